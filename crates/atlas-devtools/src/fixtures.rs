//! Generates the committed fixtures that tests read, so that they can be rebuilt and reviewed.

use anyhow::{Context, Result};
use atlas_store_sqlite::migrations;
use std::path::Path;

/// Every fixture database.
pub fn generate(root: &Path) -> Result<()> {
    schema_v1(root)?;
    schema_v5(root)
}

/// `fixtures/schema-v1.db`: a database as schema version 1 left it, with a session of three
/// episodes linked by temporal edges, for the test that migrates an old file.
fn schema_v1(root: &Path) -> Result<()> {
    let path = root.join("fixtures").join("schema-v1.db");
    if path.exists() {
        std::fs::remove_file(&path)?;
    }
    let mut conn = rusqlite::Connection::open(&path).context("create fixture")?;
    migrations::migrate_to(&mut conn, &path.display().to_string(), 1)?;
    let turns = [
        (1, "Caroline", "I finally booked the pottery class for Saturday.", 1_683_554_160_000i64),
        (2, "Melanie", "Lovely! Pottery always calms me down.", 1_683_554_190_000),
        (3, "Caroline", "Bring your sketchbook, we can draw the lake after.", 1_683_554_220_000),
    ];
    for (i, speaker, text, t) in turns {
        conn.execute(
            "INSERT INTO memories (kind, text, speaker, scope_session, event_time, recorded_at, valid_from, meta, body) \
             VALUES ('episode', ?1, ?2, 'fixture/session_1', ?3, ?3, ?3, ?4, ?5)",
            rusqlite::params![
                text,
                speaker,
                t,
                format!("{{\"dia_id\":\"D1:{i}\"}}"),
                format!("{{\"kind\":\"episode\",\"speaker\":\"{speaker}\"}}")
            ],
        )?;
    }
    conn.execute_batch(
        "INSERT INTO edges (src, dst, kind, weight, valid_from, recorded_at) VALUES \
         (1, 2, 'temporal', 1.0, 1683554190000, 1683554190000), (2, 3, 'temporal', 1.0, 1683554220000, 1683554220000);",
    )?;
    conn.execute_batch("PRAGMA journal_mode = DELETE; VACUUM;")?;
    println!("wrote {}", path.display());
    Ok(())
}

/// `fixtures/schema-v5.db`: a database as schema version 5 (the first with the sleep cycle)
/// left it: two turns, the first consolidated into a fact (with its `derived_from` edge), the
/// second failed once, and the cycle's ledger row.
fn schema_v5(root: &Path) -> Result<()> {
    let path = root.join("fixtures").join("schema-v5.db");
    if path.exists() {
        std::fs::remove_file(&path)?;
    }
    let mut conn = rusqlite::Connection::open(&path).context("create fixture")?;
    migrations::migrate_to(&mut conn, &path.display().to_string(), 5)?;
    conn.execute_batch(
        r#"
        INSERT INTO memories (id, kind, text, speaker, scope_user, scope_session, event_time, recorded_at, valid_from, meta, body, context)
        VALUES
          (1, 'episode', '- S:checkout: owned by the payments team', 'Dana', 'dana', 'fixture/s1', 1700000000000, 1700000000000, 1700000000000, '{}', '{"kind":"episode","speaker":"Dana"}', NULL),
          (2, 'episode', 'The latency spike hit at noon.', 'Ravi', 'dana', 'fixture/s1', 1700000060000, 1700000060000, 1700000060000, '{}', '{"kind":"episode","speaker":"Ravi"}', 'Dana: - S:checkout: owned by the payments team'),
          (3, 'fact', 'checkout state owned by the payments team', NULL, 'dana', NULL, 1700000000000, 1700000100000, 1700000000000, '{"origin":"tag:S"}', '{"kind":"fact","subject":"checkout","predicate":"state","object":"owned by the payments team","confidence":1.0}', NULL);
        INSERT INTO edges (src, dst, kind, weight, valid_from, recorded_at) VALUES
          (1, 2, 'temporal', 1.0, 1700000060000, 1700000060000),
          (3, 1, 'derived_from', 1.0, 1700000000000, 1700000100000);
        INSERT INTO consolidation (id, processed_at, attempts, last_attempt) VALUES (1, 1700000100000, 1, 1700000100000);
        INSERT INTO consolidation (id, attempts, last_error, last_attempt) VALUES (2, 1, 'the model answered malformed JSON', 1700000100000);
        INSERT INTO cycles (at, report) VALUES (1700000100000, '{"episodes_seen":2,"facts_added":1,"llm_calls":1}');
        "#,
    )?;
    conn.execute_batch("PRAGMA journal_mode = DELETE; VACUUM;")?;
    println!("wrote {}", path.display());
    Ok(())
}
