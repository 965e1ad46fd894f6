//! The markdown files of a folder, as the bank and documents sync read them: every `.md` file
//! below it (hidden files and folders skipped), by its `/`-separated path below the folder, in
//! path order, as UTF-8 text; a file that is not UTF-8 is an error naming it and the line.

use atlas_domain::{AtlasError, Result};
use std::path::Path;

/// One markdown file: its path below the folder and its text.
pub(crate) struct MarkdownFile {
    pub path: String,
    pub text: String,
}

fn io_error(path: &Path, e: std::io::Error) -> AtlasError {
    AtlasError::Storage(format!("{}: {e}", path.display()))
}

/// Reads every markdown file below `dir`.
pub(crate) fn read(dir: &Path) -> Result<Vec<MarkdownFile>> {
    if !dir.is_dir() {
        return Err(AtlasError::invalid(dir.display().to_string(), "not a folder"));
    }
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).map_err(|e| io_error(&folder, e))? {
            let entry = entry.map_err(|e| io_error(&folder, e))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let kind = entry.file_type().map_err(|e| io_error(&path, e))?;
            if kind.is_dir() {
                stack.push(path);
                continue;
            }
            if !(kind.is_file() && name.ends_with(".md")) {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
            let text = String::from_utf8(bytes).map_err(|e| {
                let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|b| **b == b'\n').count();
                AtlasError::invalid(format!("{}:{line}", path.display()), "not UTF-8 text")
            })?;
            let relative = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.push(MarkdownFile { path: relative, text });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}
