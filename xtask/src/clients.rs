//! Real clients against ATLAS (`cargo xtask clients`): the official MCP Python SDK drives
//! `atlas mcp` over stdio and `atlas serve` over streamable HTTP, tenants' keys included
//! (clients/mcp_check.py), every argument rule is refused alike by the CLI, HTTP and MCP and the
//! CLI's `--json` answers as HTTP does (clients/doors_check.py), and schemathesis fuzzes the HTTP API against its own OpenAPI
//! document (clients/api_fuzz.py), and the graph's Cypher export is loaded into Ladybug, an
//! embedded Cypher engine, and checked against ATLAS's own export (clients/cypher_check.py),
//! each from a cached virtual environment of pinned, hash-verified packages.

use crate::steps::Echo;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Each check: its environment's label, its requirements file and its script (in clients/).
const CHECKS: [(&str, &str, &str); 4] = [
    ("mcp", "requirements.txt", "mcp_check.py"),
    ("mcp", "requirements.txt", "doors_check.py"),
    ("schemathesis", "schemathesis-requirements.txt", "api_fuzz.py"),
    ("cypher", "cypher-requirements.txt", "cypher_check.py"),
];

/// The environments of every check, made when missing (also ahead of time, while CI compiles).
pub fn venvs(echo: &Echo) -> Result<Vec<PathBuf>> {
    CHECKS.iter().map(|(label, requirements, _)| venv(label, requirements, echo)).collect()
}

fn venv(label: &str, requirements: &str, echo: &Echo) -> Result<PathBuf> {
    crate::python::venv(&format!("clients-{label}"), &[crate::root().join("clients").join(requirements)], echo)
}

/// Every check against `atlas`.
pub fn run(atlas: &Path, echo: &Echo) -> Result<()> {
    for (label, requirements, script) in CHECKS {
        let python = venv(label, requirements, echo)?;
        let work = crate::scratch_dir(&format!("clients-{label}"))?;
        let script = crate::root().join("clients").join(script);
        echo.line(&format!("$ {} {} {} {}", python.display(), script.display(), atlas.display(), work.display()));
        let mut check = Command::new(&python);
        check.arg(&script).arg(atlas).arg(&work).env("ATLAS_LOG", "warn");
        crate::steps::run(&mut check, &format!("the {label} client check"), echo)?;
        std::fs::remove_dir_all(&work)?;
    }
    Ok(())
}
