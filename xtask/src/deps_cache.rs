//! The compiled-dependency cache of `cargo xtask ci`: the registry crates' build units of the
//! CI profile (their `deps/` files, build-script folders and cargo fingerprints), kept outside
//! the repository and copied into an empty `target/` before the build, the way hosted CI
//! restores a Rust cache. Cargo still decides what is fresh, unit by unit: a unit whose crate,
//! features or compiler changed is compiled again, so a stale cache costs time, never
//! correctness. The workspace's own units are never kept (a fresh clone's sources are newer than
//! any of them, so cargo would compile them again anyway).
//!
//! Why not a compiler cache (sccache): it keys every compile on its working directory and on
//! `OUT_DIR`'s absolute path, so on a fresh clone in a new folder it missed every workspace crate
//! and every dependency that includes generated code, and everything built on those (measured:
//! 15 hits of 20 on one crate's dependencies, no time saved). Cargo's own fingerprints are
//! relative to the target folder and survive the move.

use crate::steps::Echo;
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The folders of a profile's target folder that hold build units.
const UNIT_FOLDERS: [&str; 3] = [".fingerprint", "build", "deps"];

/// The file written into a cache once it is complete: one without it was cut short.
const READY: &str = ".atlas-ready";

/// The builds kept, each a target folder and its cache: the profile's own
/// (`<cache>/cargo-deps/<profile>-<hash of rustc -vV>`), and the one cargo makes for an explicit
/// `--target` of the host, as `napi build` (the Node package) always passes one
/// (`target/<host>/<profile>`, cached with `-<host>` after the name).
fn builds() -> Result<[(PathBuf, PathBuf); 2]> {
    let out = Command::new("rustc").arg("-vV").output().context("run rustc -vV")?;
    if !out.status.success() {
        bail!("`rustc -vV` failed ({})", out.status);
    }
    let version = String::from_utf8_lossy(&out.stdout);
    let host = version.lines().find_map(|l| l.strip_prefix("host: ")).unwrap_or("host").trim().to_owned();
    let key: String = Sha256::digest(&out.stdout).iter().take(8).map(|b| format!("{b:02x}")).collect();
    let cache = atlas_test_servers::servers::cache_dir().join("cargo-deps").join(format!("{}-{key}", crate::profile()));
    let host_cache = cache.with_file_name(format!("{}-{key}-{host}", crate::profile()));
    let host_target = crate::target_dir().join(&host).join(crate::profile());
    Ok([(crate::profile_dir(), cache), (host_target, host_cache)])
}

/// Copies each cache into its target folder when that folder holds no build yet.
pub fn restore(echo: &Echo) -> Result<()> {
    for (target, cache) in builds()? {
        restore_into(&target, &cache, echo)?;
    }
    Ok(())
}

fn restore_into(target: &Path, cache: &Path, echo: &Echo) -> Result<()> {
    if target.join(".fingerprint").exists() {
        echo.line(&format!("{} already holds a build: the dependency cache is not copied in", target.display()));
        return Ok(());
    }
    if !cache.join(READY).exists() {
        echo.line(&format!("no dependency cache at {} yet: every dependency is compiled", cache.display()));
        return Ok(());
    }
    std::fs::create_dir_all(target).with_context(|| target.display().to_string())?;
    let sources: Vec<PathBuf> = UNIT_FOLDERS.iter().map(|f| cache.join(f)).filter(|p| p.exists()).collect();
    copy_into(&sources, target)?;
    echo.line(&format!("restored {} from {}", size_of(target), cache.display()));
    Ok(())
}

/// Replaces each cache with the registry crates' units of its build.
pub fn save(echo: &Echo) -> Result<()> {
    for (target, cache) in builds()? {
        save_from(&target, &cache, echo)?;
    }
    Ok(())
}

fn save_from(target: &Path, cache: &Path, echo: &Echo) -> Result<()> {
    if !target.join(".fingerprint").exists() {
        echo.line(&format!("nothing was built in {}: its dependency cache is left as it was", target.display()));
        return Ok(());
    }
    let lock = std::fs::read_to_string(crate::root().join("Cargo.lock")).context("read Cargo.lock")?;
    let packages = LockedPackages::parse(&lock);
    // A unit's fingerprint folder is `<package>-<hash>`, and its files in deps/ end in the same
    // `-<hash>`: the hashes of the workspace's units name every file that is not kept.
    let mut workspace_units = HashSet::new();
    let mut kept = Vec::new();
    for folder in [".fingerprint", "build"] {
        for entry in entries(&target.join(folder))? {
            let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
            let Some((package, hash)) = name.rsplit_once('-') else { continue };
            if packages.workspace.contains(package) {
                workspace_units.insert(hash.to_owned());
            } else if packages.external.contains(package) {
                kept.push(entry);
            }
        }
    }
    let units = kept.len();
    for entry in entries(&target.join("deps"))? {
        let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let stem = name.split('.').next().unwrap_or_default();
        let hash = stem.rsplit_once('-').map_or("", |(_, h)| h);
        if !workspace_units.contains(hash) {
            kept.push(entry);
        }
    }

    let parent = cache.parent().expect("the cache folder has a parent");
    let fresh = parent.join(format!(".new-{}", std::process::id()));
    if fresh.exists() {
        std::fs::remove_dir_all(&fresh)?;
    }
    let mut by_folder: std::collections::BTreeMap<PathBuf, Vec<PathBuf>> = Default::default();
    for path in &kept {
        let folder = path.parent().and_then(Path::file_name).expect("every kept path is in a unit folder");
        by_folder.entry(fresh.join(folder)).or_default().push(path.clone());
    }
    for (into, paths) in by_folder {
        std::fs::create_dir_all(&into).with_context(|| into.display().to_string())?;
        for chunk in paths.chunks(500) {
            copy_into(chunk, &into)?;
        }
    }
    std::fs::write(fresh.join(READY), "")?;
    if cache.exists() {
        std::fs::remove_dir_all(cache).with_context(|| format!("remove the old {}", cache.display()))?;
    }
    std::fs::rename(&fresh, cache).with_context(|| format!("move the new cache to {}", cache.display()))?;
    echo.line(&format!(
        "saved {} ({} unit folders, {} files in deps/; {} workspace units left out) to {}",
        size_of(cache),
        units,
        kept.len() - units,
        workspace_units.len(),
        cache.display()
    ));
    Ok(())
}

/// The package names of Cargo.lock: the workspace's (no `source`) and the others.
#[derive(Default)]
struct LockedPackages {
    workspace: HashSet<String>,
    external: HashSet<String>,
}

impl LockedPackages {
    fn parse(lock: &str) -> Self {
        let mut packages = Self::default();
        for block in lock.split("[[package]]").skip(1) {
            let field = |key: &str| {
                block.lines().find_map(|l| l.strip_prefix(key)?.trim_start().strip_prefix('=')).map(|v| v.trim())
            };
            let Some(name) = field("name ") else { continue };
            let name = name.trim_matches('"').to_owned();
            if field("source ").is_some() {
                packages.external.insert(name);
            } else {
                packages.workspace.insert(name);
            }
        }
        packages
    }
}

fn entries(folder: &Path) -> Result<Vec<PathBuf>> {
    let Ok(read) = std::fs::read_dir(folder) else { return Ok(Vec::new()) };
    read.map(|e| Ok(e?.path())).collect()
}

/// `cp -a SOURCES… INTO`: keeps modification times (cargo compares them) and is much faster
/// than a file-by-file copy in Rust for thousands of files.
fn copy_into(sources: &[PathBuf], into: &Path) -> Result<()> {
    if sources.is_empty() {
        return Ok(());
    }
    let status = Command::new("cp").arg("-a").args(sources).arg(into).status().context("run cp")?;
    if !status.success() {
        bail!("cp -a … {} failed ({status})", into.display());
    }
    Ok(())
}

/// The size of `folder`'s files, as `du` gives it.
fn size_of(folder: &Path) -> String {
    let out = Command::new("du").args(["-sh"]).arg(folder).output();
    out.ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap_or("?").to_owned())
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::LockedPackages;

    #[test]
    fn the_workspace_packages_are_those_without_a_source() {
        let lock = "version = 4\n\n[[package]]\nname = \"atlas-cli\"\nversion = \"0.1.0\"\ndependencies = [\n \"serde\",\n]\n\n\
                    [[package]]\nname = \"serde\"\nversion = \"1.0.0\"\nsource = \"registry+https://example/index\"\nchecksum = \"00\"\n";
        let packages = LockedPackages::parse(lock);
        assert!(packages.workspace.contains("atlas-cli"));
        assert!(packages.external.contains("serde"));
        assert!(!packages.workspace.contains("serde") && !packages.external.contains("atlas-cli"));
    }
}
