//! TLS for the daemon's listeners (RTMPS, HTTPS): the configured certificate chain and key
//! loaded into a rustls server configuration, or a self-signed pair for `localhost` made once in
//! the data dir, for development.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;

/// The self-signed pair's files in the data dir (named for RTMPS, which had it first).
pub const SELF_SIGNED_CERT: &str = "rtmps-cert.pem";
pub const SELF_SIGNED_KEY: &str = "rtmps-key.pem";

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

/// The server side of TLS (RTMPS, HTTPS): the configured certificate chain and key, or a
/// self-signed pair for `localhost` created (once) in the data dir for development.
pub fn server_config(
    files: Option<(&Path, &Path)>,
    data_dir: &Path,
) -> Result<rustls::ServerConfig, TlsError> {
    let (cert, key) = match files {
        Some((c, k)) => (c.to_owned(), k.to_owned()),
        None => ensure_self_signed(data_dir)?,
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
    Ok(config)
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
    tracing::info!(cert = %cert.display(), "generated a self-signed certificate (RTMPS, HTTPS)");
    Ok((cert, key))
}
