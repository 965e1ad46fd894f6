//! An import read a piece at a time: the lines of a JSON Lines source with their numbers, and a
//! plain import checked in one pass and stored from a second, so that no file is ever held
//! whole in memory (a spooled copy stands in for a stream that cannot be read twice).
//!
//! The first pass parses and validates every line and hashes the content (the idempotency key),
//! before anything is written: a bad line anywhere refuses the file with its line and field,
//! and a replay is known before a piece is stored. The second pass parses the same lines again
//! into pieces that the store pulls inside its one write; the content is hashed again and a
//! file that changed in between fails that write, so nothing of it is stored.

use atlas_domain::access::Caller;
use atlas_domain::jsonl::{self, ExportHeader};
use atlas_domain::policy::limits::validate;
use atlas_domain::policy::references::{Dangling, body_references, renumber};
use atlas_domain::ports::{CycleRecord, StoredMemory};
use atlas_domain::{AtlasError, MemoryId, NewMemory, Result, Timestamp};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::Arc;

/// Most memories in one piece.
pub const PIECE_MEMORIES: usize = 1_000;
/// A piece ends once its lines reach this many bytes (long texts make short pieces).
pub const PIECE_BYTES: usize = 4 << 20;

/// Where an import's bytes are: a file read twice, or bytes already in memory.
#[derive(Clone)]
pub enum Source {
    File(PathBuf),
    Bytes(Arc<[u8]>),
}

impl Source {
    fn open(&self, origin: &str) -> Result<Box<dyn BufRead + Send>> {
        Ok(match self {
            Source::File(path) => {
                let file =
                    std::fs::File::open(path).map_err(|e| AtlasError::invalid(origin, format!("cannot read: {e}")))?;
                Box::new(BufReader::with_capacity(1 << 16, file))
            }
            Source::Bytes(bytes) => Box::new(std::io::Cursor::new(Arc::clone(bytes))),
        })
    }
}

/// The lines of an import whose texts may hold `max_text_bytes`: a line may be as long as a
/// text at that limit with every character escaped as `\uXXXX`, with room for the other
/// fields; a longer one is refused, not buffered.
fn import_lines(
    reader: Box<dyn BufRead + Send>,
    origin: &str,
    max_text_bytes: usize,
) -> Lines<Box<dyn BufRead + Send>> {
    let mut lines = Lines::new(reader, origin, max_text_bytes.saturating_mul(6).saturating_add(1 << 20));
    lines.why_limited = format!(": no text within the limit of {max_text_bytes} bytes (max_text_bytes) needs one");
    lines
}

/// The lines of a JSON Lines stream with their 1-based numbers (`origin:line`), a UTF-8
/// byte-order mark dropped, blank lines skipped, each trimmed; a line that is not UTF-8 or is
/// longer than the limit is an error naming it. Every byte read is hashed.
pub struct Lines<R> {
    reader: R,
    origin: String,
    number: usize,
    limit: usize,
    buf: Vec<u8>,
    hasher: Sha256,
    bytes: usize,
    failed: bool,
    /// Said after "the line is longer than N bytes".
    why_limited: String,
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R, origin: &str, limit: usize) -> Self {
        Lines {
            reader,
            origin: origin.to_owned(),
            number: 0,
            limit,
            buf: Vec::new(),
            hasher: Sha256::new(),
            bytes: 0,
            failed: false,
            why_limited: String::new(),
        }
    }

    /// The sha256 of every byte read so far, in hex.
    pub fn digest(&self) -> String {
        self.hasher.clone().finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> usize {
        self.bytes
    }

    fn read_raw(&mut self) -> Result<bool> {
        self.buf.clear();
        let limit = (self.limit as u64).saturating_add(1);
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| AtlasError::invalid(&self.origin, format!("cannot read: {e}")))?;
        self.number += 1;
        if n as u64 == limit && self.buf.last() != Some(&b'\n') {
            return Err(AtlasError::invalid(
                format!("{}:{}", self.origin, self.number),
                format!("the line is longer than {} bytes{}", self.limit, self.why_limited),
            ));
        }
        self.hasher.update(&self.buf);
        self.bytes += n;
        Ok(n > 0)
    }
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = Result<(String, String)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            match self.read_raw() {
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
                Ok(false) => return None,
                Ok(true) => {}
            }
            let mut raw: &[u8] = &self.buf;
            if self.number == 1 {
                raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
            }
            let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
            let location = format!("{}:{}", self.origin, self.number);
            match std::str::from_utf8(raw) {
                Err(e) => {
                    self.failed = true;
                    return Some(Err(AtlasError::invalid(
                        &location,
                        format!("field \"line\": not valid UTF-8 (at byte {} of the line)", e.valid_up_to()),
                    )));
                }
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => return Some(Ok((location, line.trim().to_owned()))),
            }
        }
    }
}

/// How a plain import turns a line into a memory: parsed, in the caller's scope, within limits.
#[derive(Clone)]
pub struct LineRule {
    pub now: Timestamp,
    pub caller: Caller,
    pub max_text_bytes: usize,
}

impl LineRule {
    pub fn memory(&self, location: &str, line: &str) -> Result<NewMemory> {
        let mut memory = jsonl::parse_line(line, self.now).map_err(|e| AtlasError::invalid(location, e.to_string()))?;
        memory.scope = self.caller.confine(memory.scope).map_err(|denied| denied.at(location))?;
        validate(&memory, self.max_text_bytes, location)?;
        Ok(memory)
    }
}

/// [`check_export`] of a source whose first line is an export header.
pub fn check_export_source(source: &Source, origin: &str, rule: &LineRule, keep: bool) -> Result<CheckedExport> {
    let lines = import_lines(source.open(origin)?, origin, rule.max_text_bytes);
    let Some((header, reader)) = open_export(lines, rule.now)? else {
        return Err(AtlasError::invalid(origin, "the file changed while it was imported; nothing of it was stored"));
    };
    check_export(header, reader, rule, keep)
}

/// What the first pass found.
pub enum Scanned {
    /// The first line is a full export's header: restored by its own path.
    FullExport,
    /// A plain import whose every line is valid, and its content's sha256.
    Plain { digest: String },
}

/// The first pass: every line checked by `rule`, the content hashed; nothing kept.
pub fn scan(source: &Source, origin: &str, rule: &LineRule) -> Result<Scanned> {
    let mut lines = import_lines(source.open(origin)?, origin, rule.max_text_bytes);
    let mut first = true;
    for line in lines.by_ref() {
        let (location, line) = line?;
        if std::mem::take(&mut first) {
            match jsonl::parse_header(&line) {
                Ok(Some(_)) => return Ok(Scanned::FullExport),
                Ok(None) => {}
                Err(e) => return Err(AtlasError::invalid(&location, e.to_string())),
            }
        }
        rule.memory(&location, &line)?;
    }
    Ok(Scanned::Plain { digest: lines.digest() })
}

/// The second pass, as the pieces a store pulls: up to [`PIECE_MEMORIES`] memories or
/// [`PIECE_BYTES`] of lines each. After the last line the content's hash must be the one the
/// first pass saw; a file changed in between is an error, which fails the store's write.
pub fn pieces(source: &Source, origin: &str, rule: LineRule, digest: String) -> Result<PieceReader> {
    let lines = import_lines(source.open(origin)?, origin, rule.max_text_bytes);
    Ok(PieceReader { lines, rule, digest, done: false })
}

pub struct PieceReader {
    lines: Lines<Box<dyn BufRead + Send>>,
    rule: LineRule,
    digest: String,
    done: bool,
}

impl Iterator for PieceReader {
    type Item = Result<Vec<NewMemory>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut piece = Vec::new();
        let start = self.lines.bytes_read();
        while piece.len() < PIECE_MEMORIES && self.lines.bytes_read() - start < PIECE_BYTES {
            match self.lines.next() {
                Some(Ok((location, line))) => match self.rule.memory(&location, &line) {
                    Ok(memory) => piece.push(memory),
                    Err(e) => return self.fail(e),
                },
                Some(Err(e)) => return self.fail(e),
                None => {
                    self.done = true;
                    if self.lines.digest() != self.digest {
                        return Some(Err(AtlasError::invalid(
                            &self.lines.origin,
                            "the file changed while it was imported; nothing of it was stored",
                        )));
                    }
                    break;
                }
            }
        }
        (!piece.is_empty()).then_some(Ok(piece))
    }
}

impl PieceReader {
    fn fail(&mut self, e: AtlasError) -> Option<Result<Vec<NewMemory>>> {
        self.done = true;
        Some(Err(e))
    }
}

/// One line of a full export after its header.
pub enum ExportLine {
    Memory(String, Box<StoredMemory>),
    Cycle(CycleRecord),
    /// The trailer: where it stands and the count it states.
    End(String, u64),
}

/// The lines of a full export after its header, each parsed; a line after the trailer is an
/// error. Checks that need the whole file (ids once, the count) are [`check_export`]'s.
pub struct ExportReader<R> {
    lines: Lines<R>,
    now: Timestamp,
    ended: bool,
}

/// Opens a full export: its header and a reader of the rest; `None` when the first line is no
/// export header (a plain import).
pub fn open_export<R: BufRead>(mut lines: Lines<R>, now: Timestamp) -> Result<Option<(ExportHeader, ExportReader<R>)>> {
    let Some(first) = lines.next() else { return Ok(None) };
    let (location, first) = first?;
    match jsonl::parse_header(&first) {
        Ok(Some(header)) => Ok(Some((header, ExportReader { lines, now, ended: false }))),
        Ok(None) => Ok(None),
        Err(e) => Err(AtlasError::invalid(&location, e.to_string())),
    }
}

impl<R: BufRead> ExportReader<R> {
    pub fn digest(&self) -> String {
        self.lines.digest()
    }

    /// Once read to the end, the line past the last one (`origin:N`, the read that found the
    /// end counts): where a missing trailer was due.
    pub fn end_location(&self) -> String {
        format!("{}:{}", self.lines.origin, self.lines.number)
    }
}

impl<R: BufRead> Iterator for ExportReader<R> {
    type Item = Result<ExportLine>;

    fn next(&mut self) -> Option<Self::Item> {
        let (location, line) = match self.lines.next()? {
            Ok(line) => line,
            Err(e) => return Some(Err(e)),
        };
        let parsed = (|| {
            if self.ended {
                return Err(AtlasError::invalid(&location, "a line after the export's last line (atlas_export_end)"));
            }
            let bad = |e: jsonl::LineError| AtlasError::invalid(&location, e.to_string());
            if let Some(cycle) = jsonl::parse_cycle(&line).map_err(bad)? {
                return Ok(ExportLine::Cycle(cycle));
            }
            if let Some(count) = jsonl::parse_trailer(&line).map_err(bad)? {
                self.ended = true;
                return Ok(ExportLine::End(location.clone(), count));
            }
            Ok(ExportLine::Memory(location.clone(), Box::new(jsonl::parse_stored_line(&line, self.now).map_err(bad)?)))
        })();
        Some(parsed)
    }
}

/// What the first pass over a full export found.
pub struct CheckedExport {
    pub header: ExportHeader,
    pub digest: String,
    /// The memories' ids in file order.
    pub ids: Vec<MemoryId>,
    /// Every id a memory refers to that the file does not hold, with its first reference.
    pub outside: BTreeMap<MemoryId, Dangling>,
    pub cycles: Vec<CycleRecord>,
    pub vectors: usize,
    /// Ids strictly increase through the file (as `export` writes them).
    pub in_order: bool,
    /// Every memory with where it stands, when asked to keep them.
    pub items: Option<Vec<(String, StoredMemory)>>,
}

/// Reads a full export through, checking every line as an import must (ids once, each edge
/// with its later end, the scope the caller may write, the limits) and the trailer's count;
/// keeps the memories only when `keep`.
pub fn check_export<R: BufRead>(
    header: ExportHeader,
    mut reader: ExportReader<R>,
    rule: &LineRule,
    keep: bool,
) -> Result<CheckedExport> {
    let mut seen = HashSet::new();
    let mut referred: BTreeMap<MemoryId, Dangling> = BTreeMap::new();
    let mut checked = CheckedExport {
        header,
        digest: String::new(),
        ids: Vec::new(),
        outside: BTreeMap::new(),
        cycles: Vec::new(),
        vectors: 0,
        in_order: true,
        items: keep.then(Vec::new),
    };
    let mut trailer = None;
    for line in reader.by_ref() {
        let (location, item) = match line? {
            ExportLine::Cycle(cycle) => {
                checked.cycles.push(cycle);
                continue;
            }
            ExportLine::End(location, count) => {
                trailer = Some((location, count));
                continue;
            }
            ExportLine::Memory(location, item) => (location, item),
        };
        let item = rule.stored(&location, *item)?;
        let id = item.memory.id;
        if !seen.insert(id) {
            return Err(AtlasError::invalid(&location, format!("field \"id\": memory {id} appears twice")));
        }
        if let Some(edge) = item.edges.iter().find(|e| !StoredMemory::carries(id, e)) {
            return Err(AtlasError::invalid(
                &location,
                format!(
                    "field \"edges\": the edge {} -> {} travels with its later end, not with memory {id}",
                    edge.src, edge.dst
                ),
            ));
        }
        checked.in_order &= checked.ids.last().is_none_or(|last| *last < id);
        checked.ids.push(id);
        checked.vectors += usize::from(item.vector.is_some());
        let edge_ends = item.edges.iter().flat_map(|e| [e.src, e.dst]).map(|target| ("edges", target));
        // An id already read is the file's own: in an export (id order, each edge with its
        // later end) that is nearly every reference, and none of them is kept.
        for (field, target) in edge_ends.chain(body_references(&item.memory.body)) {
            if !seen.contains(&target) {
                referred.entry(target).or_insert(Dangling { memory: id, field: field.to_owned(), target });
            }
        }
        if let Some(items) = checked.items.as_mut() {
            items.push((location, item));
        }
    }
    match trailer {
        None => {
            return Err(AtlasError::invalid(
                reader.end_location(),
                format!(
                    "field \"{}\": the export ends without its last line after {} memories: the file was cut \
                     short; nothing was imported",
                    jsonl::TRAILER_KEY,
                    checked.ids.len()
                ),
            ));
        }
        Some((location, count)) if count != checked.ids.len() as u64 => {
            return Err(AtlasError::invalid(
                &location,
                format!(
                    "the export says it holds {count} memories, the file has {}; nothing was imported",
                    checked.ids.len()
                ),
            ));
        }
        Some(_) => {}
    }
    checked.outside = referred.into_iter().filter(|(target, _)| !seen.contains(target)).collect();
    checked.digest = reader.digest();
    Ok(checked)
}

impl LineRule {
    /// A stored memory of a full export, in the caller's scope, within limits.
    pub fn stored(&self, location: &str, mut item: StoredMemory) -> Result<StoredMemory> {
        item.memory.scope = self.caller.confine(item.memory.scope).map_err(|denied| denied.at(location))?;
        validate(&item.memory.to_new(), self.max_text_bytes, location)?;
        Ok(item)
    }
}

/// The second pass over a full export, as pieces of stored memories: each in the caller's
/// scope, without vectors unless `keep_vectors`, renumbered by `map` (ids of the space in
/// `in_space` kept); the content's hash checked at the end as for a plain import.
pub fn export_pieces(
    source: &Source,
    origin: &str,
    rule: LineRule,
    digest: String,
    keep_vectors: bool,
    map: BTreeMap<MemoryId, MemoryId>,
    in_space: HashSet<MemoryId>,
) -> Result<StoredPieceReader> {
    let lines = import_lines(source.open(origin)?, origin, rule.max_text_bytes);
    let Some((_, reader)) = open_export(lines, rule.now)? else {
        return Err(AtlasError::invalid(origin, "the file changed while it was imported; nothing of it was stored"));
    };
    Ok(StoredPieceReader { reader, rule, digest, keep_vectors, map, in_space, origin: origin.to_owned(), done: false })
}

pub struct StoredPieceReader {
    reader: ExportReader<Box<dyn BufRead + Send>>,
    rule: LineRule,
    digest: String,
    keep_vectors: bool,
    map: BTreeMap<MemoryId, MemoryId>,
    in_space: HashSet<MemoryId>,
    origin: String,
    done: bool,
}

impl StoredPieceReader {
    fn piece(&mut self) -> Result<Option<Vec<StoredMemory>>> {
        let mut piece = Vec::new();
        let mut bytes = 0;
        while piece.len() < PIECE_MEMORIES && bytes < PIECE_BYTES {
            match self.reader.next() {
                Some(line) => {
                    let ExportLine::Memory(location, item) = line? else { continue };
                    let mut item = self.rule.stored(&location, *item)?;
                    if !self.keep_vectors {
                        item.vector = None;
                    }
                    bytes += item.memory.text.len() + item.vector.as_ref().map_or(0, |v| v.len() * 4);
                    piece.push(item);
                }
                None => {
                    self.done = true;
                    if self.reader.digest() != self.digest {
                        return Err(AtlasError::invalid(
                            &self.origin,
                            "the file changed while it was imported; nothing of it was stored",
                        ));
                    }
                    break;
                }
            }
        }
        renumber(&mut piece, &self.map, &self.in_space).map_err(|d| AtlasError::invalid("import", d.to_string()))?;
        Ok((!piece.is_empty()).then_some(piece))
    }
}

impl Iterator for StoredPieceReader {
    type Item = Result<Vec<StoredMemory>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.piece() {
            Ok(piece) => piece.map(Ok),
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Copies a stream that cannot be read twice (standard input, a request body) to a temporary
/// file, so that it can be imported a piece at a time; the file is deleted when dropped.
pub fn spool(mut reader: impl Read, origin: &str) -> Result<tempfile::NamedTempFile> {
    let mut file = tempfile::NamedTempFile::new()
        .map_err(|e| AtlasError::Storage(format!("{origin}: cannot make a temporary file to read it into: {e}")))?;
    std::io::copy(&mut reader, file.as_file_mut())
        .map_err(|e| AtlasError::invalid(origin, format!("cannot read: {e}")))?;
    Ok(file)
}

#[cfg(test)]
mod tests;
