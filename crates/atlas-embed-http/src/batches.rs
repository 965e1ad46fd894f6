//! How one call's texts are cut into requests: in order, at most `count` texts and about
//! `bytes` bytes each (a text longer than `bytes` goes alone), so that no request exceeds what
//! an endpoint takes (OpenAI: 2,048 inputs; a llama.cpp server: its batch of tokens) and several
//! requests can be in flight at once.

use std::ops::Range;

/// The ranges of `lengths` (each text's length in bytes) that make the requests: contiguous,
/// in order, covering every text once, none empty.
pub fn split(lengths: &[usize], count: usize, bytes: usize) -> Vec<Range<usize>> {
    let count = count.max(1);
    let mut batches = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, len) in lengths.iter().enumerate() {
        let full = i - start == count || (i > start && size + len > bytes);
        if full {
            batches.push(start..i);
            (start, size) = (i, 0);
        }
        size += len;
    }
    if start < lengths.len() {
        batches.push(start..lengths.len());
    }
    batches
}

/// `text` cut to at most `max_chars` characters, at a character boundary.
pub fn truncate(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn batches_cover_every_text_once_in_order_within_both_limits(
            lengths in proptest::collection::vec(0usize..5_000, 0..200), count in 0usize..40, bytes in 1usize..20_000) {
            let batches = split(&lengths, count, bytes);
            let mut next = 0;
            for b in &batches {
                prop_assert_eq!(b.start, next);
                prop_assert!(b.end > b.start);
                prop_assert!(b.len() <= count.max(1));
                let size: usize = lengths[b.clone()].iter().sum();
                prop_assert!(b.len() == 1 || size <= bytes, "batch {:?} of {} bytes over {}", b, size, bytes);
                next = b.end;
            }
            prop_assert_eq!(next, lengths.len());
        }

        #[test]
        fn truncation_keeps_a_prefix_of_at_most_max_chars(text in "\\PC{0,300}", max in 0usize..400) {
            let cut = truncate(&text, max);
            prop_assert!(text.starts_with(cut));
            prop_assert_eq!(cut.chars().count(), text.chars().count().min(max));
        }
    }

    #[test]
    fn a_text_longer_than_the_byte_limit_goes_alone() {
        assert_eq!(split(&[10, 500, 10, 10], 8, 100), vec![0..1, 1..2, 2..4]);
        assert_eq!(split(&[1, 1, 1], 2, 100), vec![0..2, 2..3]);
        assert!(split(&[], 4, 100).is_empty());
    }
}
