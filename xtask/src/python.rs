//! Python for the project's checks: virtual environments cached outside the repository and
//! keyed by the sha256 of their requirements files and the Python version (a changed pin, any
//! pin, is a new environment; an unchanged one is never installed again), the wheel built with
//! maturin (pinned), and `cargo xtask python-tests`, which installs the wheel into its suites'
//! environments, as a user would get it, and runs their pytest files, then the peers' own
//! suites (from their pinned sdists) with the peer's constructor swapped for ATLAS's.

use crate::steps::{Counts, Echo};
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file written into an environment once every requirement is installed: an environment
/// without it was cut short and is made again.
const READY: &str = ".atlas-ready";

pub fn crate_dir() -> PathBuf {
    crate::root().join("crates").join("atlas-py")
}

fn system_python() -> String {
    std::env::var("ATLAS_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The version of the Python environments are made with, as it reports itself.
fn python_version() -> Result<String> {
    let out = Command::new(system_python())
        .args(["-c", "import sys; print(sys.version)"])
        .output()
        .with_context(|| format!("run {} (ATLAS_PYTHON)", system_python()))?;
    if !out.status.success() {
        bail!("{} -c 'import sys' failed ({})", system_python(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A cached virtual environment named after `label` holding every file of `requirements`
/// (installed with `--require-hashes`), made when no environment of the same key is ready.
/// Returns its Python.
pub fn venv(label: &str, requirements: &[PathBuf], echo: &Echo) -> Result<PathBuf> {
    let mut key = Sha256::new();
    key.update(python_version()?);
    for file in requirements {
        let text = std::fs::read(file).with_context(|| file.display().to_string())?;
        key.update([0]);
        key.update(&text);
    }
    let key: String = key.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    let venv = atlas_test_servers::servers::cache_dir().join(format!("{label}-venv-{key}"));
    let python = venv.join("bin").join("python");
    if venv.join(READY).exists() {
        return Ok(python);
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| format!("remove the unfinished {}", venv.display()))?;
    }
    echo.line(&format!("$ python3 -m venv {} (new requirements)", venv.display()));
    let mut make = Command::new(system_python());
    crate::steps::run(make.args(["-m", "venv"]).arg(&venv), "python3 -m venv", echo)?;
    for file in requirements {
        let mut pip = Command::new(&python);
        pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--require-hashes", "-r"])
            .arg(file);
        crate::steps::run(&mut pip, &format!("pip install -r {}", file.display()), echo)?;
    }
    std::fs::write(venv.join(READY), "")?;
    Ok(python)
}

/// Installs `wheel` into the environment of `python` in place of any earlier build.
pub fn install_wheel(python: &Path, wheel: &Path, echo: &Echo) -> Result<()> {
    let mut pip = Command::new(python);
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index", "--no-deps"])
        .arg("--force-reinstall")
        .arg(wheel);
    crate::steps::run(&mut pip, "pip install the wheel", echo).map(drop)
}

/// The environment maturin runs from.
pub fn build_venv(echo: &Echo) -> Result<PathBuf> {
    venv("maturin", &[crate_dir().join("build-requirements.txt")], echo)
}

/// Builds the wheel into target/wheels and returns its path.
pub fn wheel(echo: &Echo) -> Result<PathBuf> {
    let python = build_venv(echo)?;
    let maturin = python.with_file_name("maturin");
    let out = crate::target_dir().join("wheels");
    let manifest = crate_dir().join("Cargo.toml");
    // The one wheel left there afterwards is this build's.
    for old in wheels_in(&out)? {
        std::fs::remove_file(&old).with_context(|| old.display().to_string())?;
    }
    // The default model's files go inside the package (ATLAS_PREBUILT_MODELS), so that the
    // first `Memory()` fetches no model and builds no Python environment to make one.
    let models = crate_dir().join("python").join("atlas").join("models");
    let mut stage = crate::devtools(&[std::ffi::OsStr::new("models"), "stage".as_ref(), models.as_os_str()])?;
    crate::steps::run(&mut stage, "atlas-devtools models stage", echo)?;
    let profile = crate::profile();
    echo.line(&format!(
        "$ maturin build --profile {profile} --manifest-path {} --out {}",
        manifest.display(),
        out.display()
    ));
    let mut maturin = Command::new(&maturin);
    crate::as_from_a_shell(&mut maturin);
    maturin
        .args(["build", "--profile", profile, "--manifest-path"])
        .arg(&manifest)
        .arg("--out")
        .arg(&out)
        .arg("--interpreter")
        .arg(&python)
        .current_dir(crate::root());
    crate::steps::run(&mut maturin, "maturin build", echo)?;
    let built = match wheels_in(&out)?.as_slice() {
        [one] => one.clone(),
        other => bail!("maturin left {} atlas wheels in {}, expected one", other.len(), out.display()),
    };
    echo.line(&format!("wheel: {}", built.display()));
    Ok(built)
}

/// A pytest suite: its name (also the docs examples it runs), its files, and the requirements
/// of its framework beside the test requirements every suite has.
pub struct Suite {
    pub name: &'static str,
    files: &'static [&'static str],
    framework: Option<&'static str>,
}

/// The package alone, then each integration with its framework, each in its own environment
/// (their frameworks pin different versions of shared packages); the guide's examples run
/// once, each in the suite of the framework it imports.
pub const SUITES: [Suite; 3] = [
    Suite {
        name: "core",
        files: &["test_memory.py", "test_process.py", "test_doors.py", "test_docs.py"],
        framework: None,
    },
    Suite {
        name: "langgraph",
        files: &["test_langgraph.py", "test_docs.py"],
        framework: Some("langgraph-requirements.txt"),
    },
    Suite { name: "agents", files: &["test_agents.py", "test_docs.py"], framework: Some("agents-requirements.txt") },
];

/// The environment of `suite`, without the wheel.
pub fn suite_venv(suite: &Suite, echo: &Echo) -> Result<PathBuf> {
    let requirements: Vec<PathBuf> =
        std::iter::once("test-requirements.txt").chain(suite.framework).map(|f| crate_dir().join(f)).collect();
    venv(&format!("python-tests-{}", suite.name), &requirements, echo)
}

/// Builds the wheel and runs every suite against it, installed as a user would install it.
pub fn tests(echo: &Echo) -> Result<Counts> {
    let wheel = wheel(echo)?;
    let mut counts = Counts::default();
    for suite in &SUITES {
        let python = suite_venv(suite, echo)?;
        install_wheel(&python, &wheel, echo)?;
        let venv = python.parent().and_then(Path::parent).expect("a venv's python is in bin/").to_path_buf();
        let tests: Vec<PathBuf> = suite.files.iter().map(|f| crate_dir().join("tests").join(f)).collect();
        echo.line(&format!("$ {} -m pytest ({}) {}", python.display(), suite.name, suite.files.join(" ")));
        let mut pytest = Command::new(&python);
        pytest
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
            .args(&tests)
            .env("ATLAS_LOG", "warn")
            .env("ATLAS_DOCS", crate::root().join("docs"))
            .env("ATLAS_DOCS_SUITE", suite.name)
            // The tests import the installed package, never the source tree.
            .current_dir(&venv);
        counts += crate::steps::run(&mut pytest, &format!("the Python tests ({})", suite.name), echo)?;
    }
    for peer in &PEERS {
        counts += peer_suite(peer, echo)?;
    }
    Ok(counts)
}

/// A peer's own test suite, run against ATLAS: the sdist it comes from (pinned in
/// peers/sdists.txt), its test files, and the suite whose environment (the wheel and the
/// framework) it runs in.
pub struct Peer {
    sdist: &'static str,
    files: &'static [&'static str],
    suite: &'static Suite,
    /// The swap of the peer's constructor for ATLAS's, in peers/ (the suite's root conftest).
    conftest: &'static str,
}

/// LangGraph's own store tests (InMemoryStore's, and the SQLite stores') with the store swapped
/// for ATLAS's; the Agents SDK's own session and Runner tests with `SQLiteSession` swapped for
/// ATLAS's session.
pub const PEERS: [Peer; 3] = [
    Peer {
        sdist: "langgraph_checkpoint-4.3.2",
        files: &["tests/test_store.py"],
        suite: &SUITES[1],
        conftest: "langgraph_conftest.py",
    },
    Peer {
        sdist: "langgraph_checkpoint_sqlite-3.1.2",
        files: &["tests/test_store.py", "tests/test_async_store.py", "tests/test_ttl.py"],
        suite: &SUITES[1],
        conftest: "langgraph_sqlite_conftest.py",
    },
    Peer {
        sdist: "openai_agents-0.24.0",
        files: &[
            "tests/memory/test_session.py",
            "tests/memory/test_session_limit.py",
            // The Runner-level tests that build a SQLiteSession: whole runs (streamed or not),
            // resumes, cancellation, tool failures and automatic compaction over the session.
            "tests/test_agent_runner.py",
            "tests/test_agent_runner_streamed.py",
            "tests/test_max_turns.py",
            "tests/test_native_tool_failure_history.py",
            "tests/test_programmatic_tool_calling.py",
            "tests/test_run_impl_resume_paths.py",
            "tests/test_soft_cancel.py",
            "tests/test_tool_batch_failure_history.py",
            "tests/test_tool_failure_boundaries.py",
            "tests/memory/test_compaction_model_visibility.py",
            "tests/memory/test_compaction_suffix.py",
            "tests/memory/test_openai_responses_compaction_session.py",
        ],
        suite: &SUITES[2],
        conftest: "agents_conftest.py",
    },
];

/// Runs `peer`'s tests from its sdist (downloaded once into the cache, hash-checked by pip) in
/// a scratch folder, with the peer's swap (its conftest in peers/) and peers/skips.txt's list.
fn peer_suite(peer: &Peer, echo: &Echo) -> Result<Counts> {
    let python = suite_venv(peer.suite, echo)?;
    let peers = crate_dir().join("peers");
    let cache = atlas_test_servers::servers::cache_dir().join("peers");
    let sdist = cache.join(format!("{}.tar.gz", peer.sdist));
    if !sdist.exists() {
        echo.line(&format!(
            "$ pip download --no-binary :all: --require-hashes -r peers/sdists.txt -d {}",
            cache.display()
        ));
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-binary",
            ":all:",
        ])
        .args(["--require-hashes", "-r"])
        .arg(peers.join("sdists.txt"))
        .arg("-d")
        .arg(&cache);
        crate::steps::run(&mut pip, "pip download of the peers' sdists", echo)?;
    }
    let folder = crate::scratch_dir(&format!("peer-{}", peer.sdist))?;
    let mut tar = Command::new("tar");
    tar.arg("xzf").arg(&sdist).arg("-C").arg(&folder).args(["--strip-components=1", &format!("{}/tests", peer.sdist)]);
    crate::steps::run(&mut tar, &format!("tar of {}", sdist.display()), echo)?;
    for (file, name) in [(peer.conftest, "conftest.py"), ("skipped.py", "skipped.py"), ("skips.txt", "skips.txt")] {
        std::fs::copy(peers.join(file), folder.join(name)).with_context(|| format!("copy peers/{file}"))?;
    }
    echo.line(&format!("$ {} -m pytest ({}'s own) {}", python.display(), peer.sdist, peer.files.join(" ")));
    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-o", "asyncio_mode=auto", "--rootdir"])
        .arg(&folder)
        .args(peer.files)
        .env("ATLAS_LOG", "warn")
        // Which peer's lines of skips.txt apply (two peers have a tests/test_store.py).
        .env("ATLAS_PEER", peer.sdist)
        .current_dir(&folder);
    let counts = crate::steps::run(&mut pytest, &format!("{}'s own tests against ATLAS", peer.sdist), echo)?;
    std::fs::remove_dir_all(&folder).with_context(|| folder.display().to_string())?;
    Ok(counts)
}

/// The atlas wheels in `dir` (none when it does not exist).
fn wheels_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut wheels = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("atlas_memory-") && name.ends_with(".whl") {
            wheels.push(path);
        }
    }
    Ok(wheels)
}
