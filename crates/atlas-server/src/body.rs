//! A request's body as the guard reads it: within the size limit (413) and, a piece at a time,
//! within the timeout (503), in memory or, for an import, spooled to a temporary file so that
//! the size of an import does not decide the server's memory.

use crate::ops::ApiError;
use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;

/// A request body as the guard read it: in memory, or, for an import, in a temporary file (so
/// that the size of an import does not decide the server's memory), deleted when dropped.
pub(crate) enum Received {
    Memory(Bytes),
    Spooled(SpooledBody),
}

/// An import's body in a temporary file, handed to the route through the request's extensions.
#[derive(Clone)]
pub struct SpooledBody {
    pub(crate) file: Arc<tempfile::NamedTempFile>,
    /// Nothing but whitespace (or nothing) was sent.
    blank: bool,
}

impl Received {
    pub(crate) fn is_blank(&self) -> bool {
        match self {
            Received::Memory(bytes) => bytes.iter().all(u8::is_ascii_whitespace),
            Received::Spooled(spooled) => spooled.blank,
        }
    }
}

/// Reads a body within `limit` bytes, each piece within the request timeout: a client that
/// stalls gets 503 and a body over the limit 413. With `spool`, the pieces go to a temporary
/// file instead of memory.
pub(crate) async fn read_body(body: Body, limit: usize, timeout: Duration, spool: bool) -> Result<Received, ApiError> {
    let mut body = http_body_util::Limited::new(body, limit);
    let mut bytes = Vec::new();
    let spool_failed = |e: std::io::Error| {
        ApiError::new(500, "storage", format!("cannot keep the request body in a temporary file: {e}"), Some("body"))
    };
    let mut file = if spool { Some(tempfile::NamedTempFile::new().map_err(spool_failed)?) } else { None };
    let mut blank = true;
    loop {
        match tokio::time::timeout(timeout, body.frame()).await {
            Err(_) => {
                let message = format!("the request body stalled for {} ms; nothing was done", timeout.as_millis());
                return Err(ApiError::new(503, "timeout", message, Some("body")));
            }
            Ok(None) => {
                return Ok(match file {
                    Some(file) => Received::Spooled(SpooledBody { file: Arc::new(file), blank }),
                    None => Received::Memory(Bytes::from(bytes)),
                });
            }
            Ok(Some(Err(e))) => {
                if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                    return Err(ApiError::new(
                        413,
                        "too_large",
                        format!("request body over {limit} bytes"),
                        Some("body"),
                    ));
                }
                return Err(ApiError::new(400, "invalid_input", format!("request body: {e}"), Some("body")));
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    match file.as_mut() {
                        Some(file) => {
                            blank = blank && data.iter().all(u8::is_ascii_whitespace);
                            // A frame is at most a few tens of kilobytes, written to the page
                            // cache: not worth a trip to the blocking pool.
                            std::io::Write::write_all(file.as_file_mut(), &data).map_err(spool_failed)?;
                        }
                        None => bytes.extend_from_slice(&data),
                    }
                }
            }
        }
    }
}
