//! The Concept library's compression (after Stitch): sub-programs that recur across
//! trajectories become learned concepts. Candidates are the anti-unifications of every pair of
//! step windows from two different trajectories ([`crate::policy::program`]); each is scored by
//! the description length it saves over the whole corpus (every occurrence's size minus the
//! size of a call with its arguments, minus the concept's own size), and the best is taken,
//! its occurrences consumed, until nothing saves anything or enough are learned. A concept
//! always occurs in at least two trajectories. Deterministic for the same input.

use crate::policy::program::{Term, anti_unify, holes_of, instantiate, matches, parse_step, print};
use std::collections::{BTreeMap, BTreeSet};

/// One place a learned concept abstracts: a window of a program and the arguments that
/// reproduce it.
#[derive(Debug, Clone, PartialEq)]
pub struct Occurrence {
    /// The program's index in the corpus.
    pub program: usize,
    /// The window's first step.
    pub start: usize,
    /// The arguments, in parameter order, as code.
    pub args: Vec<String>,
}

/// A learned concept.
#[derive(Debug, Clone, PartialEq)]
pub struct Learned {
    /// A deterministic name from what it calls (a model may rename it).
    pub name: String,
    /// Its body: one statement per line, parameters by name.
    pub code: String,
    pub params: Vec<String>,
    pub statements: Vec<Term>,
    /// Holes in parameter order (`params[i]` is hole `holes[i]`).
    pub holes: Vec<usize>,
    pub occurrences: Vec<Occurrence>,
    /// How many distinct programs it occurs in.
    pub programs: usize,
    /// Description length saved over the corpus.
    pub saved: i64,
}

impl Learned {
    /// The steps an occurrence's arguments give back.
    pub fn instantiate(&self, args: &[Term]) -> Vec<String> {
        let binding: BTreeMap<usize, Term> = self.holes.iter().copied().zip(args.iter().cloned()).collect();
        self.statements.iter().map(|s| print(&instantiate(s, &binding), &[])).collect()
    }
}

/// A candidate with its occurrences and the description length it saves.
struct Scored {
    saved: i64,
    programs: usize,
    pattern: Vec<Term>,
    found: Vec<(usize, usize, BTreeMap<usize, Term>)>,
}

impl Scored {
    /// More saved first, then more programs; ties keep the earlier candidate (deterministic).
    fn beats(&self, other: &Scored) -> bool {
        (self.saved, self.programs) > (other.saved, other.programs)
    }
}

/// A statement of a concept says something: not a bare parameter, not `x = arg`, not `f(arg)`
/// (at least three concrete nodes), and never a call of whatever function the caller passes.
fn worth_a_statement(s: &Term) -> bool {
    s.concrete() >= 3 && !calls_a_parameter(s)
}

fn calls_a_parameter(t: &Term) -> bool {
    match t {
        Term::Node(label, c) => {
            (label == "call" && matches!(c.first(), Some(Term::Hole(_)))) || c.iter().any(calls_a_parameter)
        }
        _ => false,
    }
}

fn window_matches(pattern: &[Term], window: &[Term]) -> Option<BTreeMap<usize, Term>> {
    let mut binding = BTreeMap::new();
    pattern.iter().zip(window).all(|(p, t)| matches(p, t, &mut binding)).then_some(binding)
}

fn param_names(pattern: &[Term], count: usize) -> Vec<String> {
    let mut taken = BTreeSet::new();
    fn leaves(t: &Term, out: &mut BTreeSet<String>) {
        match t {
            Term::Leaf(l) => {
                out.insert(l.clone());
            }
            Term::Node(_, c) => c.iter().for_each(|t| leaves(t, out)),
            Term::Hole(_) => {}
        }
    }
    pattern.iter().for_each(|t| leaves(t, &mut taken));
    (1..).map(|i| format!("arg{i}")).filter(|n| !taken.contains(n)).take(count).collect()
}

fn name_for(pattern: &[Term], taken: &BTreeSet<String>) -> String {
    let mut callees = Vec::new();
    pattern.iter().for_each(|s| s.callees(&mut callees));
    callees.dedup();
    // Never the name of the one function it calls: a program calling that function is not
    // calling the concept.
    let base = match callees.len() {
        0 => "steps".to_owned(),
        1 => format!("{}_step", callees[0]),
        _ => callees.join("_then_"),
    };
    let base: String = base.chars().map(|c| if c.is_alphanumeric() || c == '_' { c } else { '_' }).collect();
    (1..)
        .map(|i| if i == 1 { base.clone() } else { format!("{base}_{i}") })
        .find(|n| !taken.contains(n))
        .expect("a free name")
}

/// Learns up to `max_concepts` concepts of at most `max_steps` statements from `programs`
/// (each a trajectory's steps).
pub fn compress(programs: &[Vec<String>], max_concepts: usize, max_steps: usize) -> Vec<Learned> {
    let parsed: Vec<Vec<Term>> = programs.iter().map(|p| p.iter().map(|s| parse_step(s)).collect()).collect();
    let mut consumed: Vec<Vec<bool>> = parsed.iter().map(|p| vec![false; p.len()]).collect();
    let mut learned: Vec<Learned> = Vec::new();
    let mut names = BTreeSet::new();
    while learned.len() < max_concepts {
        let free = |p: usize, start: usize, len: usize, consumed: &[Vec<bool>]| {
            start + len <= parsed[p].len() && !consumed[p][start..start + len].iter().any(|c| *c)
        };
        // Every pair of free windows from two programs proposes its generalisation.
        let mut candidates: BTreeSet<Vec<Term>> = BTreeSet::new();
        for len in 1..=max_steps {
            for p in 0..parsed.len() {
                for q in p + 1..parsed.len() {
                    for a in 0..parsed[p].len() {
                        if !free(p, a, len, &consumed) {
                            continue;
                        }
                        for b in 0..parsed[q].len() {
                            if !free(q, b, len, &consumed) {
                                continue;
                            }
                            let mut holes = Vec::new();
                            let pattern: Vec<Term> = (0..len)
                                .map(|i| anti_unify(&[&parsed[p][a + i], &parsed[q][b + i]], &mut holes))
                                .collect();
                            if pattern.iter().all(worth_a_statement) {
                                candidates.insert(pattern);
                            }
                        }
                    }
                }
            }
        }
        // A candidate's occurrences (left to right, never overlapping, free steps only) and the
        // description length it saves; `None` when it occurs in fewer than two programs or
        // saves nothing.
        let evaluate = |pattern: &[Term]| -> Option<Scored> {
            let len = pattern.len();
            let mut found = Vec::new();
            for (p, program) in parsed.iter().enumerate() {
                let mut start = 0;
                while start + len <= program.len() {
                    if free(p, start, len, &consumed)
                        && let Some(binding) = window_matches(pattern, &program[start..start + len])
                    {
                        found.push((p, start, binding));
                        start += len;
                    } else {
                        start += 1;
                    }
                }
            }
            let programs_with = found.iter().map(|(p, _, _)| *p).collect::<BTreeSet<_>>().len();
            let body: usize = pattern.iter().map(Term::size).sum();
            let saved: i64 = found
                .iter()
                .map(|(p, start, binding)| {
                    let window: usize = parsed[*p][*start..*start + len].iter().map(Term::size).sum();
                    let call = 1 + binding.values().map(Term::size).sum::<usize>();
                    window as i64 - call as i64
                })
                .sum::<i64>()
                - body as i64;
            (programs_with >= 2 && saved > 0).then(|| Scored {
                saved,
                programs: programs_with,
                pattern: pattern.to_vec(),
                found,
            })
        };
        // Pairs only see what two programs share: each candidate is generalised further with
        // the windows it misses (a third program that varies another argument), while that
        // saves more; the best of them all is learned.
        let climb = |mut current: Scored| -> Scored {
            loop {
                let len = current.pattern.len();
                let mut improved: Option<Scored> = None;
                for (p, program) in parsed.iter().enumerate() {
                    for start in 0..program.len() {
                        let matched = current.found.iter().any(|(q, s, _)| *q == p && *s == start);
                        if matched || !free(p, start, len, &consumed) {
                            continue;
                        }
                        let mut holes = Vec::new();
                        let wider: Vec<Term> = (0..len)
                            .map(|i| anti_unify(&[&current.pattern[i], &program[start + i]], &mut holes))
                            .collect();
                        if !wider.iter().all(worth_a_statement) {
                            continue;
                        }
                        if let Some(scored) = evaluate(&wider)
                            && scored.beats(improved.as_ref().unwrap_or(&current))
                        {
                            improved = Some(scored);
                        }
                    }
                }
                match improved {
                    Some(better) => current = better,
                    None => return current,
                }
            }
        };
        let mut best: Option<Scored> = None;
        for pattern in &candidates {
            if let Some(scored) = evaluate(pattern).map(&climb)
                && best.as_ref().is_none_or(|b| scored.beats(b))
            {
                best = Some(scored);
            }
        }
        let Some(Scored { saved, programs: programs_with, pattern, found }) = best else { break };
        let holes = holes_of(&pattern);
        let params = param_names(&pattern, holes.len());
        let mut hole_names = vec![String::new(); holes.iter().max().map_or(0, |m| m + 1)];
        for (h, n) in holes.iter().zip(&params) {
            hole_names[*h] = n.clone();
        }
        let name = name_for(&pattern, &names);
        names.insert(name.clone());
        let occurrences = found
            .iter()
            .map(|(p, start, binding)| {
                for c in &mut consumed[*p][*start..*start + pattern.len()] {
                    *c = true;
                }
                Occurrence { program: *p, start: *start, args: holes.iter().map(|h| print(&binding[h], &[])).collect() }
            })
            .collect();
        learned.push(Learned {
            name,
            code: pattern.iter().map(|s| print(s, &hole_names)).collect::<Vec<_>>().join("\n"),
            params,
            statements: pattern,
            holes,
            occurrences,
            programs: programs_with,
            saved,
        });
    }
    learned
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn corpus() -> Vec<Vec<String>> {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
        vec![
            s(&["g = load(input)", "m = flip(g, 1)", "out = hstack(g, m)", "save(out)"]),
            s(&["log('start')", "g = load(input)", "m = flip(g, 0)", "out = hstack(g, m)"]),
            s(&["h = load(other)", "m = flip(h, 1)", "out = hstack(h, m)", "count(out, red)"]),
            s(&["x = rotate_90(g)", "save(x)"]),
        ]
    }

    #[test]
    fn the_planted_pattern_is_found_with_its_parameters() {
        let learned = compress(&corpus(), 3, 3);
        let first = &learned[0];
        assert_eq!(first.code, "arg1 = load(arg2)\nm = flip(arg1, arg3)\nout = hstack(arg1, m)", "{learned:#?}");
        assert_eq!(first.params, ["arg1", "arg2", "arg3"]);
        assert_eq!(first.programs, 3);
        assert_eq!(first.name, "load_then_flip_then_hstack");
        assert_eq!(first.occurrences[1].args, ["g", "input", "0"]);
        for c in &learned {
            assert!(c.programs >= 2, "never a concept that occurs once: {c:?}");
        }
    }

    #[test]
    fn nothing_recurs_nothing_is_learned() {
        let programs = vec![vec!["a = f(x)".to_owned()], vec!["b = g(y, z)".to_owned(), "h()".to_owned()]];
        assert!(compress(&programs, 3, 3).is_empty());
    }

    fn arb_arg() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z][a-z0-9_]{0,4}", "[0-9]{1,3}", Just("(0, 0)".to_owned()), Just("'red'".to_owned())]
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// A planted pattern whose arguments differ in every program is found in all of them,
        /// with one parameter per varying argument, however much noise surrounds it.
        #[test]
        fn a_planted_pattern_is_found_with_its_parameters(
            n in 2usize..7,
            constant_third in any::<bool>(),
            noise in proptest::collection::vec(proptest::collection::vec(("[a-z]{1,5}", arb_arg()), 0..4), 7),
        ) {
            let programs: Vec<Vec<String>> = (0..n)
                .map(|i| {
                    let mut steps: Vec<String> =
                        noise[i].iter().enumerate().map(|(j, (f, x))| format!("{f}_{i}_{j}({x})")).collect();
                    let third = if constant_third { "k".to_owned() } else { format!("z{i}") };
                    let at = steps.len() / 2;
                    let planted = [format!("v = paint(x{i}, ({i}, 0))"), format!("w = shift(v, {third})"), "emit(w)".to_owned()];
                    steps.splice(at..at, planted);
                    steps
                })
                .collect();
            let learned = compress(&programs, 4, 3);
            let planted = learned.iter().find(|c| c.code.contains("paint(") && c.code.contains("emit(w)"));
            prop_assert!(planted.is_some(), "{learned:#?}");
            let planted = planted.unwrap();
            prop_assert_eq!(planted.programs, n);
            prop_assert_eq!(planted.params.len(), if constant_third { 2 } else { 3 }, "{}", planted.code);
        }

        /// Soundness: each occurrence's arguments, put back into the concept, give exactly the
        /// steps it abstracts; and no concept occurs in fewer than two programs.
        #[test]
        fn concepts_reproduce_what_they_abstract(
            args in proptest::collection::vec((arb_arg(), arb_arg(), arb_arg()), 2..6),
            noise in proptest::collection::vec(proptest::collection::vec(("[a-z]{1,5}", arb_arg()), 0..3), 6),
        ) {
            let programs: Vec<Vec<String>> = args
                .iter()
                .enumerate()
                .map(|(i, (a, b, c))| {
                    // Noise: calls no other program makes.
                    let mut steps: Vec<String> =
                        noise[i].iter().enumerate().map(|(j, (f, x))| format!("{f}_{i}_{j}({x})")).collect();
                    let at = steps.len() / 2;
                    let planted = [format!("v = paint({a}, {b})"), format!("w = shift(v, {c})"), "emit(w)".to_owned()];
                    steps.splice(at..at, planted);
                    steps
                })
                .collect();
            let learned = compress(&programs, 4, 3);
            // Whatever the arguments, the planted block is abstracted somewhere.
            prop_assert!(learned.iter().any(|c| c.code.contains("paint(") && c.code.contains("emit(w)")), "{learned:#?}");
            for concept in &learned {
                prop_assert!(concept.programs >= 2);
                for occ in &concept.occurrences {
                    let args: Vec<Term> = occ.args.iter().map(|a| parse_step(a)).collect();
                    let back = concept.instantiate(&args);
                    prop_assert_eq!(&back[..], &programs[occ.program][occ.start..occ.start + concept.statements.len()]);
                }
            }
        }
    }
}
