//! Fuzzes the JSON Lines parsers of import, full exports and archives: any line, never a panic.
#![no_main]

use atlas_domain::Timestamp;
use atlas_domain::jsonl::{parse_header, parse_line, parse_stored_line, parse_trailer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else { return };
    let _ = parse_line(line, Timestamp(0));
    let _ = parse_stored_line(line, Timestamp(0));
    let _ = parse_header(line);
    let _ = parse_trailer(line);
});
