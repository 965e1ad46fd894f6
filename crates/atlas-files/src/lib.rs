//! Files and folders ATLAS creates are its user's alone: a file is created owner-only (0600) and
//! a folder owner-only (0700) whatever the process's umask, because a memory store holds every
//! tenant's words and the umask of a laptop (022) would make them readable by every local user.
//! An existing file or folder keeps its mode: an operator who widened it (docs/SERVER.md, "Files
//! on disk") is never overruled. On systems without Unix modes these are the plain calls.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The mode of a file ATLAS creates.
pub const FILE_MODE: u32 = 0o600;
/// The mode of a folder ATLAS creates.
pub const DIR_MODE: u32 = 0o700;

/// Open options that create a file owner-only; add the access and creation flags.
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options
}

/// `File::create`, owner-only when it creates the file.
pub fn create(path: impl AsRef<Path>) -> io::Result<File> {
    options().write(true).create(true).truncate(true).open(path)
}

/// Creates `path`, which must not exist, owner-only.
pub fn create_new(path: impl AsRef<Path>) -> io::Result<File> {
    options().write(true).create_new(true).open(path)
}

/// `fs::write`, owner-only when it creates the file.
pub fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    io::Write::write_all(&mut create(path)?, bytes.as_ref())
}

/// Creates an empty owner-only file at `path` when there is none (before a library such as
/// SQLite creates it with its own mode; SQLite gives its `-wal` and `-shm` files the mode of
/// the database file).
pub fn touch(path: impl AsRef<Path>) -> io::Result<()> {
    options().write(true).create(true).truncate(false).open(path).map(drop)
}

/// `fs::create_dir_all`, every folder it creates owner-only.
pub fn create_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn created_files_and_folders_are_owner_only_and_existing_ones_keep_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        create_dir_all(&nested).unwrap();
        assert_eq!((mode(&dir.path().join("a")), mode(&nested)), (DIR_MODE, DIR_MODE));
        let file = nested.join("f");
        write(&file, b"x").unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        touch(nested.join("g")).unwrap();
        assert_eq!(mode(&nested.join("g")), FILE_MODE);
        assert!(create_new(&file).is_err(), "create_new refuses an existing file");
        // An operator widened it: writing again keeps the wider mode.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        write(&file, b"y").unwrap();
        touch(&file).unwrap();
        assert_eq!((mode(&file), std::fs::read(&file).unwrap()), (0o640, b"y".to_vec()));
    }
}
