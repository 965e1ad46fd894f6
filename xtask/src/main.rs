//! Developer tasks, run as `cargo xtask <task>`: the CI gate and the checks it is made of (the
//! Rust tests, the real clients, the Python, Node and browser tests, the Qdrant suite). Plain Rust
//! instead of shell scripts, so they run the same everywhere cargo does. Thin on purpose (std,
//! clap, anyhow): the tasks that run the workspace's own code (bench, eval, migrate,
//! migrate-to-qdrant, migrate-from-qdrant, fixtures, models, demo) are `atlas-devtools`', which
//! xtask builds with the workspace and runs with the same arguments.

mod ci;
mod clients;
mod deps_cache;
mod inspector;
mod node;
mod python;
mod steps;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::Command;
use steps::{Counts, Echo};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    after_help = "Also, run by atlas-devtools (`cargo xtask <task> --help`): demo, bench, eval, migrate, \
                  migrate-to-qdrant, migrate-from-qdrant, fixtures, models fetch."
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Everything CI checks: fmt, clippy, cargo-deny, the whole test suite, the real clients,
    /// the Python, Node and browser tests, the Qdrant suite and the demo, with a table of each step's
    /// wall time and test count at the end.
    Ci {
        /// Property tests with 4 times their cases and heavy tests 4 times their size
        /// (ATLAS_TEST_SCALE=4): for before a release.
        #[arg(long)]
        long: bool,
    },
    /// The test suite alone (nextest when installed, else cargo test).
    Test,
    /// Real clients against ATLAS: the official MCP Python SDK over stdio and streamable HTTP,
    /// schemathesis against the OpenAPI document of a live `atlas serve`, and the Cypher export
    /// loaded into an embedded Cypher engine (Ladybug).
    Clients,
    /// The Qdrant suite against `QDRANT_URL` (a cluster when it lists several nodes) or a
    /// three-node cluster started for it.
    QdrantSuite,
    /// Builds the Python wheel (the `atlas` package and console script) into target/wheels.
    Wheel {
        /// Also installs it into the cached environment of this label (no other requirement)
        /// and prints that environment's Python as the last line.
        #[arg(long)]
        venv: Option<String>,
    },
    /// Installs the wheel into its suites' cached virtual environments and runs their pytest files.
    PythonTests,
    /// Builds the Node.js package `atlas-memory` (the native module with `@napi-rs/cli`, pinned)
    /// into target/npm.
    Npm,
    /// Installs the Node.js package into an empty folder and runs its tests with node's test
    /// runner, the docs' examples among them.
    NodeTests,
    /// The memory inspector in headless Chromium against a live `atlas ui` (screenshots in
    /// target/inspector-shots).
    InspectorTests,
    /// First paint of every view of the inspector on a populated space (for `bench inspector`).
    #[command(hide = true)]
    InspectorPaint {
        #[arg(long)]
        db: PathBuf,
        /// 1 when the space is synthetic (its ids are known), 0 for a space of one's own.
        #[arg(long, default_value = "0")]
        seed: String,
    },
    /// CI's compiled-dependency cache: `save` keeps the registry crates' units of a profile's
    /// build, `restore` copies them into a target folder that holds no build yet.
    #[command(hide = true)]
    DepsCache {
        #[arg(value_parser = ["save", "restore"])]
        action: String,
        #[arg(long, default_value = "ci")]
        profile: String,
    },
    /// A task of atlas-devtools, which runs the workspace's own code.
    #[command(external_subcommand)]
    Devtools(Vec<String>),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Ci { long } => ci::run(long),
        Task::Test => test(&Echo::plain()).map(drop),
        Task::Clients => clients::run(&atlas_binary()?, &Echo::plain()),
        Task::QdrantSuite => qdrant_suite(),
        Task::Wheel { venv } => {
            let echo = Echo::plain();
            let wheel = python::wheel(&echo)?;
            if let Some(label) = venv {
                let python = python::venv(&label, &[], &echo)?;
                python::install_wheel(&python, &wheel, &echo)?;
                println!("{}", python.display());
            }
            Ok(())
        }
        Task::PythonTests => python::tests(&Echo::plain()).map(drop),
        Task::Npm => {
            // The tarball's path is the last line, for scripts (`bench node`).
            println!("{}", node::package(&Echo::plain())?.display());
            Ok(())
        }
        Task::NodeTests => node::tests(&Echo::plain()).map(drop),
        Task::InspectorTests => inspector::tests(&atlas_binary()?, &Echo::plain()).map(drop),
        Task::InspectorPaint { db, seed } => inspector::paint(&atlas_binary()?, &db, &seed),
        Task::DepsCache { action, profile } => {
            PROFILE.set(Box::leak(profile.into_boxed_str())).expect("the profile is set once");
            match action.as_str() {
                "save" => deps_cache::save(&Echo::plain()),
                _ => deps_cache::restore(&Echo::plain()),
            }
        }
        Task::Devtools(args) => {
            let status = devtools(&args)?.status().context("run atlas-devtools")?;
            if !status.success() {
                std::process::exit(status.code().unwrap_or(1));
            }
            Ok(())
        }
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// The cargo profile this run builds: `release`, or under `cargo xtask ci` the `ci` profile
/// (Cargo.toml says why it differs).
static PROFILE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

pub fn profile() -> &'static str {
    PROFILE.get().copied().unwrap_or("release")
}

/// Where [`profile`]'s binaries are.
pub fn profile_dir() -> PathBuf {
    target_dir().join(profile())
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// A cargo command as a shell would run it: without the variables `cargo run` set for xtask
/// itself, which build scripts (ring's) track, so that xtask's builds and a person's share
/// target/ instead of rebuilding each other's dependencies.
pub fn cargo_command() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    as_from_a_shell(&mut command);
    command
}

/// Removes from `command`'s environment what `cargo run` set for xtask (its manifest, package
/// and binary), keeping `CARGO` itself.
pub fn as_from_a_shell(command: &mut Command) {
    let set_by_cargo_run = ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_BIN_", "CARGO_CRATE_", "CARGO_PRIMARY_PACKAGE"];
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| set_by_cargo_run.iter().any(|p| n.starts_with(p))) {
            command.env_remove(name);
        }
    }
}

fn cargo(args: &[&str], echo: &Echo) -> Result<()> {
    cargo_counted(args, echo).map(drop)
}

/// Runs `cargo ARGS` as a step: its output echoed, the tests it ran counted.
fn cargo_counted(args: &[&str], echo: &Echo) -> Result<Counts> {
    echo.line(&format!("$ cargo {}", args.join(" ")));
    let mut command = cargo_command();
    command.args(args).current_dir(root());
    steps::run(&mut command, &format!("`cargo {}`", args.join(" ")), echo)
}

/// A new, empty folder under target/tmp for one check's files, left there when the check
/// fails (so that its reports can be read), removed by the check when it passes.
pub fn scratch_dir(name: &str) -> Result<PathBuf> {
    let dir = target_dir().join("tmp").join(format!("xtask-{name}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| dir.display().to_string())?;
    }
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    Ok(dir)
}

fn has_cargo_subcommand(name: &str) -> bool {
    Command::new("cargo").args([name, "--version"]).output().is_ok_and(|o| o.status.success())
}

/// The release binaries the checks run, `atlas` and `atlas-devtools`, built in one cargo run
/// (every crate has one feature set, atlas-workspace-hack's: after the test build this
/// compiles nothing).
fn binaries() -> Result<PathBuf> {
    cargo(&["build", "--profile", profile(), "--quiet", "-p", "atlas-cli", "-p", "atlas-devtools"], &Echo::plain())?;
    Ok(profile_dir())
}

pub fn atlas_binary() -> Result<PathBuf> {
    Ok(binaries()?.join("atlas"))
}

/// The `atlas` binary of the test build, checking that building the binaries again compiles
/// nothing: were features resolved differently for `-p atlas-cli` than for the workspace, every
/// later step would compile the workspace again (what atlas-workspace-hack prevents).
pub fn test_build_atlas() -> Result<PathBuf> {
    let args = ["build", "--profile", profile(), "--message-format=json", "-p", "atlas-cli", "-p", "atlas-devtools"];
    let out = cargo_command().args(args).current_dir(root()).output().context("run cargo build")?;
    if !out.status.success() {
        bail!("`cargo {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    }
    let compiled: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(r#""reason":"compiler-artifact""#) && l.contains(r#""fresh":false"#))
        .filter_map(|l| l.split(r#""package_id":""#).nth(1)?.split('"').next().map(str::to_owned))
        .collect();
    if !compiled.is_empty() {
        bail!(
            "building the binaries after the test build compiled {} crates again ({}): some crate's features \
             differ between builds; run `cargo hakari generate` and `cargo hakari manage-deps`",
            compiled.len(),
            compiled.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(profile_dir().join("atlas"))
}

/// `atlas-devtools ARGS`, built first, in the environment of a shell.
pub fn devtools<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Result<Command> {
    let mut command = Command::new(binaries()?.join("atlas-devtools"));
    as_from_a_shell(&mut command);
    command.args(args).current_dir(root());
    Ok(command)
}

/// `cargo xtask qdrant-suite`: against `QDRANT_URL` when set, else a three-node cluster of
/// the Qdrant binary beside the repository (the way CI runs it).
fn qdrant_suite() -> Result<()> {
    let server = match std::env::var("QDRANT_URL") {
        Ok(url) if !url.trim().is_empty() => atlas_test_servers::servers::qdrant(),
        _ => atlas_test_servers::servers::qdrant_cluster(3),
    };
    ci::qdrant_suite(server, &Echo::plain()).map(drop)
}

/// The loud banner of a suite that did not run (atlas_testing's), with the remedy.
fn skipped(what: &str, why: &str) {
    let remedy = "point QDRANT_URL at a Qdrant server (gRPC, e.g. http://localhost:6334) or ATLAS_QDRANT_BIN \
                  at a Qdrant binary, and run `cargo xtask ci` again";
    atlas_test_servers::servers::skipped(what, &format!("{why}; {remedy}"));
}

/// Tests build in the release profile: the demo and benchmarks need it anyway, so one build
/// of the dependencies serves all three on a 2-core machine.
fn test(echo: &Echo) -> Result<Counts> {
    if has_cargo_subcommand("nextest") {
        cargo_counted(&["nextest", "run", "--workspace", "--cargo-profile", profile(), "--no-fail-fast"], echo)
    } else {
        cargo_counted(&["test", "--workspace", "--profile", profile(), "--no-fail-fast"], echo)
    }
}
