//! Fuzzes the bank's page parser (`atlas bank sync|rebuild` read pages anyone may have edited):
//! any text at any path below the bank, never a panic; a page that parses writes back to pages
//! that parse again.
#![no_main]

use atlas_domain::policy::bank::{BankFile, parse, render};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (path, text) = text.split_once('\n').unwrap_or(("user-ann/entities/x.md", text));
    let files = [BankFile { path: path.to_owned(), text: text.to_owned() }];
    if let Ok(bank) = parse(&files) {
        parse(&render(&bank.records)).expect("what the bank writes, it reads back");
    }
});
