//! Generates the committed fixtures that tests read, so that they can be rebuilt and reviewed.

use anyhow::{Context, Result};
use atlas_store_sqlite::migrations;
use std::path::Path;

/// `fixtures/schema-v1.db`: a database as schema version 1 left it, with a session of three
/// episodes linked by temporal edges, for the test that migrates an old file.
pub fn generate(root: &Path) -> Result<()> {
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
