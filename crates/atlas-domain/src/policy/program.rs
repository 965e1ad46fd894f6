//! The structure of a trajectory's step code, for the Concept library: a small parser of the
//! Python-like steps agents write (`m = flip(g)`, `out = hstack(g, m)`, `fill(g, (0, 0), c=blue)`)
//! into terms, their canonical printing, and anti-unification (the least general
//! generalisation of several sub-programs, where the parts that differ become parameters).
//!
//! Grammar: `stmt := NAME "=" expr | expr`; `expr := term (OP term)*`; `term := atom postfix*`;
//! `atom := NAME | NUMBER | STRING | "(" items ")" | "[" items "]"`;
//! `postfix := "(" args ")" | "." NAME | "[" expr "]"`; `arg := NAME "=" expr | expr`.
//! A line outside it is kept as its tokens (a `seq` node), so that nothing is ever dropped.

use std::collections::BTreeMap;

/// A term of step code. Holes are the parameters of a generalised sub-program.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Term {
    Leaf(String),
    Node(String, Vec<Term>),
    Hole(usize),
}

impl Term {
    /// Nodes and leaves, a hole counting one: the description length of the term.
    pub fn size(&self) -> usize {
        match self {
            Term::Leaf(_) | Term::Hole(_) => 1,
            Term::Node(_, children) => 1 + children.iter().map(Term::size).sum::<usize>(),
        }
    }

    /// Nodes and leaves that are not holes: how much concrete structure a pattern has.
    pub fn concrete(&self) -> usize {
        match self {
            Term::Leaf(_) => 1,
            Term::Hole(_) => 0,
            Term::Node(_, children) => 1 + children.iter().map(Term::concrete).sum::<usize>(),
        }
    }

    fn holes(&self, out: &mut Vec<usize>) {
        match self {
            Term::Hole(h) if !out.contains(h) => out.push(*h),
            Term::Node(_, children) => children.iter().for_each(|c| c.holes(out)),
            _ => {}
        }
    }

    /// The callees of its calls, in order: what a sub-program does, by name.
    pub fn callees(&self, out: &mut Vec<String>) {
        if let Term::Node(label, children) = self {
            if label == "call"
                && let Some(Term::Leaf(name)) = children.first()
            {
                out.push(name.clone());
            }
            children.iter().for_each(|c| c.callees(out));
        }
    }
}

const OPERATORS: [&str; 14] = ["==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "<", ">", "@"];

fn tokens(line: &str) -> Option<Vec<String>> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || (chars[i] == '.' && chars[start].is_ascii_digit()))
            {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == '"' || c == '\'' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            if i >= chars.len() {
                return None;
            }
            i += 1;
            out.push(chars[start..i].iter().collect());
        } else if let Some(op) = OPERATORS.iter().find(|op| chars[i..].starts_with(&op.chars().collect::<Vec<_>>())) {
            out.push((*op).to_owned());
            i += op.chars().count();
        } else if "()[],.=".contains(c) {
            out.push(c.to_string());
            i += 1;
        } else {
            return None;
        }
    }
    Some(out)
}

struct Parser {
    tokens: Vec<String>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn eat(&mut self, t: &str) -> bool {
        if self.peek() == Some(t) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn name(&mut self) -> Option<String> {
        let t = self.peek()?;
        let first = t.chars().next()?;
        if first.is_alphabetic() || first == '_' {
            self.at += 1;
            Some(self.tokens[self.at - 1].clone())
        } else {
            None
        }
    }

    fn statement(&mut self) -> Option<Term> {
        let is_assignment = self.tokens.len() > 2 && self.tokens.get(1).map(String::as_str) == Some("=");
        let term = if is_assignment {
            let target = self.name()?;
            self.eat("=");
            Term::Node("assign".into(), vec![Term::Leaf(target), self.expr()?])
        } else {
            self.expr()?
        };
        (self.at == self.tokens.len()).then_some(term)
    }

    fn expr(&mut self) -> Option<Term> {
        let mut left = self.term()?;
        while let Some(op) = self.peek().filter(|t| OPERATORS.contains(t)).map(str::to_owned) {
            self.at += 1;
            let right = self.term()?;
            left = Term::Node(format!("op{op}"), vec![left, right]);
        }
        Some(left)
    }

    fn items(&mut self, close: &str) -> Option<Vec<Term>> {
        let mut items = Vec::new();
        if self.eat(close) {
            return Some(items);
        }
        loop {
            let keyword = self.tokens.get(self.at + 1).map(String::as_str) == Some("=")
                && self.peek().is_some_and(|t| t.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_'));
            if keyword {
                let name = self.name()?;
                self.eat("=");
                items.push(Term::Node("kw".into(), vec![Term::Leaf(name), self.expr()?]));
            } else {
                items.push(self.expr()?);
            }
            if self.eat(close) {
                return Some(items);
            }
            if !self.eat(",") {
                return None;
            }
        }
    }

    fn term(&mut self) -> Option<Term> {
        let mut term = if self.eat("(") {
            Term::Node("tuple".into(), self.items(")")?)
        } else if self.eat("[") {
            Term::Node("list".into(), self.items("]")?)
        } else {
            let t = self.peek()?.to_owned();
            if OPERATORS.contains(&t.as_str()) || "()[],.=".contains(t.as_str()) {
                return None;
            }
            self.at += 1;
            Term::Leaf(t)
        };
        loop {
            if self.eat("(") {
                let mut children = vec![term];
                children.extend(self.items(")")?);
                term = Term::Node("call".into(), children);
            } else if self.eat(".") {
                term = Term::Node("attr".into(), vec![term, Term::Leaf(self.name()?)]);
            } else if self.eat("[") {
                let index = self.expr()?;
                if !self.eat("]") {
                    return None;
                }
                term = Term::Node("index".into(), vec![term, index]);
            } else {
                return Some(term);
            }
        }
    }
}

/// One step as a term: parsed when it follows the grammar, else its tokens (or its words).
pub fn parse_step(line: &str) -> Term {
    let parsed = tokens(line).and_then(|tokens| {
        if tokens.is_empty() {
            return None;
        }
        Parser { tokens, at: 0 }.statement()
    });
    parsed.unwrap_or_else(|| {
        let words = tokens(line).unwrap_or_else(|| line.split_whitespace().map(str::to_owned).collect());
        Term::Node("seq".into(), words.into_iter().map(Term::Leaf).collect())
    })
}

/// The canonical text of a term: what a parsed step prints back as (single spaces around `=`
/// and operators, `", "` between items); holes print as `names[hole]`.
pub fn print(term: &Term, names: &[String]) -> String {
    let list = |items: &[Term]| items.iter().map(|t| print(t, names)).collect::<Vec<_>>().join(", ");
    match term {
        Term::Leaf(t) => t.clone(),
        Term::Hole(h) => names.get(*h).cloned().unwrap_or_else(|| format!("_{h}")),
        Term::Node(label, c) => match label.as_str() {
            "assign" => format!("{} = {}", print(&c[0], names), print(&c[1], names)),
            "call" => format!("{}({})", print(&c[0], names), list(&c[1..])),
            "tuple" => format!("({})", list(c)),
            "list" => format!("[{}]", list(c)),
            "attr" => format!("{}.{}", print(&c[0], names), print(&c[1], names)),
            "index" => format!("{}[{}]", print(&c[0], names), print(&c[1], names)),
            "kw" => format!("{}={}", print(&c[0], names), print(&c[1], names)),
            "seq" => c.iter().map(|t| print(t, names)).collect::<Vec<_>>().join(" "),
            op => format!("{} {} {}", print(&c[0], names), op.trim_start_matches("op"), print(&c[1], names)),
        },
    }
}

/// The least general generalisation of `terms` (all the same shape where they agree): where
/// they differ, a hole; the same differing tuple always gets the same hole, recorded in
/// `holes` (one entry per hole: the subterm of each input).
pub fn anti_unify(terms: &[&Term], holes: &mut Vec<Vec<Term>>) -> Term {
    let first = terms[0];
    if terms.iter().all(|t| *t == first) {
        return first.clone();
    }
    if let Term::Node(label, children) = first {
        let same_shape = terms.iter().all(|t| matches!(t, Term::Node(l, c) if l == label && c.len() == children.len()));
        if same_shape {
            let generalised = (0..children.len())
                .map(|i| {
                    let column: Vec<&Term> = terms
                        .iter()
                        .map(|t| match t {
                            Term::Node(_, c) => &c[i],
                            _ => unreachable!("checked above"),
                        })
                        .collect();
                    anti_unify(&column, holes)
                })
                .collect();
            return Term::Node(label.clone(), generalised);
        }
    }
    let tuple: Vec<Term> = terms.iter().map(|t| (*t).clone()).collect();
    match holes.iter().position(|h| *h == tuple) {
        Some(i) => Term::Hole(i),
        None => {
            holes.push(tuple);
            Term::Hole(holes.len() - 1)
        }
    }
}

/// Whether `pattern` matches `term`, extending `binding` (hole → its subterm) consistently.
pub fn matches(pattern: &Term, term: &Term, binding: &mut BTreeMap<usize, Term>) -> bool {
    match (pattern, term) {
        (Term::Hole(h), t) => match binding.get(h) {
            Some(bound) => bound == t,
            None => {
                binding.insert(*h, t.clone());
                true
            }
        },
        (Term::Leaf(a), Term::Leaf(b)) => a == b,
        (Term::Node(l1, c1), Term::Node(l2, c2)) => {
            l1 == l2 && c1.len() == c2.len() && c1.iter().zip(c2).all(|(p, t)| matches(p, t, binding))
        }
        _ => false,
    }
}

/// Replaces holes by their bindings.
pub fn instantiate(pattern: &Term, binding: &BTreeMap<usize, Term>) -> Term {
    match pattern {
        Term::Hole(h) => binding.get(h).cloned().unwrap_or_else(|| pattern.clone()),
        Term::Leaf(_) => pattern.clone(),
        Term::Node(l, c) => Term::Node(l.clone(), c.iter().map(|t| instantiate(t, binding)).collect()),
    }
}

/// The holes of a sub-program (several statements), in order of first appearance.
pub fn holes_of(statements: &[Term]) -> Vec<usize> {
    let mut out = Vec::new();
    statements.iter().for_each(|s| s.holes(&mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_print_back_as_written() {
        for line in [
            "g = load(input)",
            "out = flood_fill(g, (0, 0), blue)",
            "m = g.T[::1]",
            "x = a + b * 2",
            "fill(g, seed, color=blue)",
            "rows = [r for r in g]",
            "print('done')",
        ] {
            let term = parse_step(line);
            if line.contains("::") || line.contains(" for ") {
                assert!(matches!(&term, Term::Node(l, _) if l == "seq"), "{line}: {term:?}");
                continue;
            }
            assert_eq!(print(&term, &[]), line, "{term:?}");
        }
    }

    #[test]
    fn what_differs_becomes_a_parameter_used_consistently() {
        let a = parse_step("out = hstack(g, flip(g, 1))");
        let b = parse_step("out = hstack(h, flip(h, 2))");
        let mut holes = Vec::new();
        let pattern = anti_unify(&[&a, &b], &mut holes);
        assert_eq!(print(&pattern, &["grid".into(), "axis".into()]), "out = hstack(grid, flip(grid, axis))");
        assert_eq!(holes.len(), 2, "the same pair (g, h) is one parameter");
        let mut binding = BTreeMap::new();
        assert!(matches(&pattern, &b, &mut binding));
        assert_eq!(instantiate(&pattern, &binding), b);
        assert!(!matches(&pattern, &parse_step("out = vstack(g, flip(g, 1))"), &mut BTreeMap::new()));
    }
}
