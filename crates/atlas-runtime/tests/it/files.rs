//! Memory as files, on the SQLite store and the in-memory fake: the markdown bank written,
//! edited, synced back and rebuilt into a new space, a bank write that lands whole after a
//! crash, the dual write of every sleep cycle, documents synced by content hash, and the graph
//! as Cypher.

use atlas_domain::{Body, MemoryKind, RecallFilter};
use atlas_runtime::{Atlas, Config, ImportOptions, RecallRequest};
use std::path::{Path, PathBuf};

use crate::files_support;
use files_support::*;

fn page(dir: &Path, path: &str) -> PathBuf {
    dir.join(path)
}

fn ask(query: &str, k: usize) -> RecallRequest {
    RecallRequest {
        query: query.to_owned(),
        k,
        scope: Default::default(),
        kinds: Vec::new(),
        since: None,
        until: None,
        as_of: None,
    }
}

/// Recall of facts now and at a past time: what a rebuilt space must answer alike.
async fn beliefs(atlas: &Atlas, query: &str) -> Vec<Vec<(i64, String)>> {
    let mut out = Vec::new();
    for as_of in [None, Some(atlas_domain::Timestamp::parse("2024-04-20T00:00:00Z").unwrap())] {
        let request = RecallRequest { kinds: vec![MemoryKind::Fact], as_of, ..ask(query, 10) };
        let hits = atlas.recall(request).await.unwrap().hits;
        out.push(hits.iter().map(|h| (h.memory.id.0, h.memory.text.clone())).collect());
    }
    out
}

#[tokio::test]
async fn a_bank_written_twice_changes_no_byte_and_an_edit_comes_back_as_a_new_version() {
    for on_sqlite in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let atlas =
            if on_sqlite { sqlite(&dir.path().join("a.db"), Config::default()).await } else { fake(dir.path()).await };
        demo(&atlas).await;
        let bank = dir.path().join("bank");
        let first = atlas.bank_write(&bank).await.unwrap();
        assert!(first.changed > 3, "{first:?}");
        let before = read_tree(&bank);
        let again = atlas.bank_write(&bank).await.unwrap();
        assert_eq!((again.changed, again.removed), (0, 0));
        assert_eq!(read_tree(&bank), before);
        // Synced with no edit: nothing changes in the space or on disk.
        let synced = atlas.bank_sync(&bank).await.unwrap();
        assert_eq!((synced.edited, synced.added, synced.forgotten, synced.written.changed), (0, 0, 0, 0));

        // A person edits the current state, adds a line and deletes the agent's opinion.
        let service = page(&bank, "user-ann/entities/checkout-service.md");
        let text = std::fs::read_to_string(&service).unwrap();
        let current = text.lines().find(|l| l.starts_with("- state: rolled back to Python")).unwrap().to_owned();
        let id: i64 = current.rsplit('^').next().unwrap().parse().unwrap();
        let edited = text
            .replace(&current, &format!("- state: runs on Python 3.13 ^{id}"))
            .replace("## Now\n\n", "## Now\n\n- owner: the payments team\n");
        std::fs::write(&service, edited).unwrap();
        let agent = page(&bank, "user-ann/entities/agent.md");
        let text = std::fs::read_to_string(&agent).unwrap();
        let opinion = text.lines().find(|l| l.starts_with("- believes:")).unwrap().to_owned();
        let opinion_id: i64 = opinion.rsplit('^').next().unwrap().parse().unwrap();
        std::fs::write(&agent, text.replace(&format!("{opinion}\n"), "")).unwrap();

        let synced = atlas.bank_sync(&bank).await.unwrap();
        assert_eq!((synced.edited, synced.added, synced.forgotten), (1, 1, 1), "{synced:?}");
        // The edit is a new version that supersedes the old one, marked as edited in the bank.
        let explained = atlas.explain(atlas_domain::MemoryId(id)).await.unwrap().unwrap();
        assert!(explained.memory.validity.valid_until.is_some(), "the old version ended");
        let now = beliefs(&atlas, "checkout service python").await;
        let (new_id, new_text) = now[0][0].clone();
        assert_eq!(new_text, "checkout-service is now: runs on Python 3.13");
        let new = atlas.get(atlas_domain::MemoryId(new_id)).await.unwrap().unwrap();
        assert_eq!(new.memory.meta.get("origin").and_then(|v| v.as_str()), Some("bank"));
        assert!(new.edges.iter().any(|e| e.kind == atlas_domain::EdgeKind::Supersedes && e.dst.0 == id));
        // The deleted line's fact is forgotten softly: recoverable.
        let forgotten = atlas.get(atlas_domain::MemoryId(opinion_id)).await.unwrap().unwrap();
        assert!(forgotten.memory.lifecycle.is_deleted());
        // The bank was written again: the edit is there under its new id, history below.
        let rewritten = std::fs::read_to_string(&service).unwrap();
        assert!(rewritten.contains(&format!("- state: runs on Python 3.13 ^{new_id}\n")), "{rewritten}");
        assert!(rewritten.contains(&format!("  - replaces: ^{id}\n")));
        assert!(rewritten.contains("- owner: the payments team ^"));
        assert!(!std::fs::read_to_string(&agent).unwrap().contains("believes"));
    }
}

#[tokio::test]
async fn a_malformed_page_names_its_line_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    demo(&atlas).await;
    let bank = dir.path().join("bank");
    atlas.bank_write(&bank).await.unwrap();
    let service = page(&bank, "user-ann/entities/checkout-service.md");
    let text = std::fs::read_to_string(&service).unwrap();
    let line = text.lines().position(|l| l == "## Now").unwrap() + 3;
    // A good edit elsewhere, and a bad line here: neither lands.
    let text = text.replace("## Now\n\n", "## Now\n\n- owner: payments\nthis line has no dash\n");
    std::fs::write(&service, &text).unwrap();
    let stats = atlas.stats().await.unwrap();
    let err = atlas.bank_sync(&bank).await.unwrap_err().to_string();
    assert!(err.contains(&format!("checkout-service.md:{}", line + 1)), "{err}");
    assert!(err.contains("under Now"), "{err}");
    assert_eq!(atlas.stats().await.unwrap().store.memories(), stats.store.memories());
    assert_eq!(std::fs::read_to_string(&service).unwrap(), text, "the page is left as the person wrote it");
    // A folder that is not a bank is refused rather than read as "everything was deleted".
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = atlas.bank_sync(&empty).await.unwrap_err().to_string();
    assert!(err.contains("not an ATLAS bank"), "{err}");
}

#[tokio::test]
async fn a_space_rebuilt_from_its_bank_believes_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let bank = dir.path().join("bank");
    let queries =
        ["what does the checkout service run on", "checkout service python", "Ann short answers", "on-call rotation"];
    let (original, beliefs_only) = {
        let atlas = sqlite(&db, Config::default()).await;
        demo(&atlas).await;
        atlas.bank_write(&bank).await.unwrap();
        let mut original = Vec::new();
        for q in queries {
            original.push(beliefs(&atlas, q).await);
        }
        // The same space without its episodes: what a bank can hold, and so must give back exactly.
        let mut export = Vec::new();
        atlas.export(&mut export, false).await.unwrap();
        let reference = sqlite(&dir.path().join("reference.db"), Config::default()).await;
        let text = String::from_utf8(export).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains("\"kind\":\"episode\"") && !l.contains("\"kind\":\"summary\""))
            .collect();
        let cleaned: Vec<String> = kept
            .iter()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                if let Some(edges) = v.get_mut("edges").and_then(|e| e.as_array_mut()) {
                    // Only the links between beliefs: episodes and summaries are not in this space.
                    let ids: std::collections::HashSet<i64> = kept
                        .iter()
                        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?.get("id")?.as_i64())
                        .collect();
                    edges.retain(|e| {
                        ids.contains(&e["src"].as_i64().unwrap()) && ids.contains(&e["dst"].as_i64().unwrap())
                    });
                }
                if let Some(end) = v.get_mut("atlas_export_end") {
                    *end = serde_json::json!({"memories": ids_kept(&kept)});
                }
                v.to_string()
            })
            .filter(|l| !l.starts_with("{\"atlas_cycle\""))
            .collect();
        reference
            .import_bytes(cleaned.join("\n").as_bytes(), "reference", ImportOptions::default(), None)
            .await
            .unwrap();
        let mut beliefs_only = Vec::new();
        for q in queries {
            beliefs_only.push(beliefs(&reference, q).await);
        }
        (original, beliefs_only)
    };
    // The database is gone; the bank alone rebuilds it.
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let p = f.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with("a.db") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let rebuilt = sqlite(&db, Config::default()).await;
    let count = rebuilt.bank_rebuild(&bank).await.unwrap();
    assert!(count >= 10, "{count}");
    for (i, q) in queries.iter().enumerate() {
        let got = beliefs(&rebuilt, q).await;
        assert_eq!(got, beliefs_only[i], "{q}: the rebuilt space answers as the same beliefs without their episodes");
        // Against the original, whose episodes link facts to each other: the same current truth
        // and the same truth at the past date.
        for (at, hits) in got.iter().enumerate() {
            assert_eq!(hits.first(), original[i][at].first(), "{q} (as of #{at})");
        }
    }
    // A rebuilt space's facts keep their history: the demo's three versions of one state.
    let versions = rebuilt
        .latest(RecallFilter { kinds: vec![MemoryKind::Fact], ..RecallFilter::default() }, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| matches!(&m.body, Body::Fact { subject, .. } if subject == "checkout-service"))
        .count();
    assert_eq!(versions, 3);
    // A second rebuild into a space that holds memories is refused.
    let err = rebuilt.bank_rebuild(&bank).await.unwrap_err().to_string();
    assert!(err.contains("empty space"), "{err}");
}

#[tokio::test]
async fn every_sleep_cycle_writes_the_configured_bank() {
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let mut config = Config::default();
    config.bank.dir = Some(bank.clone());
    let atlas = sqlite(&dir.path().join("a.db"), config).await;
    atlas.import_file(&fixture("changes.jsonl"), ImportOptions::default(), None).await.unwrap();
    assert!(!bank.exists());
    atlas.consolidate_ending_sessions().await.unwrap();
    let text = std::fs::read_to_string(page(&bank, "user-ann/entities/checkout-service.md")).unwrap();
    assert!(text.contains("rolled back to Python after the latency spike"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_syncs_at_once_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    demo(&atlas).await;
    let bank = dir.path().join("bank");
    atlas.bank_write(&bank).await.unwrap();
    let written = read_tree(&bank);
    let (a, b, c) = tokio::join!(atlas.bank_write(&bank), atlas.bank_sync(&bank), atlas.bank_write(&bank));
    a.unwrap();
    b.unwrap();
    c.unwrap();
    assert_eq!(read_tree(&bank), written);
    assert!(!bank.join(".atlas-staging").exists());
    let missing = atlas.bank_sync(&dir.path().join("nowhere")).await.unwrap_err().to_string();
    assert!(missing.contains("no such folder"), "{missing}");
    assert!(!dir.path().join("nowhere").exists());
}

#[tokio::test]
async fn a_bank_write_cut_short_lands_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    demo(&atlas).await;
    let bank = dir.path().join("bank");
    atlas.bank_write(&bank).await.unwrap();
    let written = read_tree(&bank);
    // A write that died after committing its journal: two renames left to do. The next write
    // finishes them before it compares.
    let staging = bank.join(".atlas-staging");
    std::fs::create_dir_all(&staging).unwrap();
    let new_page = "---\natlas: facts\nsubject: \"new\"\n---\n\n# new\n\n## Now\n\n## History\n";
    std::fs::write(staging.join("0"), new_page).unwrap();
    // The manifest it would have left: the new page in, the removed one out.
    let manifest = std::fs::read_to_string(bank.join(".atlas-manifest")).unwrap();
    let mut lines: Vec<String> =
        manifest.lines().filter(|l| !l.ends_with("  user-ann/entities/Bruno.md")).map(str::to_owned).collect();
    lines.push(format!("{}  everyone/entities/new.md", sha256(new_page)));
    lines[1..].sort_by(|a, b| a[66..].cmp(&b[66..]));
    let manifest = lines.join("\n") + "\n";
    std::fs::write(staging.join("1"), &manifest).unwrap();
    let journal = format!(
        "rename 0 {} - everyone/entities/new.md\nremove user-ann/entities/Bruno.md\nmanifest 1 {}\n",
        sha256(new_page),
        sha256(&manifest)
    );
    std::fs::write(staging.join("JOURNAL"), journal).unwrap();
    atlas.bank_sync(&bank).await.unwrap();
    assert!(!staging.exists());
    // It landed whole (both changes), then the write after it put the space's beliefs back.
    assert_eq!(read_tree(&bank), written);
    // A write that died before its journal was committed leaves the bank as it was.
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join("0"), "half a page").unwrap();
    std::fs::write(staging.join("JOURNAL.tmp"), "rename 0 user-ann/entities/Bruno.md\n").unwrap();
    atlas.bank_write(&bank).await.unwrap();
    assert!(!staging.exists());
    assert_eq!(read_tree(&bank), written);
}

#[tokio::test]
async fn documents_sync_by_content_hash_and_recall_finds_them_only_when_asked() {
    for on_sqlite in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let atlas =
            if on_sqlite { sqlite(&dir.path().join("a.db"), Config::default()).await } else { fake(dir.path()).await };
        let docs = dir.path().join("docs");
        std::fs::create_dir_all(docs.join("ops")).unwrap();
        std::fs::write(docs.join("guide.md"), "# Guide\n\n## Deploying\n\nThe checkout service deploys with blue-green releases.\n\n## Rollback\n\nRoll back with the release tool.\n").unwrap();
        std::fs::write(docs.join("ops/oncall.md"), "## Rotation\n\nThe pager rotates every Monday.\n").unwrap();
        std::fs::write(docs.join("notes.txt"), "not markdown").unwrap();
        let first = atlas.docs_sync(&docs, false).await.unwrap();
        assert_eq!((first.files, first.added, first.changed, first.unchanged, first.removed), (2, 3, 0, 0, 0));
        let again = atlas.docs_sync(&docs, false).await.unwrap();
        assert_eq!((again.added, again.changed, again.unchanged, again.removed), (0, 0, 3, 0));

        let ask = |query: &str, kinds: Vec<MemoryKind>| RecallRequest { kinds, ..ask(query, 5) };
        let found = atlas.recall(ask("blue-green releases", vec![MemoryKind::Doc])).await.unwrap().hits;
        assert!(found[0].memory.text.starts_with("## Deploying"), "{:?}", found[0].memory.text);
        assert!(
            matches!(&found[0].memory.body, Body::Doc { path, heading, .. } if path == "guide.md" && heading == "Deploying")
        );
        let plain = atlas.recall(ask("blue-green releases", vec![])).await.unwrap().hits;
        assert!(plain.iter().all(|h| h.memory.kind() != MemoryKind::Doc), "plain recall leaves documents out");

        // One section changes, one file goes away.
        let old_id = found[0].memory.id;
        std::fs::write(docs.join("guide.md"), "# Guide\n\n## Deploying\n\nThe checkout service deploys with canary releases.\n\n## Rollback\n\nRoll back with the release tool.\n").unwrap();
        std::fs::remove_file(docs.join("ops/oncall.md")).unwrap();
        let third = atlas.docs_sync(&docs, false).await.unwrap();
        assert_eq!((third.added, third.changed, third.unchanged, third.removed), (0, 1, 1, 1));
        let now = atlas.recall(ask("canary releases", vec![MemoryKind::Doc])).await.unwrap().hits;
        assert!(now[0].memory.text.contains("canary"));
        let old = atlas.explain(old_id).await.unwrap().unwrap();
        assert!(old.memory.validity.valid_until.is_some(), "the old version is kept as history");
        let pager = atlas.recall(ask("pager rotates Monday", vec![MemoryKind::Doc])).await.unwrap().hits;
        assert!(pager.iter().all(|h| !h.memory.text.contains("pager")), "a removed document is forgotten");
    }
}

#[tokio::test]
async fn the_cypher_export_has_a_node_per_live_memory_and_an_edge_per_link() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(&dir.path().join("a.db"), Config::default()).await;
    demo(&atlas).await;
    let mut out = Vec::new();
    let counts = atlas.export_cypher(&mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let stats = atlas.stats().await.unwrap();
    assert_eq!(counts.nodes, stats.store.memories());
    // A node statement's rows each hold `{id: `, and so does its CREATE pattern.
    let nodes: usize = text.lines().filter(|l| l.contains("CREATE (:")).map(|l| l.matches("{id: ").count() - 1).sum();
    assert_eq!(nodes as u64, counts.nodes);
    let edges: usize = text.lines().filter(|l| l.contains("CREATE (a)-[")).map(|l| l.matches("{src: ").count()).sum();
    assert_eq!(edges as u64, counts.edges);
    assert!(text.contains("CREATE (:Fact {") && text.contains("-[:SUPERSEDES {") && text.contains("-[:MENTIONS {"));
    assert!(text.lines().all(|l| l.is_empty() || l.starts_with("//") || l.ends_with(';')));
}
