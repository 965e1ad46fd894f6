//! `atlas embed --batch`: the vectors of a JSON Lines file's texts, one line out per line in,
//! read a piece at a time after every line was checked.

use anyhow::{Context, Result, anyhow};
use atlas_runtime::Config;
use std::io::Write;

pub(crate) async fn embed(config: &Config, batch: &std::path::Path, json: bool) -> Result<()> {
    let shown = batch.display().to_string();
    let embedder = atlas_runtime::open_embedder(config)
        .await?
        .ok_or_else(|| anyhow!("embed needs an embedder; this configuration has embedder = \"none\""))?;
    // Every line is checked before the first vector is written; then the file is read again a
    // piece at a time, so that what is held does not grow with it.
    for row in stream_lines(batch, &shown, ["id", "text"])? {
        row?;
    }
    let mut rows = stream_lines(batch, &shown, ["id", "text"])?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    loop {
        let chunk: Vec<(String, [String; 2])> = rows.by_ref().take(256).collect::<Result<_>>()?;
        if chunk.is_empty() {
            break;
        }
        let vectors = embedder.embed(chunk.iter().map(|(_, [_, text])| text.clone()).collect()).await?;
        for ((_, [id, _]), vector) in chunk.iter().zip(vectors) {
            if json {
                writeln!(out, "{}", serde_json::json!({"id": id, "vector": vector}))?;
            } else {
                let head: Vec<String> = vector.iter().take(4).map(|x| format!("{x:.4}")).collect();
                writeln!(out, "{id}: [{}, …] ({} dimensions)", head.join(", "), vector.len())?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// The rows of a JSON Lines file, read a line at a time.
fn stream_lines<const N: usize>(
    path: &std::path::Path,
    origin: &str,
    fields: [&'static str; N],
) -> Result<impl Iterator<Item = Result<(String, [String; N])>>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {origin}"))?;
    Ok(crate::json_lines(std::io::BufReader::new(file), origin, fields))
}
