//! The markdown files of a folder, as the bank and documents sync read them: every `.md` file
//! below it (hidden files and folders skipped, links never followed), by its `/`-separated path
//! below the folder, in path order, as UTF-8 text without a leading byte-order mark, with the
//! sha256 of its bytes; a file that is not UTF-8, or whose name is not, is an error naming it.

use atlas_domain::{AtlasError, Result};
use sha2::{Digest, Sha256};
use std::path::Path;

/// One markdown file: its path below the folder, its text and the sha256 of its bytes.
pub(crate) struct MarkdownFile {
    pub path: String,
    pub text: String,
    pub hash: String,
}

pub(crate) fn io_error(path: &Path, e: std::io::Error) -> AtlasError {
    AtlasError::Storage(format!("{}: {e}", path.display()))
}

/// The sha256 of `bytes` in lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A folder given on the command line, resolved once: links in the path to it are followed
/// here (a bank may live behind a link), none below it ever is.
pub(crate) fn resolve_dir(dir: &Path) -> Result<std::path::PathBuf> {
    let resolved = std::fs::canonicalize(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => AtlasError::invalid(dir.display().to_string(), "no such folder"),
        _ => io_error(dir, e),
    })?;
    if !resolved.is_dir() {
        return Err(AtlasError::invalid(dir.display().to_string(), "not a folder"));
    }
    Ok(resolved)
}

/// One `.md` file found below a folder, before it is read.
pub(crate) struct Found {
    /// Its path below the folder, `/`-separated; `None` when a part of it is not UTF-8.
    pub path: Option<String>,
    pub full: std::path::PathBuf,
}

/// Every `.md` file below `dir` that is a regular file, reached without following a link
/// (hidden files and folders skipped).
pub(crate) fn find(dir: &Path) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    let mut stack = vec![(dir.to_owned(), Some(String::new()))];
    while let Some((folder, prefix)) = stack.pop() {
        for entry in std::fs::read_dir(&folder).map_err(|e| io_error(&folder, e))? {
            let entry = entry.map_err(|e| io_error(&folder, e))?;
            let full = entry.path();
            let raw = entry.file_name();
            if raw.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let name = raw.to_str().map(str::to_owned);
            let path = match (&prefix, &name) {
                (Some(p), Some(n)) if p.is_empty() => Some(n.clone()),
                (Some(p), Some(n)) => Some(format!("{p}/{n}")),
                _ => None,
            };
            // The entry's own type: a link is neither a folder nor a file here.
            let kind = entry.file_type().map_err(|e| io_error(&full, e))?;
            if kind.is_dir() {
                stack.push((full, path));
            } else if kind.is_file() && raw.as_encoded_bytes().ends_with(b".md") {
                found.push(Found { path, full });
            }
        }
    }
    found.sort_by(|a, b| a.full.cmp(&b.full));
    Ok(found)
}

/// Reads every markdown file below `dir`.
pub(crate) fn read(dir: &Path) -> Result<Vec<MarkdownFile>> {
    if !dir.is_dir() {
        return Err(AtlasError::invalid(dir.display().to_string(), "not a folder"));
    }
    let mut files = Vec::new();
    for found in find(dir)? {
        let Some(path) = found.path else {
            return Err(AtlasError::invalid(
                found.full.display().to_string(),
                "a file name that is not UTF-8: rename it (two such names could not be told apart)",
            ));
        };
        let bytes = std::fs::read(&found.full).map_err(|e| io_error(&found.full, e))?;
        let hash = sha256_hex(&bytes);
        let text = String::from_utf8(bytes).map_err(|e| {
            let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|b| **b == b'\n').count();
            AtlasError::invalid(format!("{}:{line}", found.full.display()), "not UTF-8 text")
        })?;
        // An editor's byte-order mark is not part of the text.
        let text = match text.strip_prefix('\u{feff}') {
            Some(rest) => rest.to_owned(),
            None => text,
        };
        files.push(MarkdownFile { path, text, hash });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}
