//! The inspector's browser tests (`cargo xtask inspector-tests`, part of `ci`) and its
//! first-paint benchmark (`cargo xtask bench inspector`): Debian's Chromium (installed here when
//! missing and possible, else the tests say loudly that they were skipped), driven by
//! `playwright-core`, pinned with its hash in crates/atlas-server/inspector/tests/package-lock.json.

use crate::steps::{Counts, Echo};
use anyhow::{Result, bail};
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
fn chromium(echo: &Echo) -> Result<PathBuf, String> {
    let path = std::env::var_os("ATLAS_CHROMIUM").map_or_else(|| PathBuf::from(CHROMIUM), PathBuf::from);
    if path.exists() {
        return Ok(path);
    }
    echo.line("$ apt-get install chromium (the inspector's browser tests need it)");
    let apt = |args: &[&str]| {
        let mut apt = Command::new("apt-get");
        apt.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        crate::steps::run(&mut apt, &format!("apt-get {}", args.join(" ")), echo)
            .map(drop)
            .map_err(|e| format!("{e:#}"))
    };
    apt(&["install", "-y", "--no-install-recommends", "chromium"])
        .or_else(|_| apt(&["update"]).and_then(|()| apt(&["install", "-y", "--no-install-recommends", "chromium"])))?;
    if path.exists() { Ok(path) } else { Err(format!("apt installed chromium but {} is missing", path.display())) }
}

/// `npm ci` in `dir`: exactly the locked, hash-verified packages (skipped when `witness`, an
/// installed package, is newer than the lock file).
pub fn node_packages(dir: &Path, witness: &str, echo: &Echo) -> Result<()> {
    if dir.join("node_modules").join(witness).join("package.json").exists() {
        let lock = std::fs::metadata(dir.join("package-lock.json"))?.modified()?;
        let installed = std::fs::metadata(dir.join("node_modules").join(".package-lock.json"))
            .and_then(|m| m.modified())
            .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
        if installed >= lock {
            return Ok(());
        }
    }
    echo.line(&format!("$ npm ci (in {})", dir.display()));
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"]).current_dir(dir);
    crate::steps::run(&mut npm, "npm ci (Node.js's package manager)", echo).map(drop)
}

/// Chromium and the Node packages, or why the browser cannot run here (also ahead of time,
/// while CI compiles).
pub fn prepared(echo: &Echo) -> Result<Option<PathBuf>> {
    let chromium = match chromium(echo) {
        Ok(path) => path,
        Err(why) => {
            atlas_test_servers::servers::skipped(
                "the inspector's browser tests",
                &format!(
                    "{why}; install Debian's chromium (or set ATLAS_CHROMIUM) and run `cargo xtask inspector-tests`"
                ),
            );
            return Ok(None);
        }
    };
    node_packages(&tests_dir(), "playwright-core", echo)?;
    Ok(Some(chromium))
}

fn node(script: &str, chromium: &Path, atlas: &Path, extra: &[(&str, &Path)], echo: &Echo) -> Result<Counts> {
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
    echo.line(&format!("$ node {script} (in {})", dir.display()));
    crate::steps::run(&mut command, &format!("`node {script}`"), echo)
}

/// The browser tests against a live `atlas ui` (of `atlas`) on the fixture space.
pub fn tests(atlas: &Path, echo: &Echo) -> Result<Option<Counts>> {
    let Some(chromium) = prepared(echo)? else { return Ok(None) };
    let counts = node("inspector.test.mjs", &chromium, atlas, &[], echo)?;
    echo.line(&format!("screenshots and first paints: {}", shots_dir().display()));
    Ok(Some(counts))
}

/// First paint of every view of `atlas ui` on `db`, printed as a table (`seed`: "1" when the
/// space is `bench inspector`'s synthetic one).
pub fn paint(atlas: &Path, db: &Path, seed: &str) -> Result<()> {
    let echo = Echo::plain();
    let Some(chromium) = prepared(&echo)? else { bail!("no browser to measure with") };
    let paint = [("ATLAS_DB", db), ("ATLAS_PAINT_SEED", Path::new(seed))];
    node("paint.mjs", &chromium, atlas, &paint, &echo).map(drop)
}
