//! The stage profile of a set of recalls: each stage's p50, p95 and share of the recall time
//! (from `StageTimings`, as the wire's `stages` carries them), and the slowest 1% of the
//! recalls with their stage times, so that a tail is explained rather than averaged away.

use crate::measure::{percentile, sorted};
use serde_json::Value;

/// The stages in the order a recall runs them, each with its wire name (`stages` of a recall's
/// JSON) and what the table calls it. The four searches overlap (full text runs beside the
/// query embedding and the vector search); the rest run one after the other.
const STAGES: &[(&str, &str)] = &[
    ("words_ms", "query words"),
    ("query_embedding_ms", "query embedding"),
    ("vector_ms", "vector search"),
    ("text_ms", "full-text search"),
    ("text_rows_ms", "full text's records"),
    ("fuse_ms", "fusion"),
    ("walk_ms", "graph walk (and candidates' records)"),
    ("spread_ms", "neighbours' records, spreading"),
    ("fetch_ms", "hits' records through the filter"),
    ("rules_ms", "recency, question rules, instruction"),
    ("folding_ms", "folding, passages"),
    ("sources_ms", "sources of consolidated hits"),
];

/// One recall as the profile sees it.
#[derive(Debug, Clone)]
pub struct Timed {
    /// What it was asked (a query, or a harness's question id).
    pub label: String,
    pub took_ms: f64,
    /// Stage name (the wire's) to milliseconds; a stage missing is 0.
    pub stages: Vec<(String, f64)>,
}

impl Timed {
    /// From a recall's JSON line (`took_ms`, `stages`) and extra stages measured outside it
    /// (serialising, in the benchmark's own process).
    pub fn from_wire(label: String, line: &Value, extra: &[(&str, f64)]) -> Option<Timed> {
        let took_ms = line["took_ms"].as_f64()?;
        let mut stages: Vec<(String, f64)> =
            line["stages"].as_object()?.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect();
        stages.extend(extra.iter().map(|(k, v)| (k.to_string(), *v)));
        Some(Timed { label, took_ms, stages })
    }

    fn stage(&self, name: &str) -> f64 {
        self.stages.iter().find(|(k, _)| k == name).map_or(0.0, |(_, v)| *v)
    }

    /// What no stage accounts for: the recall's time less its words, the longer of its two
    /// search paths (full text, or the embedding and the vector search) and the stages after.
    fn other(&self) -> f64 {
        let searches = (self.stage("text_ms") + self.stage("text_rows_ms"))
            .max(self.stage("query_embedding_ms") + self.stage("vector_ms"));
        (self.took_ms - self.stage("words_ms") - searches - self.stage("fusion_ms")).max(0.0)
    }

    /// Every stage with its time, the named ones first, then any extra, then the rest.
    fn rows(&self) -> Vec<(String, f64)> {
        let mut rows: Vec<(String, f64)> = STAGES.iter().map(|(k, name)| (name.to_string(), self.stage(k))).collect();
        let known = |k: &str| STAGES.iter().any(|(s, _)| *s == k) || k == "fusion_ms";
        rows.extend(
            self.stages
                .iter()
                .filter(|(k, _)| !known(k))
                .map(|(k, v)| (k.trim_end_matches("_ms").replace('_', " "), *v)),
        );
        rows.push(("other (unaccounted)".to_owned(), self.other()));
        rows
    }
}

/// Prints the profile of `recalls` under `title` as a markdown table, and the slowest 1% (at
/// least one) with their three costliest stages.
pub fn print(title: &str, recalls: &[Timed]) {
    if recalls.is_empty() {
        println!("\n{title}: no recalls");
        return;
    }
    let took = sorted(recalls.iter().map(|r| r.took_ms).collect());
    let total: f64 = took.iter().sum();
    println!(
        "\n{title}: {} recalls, p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        recalls.len(),
        percentile(&took, 0.5),
        percentile(&took, 0.95),
        percentile(&took, 0.99),
        took[took.len() - 1]
    );
    println!("| stage | p50 (ms) | p95 (ms) | max (ms) | share of recall time |");
    println!("|---|---|---|---|---|");
    let rows: Vec<Vec<(String, f64)>> = recalls.iter().map(Timed::rows).collect();
    for (i, (name, _)) in rows[0].iter().enumerate() {
        let values = sorted(rows.iter().map(|r| r.get(i).map_or(0.0, |(_, v)| *v)).collect());
        let sum: f64 = values.iter().sum();
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.1}% |",
            percentile(&values, 0.5),
            percentile(&values, 0.95),
            values[values.len() - 1],
            100.0 * sum / total
        );
    }
    let mut slowest: Vec<&Timed> = recalls.iter().collect();
    slowest.sort_by(|a, b| b.took_ms.total_cmp(&a.took_ms));
    let tail = recalls.len().div_ceil(100);
    println!("slowest {tail} ({}%):", if recalls.len() >= 100 { 1 } else { 100 * tail / recalls.len() });
    for r in &slowest[..tail] {
        let mut rows = r.rows();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top: Vec<String> = rows.iter().take(3).map(|(name, v)| format!("{name} {v:.1}")).collect();
        println!("  {:.1} ms  {}  ({})", r.took_ms, top.join(", "), r.label);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_is_what_the_stages_leave() {
        let line = serde_json::json!({"took_ms": 10.0, "stages": {
            "words_ms": 0.5, "text_ms": 2.0, "text_rows_ms": 1.0, "query_embedding_ms": 4.0,
            "vector_ms": 1.0, "fusion_ms": 3.0}});
        let timed = Timed::from_wire("q".into(), &line, &[("serialising_ms", 0.2)]).expect("a recall line");
        // 10 - 0.5 - max(3, 5) - 3
        assert!((timed.other() - 1.5).abs() < 1e-9);
        let rows = timed.rows();
        assert!(rows.iter().any(|(name, v)| name == "serialising" && (*v - 0.2).abs() < 1e-9));
        assert_eq!(rows.last().map(|r| r.0.as_str()), Some("other (unaccounted)"));
    }

    #[test]
    fn a_line_without_timings_is_not_a_recall() {
        assert!(Timed::from_wire("q".into(), &serde_json::json!({"hits": []}), &[]).is_none());
    }
}
