//! The memory inspector's page: `GET /` and every view's address answer the one page, whose
//! script and styles are embedded in the binary (no CDN, nothing fetched at run time). The page
//! reads only the public JSON API; serving it needs no key (the key is entered in the page and
//! sent by it as a header), and every answer carries a Content-Security-Policy without inline
//! script, so that a memory holding markup can only ever show as text.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../inspector/index.html");
const SCRIPT: &str = include_str!("../inspector/app.js");
const STYLES: &str = include_str!("../inspector/app.css");

/// The policy of every page and asset: scripts and styles of this origin only, calls to this
/// origin only, never framed, no forms posted elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The views' first path segments (`/memory/7`, `/entity/Caroline`); `/` is the search.
const VIEWS: [&str; 8] = ["search", "memory", "entity", "sessions", "session", "forgetting", "agents", "health"];

/// Whether a GET of `path` is the inspector's (a view's address or one of its assets).
pub fn serves(path: &str) -> bool {
    if path == "/" || asset(path).is_some() {
        return true;
    }
    let first = path.trim_start_matches('/').split('/').next().unwrap_or_default();
    VIEWS.contains(&first)
}

fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/assets/app.js" => Some((SCRIPT, "text/javascript; charset=utf-8")),
        "/assets/app.css" => Some((STYLES, "text/css; charset=utf-8")),
        _ => None,
    }
}

/// The page or the asset at `path` (which [`serves`] accepted), with its security headers.
pub fn answer(path: &str) -> Response {
    let (body, content_type) = asset(path).unwrap_or((INDEX, "text/html; charset=utf-8"));
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
