//! The Python package: `cargo xtask wheel` builds it with maturin (pinned, from a virtual
//! environment it installs with hashes), and `cargo xtask python-tests` installs the wheel into
//! fresh virtual environments (the package alone, with LangGraph, with the Agents SDK) and runs
//! its pytest suites there, as a user would get it.

use anyhow::{Context, Result, bail};
use atlas_embed_onnx::assets;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn crate_dir() -> PathBuf {
    crate::root().join("crates").join("atlas-py")
}

/// The version `requirements` pins for `package` (its `package==VERSION` line).
fn pinned(requirements: &Path, package: &str) -> Result<String> {
    let text = std::fs::read_to_string(requirements).with_context(|| requirements.display().to_string())?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{package}==")))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("{}: no {package}==VERSION line", requirements.display()))
}

/// A cached virtual environment holding `requirements` (hash-checked), named after the pinned
/// version of `package`: a new pin, a new environment. Returns its Python.
pub fn pinned_venv(requirements: &Path, package: &str, import: &str) -> Result<PathBuf> {
    let version = pinned(requirements, package)?;
    Ok(assets::python_venv(
        &format!("{package}-pyenv-{version}"),
        import,
        &["--require-hashes", "-r", &requirements.display().to_string()],
    )?)
}

/// Builds the wheel into target/wheels and returns its path.
pub fn wheel() -> Result<PathBuf> {
    let python = pinned_venv(&crate_dir().join("build-requirements.txt"), "maturin", "maturin")?;
    let maturin = python.with_file_name("maturin");
    let out = crate::target_dir().join("wheels");
    let manifest = crate_dir().join("Cargo.toml");
    // The one wheel left there afterwards is this build's.
    for old in wheels_in(&out)? {
        std::fs::remove_file(&old).with_context(|| old.display().to_string())?;
    }
    println!("$ maturin build --release --manifest-path {} --out {}", manifest.display(), out.display());
    let mut maturin = Command::new(&maturin);
    crate::as_from_a_shell(&mut maturin);
    run(
        maturin
            .args(["build", "--release", "--manifest-path"])
            .arg(&manifest)
            .arg("--out")
            .arg(&out)
            .arg("--interpreter")
            .arg(&python)
            .current_dir(crate::root()),
        "maturin build",
    )?;
    let built = match wheels_in(&out)?.as_slice() {
        [one] => one.clone(),
        other => bail!("maturin left {} atlas wheels in {}, expected one", other.len(), out.display()),
    };
    println!("wheel: {}", built.display());
    Ok(built)
}

/// The pytest suites: the package alone, then each integration with its framework, each in
/// its own fresh environment (their frameworks pin different versions of shared packages);
/// the guide's examples run in every one (each where its framework is).
const SUITES: [(&str, &[&str], Option<&str>); 3] = [
    ("core", &["test_memory.py", "test_docs.py"], None),
    ("langgraph", &["test_langgraph.py", "test_docs.py"], Some("langgraph-requirements.txt")),
    ("agents", &["test_agents.py", "test_docs.py"], Some("agents-requirements.txt")),
];

/// Builds the wheel and runs every suite against it, installed as a user would install it.
pub fn tests() -> Result<()> {
    let wheel = wheel()?;
    for (name, files, framework) in SUITES {
        let requirements: Vec<&str> = std::iter::once("test-requirements.txt").chain(framework).collect();
        let python = fresh_venv(&format!("python-tests-{name}"), &requirements, &wheel)?;
        let venv = python.parent().and_then(Path::parent).expect("a venv's python is in bin/").to_path_buf();
        let tests: Vec<PathBuf> = files.iter().map(|f| crate_dir().join("tests").join(f)).collect();
        println!("$ {} -m pytest ({name}) {}", python.display(), files.join(" "));
        run(
            Command::new(&python)
                .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
                .args(&tests)
                .env("ATLAS_LOG", "warn")
                .env("ATLAS_DOCS", crate::root().join("docs"))
                // The tests import the installed package, never the source tree.
                .current_dir(&venv),
            &format!("the Python tests ({name})"),
        )?;
    }
    Ok(())
}

/// A new virtual environment target/`name` holding `requirements` (files of this crate, each
/// hash-checked) and `wheel`; returns its Python.
pub fn fresh_venv(name: &str, requirements: &[&str], wheel: &Path) -> Result<PathBuf> {
    let venv = crate::target_dir().join(name);
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| venv.display().to_string())?;
    }
    let system_python = std::env::var("ATLAS_PYTHON").unwrap_or_else(|_| "python3".into());
    run(Command::new(&system_python).args(["-m", "venv"]).arg(&venv), "python3 -m venv")?;
    let python = venv.join("bin").join("python");
    for requirements in requirements {
        run(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--require-hashes", "-r"])
                .arg(crate_dir().join(requirements)),
            &format!("pip install -r {requirements}"),
        )?;
    }
    run(
        Command::new(&python).args(["-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]).arg(wheel),
        "pip install the wheel",
    )?;
    Ok(python)
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

fn run(command: &mut Command, what: &str) -> Result<()> {
    let status = command.status().with_context(|| format!("{what}: could not start it"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
