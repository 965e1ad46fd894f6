//! Fuzzes the readers of the bank's own files, which a shared bank can carry planted: the
//! journal of a staged write and the manifest. Never a panic, and every path either refused
//! or confined to the bank's folder.
#![no_main]

use atlas_domain::policy::bank::files::{Journal, JournalStep, Manifest};
use libfuzzer_sys::fuzz_target;
use std::path::{Component, Path};

fn confined(path: &str) -> bool {
    Path::new(path).components().all(|c| matches!(c, Component::Normal(_)))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(journal) = Journal::parse("JOURNAL", text) {
        for step in &journal.steps {
            if let JournalStep::Rename { path, .. } | JournalStep::Remove { path } = step {
                assert!(confined(path), "{path:?}");
            }
        }
        assert_eq!(Journal::parse("JOURNAL", &journal.render()).unwrap(), journal);
    }
    if let Ok(manifest) = Manifest::parse("MANIFEST", text) {
        assert!(manifest.files.keys().all(|p| confined(p)));
        assert_eq!(Manifest::parse("MANIFEST", &manifest.render()).unwrap(), manifest);
    }
});
