//! Cache files beside the database: the text and vector caches, written after a process built
//! them from SQL, so that the next process loads them with one sequential read instead.
//!
//! A file is never trusted blindly. It records the database's schema version, its count of
//! committed writes and the random number the last of them drew (`cache_epoch`, which the
//! writer updates in every write transaction: a database replaced by another, or restored from
//! a backup and written again, draws another number at the same count), a key
//! naming what the cache depends on (model and dimension, precision, tokenizer), and a CRC-32 of
//! all of it; a file whose stamp, key or checksum differs, or that is truncated, is reported
//! stale and the cache is rebuilt from SQL (and the file written again). A file some writes
//! behind is caught up instead when those writes are still logged (schema 8: `cache_epochs`
//! holds each recent write's random number, `cache_log` the memories it changed): the file's
//! state must be one this database went through, and the rows changed since are read again
//! ([`Behind`]). A file is written to a temporary name, synced, then renamed over the old
//! one, so a crash leaves the old file or none, never a torn one.

use crate::error::storage;
use atlas_domain::Result;
use rusqlite::{Connection, OptionalExtension};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"ATLCACHE";
/// The layout of the files; a file of another layout is rebuilt.
const FORMAT: u32 = 3;

/// Writes whose changes stay logged for catching files up; an older file is rebuilt.
pub const LOGGED_WRITES: i64 = 100_000;

/// Adds one to the count of committed writes and draws a new random number, inside the
/// writer's transaction, logs both, and forgets the log older than [`LOGGED_WRITES`]. A
/// database without the counter (older schema) has no cache files.
pub fn count_write(conn: &Connection) -> Result<()> {
    match conn.prepare_cached("UPDATE cache_epoch SET changes = changes + 1, nonce = random() WHERE id = 1") {
        Ok(mut stmt) => stmt.execute([]).map_err(storage)?,
        Err(e) if e.to_string().contains("no such table") => return Ok(()),
        Err(e) => return Err(storage(e)),
    };
    let logged = conn.prepare_cached(
        "INSERT INTO cache_epochs (epoch, nonce) SELECT changes, nonce FROM cache_epoch WHERE id = 1 RETURNING epoch",
    );
    let epoch: i64 = match logged {
        Ok(mut stmt) => stmt.query_row([], |r| r.get(0)).map_err(storage)?,
        Err(e) if e.to_string().contains("no such table") => return Ok(()),
        Err(e) => return Err(storage(e)),
    };
    // Pruned a hundredth of the window at a time, so the deletes stay small and rare.
    if epoch % (LOGGED_WRITES / 100) == 0 {
        let before = epoch - LOGGED_WRITES;
        conn.prepare_cached("DELETE FROM cache_epochs WHERE epoch <= ?1")
            .and_then(|mut s| s.execute([before]))
            .map_err(storage)?;
        conn.prepare_cached("DELETE FROM cache_log WHERE epoch <= ?1")
            .and_then(|mut s| s.execute([before]))
            .map_err(storage)?;
    }
    Ok(())
}

/// Logs that the current write transaction changed what the caches hold of memory `id` (its
/// vector: its row's changes are logged by triggers).
pub fn log_changed(conn: &Connection, id: i64) -> Result<()> {
    match conn.prepare_cached("INSERT OR IGNORE INTO cache_log (epoch, id) SELECT changes + 1, ?1 FROM cache_epoch") {
        Ok(mut stmt) => stmt.execute([id]).map(drop).map_err(storage),
        Err(e) if e.to_string().contains("no such table") => Ok(()),
        Err(e) => Err(storage(e)),
    }
}

/// Forgets which writes changed what, inside a write transaction that changes more than the
/// log can say (every vector, at a model switch): files made before it are rebuilt.
pub fn forget_history(conn: &Connection) -> Result<()> {
    match conn.execute_batch("DELETE FROM cache_epochs; DELETE FROM cache_log;") {
        Ok(()) => Ok(()),
        Err(e) if e.to_string().contains("no such table") => Ok(()),
        Err(e) => Err(storage(e)),
    }
}

/// A file some writes behind the database, and the memories those writes changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    pub made_at: Stamp,
    pub changed: Vec<i64>,
}

/// Whether a file made at `found` is behind the database at `now` (`false`: made at it), or
/// why it cannot be used at all, before the log is read.
fn behind(now: Stamp, found: Stamp) -> std::result::Result<bool, Stale> {
    if found.schema != now.schema {
        return Err(format!("made for schema {}, the database has {}", found.schema, now.schema));
    }
    if found.epoch == now.epoch {
        return if found.nonce == now.nonce {
            Ok(false)
        } else {
            Err(format!("made after write {} of another history (replaced or restored database)", found.epoch))
        };
    }
    if found.epoch > now.epoch {
        return Err(format!("made after write {}, the database has had {}", found.epoch, now.epoch));
    }
    Ok(true)
}

/// Whether a file made at `found` may be used with the database now at `now` (read in the same
/// read transaction as `conn`): `Ok(None)` as it is, `Ok(Some(behind))` after the memories in
/// `behind` (at most `most`) are read again, or why not.
pub fn accept(conn: &Connection, now: Stamp, found: Stamp, most: usize) -> std::result::Result<Option<Behind>, Stale> {
    if !behind(now, found)? {
        return Ok(None);
    }
    let nonce: Option<i64> = conn
        .query_row("SELECT nonce FROM cache_epochs WHERE epoch = ?1", [found.epoch], |r| r.get(0))
        .optional()
        .map_err(|e| format!("reading the cache log: {e}"))?;
    match nonce {
        None => Err(format!(
            "made after write {}, the database has had {} and no longer logs what changed since",
            found.epoch, now.epoch
        )),
        Some(n) if n != found.nonce => {
            Err(format!("made after write {} of another history (replaced or restored database)", found.epoch))
        }
        Some(_) => {
            let mut stmt = conn
                .prepare("SELECT DISTINCT id FROM cache_log WHERE epoch > ?1 ORDER BY id LIMIT ?2")
                .map_err(|e| format!("reading the cache log: {e}"))?;
            let changed = stmt
                .query_map([found.epoch, most as i64 + 1], |r| r.get(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<i64>>>())
                .map_err(|e| format!("reading the cache log: {e}"))?;
            if changed.len() > most {
                return Err(format!("more than {most} memories changed since the file was made: rebuilding"));
            }
            Ok(Some(Behind { made_at: found, changed }))
        }
    }
}

/// What the database was when a cache was read from it: its schema version, count of committed
/// writes and the last write's random number. Read in the same read transaction as the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub schema: i64,
    pub epoch: i64,
    pub nonce: i64,
}

impl Stamp {
    /// `None` for a database without the counter.
    pub fn read(conn: &Connection) -> Result<Option<Stamp>> {
        let schema: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(storage)?;
        let sql = "SELECT changes, nonce FROM cache_epoch WHERE id = 1";
        let found = match conn.query_row(sql, [], |r| Ok((r.get(0)?, r.get(1)?))).optional() {
            Ok(found) => found,
            Err(e) if e.to_string().contains("no such table") => None,
            Err(e) => return Err(storage(e)),
        };
        Ok(found.map(|(epoch, nonce)| Stamp { schema, epoch, nonce }))
    }
}

/// The file of one cache (`kind`: "text" or "vectors") beside the database at `db`.
pub fn path_for(db: &Path, kind: &str) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{kind}.cache"));
    db.with_file_name(name)
}

/// Plain numbers a cache's arrays hold: written and read as their bytes, in this machine's
/// byte order (a file records which; one from a machine of the other order is rebuilt).
pub trait Plain: bytemuck::Pod {}
impl Plain for u8 {}
impl Plain for i8 {}
impl Plain for u32 {}
impl Plain for u64 {}
impl Plain for i64 {}
impl Plain for f32 {}

/// The layout's variant for this machine's byte order.
const ENDIAN: u8 = if cfg!(target_endian = "little") { b'L' } else { b'B' };

/// Writes a cache's values to its file, keeping the checksum.
pub struct Encoder<'a> {
    out: &'a mut dyn Write,
    crc: crc32fast::Hasher,
    /// Bytes written so far.
    position: u64,
}

impl Encoder<'_> {
    fn raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.crc.update(bytes);
        self.position += bytes.len() as u64;
        self.out.write_all(bytes)
    }
    /// Where the next value goes, in bytes from the start of the file.
    pub fn position(&self) -> u64 {
        self.position
    }
    /// Values of an array whose length was written before (as [`Encoder::u64`]), one piece at
    /// a time.
    pub fn values<T: Plain>(&mut self, values: &[T]) -> std::io::Result<()> {
        self.raw(bytemuck::cast_slice(values))
    }
    pub fn u64(&mut self, v: u64) -> std::io::Result<()> {
        self.raw(&v.to_ne_bytes())
    }
    /// A length, then the values.
    pub fn array<T: Plain>(&mut self, values: &[T]) -> std::io::Result<()> {
        self.u64(values.len() as u64)?;
        self.raw(bytemuck::cast_slice(values))
    }
}

/// Reads what an [`Encoder`] wrote, straight into the arrays' own memory; every read is
/// bounded by what the file holds, and says what was missing.
pub struct Decoder<'a> {
    input: &'a mut dyn Read,
    crc: crc32fast::Hasher,
    left: u64,
    /// The file read, and where its checksummed part ends.
    file: &'a std::fs::File,
    path: &'a Path,
    end: u64,
}

/// An array a cache file holds, left there: read by position when needed
/// ([`Decoder::array_in_file`]).
#[derive(Debug)]
pub struct FileArray {
    file: std::fs::File,
    path: PathBuf,
    /// Where its first value is, in bytes from the start of the file.
    offset: u64,
    /// Its values.
    len: usize,
}

impl FileArray {
    /// The array at `offset` of `len` values in `file` (at `path`, for messages), which this
    /// process wrote and checked.
    pub fn new(file: std::fs::File, path: PathBuf, offset: u64, len: usize) -> Self {
        FileArray { file, path, offset, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the values from `first` on into `out`. An error names the file: the file was
    /// changed in place under this process (cache files are only ever replaced whole).
    pub fn read<T: Plain>(&self, first: usize, out: &mut [T]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if first + out.len() > self.len {
            return Err(std::io::Error::other(format!(
                "{}: values {first}..{} wanted of an array of {}",
                self.path.display(),
                first + out.len(),
                self.len
            )));
        }
        let at = self.offset + (first * std::mem::size_of::<T>()) as u64;
        self.file
            .read_exact_at(bytemuck::cast_slice_mut(out), at)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))
    }
}

/// Why a cache file cannot be used.
pub type Stale = String;

impl Decoder<'_> {
    fn raw(&mut self, buf: &mut [u8], what: &str) -> std::result::Result<(), Stale> {
        if buf.len() as u64 > self.left {
            return Err(format!("{what}: {} bytes wanted, {} left", buf.len(), self.left));
        }
        // In pieces that stay in the CPU's cache between the copy and the checksum.
        for piece in buf.chunks_mut(256 << 10) {
            self.input.read_exact(piece).map_err(|e| format!("{what}: {e}"))?;
            self.crc.update(piece);
        }
        self.left -= buf.len() as u64;
        Ok(())
    }
    pub fn u64(&mut self, what: &str) -> std::result::Result<u64, Stale> {
        let mut b = [0u8; 8];
        self.raw(&mut b, what)?;
        Ok(u64::from_ne_bytes(b))
    }
    /// An array left in the file: its values go through the checksum like any other, but only
    /// where they are is kept, to be read by position later ([`FileArray`]).
    pub fn array_in_file<T: Plain>(&mut self, what: &str) -> std::result::Result<FileArray, Stale> {
        let n = self.u64(what)?;
        let width = std::mem::size_of::<T>() as u64;
        let Some(bytes) = n.checked_mul(width).filter(|bytes| *bytes <= self.left) else {
            return Err(format!("{what}: {n} values do not fit the {} bytes left", self.left));
        };
        let offset = self.end - self.left;
        let mut piece = vec![0u8; bytes.min(256 << 10) as usize];
        let mut rest = bytes;
        while rest > 0 {
            let size = rest.min(piece.len() as u64) as usize;
            self.raw(&mut piece[..size], what)?;
            rest -= size as u64;
        }
        let file = self.file.try_clone().map_err(|e| format!("{what}: {e}"))?;
        Ok(FileArray { file, path: self.path.to_path_buf(), offset, len: n as usize })
    }

    pub fn array<T: Plain>(&mut self, what: &str) -> std::result::Result<Vec<T>, Stale> {
        let n = self.u64(what)?;
        let width = std::mem::size_of::<T>() as u64;
        if n.checked_mul(width).is_none_or(|bytes| bytes > self.left) {
            return Err(format!("{what}: {n} values do not fit the {} bytes left", self.left));
        }
        let mut values = vec![T::zeroed(); n as usize];
        self.raw(bytemuck::cast_slice_mut(&mut values), what)?;
        Ok(values)
    }
}

/// Writes the cache file at `path` for the database state `stamp` and the cache's `key`, the
/// body written by `body`, to a temporary file beside it; [`Written::commit`] then syncs it and
/// renames it over the old one (and syncs the folder), so that readers see the old file or the
/// new one whole. Dropped uncommitted, the temporary file is removed.
pub fn write(
    path: &Path,
    stamp: Stamp,
    key: &str,
    body: impl FnOnce(&mut Encoder<'_>) -> std::io::Result<()>,
) -> std::io::Result<Written> {
    sweep_abandoned(path);
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    // Unique per write: two stores of one process may write the same file at once.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tmp_name.push(format!(".{}-{n}.tmp", std::process::id()));
    let mut written = Written { tmp: path.with_file_name(tmp_name), path: path.to_path_buf(), file: None };
    let mut out = std::io::BufWriter::with_capacity(1 << 20, atlas_files::create(&written.tmp)?);
    let mut e = Encoder { out: &mut out, crc: crc32fast::Hasher::new(), position: 0 };
    e.raw(MAGIC)?;
    e.raw(&FORMAT.to_le_bytes())?;
    e.raw(&[ENDIAN])?;
    e.u64(stamp.schema as u64)?;
    e.u64(stamp.epoch as u64)?;
    e.u64(stamp.nonce as u64)?;
    e.array(key.as_bytes())?;
    body(&mut e)?;
    let crc = e.crc.finalize();
    out.write_all(&crc.to_le_bytes())?;
    written.file = Some(out.into_inner().map_err(|e| e.into_error())?);
    Ok(written)
}

/// Removes the temporary files of `path` that processes no longer running left (killed while
/// writing: `<file>.<pid>-<n>.tmp`).
fn sweep_abandoned(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = file.strip_prefix(&prefix).and_then(|rest| rest.strip_suffix(".tmp")) else { continue };
        let pid = pid.split('-').next().unwrap_or_default();
        let Ok(pid) = pid.parse::<i32>() else { continue };
        if pid != std::process::id() as i32 && !process_alive(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn process_alive(pid: i32) -> bool {
    // Signal 0 checks that the process exists without touching it.
    // SAFETY: kill(2) with signal 0 has no effect on the target and reads no memory of ours.
    let answer = unsafe { libc::kill(pid, 0) };
    answer == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// A cache file written under a temporary name, not yet in place.
pub struct Written {
    tmp: PathBuf,
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl Written {
    /// Puts the file in place; returns it opened for reading (this very file, whatever replaces
    /// it later).
    pub fn commit(mut self) -> std::io::Result<std::fs::File> {
        let file = self.file.take().expect("written");
        file.sync_all()?;
        let written = std::fs::File::open(&self.tmp)?;
        std::fs::rename(&self.tmp, &self.path)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(written)
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        if self.file.is_some() || std::fs::metadata(&self.tmp).is_ok() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// (Tests) [`read_accepting`] for exactly `stamp`.
#[cfg(test)]
pub(crate) fn read<T>(
    path: &Path,
    stamp: Stamp,
    key: &str,
    body: impl FnOnce(&mut Decoder<'_>) -> std::result::Result<T, Stale>,
) -> std::result::Result<T, Stale> {
    let exact = |found: Stamp| match behind(stamp, found)? {
        false => Ok(()),
        true => Err(format!("made after write {}, the database has had {}", found.epoch, stamp.epoch)),
    };
    read_accepting(path, key, exact, body).map(|((), value)| value)
}

/// Reads the cache file at `path` with `body` if its stamp passes `accept` (judged before the
/// body is read; what it returns comes back beside the body), it was written for `key` and it
/// is whole (its checksum is checked after `body` read it all); otherwise says why not.
pub fn read_accepting<A, T>(
    path: &Path,
    key: &str,
    accept: impl FnOnce(Stamp) -> std::result::Result<A, Stale>,
    body: impl FnOnce(&mut Decoder<'_>) -> std::result::Result<T, Stale>,
) -> std::result::Result<(A, T), Stale> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
    if size < (MAGIC.len() + 4 + 1 + 4) as u64 {
        return Err(format!("{size} bytes: not a cache file"));
    }
    let reader = file.try_clone().map_err(|e| format!("{}: {e}", path.display()))?;
    let mut input = std::io::BufReader::with_capacity(1 << 20, reader);
    let mut d =
        Decoder { input: &mut input, crc: crc32fast::Hasher::new(), left: size - 4, file: &file, path, end: size - 4 };
    let mut head = [0u8; MAGIC.len() + 4 + 1];
    d.raw(&mut head, "header")?;
    if &head[..MAGIC.len()] != MAGIC {
        return Err("not a cache file".into());
    }
    let format = u32::from_le_bytes(head[MAGIC.len()..MAGIC.len() + 4].try_into().expect("4 bytes"));
    if format != FORMAT || head[MAGIC.len() + 4] != ENDIAN {
        return Err(format!(
            "format {format}/{}, this build reads {FORMAT}/{}",
            head[MAGIC.len() + 4] as char,
            ENDIAN as char
        ));
    }
    let found = Stamp { schema: d.u64("schema")? as i64, epoch: d.u64("epoch")? as i64, nonce: d.u64("nonce")? as i64 };
    let accepted = accept(found)?;
    let found_key: Vec<u8> = d.array("key")?;
    if found_key != key.as_bytes() {
        return Err(format!("made for {:?}, wanted {key:?}", String::from_utf8_lossy(&found_key)));
    }
    let value = body(&mut d)?;
    if d.left != 0 {
        return Err(format!("{} bytes left over", d.left));
    }
    let mut tail = [0u8; 4];
    d.input.read_exact(&mut tail).map_err(|e| format!("checksum: {e}"))?;
    if d.crc.clone().finalize().to_le_bytes() != tail {
        return Err("checksum differs (corrupted)".into());
    }
    Ok((accepted, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STAMP: Stamp = Stamp { schema: 7, epoch: 42, nonce: -5 };

    fn write_bytes(path: &Path, key: &str, body: &[u8]) {
        write(path, STAMP, key, |e| e.array(body)).unwrap().commit().unwrap();
    }

    fn read_bytes(path: &Path, stamp: Stamp, key: &str) -> std::result::Result<Vec<u8>, Stale> {
        read(path, stamp, key, |d| d.array("body"))
    }

    #[test]
    fn a_file_is_read_back_only_for_its_own_stamp_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(&dir.path().join("space.db"), "vectors");
        assert!(path.ends_with("space.db.vectors.cache"));
        write_bytes(&path, "model a/384/f32", b"body bytes");
        assert_eq!(read_bytes(&path, STAMP, "model a/384/f32").unwrap(), b"body bytes");
        let later = Stamp { epoch: 43, ..STAMP };
        assert!(read_bytes(&path, later, "model a/384/f32").unwrap_err().contains("write 42"));
        let other_schema = Stamp { schema: 8, ..STAMP };
        assert!(read_bytes(&path, other_schema, "model a/384/f32").unwrap_err().contains("schema 7"));
        let other_history = Stamp { nonce: 9, ..STAMP };
        assert!(read_bytes(&path, other_history, "model a/384/f32").unwrap_err().contains("another history"));
        assert!(read_bytes(&path, STAMP, "model b/384/f32").unwrap_err().contains("model a"));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
    }

    #[test]
    fn a_missing_file_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_bytes(&dir.path().join("none.cache"), STAMP, "k").is_err());
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Every truncation and every flipped bit is detected.
        #[test]
        fn truncated_or_corrupted_files_are_refused(
            body in proptest::collection::vec(any::<u8>(), 0..200),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("x.cache");
            write_bytes(&path, "key", &body);
            let whole = std::fs::read(&path).unwrap();
            std::fs::write(&path, &whole[..cut.index(whole.len())]).unwrap();
            prop_assert!(read_bytes(&path, STAMP, "key").is_err());
            let mut flipped = whole.clone();
            flipped[flip.index(whole.len())] ^= 1 << bit;
            std::fs::write(&path, &flipped).unwrap();
            prop_assert!(read_bytes(&path, STAMP, "key").is_err());
            std::fs::write(&path, &whole).unwrap();
            prop_assert_eq!(read_bytes(&path, STAMP, "key").unwrap(), body);
        }

        #[test]
        fn arrays_round_trip(
            a in proptest::collection::vec(any::<u32>(), 0..50),
            b in proptest::collection::vec(any::<i64>(), 0..50),
            c in proptest::collection::vec(any::<f32>(), 0..50),
            d in proptest::collection::vec(any::<i8>(), 0..50),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("x.cache");
            write(&path, STAMP, "k", |e| { e.array(&a)?; e.array(&b)?; e.array(&c)?; e.array(&d)?; e.u64(7) }).unwrap().commit().unwrap();
            let back = read(&path, STAMP, "k", |r| {
                Ok((r.array::<u32>("a")?, r.array::<i64>("b")?, r.array::<f32>("c")?, r.array::<i8>("d")?, r.u64("e")?))
            }).unwrap();
            prop_assert_eq!(&back.0, &a);
            prop_assert_eq!(&back.1, &b);
            prop_assert!(back.2.len() == c.len() && back.2.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()));
            prop_assert_eq!(&back.3, &d);
            prop_assert_eq!(back.4, 7);
        }
    }
}
