"""ATLAS's Cypher export loaded into a real Cypher engine, and checked against ATLAS's own record.

Usage: cypher_check.py ATLAS_BINARY WORK_DIR [DB]

Without DB, builds the demo space in WORK_DIR (fixtures/demo/changes.jsonl imported and
consolidated by rules: entities, facts with history, summaries). Then:
  1. `atlas export --format cypher --out FILE` and `atlas export --out FILE.jsonl` (the full
     export: ATLAS's own record of every memory and edge);
  2. loads the Cypher file, statement by statement as written, into Ladybug (the embedded Kuzu
     fork, from PyPI), after declaring the schema a typed engine needs: one node table per
     label with the properties the export's header lists, one relationship table per edge type;
  3. checks that the counts of nodes by label and of edges by type, and every entity's two-hop
     neighbourhood, equal those computed from the full export (live memories only).
Exits non-zero with a message on the first difference. `cargo xtask clients` runs it from a
virtual environment with Ladybug pinned by hash; `cargo xtask ci` runs it too.
"""

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import real_ladybug as lb

LABELS = {
    "episode": "Episode", "fact": "Fact", "entity": "Entity", "core": "Core", "experience": "Experience",
    "concept": "Concept", "strategy": "Strategy", "summary": "Summary", "doc": "Doc",
}
EDGE_TYPES = {
    "temporal": "TEMPORAL", "causal": "CAUSAL", "entity": "MENTIONS", "derived_from": "DERIVED_FROM",
    "supersedes": "SUPERSEDES",
}
TYPES = {"id": "INT64", "confidence": "DOUBLE", "weight": "DOUBLE"}


def fail(message):
    print(f"cypher check FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def atlas(binary, db, *args):
    env = dict(os.environ, ATLAS_EMBEDDER="none", ATLAS_LOG="warn")
    done = subprocess.run([binary, "--db", str(db), *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        fail(f"atlas {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def header_properties(cypher_text, what):
    """The property names the export's header comment lists for nodes or edges."""
    pattern = r"^// Nodes: .* with the properties ([a-z_, ]+) \(" if what == "nodes" else r"^// Edges: .* with the properties ([a-z_, ]+)\."
    match = re.search(pattern, cypher_text, re.M)
    if not match:
        fail(f"the export's header does not list the {what}' properties")
    return [p.strip() for p in match.group(1).split(",")]


def main():
    binary, work = sys.argv[1], Path(sys.argv[2])
    if len(sys.argv) > 3:
        db = Path(sys.argv[3])
    else:
        db = work / "demo.db"
        fixture = Path(__file__).resolve().parent.parent / "fixtures" / "demo" / "changes.jsonl"
        atlas(binary, db, "import", str(fixture))
        atlas(binary, db, "consolidate", "--end-sessions")
    cypher_file, jsonl_file = work / "graph.cypher", work / "export.jsonl"
    atlas(binary, db, "export", "--format", "cypher", "--out", str(cypher_file))
    atlas(binary, db, "export", "--out", str(jsonl_file))

    # ATLAS's own record: live memories, and the edges between them.
    kinds, edges = {}, []
    # JSON Lines end at "\n" only: a value may hold U+2028 and other characters that
    # str.splitlines() would also cut at.
    for line in jsonl_file.read_text(encoding="utf-8").split("\n"):
        if not line:
            continue
        record = json.loads(line)
        if "id" not in record or (record.get("lifecycle") or {}).get("deleted_at"):
            continue
        kinds[record["id"]] = record.get("kind", "episode")
        edges.extend(record.get("edges", []))
    edges = [e for e in edges if e["src"] in kinds and e["dst"] in kinds]
    want_nodes = collections.Counter(LABELS[k] for k in kinds.values())
    want_edges = collections.Counter(EDGE_TYPES[e["kind"]] for e in edges)
    demo = len(sys.argv) <= 3
    if not want_nodes.get("Entity") or (demo and not (want_nodes.get("Fact") and want_edges.get("SUPERSEDES"))):
        fail(f"the space has too little to check: {dict(want_nodes)} {dict(want_edges)}")

    text = cypher_file.read_text(encoding="utf-8")
    node_props, edge_props = header_properties(text, "nodes"), header_properties(text, "edges")
    conn = lb.Connection(lb.Database(str(work / "graph.lbdb")))
    for label in LABELS.values():
        columns = ", ".join(f"{p} {TYPES.get(p, 'STRING')}" for p in node_props)
        conn.execute(f"CREATE NODE TABLE {label}({columns}, PRIMARY KEY (id))")
    pairs = ", ".join(f"FROM {a} TO {b}" for a in LABELS.values() for b in LABELS.values())
    for edge_type in EDGE_TYPES.values():
        columns = ", ".join(f"{p} {TYPES.get(p, 'STRING')}" for p in edge_props)
        conn.execute(f"CREATE REL TABLE {edge_type}({pairs}, {columns})")
    statements = 0
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.startswith("//"):
            continue
        try:
            conn.execute(line)
        except Exception as error:  # the engine's own message, with where it was
            fail(f"{cypher_file}:{number}: {error}")
        statements += 1

    def count(query):
        result = conn.execute(query)
        return result.get_next()[0]

    got_nodes = collections.Counter({label: count(f"MATCH (n:{label}) RETURN count(*)") for label in LABELS.values()})
    got_edges = collections.Counter({t: count(f"MATCH ()-[r:{t}]->() RETURN count(*)") for t in EDGE_TYPES.values()})
    if +got_nodes != +want_nodes:
        fail(f"nodes by label: loaded {dict(+got_nodes)}, ATLAS has {dict(+want_nodes)}")
    if +got_edges != +want_edges:
        fail(f"edges by type: loaded {dict(+got_edges)}, ATLAS has {dict(+want_edges)}")

    neighbours = collections.defaultdict(set)
    for e in edges:
        neighbours[e["src"]].add(e["dst"])
        neighbours[e["dst"]].add(e["src"])
    entities = [i for i, k in kinds.items() if k == "entity"]
    for entity in entities:
        want = set(neighbours[entity])
        for n in list(want):
            want |= neighbours[n]
        want.discard(entity)
        result = conn.execute(f"MATCH (e:Entity {{id: {entity}}})-[*1..2]-(n) WHERE n.id <> {entity} RETURN DISTINCT n.id")
        got = set()
        while result.has_next():
            got.add(result.get_next()[0])
        if got != want:
            fail(f"two hops from entity {entity}: loaded {sorted(got)}, ATLAS has {sorted(want)}")
    print(
        f"cypher check passed: {statements} statements loaded into Ladybug {lb.__version__ if hasattr(lb, '__version__') else ''}; "
        f"nodes {dict(sorted(want_nodes.items()))}, edges {dict(sorted(want_edges.items()))}, "
        f"two-hop neighbourhoods of {len(entities)} entities equal"
    )


if __name__ == "__main__":
    main()
