//! Context assembly (seed 000 §6): what goes into an agent's prompt, in which order, within a
//! token budget. Sections in order: the agent's persona, core memory (first: what the model
//! weighs most), the active goal, retrieved memories (just before the history: the "bridge"),
//! the recent history (last: the other end of the U-shaped attention curve). Default budgets
//! 500 / 500 / 500 / 4000 / 2000 tokens, scaled to the total asked for.
//!
//! Tokens are estimated, not counted: `ceil(chars / 4)`, the usual rule for English under
//! BPE and WordPiece vocabularies (all-MiniLM-L6-v2's tokenizer averages about 4.2 characters
//! per token on the LoCoMo turns), so a budget is met without loading a tokenizer.

use serde::Serialize;

/// The sections, in the order they are assembled.
pub const SECTIONS: [&str; 5] = ["persona", "core", "goal", "retrieved", "history"];

/// Default budget of each section, in [`SECTIONS`] order.
pub const DEFAULT_BUDGETS: [usize; 5] = [500, 500, 500, 4000, 2000];

/// The budget of a context when none is given, in tokens: the sections' defaults in full. Every
/// door (the CLI, HTTP and MCP, Python) leaves it to this one value.
pub const DEFAULT_BUDGET: usize = 7_500;

/// The estimated token count of `text`.
pub fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The default budgets scaled to `total` (rounded down: their sum never exceeds it).
pub fn scaled(total: usize) -> [usize; 5] {
    let sum: usize = DEFAULT_BUDGETS.iter().sum();
    DEFAULT_BUDGETS.map(|b| b * total / sum)
}

/// One assembled section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Section {
    pub name: &'static str,
    pub budget: usize,
    pub tokens: usize,
    pub items: Vec<String>,
}

/// Packs each section's candidate items, best first, into its budget: an item that does not
/// fit is cut at a word when at least 16 tokens are left (marked `…`), else skipped for the
/// next, smaller one.
pub fn assemble(candidates: [Vec<String>; 5], budgets: [usize; 5]) -> Vec<Section> {
    candidates
        .into_iter()
        .zip(budgets)
        .zip(SECTIONS)
        .map(|((items, budget), name)| {
            let mut kept = Vec::new();
            let mut used = 0;
            for item in items {
                let cost = tokens(&item);
                if used + cost <= budget {
                    used += cost;
                    kept.push(item);
                } else if budget - used >= 16 {
                    let room = (budget - used) * 4 - 1;
                    let head: String = item.chars().take(room).collect();
                    let cut = head.rfind(char::is_whitespace).filter(|at| *at > room / 2).unwrap_or(head.len());
                    let shortened = format!("{}…", head[..cut].trim_end());
                    used += tokens(&shortened);
                    kept.push(shortened);
                }
            }
            Section { name, budget, tokens: used, items: kept }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn defaults_scale_and_keep_their_proportions() {
        assert_eq!(scaled(7500), DEFAULT_BUDGETS);
        assert_eq!(DEFAULT_BUDGETS.iter().sum::<usize>(), DEFAULT_BUDGET);
        assert_eq!(scaled(15000), [1000, 1000, 1000, 8000, 4000]);
        assert!(scaled(8000).iter().sum::<usize>() <= 8000);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn sections_keep_their_budgets_their_order_and_the_total(
            items in proptest::collection::vec(proptest::collection::vec("\\PC{0,400}", 0..12), 5),
            total in 0usize..20_000,
        ) {
            let candidates: [Vec<String>; 5] = items.try_into().unwrap();
            let budgets = scaled(total);
            let sections = assemble(candidates.clone(), budgets);
            prop_assert_eq!(sections.iter().map(|s| s.name).collect::<Vec<_>>(), SECTIONS.to_vec());
            for (section, budget) in sections.iter().zip(budgets) {
                prop_assert!(section.tokens <= budget, "{} used {} of {}", section.name, section.tokens, budget);
                prop_assert_eq!(section.tokens, section.items.iter().map(|i| tokens(i)).sum::<usize>());
            }
            prop_assert!(sections.iter().map(|s| s.tokens).sum::<usize>() <= total);
            // Within a section, what is kept keeps the candidates' order.
            for (section, items) in sections.iter().zip(&candidates) {
                let mut from = 0;
                for kept in &section.items {
                    let head = kept.trim_end_matches('…');
                    let at = items[from..].iter().position(|c| c.starts_with(head));
                    prop_assert!(at.is_some(), "{kept:?} out of order");
                    from += at.unwrap() + 1;
                }
            }
        }
    }
}
