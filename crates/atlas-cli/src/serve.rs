//! `atlas serve` and `atlas ui`: the HTTP server (API, MCP, the inspector) on a listener, until
//! SIGINT or SIGTERM; beyond loopback only with a token or keys.

use anyhow::{Context, Result, anyhow};
use atlas_domain::access::AccessKey;
use atlas_runtime::Atlas;
use std::sync::Arc;

/// Serves `atlas` on `listen`; `ui` (whether to open a browser) prints the inspector's address
/// first, on standard output, for a script or a person to open.
pub(crate) async fn serve(
    atlas: Atlas,
    listen: &str,
    mut options: atlas_server::ServerOptions,
    ui: Option<bool>,
) -> Result<()> {
    let addr: std::net::SocketAddr =
        listen.parse().map_err(|e| anyhow!("--listen: {listen:?} is not an address like 127.0.0.1:7431 ({e})"))?;
    let has_keys = atlas.keys().await?.iter().any(AccessKey::is_live);
    if !atlas_server::is_loopback(&addr) && options.token.is_none() && !has_keys {
        return Err(anyhow!(
            "refusing to listen on {addr} without a token: anyone who can reach it could read and change \
             this memory; give one with --token-file FILE or ATLAS_TOKEN, add keys with `atlas keys add`, \
             or listen on 127.0.0.1"
        ));
    }
    // On loopback the Host check stops DNS rebinding; beyond it the tokens guard, and the Host
    // is checked only against the names given with --allowed-host.
    options.check_host = atlas_server::is_loopback(&addr) || !options.allowed_hosts.is_empty();
    if atlas_server::is_loopback(&addr) {
        // The address it listens on is one it answers to (127.0.0.2 is loopback, not a name).
        options.allowed_hosts.push(match addr.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        });
    }
    options.require_token = !atlas_server::is_loopback(&addr);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
    let addr = listener.local_addr().with_context(|| format!("cannot read the address bound for {addr}"))?;
    let atlas = Arc::new(atlas);
    atlas.start_sleep_cycle();
    atlas.keep_search_current();
    eprintln!("atlas serving {} on http://{addr} (docs/SERVER.md)", atlas.config().db.display());
    if let Some(open) = ui {
        let url = format!("http://{addr}/");
        println!("{url}");
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        if open {
            let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
            if let Err(e) = std::process::Command::new(opener).arg(&url).spawn() {
                eprintln!("could not open a browser ({opener}: {e}); open {url} yourself");
            }
        }
    }
    let app = atlas_server::router(Arc::clone(&atlas), options.clone());
    axum_serve(listener, app, &options).await?;
    atlas.end_session();
    Ok(())
}

async fn axum_serve(
    listener: tokio::net::TcpListener,
    app: atlas_server::Router,
    options: &atlas_server::ServerOptions,
) -> Result<()> {
    // SIGINT or SIGTERM: stop accepting, let requests in flight finish (every 2xx write is
    // committed before its answer), then return.
    atlas_server::serve(listener, app, options, async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    })
    .await
    .context("the server stopped")
}
