//! Checks a new memory against the configured limits before anything is written.

use crate::{AtlasError, NewMemory, Result};

/// The default cap on one memory's text: 1 MiB.
pub const DEFAULT_MAX_TEXT_BYTES: usize = 1 << 20;

/// Validates what every store needs to hold: non-blank text within `max_text_bytes`, a valid
/// interval, and a body consistent with its kind. `location` prefixes the error (e.g.
/// `episodes.jsonl:12`).
pub fn validate(memory: &NewMemory, max_text_bytes: usize, location: &str) -> Result<()> {
    if memory.text.trim().is_empty() {
        return Err(AtlasError::invalid(location, "field \"text\": must not be empty"));
    }
    if memory.text.len() > max_text_bytes {
        return Err(AtlasError::invalid(
            location,
            format!(
                "field \"text\": {} bytes exceeds the limit of {} bytes (max_text_bytes)",
                memory.text.len(),
                max_text_bytes
            ),
        ));
    }
    if memory.text.contains('\0') {
        return Err(AtlasError::invalid(location, "field \"text\": contains a NUL character"));
    }
    if let Some(until) = memory.validity.valid_until
        && until <= memory.validity.valid_from
    {
        return Err(AtlasError::invalid(
            location,
            format!("field \"valid_until\": {until} is not after valid_from {}", memory.validity.valid_from),
        ));
    }
    if let crate::Body::Fact { confidence, .. } = memory.body
        && !(0.0..=1.0).contains(&confidence)
    {
        return Err(AtlasError::invalid(
            location,
            format!("field \"body.confidence\": {confidence} is outside [0, 1]"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Scope, Timestamp};

    fn episode(text: &str) -> NewMemory {
        NewMemory::episode(text, Scope::default(), None, Timestamp(0), Timestamp(0))
    }

    #[test]
    fn rejects_blank_oversized_and_nul_text() {
        assert!(validate(&episode("hi"), 10, "x").is_ok());
        let blank = validate(&episode("  \n"), 10, "f.jsonl:3").unwrap_err().to_string();
        assert!(blank.starts_with("f.jsonl:3: field \"text\""), "{blank}");
        let big = validate(&episode(&"x".repeat(11)), 10, "x").unwrap_err().to_string();
        assert!(big.contains("11 bytes exceeds the limit of 10"), "{big}");
        assert!(validate(&episode("a\0b"), 10, "x").is_err());
    }
}
