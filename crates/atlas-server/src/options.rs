//! How `atlas serve` guards itself: its token, limits, timeout, the hosts and origins it
//! answers to. Read by the guard, the accept loop and the CLI that fills it from flags.

use std::time::Duration;

/// How the server guards itself.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The admin token: `Authorization: Bearer <token>` sees every tenant. Tenants' keys are
    /// read from the space ([`atlas_runtime::Atlas::keys`]).
    pub token: Option<String>,
    pub max_body_bytes: usize,
    /// The largest body `POST /v1/import` reads (it streams; the import is one transaction).
    pub max_import_bytes: usize,
    /// Reading a request (headers, then body) and answering a read take at most this long.
    pub timeout: Duration,
    /// Requests in flight beyond this are answered 503 with `Retry-After`.
    pub max_in_flight: usize,
    /// Check every request's `Host` against the loopback names and `allowed_hosts` (against
    /// DNS rebinding): on when listening on loopback.
    pub check_host: bool,
    /// Refuse calls without a token even when no token and no key exist (beyond loopback: the
    /// last key revoked must not open the server).
    pub require_token: bool,
    /// Host names (without port) accepted besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Web origins (`scheme://host[:port]`) whose pages may call, besides the server's own.
    pub allowed_origins: Vec<String>,
    /// Cancelled at shutdown: ends the MCP sessions' open event streams, which a graceful
    /// shutdown would otherwise wait for.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            token: None,
            max_body_bytes: 8 << 20,
            max_import_bytes: 1 << 30,
            timeout: Duration::from_secs(30),
            max_in_flight: 256,
            check_host: true,
            require_token: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }
}
