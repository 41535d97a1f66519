//! The TLS client of RTMPS restreams: the target's certificate is validated (WebPKI, its name)
//! against the system's roots plus, when the operator names one, a CA file of theirs (a private
//! ingest server; the tests' own CA).

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::{self, pki_types::CertificateDer, ClientConfig, RootCertStore};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading the restream CA file {path}: {source}")]
    CaFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the restream CA file {0} holds no certificate")]
    NoCertificate(String),
    #[error(
        "no CA certificate to validate RTMPS targets with (none in the system store, no CA file)"
    )]
    NoRoots,
    #[error("TLS set-up: {0}")]
    Setup(#[from] rustls::Error),
}

/// A client configuration for RTMPS targets.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = ca_file {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| TlsError::CaFile {
            path: shown.clone(),
            source,
        })?;
        let certs: Vec<CertificateDer<'static>> =
            rustls_pemfile::certs(&mut std::io::BufReader::new(file))
                .collect::<Result<_, _>>()
                .map_err(|source| TlsError::CaFile {
                    path: shown.clone(),
                    source,
                })?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate(shown));
        }
        for cert in certs {
            roots.add(cert)?;
        }
    }
    if roots.is_empty() {
        return Err(TlsError::NoRoots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
