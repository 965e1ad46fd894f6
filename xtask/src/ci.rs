//! `cargo xtask ci`, the gate every change passes, laid out for a 2-core machine: the checks
//! that need the compiler run one after another on one build of the workspace (one feature set,
//! see `atlas-workspace-hack`); what only waits on the network or on servers (Python and Node
//! environments, the Qdrant cluster's boot) starts at once in the background; once the Rust
//! tests have passed, the Qdrant suite and the clients' lane run side by side. Every step's wall
//! time and test count is printed as a table at the end, failed or not.

use crate::steps::{Counts, Echo, Table};
use anyhow::{Result, bail};
use atlas_test_servers::servers::Qdrant;
use std::path::{Path, PathBuf};

/// The cargo tools CI runs: each built from the crate registry at its pinned version when the
/// machine has none (cargo-deny also when it has another version: its checks change between
/// versions), and never rebuilt when present.
const TOOLS: [(&str, &str, &str, bool); 2] =
    [("deny", "cargo-deny", "0.20.2", true), ("nextest", "cargo-nextest", "0.9.143", false)];

/// The profile CI builds and tests (Cargo.toml: release with the workspace's own crates at
/// opt-level 1).
const CI_PROFILE: &str = "ci";

/// What `--long` multiplies every property test's cases and heavy test's size by.
const LONG_SCALE: &str = "4";

pub fn run(long: bool) -> Result<()> {
    if long {
        // SAFETY: no other thread runs yet; every test process started from here inherits it.
        unsafe { std::env::set_var("ATLAS_TEST_SCALE", LONG_SCALE) };
        println!("--long: ATLAS_TEST_SCALE={LONG_SCALE} (property-test cases and heavy tests' sizes ×{LONG_SCALE})");
    }
    crate::PROFILE.set(CI_PROFILE).expect("the profile is set once, before any build");
    lint_while_compiling()?;
    let table = Table::new();
    let result = pipeline(&table);
    // Whatever the tests said: every unit cargo finished is sound, and the next run starts from it.
    let saved = table.step("dependency cache save", None, || no_count(crate::deps_cache::save(&Echo::plain())?));
    if let Err(e) = saved {
        println!("warning: the dependency cache was not saved: {e:#}");
    }
    print!("{}", table.render());
    if let Err(e) = &result {
        println!("CI failed: {e:#}");
    }
    result
}

/// Makes clippy the compiler of every workspace crate in every later build (`cargo clippy`'s
/// own mechanism: clippy-driver as `RUSTC_WORKSPACE_WRAPPER`, its lint levels in `CLIPPY_ARGS`),
/// so that the lints of `cargo clippy --workspace --all-targets -D warnings` come out of the
/// one build instead of a second, check-only compilation of the whole workspace (four minutes
/// here). Dependencies are compiled by rustc as always.
fn lint_while_compiling() -> Result<()> {
    let sysroot = std::process::Command::new("rustc").args(["--print", "sysroot"]).output();
    let sysroot = match sysroot {
        Ok(out) if out.status.success() => PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
        _ => bail!("`rustc --print sysroot` failed: is Rust installed?"),
    };
    let driver = sysroot.join("bin").join("clippy-driver");
    if !driver.exists() {
        bail!("there is no clippy-driver at {}: run `rustup component add clippy`", driver.display());
    }
    println!("clippy lints every workspace crate as it is compiled ({} -D warnings)", driver.display());
    // SAFETY: no other thread runs yet; every cargo started from here inherits them.
    unsafe {
        std::env::set_var("RUSTC_WORKSPACE_WRAPPER", &driver);
        std::env::set_var("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__");
    }
    Ok(())
}

fn no_count<T>(value: T) -> Result<(T, Option<Counts>)> {
    Ok((value, None))
}

fn pipeline(table: &Table) -> Result<()> {
    let main = Echo::plain();
    table.step("fmt", None, || no_count(crate::cargo(&["fmt", "--all", "--", "--check"], &main)?))?;
    std::thread::scope(|scope| {
        // Started now, needed only after the Rust tests: they wait on the network and on
        // servers, not on the cores the compiler uses.
        let cluster = scope.spawn(|| {
            table.step("qdrant cluster boot (3 nodes)", Some("background"), || {
                no_count(atlas_test_servers::servers::qdrant_cluster(3))
            })
        });
        let environments = scope.spawn(|| {
            table
                .step("python and node environments", Some("background"), || no_count(prepare(&Echo::lane("prepare"))?))
        });

        table.step("cargo tools", None, || no_count(tools(&main)?))?;
        table.step("dependency cache restore", None, || no_count(crate::deps_cache::restore(&main)?))?;
        let deny = ["deny", "check", "bans", "licenses", "sources"];
        table.step("cargo-deny", None, || no_count(crate::cargo(&deny, &main)?))?;
        // Builds atlas and atlas-devtools (most of the workspace) and fetches what the tests need.
        table.step("build binaries + models fetch", None, || {
            let mut fetch = crate::devtools(&["models", "fetch", "--all"])?;
            no_count(crate::steps::run(&mut fetch, "atlas-devtools models fetch", &main)?)
        })?;
        table.step("rust tests (nextest)", None, || {
            let args = ["nextest", "run", "--workspace", "--cargo-profile", crate::profile(), "--no-fail-fast"];
            let counts = crate::cargo_counted(&args, &main)?;
            Ok(((), Some(counts)))
        })?;

        let chromium = environments.join().expect("the environments' thread")?;
        let cluster = cluster.join().expect("the cluster's thread")?;
        let atlas = table.step("one feature set (binaries fresh)", None, || no_count(crate::test_build_atlas()?))?;
        let qdrant = scope.spawn(|| {
            table.step("qdrant suite (3-node cluster)", Some("qdrant"), || qdrant_suite(cluster, &Echo::lane("qdrant")))
        });
        let lane = Echo::lane("clients");
        let clients = (|| {
            table.step("python tests (3 suites, 3 peers)", Some("clients"), || {
                let counts = crate::python::tests(&lane)?;
                Ok(((), Some(counts)))
            })?;
            table.step("node tests (from the tarball)", Some("clients"), || {
                let counts = crate::node::tests(&lane)?;
                Ok(((), Some(counts)))
            })?;
            table.step("clients (mcp, schemathesis, cypher)", Some("clients"), || {
                no_count(crate::clients::run(&atlas, &lane)?)
            })?;
            table
                .step("inspector (chromium)", Some("clients"), || browser_tests(chromium.as_deref(), &atlas, &lane))?;
            table.step("demo", Some("clients"), || {
                let mut demo = crate::devtools(&["demo"])?;
                no_count(crate::steps::run(&mut demo, "the demo (atlas-devtools demo)", &lane)?)
            })
        })();
        let qdrant = qdrant.join().expect("the Qdrant lane's thread");
        clients.and(qdrant)
    })
}

/// Every environment the later steps use, made when missing: the Python ones (keyed by their
/// requirements) and the browser tests' Chromium and Node packages (`None`: no browser here).
fn prepare(echo: &Echo) -> Result<Option<PathBuf>> {
    crate::python::build_venv(echo)?;
    for suite in &crate::python::SUITES {
        crate::python::suite_venv(suite, echo)?;
    }
    crate::clients::venvs(echo)?;
    crate::node::tools(echo)?;
    crate::inspector::prepared(echo)
}

fn browser_tests(chromium: Option<&Path>, atlas: &Path, echo: &Echo) -> Result<((), Option<Counts>)> {
    match chromium {
        Some(_) => Ok(((), crate::inspector::tests(atlas, echo)?)),
        None => Ok(((), None)),
    }
}

/// Every tool of [`TOOLS`] present, installing what is missing.
fn tools(echo: &Echo) -> Result<()> {
    for (subcommand, package, version, exact) in TOOLS {
        let found = std::process::Command::new("cargo").args([subcommand, "--version"]).output();
        let found = found.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        match found {
            Some(v) if !exact || v.split_whitespace().any(|w| w == version) => {
                echo.line(&format!("ok {}", v.lines().next().unwrap_or(package)));
            }
            _ => crate::cargo(&["install", package, "--version", version, "--locked"], echo)?,
        }
    }
    Ok(())
}

/// The Qdrant suite once, on a three-node cluster (or the one server `QDRANT_URL` names) (three shards, two replicas each): the
/// conformance cases, the upgrade of old collections, many hosts and shared spaces on one
/// space, and the cluster test that starts nodes of its own. Without a cluster it says loudly
/// that it was skipped, and why.
pub fn qdrant_suite(cluster: Result<Qdrant, String>, echo: &Echo) -> Result<((), Option<Counts>)> {
    let cluster = match cluster {
        Ok(cluster) => cluster,
        Err(why) => {
            crate::skipped("the Qdrant suite (atlas-store-qdrant, every case)", &why);
            return Ok(((), None));
        }
    };
    // On a cluster, collections are spread as production spreads them; one server holds one shard.
    let settings: &[(&str, &str)] = if cluster.url.contains(',') {
        &[("ATLAS_QDRANT_SHARDS", "3"), ("ATLAS_QDRANT_REPLICATION_FACTOR", "2")]
    } else {
        &[]
    };
    let args = [
        "nextest",
        "run",
        "--workspace",
        "--cargo-profile",
        crate::profile(),
        "--run-ignored",
        "only",
        "--no-fail-fast",
        "-E",
        "package(atlas-store-qdrant)",
    ];
    let shown: String = settings.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    echo.line(&format!("$ QDRANT_URL={} {shown}cargo {}", cluster.url, args.join(" ")));
    let mut command = crate::cargo_command();
    command.args(args).env("QDRANT_URL", &cluster.url).envs(settings.iter().copied()).current_dir(crate::root());
    let counts = crate::steps::run(&mut command, &format!("the Qdrant suite against {}", cluster.url), echo)?;
    if counts.passed == 0 {
        bail!("the Qdrant suite ran no test: the filter or the build lost them");
    }
    drop(cluster);
    Ok(((), Some(counts)))
}
