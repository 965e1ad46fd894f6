//! `atlas export --format cypher`: the space's live memories and the edges between them as
//! Cypher statements ([`atlas_domain::cypher`]), in two passes over the store (nodes, then
//! edges, so that every edge finds both ends), a page at a time.

use crate::Atlas;
use atlas_domain::cypher::{self, BATCH};
use atlas_domain::{AtlasError, EdgeKind, MemoryId, Result};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;

/// How many memories one read of the store returns.
const PIECE: usize = 1_000;

/// What a Cypher export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphExported {
    pub nodes: u64,
    pub edges: u64,
}

fn io(e: std::io::Error) -> AtlasError {
    AtlasError::Storage(format!("export: {e}"))
}

impl Atlas {
    /// Writes every live memory as a node labelled by its kind and every edge between two live
    /// memories as a typed relationship with its validity (docs/FILES.md). Soft-deleted memories
    /// and their edges are left out.
    pub async fn export_cypher(&self, out: &mut dyn Write) -> Result<GraphExported> {
        writeln!(out, "// ATLAS graph export (Cypher): one statement per line; load with cypher-shell, mgconsole or any Cypher engine.").map_err(io)?;
        let nodes: Vec<&str> = cypher::NODE_PROPERTIES.iter().map(|(k, _)| *k).collect();
        let edges: Vec<&str> = cypher::EDGE_PROPERTIES.iter().map(|(k, _)| *k).collect();
        writeln!(
            out,
            "// Nodes: labels {} with the properties {} (absent ones null).",
            atlas_domain::MemoryKind::ALL.map(cypher::label).join(", "),
            nodes.join(", ")
        )
        .map_err(io)?;
        writeln!(
            out,
            "// Edges: {} with the properties {}.",
            EdgeKind::ALL.map(cypher::edge_type).join(", "),
            edges.join(", ")
        )
        .map_err(io)?;
        writeln!(out, "// A large graph loads faster with an index on id per label first (Neo4j: CREATE INDEX FOR (n:Fact) ON (n.id); Memgraph: CREATE INDEX ON :Fact(id);).").map_err(io)?;
        let mut labels: HashMap<MemoryId, &'static str> = HashMap::new();
        let mut rows: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        let mut counts = GraphExported::default();
        let mut after = None;
        loop {
            let page = self.parts.replica.export_batch(after, PIECE).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.memory.id);
            for item in page.iter().filter(|s| !s.memory.lifecycle.is_deleted()) {
                let label = cypher::label(item.memory.kind());
                labels.insert(item.memory.id, label);
                let batch = rows.entry(label).or_default();
                batch.push(cypher::node_row(&item.memory));
                counts.nodes += 1;
                if batch.len() == BATCH {
                    writeln!(out, "{}", cypher::nodes_statement(label, batch)).map_err(io)?;
                    batch.clear();
                }
            }
        }
        for (label, batch) in rows.iter().filter(|(_, b)| !b.is_empty()) {
            writeln!(out, "{}", cypher::nodes_statement(label, batch)).map_err(io)?;
        }
        let mut rows: BTreeMap<(&'static str, &'static str, &'static str), (EdgeKind, Vec<String>)> = BTreeMap::new();
        let mut after = None;
        loop {
            let page = self.parts.replica.export_batch(after, PIECE).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.memory.id);
            for edge in page.iter().flat_map(|s| s.edges.iter()) {
                let (Some(src), Some(dst)) = (labels.get(&edge.src), labels.get(&edge.dst)) else { continue };
                let (_, batch) = rows.entry((edge.kind.as_str(), src, dst)).or_insert_with(|| (edge.kind, Vec::new()));
                batch.push(cypher::edge_row(edge));
                counts.edges += 1;
                if batch.len() == BATCH {
                    writeln!(out, "{}", cypher::edges_statement(edge.kind, src, dst, batch)).map_err(io)?;
                    batch.clear();
                }
            }
        }
        for ((_, src, dst), (kind, batch)) in rows.iter().filter(|(_, (_, b))| !b.is_empty()) {
            writeln!(out, "{}", cypher::edges_statement(*kind, src, dst, batch)).map_err(io)?;
        }
        writeln!(out, "// {} nodes, {} edges.", counts.nodes, counts.edges).map_err(io)?;
        out.flush().map_err(io)?;
        Ok(counts)
    }
}
