//! Fuzzes the retain-tag parser: any text, never a panic, and every tag it finds is well formed.
#![no_main]

use atlas_domain::policy::retain::{RetainTag, harvest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for tag in harvest(text) {
        match tag {
            RetainTag::Opinion { confidence, text } => {
                assert!((0.0..=1.0).contains(&confidence), "confidence {confidence} out of range");
                assert!(!text.trim().is_empty());
            }
            RetainTag::State { entity, state } => assert!(!entity.trim().is_empty() && !state.trim().is_empty()),
            RetainTag::World(t) | RetainTag::Behavior(t) | RetainTag::User { text: t, .. } => {
                assert!(!t.trim().is_empty())
            }
        }
    }
});
