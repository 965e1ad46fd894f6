//! Fuzzes the extractive session summary: any turns, any budget, never a panic.
#![no_main]

use atlas_domain::policy::summary::{Turn, extractive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let budget = text.len() % 700;
    let turns: Vec<Turn<'_>> = text.split('\n').map(|t| Turn { speaker: Some("A"), text: t }).collect();
    let _ = extractive(&turns, budget);
});
