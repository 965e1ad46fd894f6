//! Secrets kept out of everything ATLAS says or stores: an endpoint's URL as errors, notes, logs
//! and stored fields show it (no user-info, no query values), and any text about a model call
//! (an error body that echoes the request, a message that quotes a URL) with the configured keys,
//! bearer tokens, URL credentials and key-shaped words replaced by `[redacted]`. A tenant who
//! reads a recall's notes, a log line or the database never learns a key.

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// `url` as it may be shown: without user-info (`user:pass@`), and with every query value
/// replaced (`?api-version=[redacted]`), the scheme, host, port and path kept.
pub fn display_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let end_of_authority = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end_of_authority);
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let mut shown = match scheme {
        Some(scheme) => format!("{scheme}://{host}{path}"),
        None => format!("{host}{path}"),
    };
    if let Some(query) = query {
        let query = query.split('#').next().unwrap_or_default();
        let pairs: Vec<String> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((key, _)) => format!("{key}={REDACTED}"),
                None => REDACTED.to_owned(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&pairs.join("&"));
    }
    shown
}

/// Whether `word` looks like an API key: a known key prefix (`sk-`, `sk_`, `xoxb-`, `ghp_`,
/// `AKIA`…) followed by a long run, or 32 or more characters of letters and digits with both
/// (hex digests of 40 or more are also keys to a reader who cannot tell).
fn key_shaped(word: &str) -> bool {
    const PREFIXES: [&str; 8] = ["sk-", "sk_", "pk-", "rk-", "xoxb-", "xoxp-", "ghp_", "hf_"];
    let body_ok = |s: &str| s.len() >= 16 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if PREFIXES.iter().any(|p| word.strip_prefix(p).is_some_and(body_ok)) {
        return true;
    }
    if word.starts_with("AKIA") && word.len() == 20 && word.chars().all(|c| c.is_ascii_alphanumeric()) {
        return true;
    }
    let long = word.len() >= 32 && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    long && word.chars().any(|c| c.is_ascii_digit()) && word.chars().any(|c| c.is_ascii_alphabetic())
}

/// `text` with every secret in it replaced by [`REDACTED`]: each of `known` (the configured keys;
/// ones shorter than 4 characters are not looked for, since they would match ordinary words), a
/// bearer token, the user-info and query values of any URL, and key-shaped words.
pub fn redact(text: &str, known: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in known.iter().filter(|s| s.len() >= 4) {
        if out.contains(secret) {
            out = out.replace(secret, REDACTED);
        }
    }
    let mut shown = String::with_capacity(out.len());
    let mut after_bearer = false;
    // Words are cut at whitespace and at the quotes and brackets JSON puts around them.
    let mut rest = out.as_str();
    while !rest.is_empty() {
        let start = rest.find(|c: char| !is_separator(c)).unwrap_or(rest.len());
        shown.push_str(&rest[..start]);
        rest = &rest[start..];
        if rest.is_empty() {
            break;
        }
        let end = rest.find(is_separator).unwrap_or(rest.len());
        let word = &rest[..end];
        rest = &rest[end..];
        let replaced = if after_bearer && word != REDACTED {
            REDACTED.to_owned()
        } else if let Some(at) = word.find("://") {
            // The scheme starts after whatever precedes it in the word (`url=http://…`).
            let scheme = word[..at].rfind(|c: char| !c.is_ascii_alphanumeric()).map_or(0, |i| i + 1);
            format!("{}{}", &word[..scheme], display_url(&word[scheme..]))
        } else if key_shaped(word) {
            REDACTED.to_owned()
        } else {
            word.to_owned()
        };
        after_bearer = word.eq_ignore_ascii_case("bearer");
        shown.push_str(&replaced);
    }
    shown
}

fn is_separator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '(' | ')' | '[' | ']' | '{' | '}' | ',' | '<' | '>' | '`')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_url_is_shown_without_credentials_or_query_values() {
        assert_eq!(display_url("http://user:pass@host:8080/v1"), "http://host:8080/v1");
        assert_eq!(
            display_url("https://x.openai.azure.com/openai?api-version=2024-02-01&api_key=abc#f"),
            "https://x.openai.azure.com/openai?api-version=[redacted]&api_key=[redacted]"
        );
        assert_eq!(display_url("http://127.0.0.1:8080/v1/embeddings"), "http://127.0.0.1:8080/v1/embeddings");
    }

    #[test]
    fn keys_tokens_and_credentials_are_redacted_from_any_text() {
        let said = "HTTP 401: {\"error\": \"bad key sk-abcdefghijklmnopqrstuvwx for Bearer hunter2hunter2\"} at \
                    http://ann:s3cret@10.0.0.1/v1?key=k1 (my-own-key-1234)";
        let shown = redact(said, &["my-own-key-1234"]);
        for secret in ["sk-abcdefghijklmnopqrstuvwx", "hunter2hunter2", "s3cret", "ann:", "k1", "my-own-key-1234"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("http://10.0.0.1/v1?key=[redacted]"), "{shown}");
        assert!(shown.starts_with("HTTP 401: {\"error\": \"bad key [redacted] for Bearer [redacted]\"}"), "{shown}");
        // Ordinary words, numbers and short configured keys are left alone.
        assert_eq!(redact("input (602 tokens) is too large", &["ab"]), "input (602 tokens) is too large");
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// A configured key never survives, wherever it sits in the text.
        #[test]
        fn a_known_key_never_survives(before in "\\PC{0,40}", key in "[A-Za-z0-9]{8,24}", after in "\\PC{0,40}") {
            let shown = redact(&format!("{before}{key}{after}"), &[&key]);
            prop_assert!(!shown.contains(&key), "{}", shown);
        }

        #[test]
        fn a_shown_url_keeps_no_user_info(user in "[a-z]{1,8}", pass in "[a-z0-9]{1,12}", path in "(/[a-z0-9]{1,6}){0,3}") {
            let shown = display_url(&format!("https://{user}:{pass}@example.org{path}"));
            prop_assert_eq!(shown, format!("https://example.org{path}"));
        }
    }
}
