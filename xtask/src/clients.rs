//! Real clients against ATLAS (`cargo xtask clients`): the official MCP Python SDK drives
//! `atlas mcp` over stdio and `atlas serve` over streamable HTTP, tenants' keys included
//! (clients/mcp_check.py), and schemathesis fuzzes the HTTP API against its own OpenAPI
//! document (clients/api_fuzz.py), and the graph's Cypher export is loaded into Ladybug, an
//! embedded Cypher engine, and checked against ATLAS's own export (clients/cypher_check.py),
//! each from a virtual environment this task installs with pinned, hash-verified packages.

use anyhow::{Result, bail};
use std::process::Command;

pub fn run() -> Result<()> {
    let atlas = crate::atlas_binary()?;
    python_check("requirements.txt", ("mcp", "mcp"), "mcp_check.py", &atlas, "the MCP Python SDK client check")?;
    python_check(
        "schemathesis-requirements.txt",
        ("schemathesis", "schemathesis"),
        "api_fuzz.py",
        &atlas,
        "the schemathesis run",
    )?;
    python_check(
        "cypher-requirements.txt",
        ("real-ladybug", "real_ladybug"),
        "cypher_check.py",
        &atlas,
        "the Cypher export check",
    )
}

/// Runs `clients/<script> ATLAS WORK` with the Python of a virtual environment that holds
/// `clients/<requirements>` (named after the pinned version of `package`, which imports as
/// `import`: a new pin, a new one).
fn python_check(
    requirements: &str,
    (package, import): (&str, &str),
    script: &str,
    atlas: &std::path::Path,
    what: &str,
) -> Result<()> {
    let requirements = crate::root().join("clients").join(requirements);
    let python = crate::python::pinned_venv(&requirements, package, import)?;
    let work = tempfile::tempdir()?;
    let script = crate::root().join("clients").join(script);
    println!("$ {} {} {} {}", python.display(), script.display(), atlas.display(), work.path().display());
    let status = Command::new(&python).arg(&script).arg(atlas).arg(work.path()).env("ATLAS_LOG", "warn").status()?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
