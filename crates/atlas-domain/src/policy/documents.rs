//! Project documents as memories (`atlas docs sync`, seed 003 §11): a markdown file split at its
//! level-2 headings into sections, each kept by its content hash.

/// One section of a markdown document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Its `## ` heading, without the marks (empty for the text before the first heading).
    pub heading: String,
    /// Which section of that heading in the document (0 for the first).
    pub occurrence: u32,
    /// The section as written, heading line included, trimmed.
    pub text: String,
    /// The 1-based line it starts on.
    pub line: usize,
}

/// Splits `text` at its level-2 headings (`## `, not inside fenced code blocks). The text before
/// the first one is a section of its own when it holds more than a title; blank sections are
/// left out.
pub fn sections(text: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let mut heading = String::new();
    let mut start = 1;
    let mut body: Vec<&str> = Vec::new();
    // The open fence's character and length: only a run of the same character at least as long
    // closes it (CommonMark), so a four-backtick block can quote a three-backtick one.
    let mut fence: Option<(char, usize)> = None;
    let mut counts: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut flush = |heading: &str, start: usize, body: &[&str], out: &mut Vec<Section>| {
        let text = body.join("\n").trim().to_owned();
        let only_title = heading.is_empty() && text.lines().all(|l| l.trim().is_empty() || l.starts_with("# "));
        if text.is_empty() || only_title {
            return;
        }
        let n = counts.entry(heading.to_owned()).or_insert(0);
        out.push(Section { heading: heading.to_owned(), occurrence: *n, text, line: start });
        *n += 1;
    };
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some((mark, length)) = fence {
            let run = trimmed.chars().take_while(|c| *c == mark).count();
            if run >= length && trimmed[run * mark.len_utf8()..].trim().is_empty() {
                fence = None;
            }
        } else if let Some(open) = fence_opening(trimmed) {
            fence = Some(open);
        } else if let Some(title) = line.strip_prefix("## ") {
            flush(&heading, start, &body, &mut out);
            heading = heading_text(title);
            start = i + 1;
            body.clear();
        }
        body.push(line);
    }
    flush(&heading, start, &body, &mut out);
    out
}

/// The fence a line opens, if it opens one: three or more backticks or tildes.
fn fence_opening(trimmed: &str) -> Option<(char, usize)> {
    let mark = trimmed.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let run = trimmed.chars().take_while(|c| *c == mark).count();
    (run >= 3).then_some((mark, run))
}

/// A heading's text without its optional closing `#`s, which count only after a space
/// (`## C#` is about C#; `## Setup ##` is about Setup).
fn heading_text(title: &str) -> String {
    let title = title.trim();
    let stripped = title.trim_end_matches('#');
    if stripped.is_empty() {
        String::new()
    } else if stripped.ends_with([' ', '\t']) {
        stripped.trim_end().to_owned()
    } else {
        title.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_closing_hash_counts_only_after_a_space_and_a_fence_closes_only_with_its_own_length() {
        let doc = "## C#\n\nabout C#\n\n## Setup ##\n\nsteps\n\n````md\n```\n## inside\n```\n````\n\n## After\n\nend\n";
        let headings: Vec<String> = sections(doc).into_iter().map(|s| s.heading).collect();
        assert_eq!(headings, ["C#", "Setup", "After"]);
    }

    #[test]
    fn a_document_splits_at_its_level_two_headings() {
        let doc = "# Guide\n\nIntro words.\n\n## Install\n\nRun it.\n\n```sh\n## not a heading\n```\n\n### Detail\n\nkept\n\n## Use\n\nCall it.\n\n## Install\n\nAgain.\n";
        let s = sections(doc);
        let headings: Vec<(&str, u32, usize)> = s.iter().map(|s| (s.heading.as_str(), s.occurrence, s.line)).collect();
        assert_eq!(headings, vec![("", 0, 1), ("Install", 0, 5), ("Use", 0, 17), ("Install", 1, 21)]);
        assert!(s[1].text.contains("## not a heading") && s[1].text.contains("### Detail"));
        assert!(s[0].text.starts_with("# Guide"));
    }

    #[test]
    fn a_title_alone_is_no_section() {
        assert_eq!(sections("# Only a title\n\n## A\n\nbody").len(), 1);
        assert!(sections("").is_empty());
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Every line of a document is in exactly one section, in order, except blank edges and
        /// a lone title.
        #[test]
        fn sections_keep_every_word_in_order(parts in proptest::collection::vec(("[a-z]{1,8}", "[a-z ]{0,30}"), 0..8)) {
            let doc: String = parts.iter().map(|(h, b)| format!("## {h}\n{b}\n")).collect();
            let joined: Vec<String> = sections(&doc).iter().map(|s| s.text.clone()).collect();
            let words: Vec<&str> = doc.split_whitespace().collect();
            let got: String = joined.join("\n");
            prop_assert_eq!(got.split_whitespace().collect::<Vec<_>>(), words);
        }
    }
}
