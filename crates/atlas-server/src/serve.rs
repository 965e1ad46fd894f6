//! The accept loop of `atlas serve`: HTTP/1 connections served with a header read timeout and
//! a bound on header lines parsed, until shutdown, which drains requests in flight.

use crate::options::ServerOptions;
use axum::Router;
use std::time::Duration;

/// How many header lines hyper parses, so that a request over [`crate::edge::MAX_HEADERS`]
/// reaches the guard and its JSON answer; past this hyper itself answers 431 without a body.
const PARSED_HEADERS: usize = 1024;

/// Serves `app` on `listener` until `shutdown` completes: then it stops accepting, ends the
/// MCP event streams (`options.shutdown`) and lets requests in flight finish. Each connection
/// must send a request's headers within `options.timeout` (hyper's header read timeout;
/// the guard times the body), so that a silent client holds a socket, never a slot.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    options: &ServerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(options.timeout).max_headers(PARSED_HEADERS);
    let builder = builder.http1_only();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    options.shutdown.cancel();
    graceful.shutdown().await;
    Ok(())
}
