//! The Node.js package: `cargo xtask npm` builds the native module with `@napi-rs/cli` (pinned
//! with its hash in crates/atlas-node/package-lock.json) and packs `atlas-memory` into
//! target/npm; `cargo xtask node-tests` installs that tarball into an empty folder, as a user
//! would (`npm install <tarball>`), and runs the tests there with node's own test runner
//! (part of `cargo xtask ci`).

use crate::steps::{Counts, Echo};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn crate_dir() -> PathBuf {
    crate::root().join("crates").join("atlas-node")
}

/// The build tools of the package (`@napi-rs/cli`, `typescript`), exactly as locked.
pub fn tools(echo: &Echo) -> Result<()> {
    crate::inspector::node_packages(&crate_dir(), "@napi-rs/cli", echo)
}

/// Builds the native module and the package; returns the tarball's path.
pub fn package(echo: &Echo) -> Result<PathBuf> {
    tools(echo)?;
    let dir = crate_dir();
    let profile = crate::profile();
    echo.line(&format!("$ napi build --platform --profile {profile} --strip (in {})", dir.display()));
    let mut napi = Command::new(dir.join("node_modules").join(".bin").join("napi"));
    crate::as_from_a_shell(&mut napi);
    napi.args(["build", "--platform", "--strip", "--profile", profile, "--js", "native.cjs", "--dts", "native.d.ts"])
        .arg("--target-dir")
        .arg(crate::target_dir())
        .current_dir(&dir);
    crate::steps::run(&mut napi, "napi build (@napi-rs/cli)", echo)?;
    let out = crate::target_dir().join("npm");
    std::fs::create_dir_all(&out).with_context(|| out.display().to_string())?;
    for old in tarballs_in(&out)? {
        std::fs::remove_file(&old).with_context(|| old.display().to_string())?;
    }
    let mut pack = Command::new("npm");
    pack.args(["pack", "--silent", "--pack-destination"]).arg(&out).current_dir(&dir);
    crate::steps::run(&mut pack, "npm pack", echo)?;
    let tarball = match tarballs_in(&out)?.as_slice() {
        [one] => one.clone(),
        other => bail!("npm pack left {} atlas-memory tarballs in {}, expected one", other.len(), out.display()),
    };
    echo.line(&format!("package: {}", tarball.display()));
    Ok(tarball)
}

/// The package's tests (crates/atlas-node/tests/*.test.mjs) against the tarball installed into
/// a new folder beside the frameworks its integrations serve (LangGraph.js, the AI SDK: pinned
/// in tests/package-lock.json), with the docs' examples (docs/NODE.md) run and type-checked there.
pub fn tests(echo: &Echo) -> Result<Counts> {
    let tarball = package(echo)?;
    let folder = crate::scratch_dir("node-tests")?;
    let tests = crate_dir().join("tests");
    // The frameworks the integrations are tested against, exactly as locked (npm's cache makes
    // a repeat offline); then the package, from its tarball, as a user installs it.
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(tests.join(file), folder.join(file)).with_context(|| format!("copy tests/{file}"))?;
    }
    echo.line(&format!("$ npm ci (in {})", folder.display()));
    let mut frameworks = Command::new("npm");
    frameworks.args(["ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"]).current_dir(&folder);
    crate::steps::run(&mut frameworks, "npm ci of the tested frameworks", echo)?;
    echo.line(&format!("$ npm install --no-save {} (in {})", tarball.display(), folder.display()));
    let mut install = Command::new("npm");
    install.args(["install", "--no-save", "--no-audit", "--no-fund", "--offline"]).arg(&tarball).current_dir(&folder);
    crate::steps::run(&mut install, "npm install of the package", echo)?;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&tests).with_context(|| tests.display().to_string())? {
        let path = entry?.path();
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".mjs")) {
            let copy = folder.join(path.file_name().expect("a file name"));
            std::fs::copy(&path, &copy).with_context(|| path.display().to_string())?;
            if copy.to_string_lossy().ends_with(".test.mjs") {
                files.push(copy);
            }
        }
    }
    files.sort();
    echo.line(&format!("$ node --test ({} files, in {})", files.len(), folder.display()));
    let mut node = Command::new("node");
    node.arg("--test")
        .arg("--test-concurrency=1")
        .args(&files)
        .env("ATLAS_LOG", "warn")
        .env("ATLAS_DOCS", crate::root().join("docs"))
        .env("ATLAS_TSC", crate_dir().join("node_modules").join(".bin").join("tsc"))
        .current_dir(&folder);
    let counts = crate::steps::run(&mut node, "the Node tests", echo)?;
    std::fs::remove_dir_all(&folder).with_context(|| folder.display().to_string())?;
    Ok(counts)
}

/// The atlas-memory tarballs in `dir`.
fn tarballs_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut tarballs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("atlas-memory-") && name.ends_with(".tgz") {
            tarballs.push(path);
        }
    }
    Ok(tarballs)
}
