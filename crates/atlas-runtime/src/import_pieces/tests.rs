//! The import reader's tests: lines as a reference reader sees them, a bad line named before
//! anything is stored, a file changed between the passes, a line over the limit.

use super::*;
use proptest::prelude::*;

/// The rule as it reads over a whole file in memory: split at newlines, a byte-order mark
/// dropped, blank lines skipped, each trimmed.
fn reference(bytes: &[u8]) -> std::result::Result<Vec<(usize, String)>, usize> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut out = Vec::new();
    for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        match std::str::from_utf8(raw) {
            Err(_) => return Err(i + 1),
            Ok(line) if line.trim().is_empty() => {}
            Ok(line) => out.push((i + 1, line.trim().to_owned())),
        }
    }
    Ok(out)
}

fn rule() -> LineRule {
    LineRule { now: Timestamp(1_700_000_000_000), caller: Caller::All, max_text_bytes: 1 << 20 }
}

fn line(i: usize) -> String {
    format!("{{\"text\": \"turn {i} of a long import\", \"session\": \"s\", \"speaker\": \"A\"}}\n")
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(256))]
    #[test]
    fn lines_read_a_stream_as_the_whole_file_reads(
        chunks in proptest::collection::vec(
            prop_oneof![
                Just(b"\n".to_vec()), Just(b"  \r\n".to_vec()), Just(b"\xEF\xBB\xBF".to_vec()),
                Just(vec![0xff]), Just("é ü".as_bytes().to_vec()), "[a-z {}\":]{0,12}".prop_map(String::into_bytes),
            ],
            0..24,
        ),
        capacity in 1usize..16,
    ) {
        let bytes = chunks.concat();
        let reader = BufReader::with_capacity(capacity, bytes.as_slice());
        let mut lines = Lines::new(reader, "f", usize::MAX);
        let read: Vec<Result<(String, String)>> = lines.by_ref().collect();
        match reference(&bytes) {
            Ok(expected) => {
                let got: Vec<(String, String)> = read.into_iter().map(|l| l.unwrap()).collect();
                let expected: Vec<(String, String)> = expected.into_iter().map(|(n, l)| (format!("f:{n}"), l)).collect();
                prop_assert_eq!(got, expected);
                let whole: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
                prop_assert_eq!(lines.digest(), whole);
            }
            Err(number) => {
                let last = read.last().expect("an error ends the lines").as_ref().unwrap_err().to_string();
                prop_assert!(last.contains(&format!("f:{number}")), "{}", last);
                prop_assert!(last.contains("not valid UTF-8"), "{}", last);
            }
        }
    }

}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(48))]
    #[test]
    fn pieces_hold_every_line_once_in_order_and_are_bounded(n in 0usize..2_600, long in 0usize..4) {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&line(i));
        }
        // Long lines end pieces by bytes before they reach their count.
        for _ in 0..long {
            text.push_str(&format!("{{\"text\": \"{}\"}}\n", "w".repeat(PIECE_BYTES / 2)));
        }
        let source = Source::Bytes(text.as_bytes().into());
        let rule = LineRule { max_text_bytes: PIECE_BYTES, ..rule() };
        let Scanned::Plain { digest } = scan(&source, "f", &rule).unwrap() else { panic!("a plain file") };
        let pieces: Vec<Vec<NewMemory>> = pieces(&source, "f", rule, digest).unwrap().map(|p| p.unwrap()).collect();
        prop_assert!(pieces.iter().all(|p| !p.is_empty() && p.len() <= PIECE_MEMORIES));
        let texts: Vec<String> = pieces.iter().flatten().map(|m| m.text.clone()).collect();
        prop_assert_eq!(texts.len(), n + long);
        for (i, text) in texts.iter().take(n).enumerate() {
            prop_assert_eq!(text, &format!("turn {i} of a long import"));
        }
        for piece in &pieces {
            let bytes: usize = piece.iter().map(|m| m.text.len()).sum();
            prop_assert!(bytes <= PIECE_BYTES + PIECE_BYTES / 2 + 64, "a piece of {} bytes", bytes);
        }
    }
}

#[test]
fn a_bad_line_far_in_is_named_before_anything_is_read_for_storing() {
    let mut text: String = (0..2_500).map(line).collect();
    text.push_str("{\"text\": 7}\n");
    let err = match scan(&Source::Bytes(text.as_bytes().into()), "big.jsonl", &rule()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a bad line is refused"),
    };
    assert!(err.contains("big.jsonl:2501") && err.contains("text"), "{err}");
}

#[test]
fn a_file_changed_between_the_passes_fails_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.jsonl");
    std::fs::write(&path, (0..1_500).map(line).collect::<String>()).unwrap();
    let source = Source::File(path.clone());
    let Scanned::Plain { digest } = scan(&source, "in.jsonl", &rule()).unwrap() else { panic!("a plain file") };
    std::fs::write(&path, (0..1_500).map(|i| line(i + 1)).collect::<String>()).unwrap();
    let results: Vec<Result<Vec<NewMemory>>> = pieces(&source, "in.jsonl", rule(), digest).unwrap().collect();
    let last = results.last().unwrap().as_ref().unwrap_err().to_string();
    assert!(last.contains("changed while it was imported"), "{last}");
}

#[test]
fn a_line_over_the_limit_is_refused_not_buffered() {
    let text = format!("{}\n{{\"text\": \"{}\"}}\n", line(0).trim(), "x".repeat(200));
    let mut lines = Lines::new(text.as_bytes(), "f", 100);
    assert!(lines.next().unwrap().is_ok());
    let err = lines.next().unwrap().unwrap_err().to_string();
    assert!(err.contains("f:2") && err.contains("longer than 100 bytes"), "{err}");
    assert!(lines.next().is_none());
}
