//! The checks at a request's edge, before any route: `Host` as an authority and whether this
//! server answers to it (against DNS rebinding), whether a page's `Origin` may call, whether a
//! body's type is JSON, and how many header lines a request may carry.

use crate::options::ServerOptions;

/// The most header lines a request may carry (hyper's own default), answered 431 in JSON.
pub const MAX_HEADERS: usize = 100;

/// The host names a loopback server answers to.
pub const LOOPBACK_HOSTS: [&str; 4] = ["localhost", "127.0.0.1", "[::1]", "::1"];

/// A `Host` header as an authority (RFC 9110): a host (a bracketed IPv6 address, or letters,
/// digits, dots and dashes) and an optional port of plain digits from 1 to 65535; `None` for
/// anything else (`[::1]evil.example`, `127.0.0.1:7431@evil`, `localhost:abc`, `:99999`).
pub(crate) fn parse_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, rest) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        authority[1..end].parse::<std::net::Ipv6Addr>().ok()?;
        authority.split_at(end + 1)
    } else {
        let end = authority.find(':').unwrap_or(authority.len());
        let host = &authority[..end];
        let name = !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if !name {
            return None;
        }
        authority.split_at(end)
    };
    let port = match rest {
        "" => None,
        _ => {
            let digits = rest.strip_prefix(':')?;
            if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(u16::try_from(digits.parse::<u32>().ok()?).ok().filter(|p| *p > 0)?)
        }
    };
    Some((host, port))
}

pub(crate) fn host_allowed(options: &ServerOptions, host: &str) -> bool {
    let Some((name, _)) = parse_authority(host) else { return false };
    LOOPBACK_HOSTS.iter().any(|h| h.eq_ignore_ascii_case(name))
        || options.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// A page's `Origin` may call when it is the server's own (the origin's authority is the
/// request's `Host`) or one of `--allowed-origin`; `null` (a sandboxed page, a file) never.
pub(crate) fn origin_allowed(options: &ServerOptions, origin: &str, host: Option<&str>) -> bool {
    if options.allowed_origins.iter().any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin)) {
        return true;
    }
    let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
}

/// Whether a `Content-Type` names JSON (or, for an import, JSON Lines).
pub(crate) fn json_body(content_type: &str, lines: bool) -> bool {
    let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    media == "application/json"
        || (media.starts_with("application/") && media.ends_with("+json"))
        || (lines && matches!(media.as_str(), "application/x-ndjson" | "application/jsonl" | "application/json-lines"))
}
