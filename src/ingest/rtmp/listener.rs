//! RTMP and RTMPS listeners: accept loop with a connection cap, TLS termination for RTMPS
//! (configured certificate or a self-signed one generated into the data dir), one task per
//! connection so a failing peer affects nobody else, owned by the listener, which waits for
//! them (bounded) when the server stops.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use super::{conn, RtmpConfig};
use crate::admission::Admission;
use crate::live::Registry;
use crate::shutdown::Stopping;

/// Concurrent connections per listener; the excess is closed at accept.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// An encoder needs one connection per stream it pushes; a rack of hardware encoders behind
/// one NAT address stays under this.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 32;
pub const SELF_SIGNED_CERT: &str = "rtmps-cert.pem";
pub const SELF_SIGNED_KEY: &str = "rtmps-key.pem";
/// How long the connections left when the listener closes get to end (each closes its socket
/// when it sees the close) before they are cut.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: no certificate or private key found")]
    Empty(PathBuf),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(String),
}

/// Loads the configured certificate chain and key, or creates (once) a self-signed pair for
/// `localhost` in the data dir for development.
pub fn tls_acceptor(
    cert: Option<&Path>,
    key: Option<&Path>,
    data_dir: &Path,
) -> Result<TlsAcceptor, TlsError> {
    let (cert, key) = match (cert, key) {
        (Some(c), Some(k)) => (c.to_owned(), k.to_owned()),
        _ => ensure_self_signed(data_dir)?,
    };
    let io = |path: &Path| {
        let p = path.to_owned();
        move |source| TlsError::Io { path: p, source }
    };
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(
        std::fs::File::open(&cert).map_err(io(&cert))?,
    ))
    .collect::<Result<Vec<_>, _>>()
    .map_err(io(&cert))?;
    let key_der = rustls_pemfile::private_key(&mut std::io::BufReader::new(
        std::fs::File::open(&key).map_err(io(&key))?,
    ))
    .map_err(io(&key))?
    .ok_or_else(|| TlsError::Empty(key.clone()))?;
    if certs.is_empty() {
        return Err(TlsError::Empty(cert));
    }
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key_der)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn ensure_self_signed(data_dir: &Path) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert = data_dir.join(SELF_SIGNED_CERT);
    let key = data_dir.join(SELF_SIGNED_KEY);
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .map_err(|e| TlsError::Generate(e.to_string()))?;
    let write = |path: &Path, text: String| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|source| TlsError::Io {
                path: path.to_owned(),
                source,
            })
    };
    write(&cert, generated.cert.pem())?;
    write(&key, generated.key_pair.serialize_pem())?;
    tracing::info!(cert = %cert.display(), "generated a self-signed RTMPS certificate");
    Ok((cert, key))
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
