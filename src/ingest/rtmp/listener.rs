//! RTMP and RTMPS listeners: accept loop with a connection cap, TLS termination for RTMPS
//! (configured certificate or a self-signed one generated into the data dir), one task per
//! connection so a failing peer affects nobody else, owned by the listener, which waits for
//! them (bounded) when the server stops.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::{conn, RtmpConfig};
use crate::admission::Admission;
use crate::live::Registry;
use crate::shutdown::Stopping;
pub use crate::tls::TlsError;

/// Concurrent connections per listener; the excess is closed at accept.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// An encoder needs one connection per stream it pushes; a rack of hardware encoders behind
/// one NAT address stays under this.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 32;
/// How long the connections left when the listener closes get to end (each closes its socket
/// when it sees the close) before they are cut.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The RTMPS acceptor: the configured certificate, or the self-signed one in the data dir.
pub fn tls_acceptor(
    cert: Option<&Path>,
    key: Option<&Path>,
    data_dir: &Path,
) -> Result<TlsAcceptor, TlsError> {
    let config = crate::tls::server_config(cert.zip(key), data_dir)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves RTMP (or RTMPS with `tls`) until the server's stop closes the listeners, then waits
/// (bounded) for its connections; `admission` holds the listener's caps (built from `config` by
/// the daemon with the shared file budget). While the stop refuses, connections are still
/// taken: a new publish is refused with a status its encoder reports.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    admission: Admission,
    registry: Arc<Registry>,
    config: RtmpConfig,
    stopping: Stopping,
) {
    let scheme = if tls.is_some() { "rtmps" } else { "rtmp" };
    let mut conns = JoinSet::new();
    let mut closed = stopping.clone();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, scheme, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            _ = closed.until_closed() => break,
        };
        // Closed at once, nothing read; the gate logs the refusal, rate-limited.
        let Ok(ticket) = admission.admit(peer.ip()) else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let registry = registry.clone();
        let tls = tls.clone();
        let stopping = stopping.clone();
        conns.spawn(async move {
            // One deadline from accept: TLS, RTMP handshake and publish all fit in it.
            let started = (tokio::time::Instant::now(), &stopping);
            let result = match tls {
                None => conn::run(stream, peer, registry, &config, started).await,
                Some(acceptor) => {
                    match tokio::time::timeout(config.handshake_timeout, acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => conn::run(tls, peer, registry, &config, started).await,
                        Ok(Err(e)) => Err(conn::ConnError::Io(e)),
                        Err(_) => Err(conn::ConnError::Timeout(format!(
                            "no TLS handshake within {:?}",
                            config.handshake_timeout
                        ))),
                    }
                }
            };
            match result {
                Ok(()) => tracing::debug!(%peer, scheme, "connection closed"),
                Err(e) => tracing::info!(%peer, scheme, error = %e, "connection closed"),
            }
            drop(ticket);
        });
    }
    drop(listener);
    let left = crate::tasks::drain(conns, CLOSE_WAIT).await;
    if left > 0 {
        tracing::warn!(scheme, left, "connections still open at shutdown; cut");
    }
}
