//! Calls to model servers over HTTP, shared by every adapter that makes them (the `Llm` and the
//! `Embedder` over HTTP): the client (rustls on ring), how one attempt's failure is read (what
//! is worth another try, and how long the server asked to wait), and the retry loop with
//! exponential backoff and jitter.

mod retry;

pub use retry::{Retry, with_retries};
use std::time::Duration;

/// Why one attempt failed, and whether another may succeed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub message: String,
    /// A timeout, a refused or reset connection, a 429 or a 5xx: the same call may succeed later.
    pub retry: bool,
    /// What the server asked for in `Retry-After` (seconds).
    pub wait: Option<Duration>,
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// No answer came within the timeout.
    pub timed_out: bool,
}

impl Failure {
    /// A failure no retry mends (a malformed answer, a refused request).
    pub fn permanent(message: impl Into<String>) -> Self {
        Failure { message: message.into(), retry: false, wait: None, status: None, timed_out: false }
    }
}

/// A client whose every request, connection included, ends within `timeout`.
pub fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    // reqwest is built without a TLS provider of its own: ring, once per process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .build()
        .map_err(|e| e.to_string())
}

/// How much of an error answer's body is read (its start is quoted in the failure).
const ERROR_BODY_BYTES: usize = 4096;

/// Sends `call` and reads its answer's body, at most `max_bytes` of it: a longer answer (a
/// runaway stream, an endless chunked body) is cut off with a failure no retry mends, so that
/// no answer holds more memory than the call it answers warrants. A status other than 2xx is a
/// [`Failure`] with the start of the body, retryable for 429 and 5xx.
pub async fn send(call: reqwest::RequestBuilder, timeout: Duration, max_bytes: usize) -> Result<String, Failure> {
    // reqwest's errors quote the URL, credentials and query included: the caller names the
    // endpoint itself, as it may be shown (every log line of a retry quotes this message).
    let mut response = call.send().await.map_err(|err| err.without_url()).map_err(|err| Failure {
        retry: err.is_timeout() || err.is_connect() || err.is_request() || err.is_body(),
        message: if err.is_timeout() {
            format!("no answer within {} ms", timeout.as_millis())
        } else {
            format!("request failed: {}", chain(&err))
        },
        wait: None,
        status: None,
        timed_out: err.is_timeout(),
    })?;
    let status = response.status();
    let wait = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let limit = if status.is_success() { max_bytes } else { ERROR_BODY_BYTES };
    let too_long = |bytes: u64| Failure {
        message: format!("the answer is longer than the {max_bytes} bytes this call reads ({bytes} bytes or more)"),
        retry: false,
        wait: None,
        status: Some(status.as_u16()),
        timed_out: false,
    };
    if status.is_success()
        && let Some(length) = response.content_length()
        && length > max_bytes as u64
    {
        return Err(too_long(length));
    }
    let mut body: Vec<u8> = Vec::new();
    loop {
        let chunk = response.chunk().await.map_err(|err| err.without_url()).map_err(|err| Failure {
            // The connection broke while the answer came: the call itself may well succeed again.
            retry: true,
            message: format!("reading the answer failed: {}", chain(&err)),
            wait: None,
            status: Some(status.as_u16()),
            timed_out: err.is_timeout(),
        })?;
        let Some(chunk) = chunk else { break };
        if body.len() + chunk.len() > limit {
            if status.is_success() {
                return Err(too_long((body.len() + chunk.len()) as u64));
            }
            // An error's start is enough to quote.
            body.extend_from_slice(&chunk[..limit - body.len()]);
            break;
        }
        body.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    if !status.is_success() {
        let retry = status.as_u16() == 429 || status.is_server_error();
        let head: String = text.chars().take(300).collect();
        let code = status.as_u16();
        return Err(Failure {
            retry,
            message: format!("HTTP {code}: {head}"),
            wait,
            status: Some(code),
            timed_out: false,
        });
    }
    Ok(text)
}

/// An error with its causes (reqwest's own message hides whether a connection was reset).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
