//! The inspector's browser tests (`cargo xtask inspector-tests`, part of `ci`) and its
//! first-paint benchmark (`cargo xtask bench inspector`): Debian's Chromium (installed here when
//! missing and possible, else the tests say loudly that they were skipped), driven by
//! `playwright-core`, pinned with its hash in crates/atlas-server/inspector/tests/package-lock.json.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";

/// The browser tests' folder: their package manifest, lock file and scripts.
pub fn tests_dir() -> PathBuf {
    crate::root().join("crates").join("atlas-server").join("inspector").join("tests")
}

/// Where the tests write their screenshots and first-paint figures.
pub fn shots_dir() -> PathBuf {
    crate::target_dir().join("inspector-shots")
}

/// Debian's Chromium, installed with apt when missing (as root, which CI machines are); `Err`
/// says why there is none.
fn chromium() -> Result<PathBuf, String> {
    let path = std::env::var_os("ATLAS_CHROMIUM").map_or_else(|| PathBuf::from(CHROMIUM), PathBuf::from);
    if path.exists() {
        return Ok(path);
    }
    println!("$ apt-get install chromium (the inspector's browser tests need it)");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| format!("apt-get cannot run: {e}"))
            .and_then(|s| if s.success() { Ok(()) } else { Err(format!("apt-get {} failed ({s})", args.join(" "))) })
    };
    apt(&["install", "-y", "--no-install-recommends", "chromium"])
        .or_else(|_| apt(&["update"]).and_then(|()| apt(&["install", "-y", "--no-install-recommends", "chromium"])))?;
    if path.exists() { Ok(path) } else { Err(format!("apt installed chromium but {} is missing", path.display())) }
}

/// `npm ci` in the tests' folder: exactly the locked, hash-verified packages.
fn node_packages(dir: &Path) -> Result<()> {
    if dir.join("node_modules").join("playwright-core").join("package.json").exists() {
        let lock = std::fs::metadata(dir.join("package-lock.json"))?.modified()?;
        let installed = std::fs::metadata(dir.join("node_modules").join(".package-lock.json"))
            .and_then(|m| m.modified())
            .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
        if installed >= lock {
            return Ok(());
        }
    }
    println!("$ npm ci (in {})", dir.display());
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
        .current_dir(dir)
        .status()
        .context("run npm (Node.js's package manager)")?;
    if !status.success() {
        bail!("npm ci failed ({status})");
    }
    Ok(())
}

/// Chromium and the Node packages, or why the browser cannot run here.
fn prepared() -> Result<Option<PathBuf>> {
    let chromium = match chromium() {
        Ok(path) => path,
        Err(why) => {
            atlas_testing::servers::skipped(
                "the inspector's browser tests",
                &format!(
                    "{why}; install Debian's chromium (or set ATLAS_CHROMIUM) and run `cargo xtask inspector-tests`"
                ),
            );
            return Ok(None);
        }
    };
    node_packages(&tests_dir())?;
    Ok(Some(chromium))
}

fn node(script: &str, chromium: &Path, atlas: &Path, extra: &[(&str, &Path)]) -> Result<()> {
    let dir = tests_dir();
    let mut command = Command::new("node");
    if script.ends_with(".test.mjs") {
        command.arg("--test").arg("--test-concurrency=1");
    }
    command
        .arg(script)
        .current_dir(&dir)
        .env("ATLAS_CHROMIUM", chromium)
        .env("ATLAS_BIN", atlas)
        .env("ATLAS_ROOT", crate::root())
        .env("ATLAS_SHOTS", shots_dir());
    for (name, value) in extra {
        command.env(name, value);
    }
    println!("$ node {script} (in {})", dir.display());
    let status = command.status().context("run node")?;
    if !status.success() {
        bail!("`node {script}` failed ({status})");
    }
    Ok(())
}

/// The browser tests against a live `atlas ui` on the fixture space.
pub fn tests() -> Result<()> {
    let Some(chromium) = prepared()? else { return Ok(()) };
    let atlas = crate::atlas_binary()?;
    node("inspector.test.mjs", &chromium, &atlas, &[])?;
    println!("screenshots and first paints: {}", shots_dir().display());
    Ok(())
}

/// First paint of every view on `db` (a populated space; a synthetic one of `size` memories
/// when none is given), printed as a table.
pub fn bench(db: Option<PathBuf>, size: usize) -> Result<()> {
    let Some(chromium) = prepared()? else { bail!("no browser to measure with") };
    crate::fetch_models()?;
    let atlas = crate::atlas_binary()?;
    let dir = tempfile::tempdir()?;
    let (db, seed) = match db {
        Some(db) => (db, "0"),
        None => {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let space = rt.block_on(crate::bench_recall::populate(dir.path(), size))?;
            (space.db, "1")
        }
    };
    node("paint.mjs", &chromium, &atlas, &[("ATLAS_DB", &db), ("ATLAS_PAINT_SEED", Path::new(seed))])
}
