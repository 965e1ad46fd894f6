//! Real clients against ATLAS (`cargo xtask clients`): the official MCP Python SDK drives
//! `atlas mcp` over stdio and `atlas serve` over streamable HTTP (clients/mcp_check.py), from a
//! virtual environment this task installs with pinned, hash-verified packages.

use anyhow::{Result, bail};
use atlas_embed_onnx::assets;
use std::process::Command;

pub fn run() -> Result<()> {
    let requirements = crate::root().join("clients").join("requirements.txt");
    let text = std::fs::read_to_string(&requirements)?;
    let pinned = text
        .lines()
        .find_map(|l| l.strip_prefix("mcp=="))
        .and_then(|l| l.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("{}: no mcp==VERSION line", requirements.display()))?;
    // The environment is named after the pinned version: a new pin gets a new environment.
    let python = assets::python_venv(
        &format!("mcp-pyenv-{pinned}"),
        "mcp",
        &["--require-hashes", "-r", &requirements.display().to_string()],
    )?;
    let atlas = crate::atlas_binary()?;
    let work = tempfile::tempdir()?;
    let script = crate::root().join("clients").join("mcp_check.py");
    println!("$ {} {} {} {}", python.display(), script.display(), atlas.display(), work.path().display());
    let status = Command::new(&python).arg(&script).arg(&atlas).arg(work.path()).env("ATLAS_LOG", "warn").status()?;
    if !status.success() {
        bail!("the MCP Python SDK client check failed ({status})");
    }
    Ok(())
}
