//! TLS to the PostgreSQL store, as libpq spells it in `database_url`: `sslmode` (`disable`,
//! `prefer`, `require`, `verify-ca`, `verify-full`) and `sslrootcert`. Input: the URL; outputs:
//! the URL the client parses (it knows neither `verify-*` nor `sslrootcert`) and the rustls
//! connector that enforces the mode.
//!
//! libpq's meanings (<https://www.postgresql.org/docs/15/libpq-ssl.html>, table 34.1):
//! `prefer` (the default) encrypts when the server offers it, `require` always does, neither
//! checks who answers; `verify-ca` checks the certificate chain, `verify-full` the chain and
//! that the certificate names the host connected to. As in libpq, `require` with an
//! `sslrootcert` file checks the chain like `verify-ca`. Without `sslrootcert` (or with
//! `sslrootcert=system`), the chain is checked against the system's CA store.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::WebPkiSupportedAlgorithms;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(v: &str) -> Result<SslMode, PgTlsError> {
        Ok(match v {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` (plaintext first, TLS only if refused) protects nothing.
            _ => return Err(PgTlsError::BadMode(v.to_owned())),
        })
    }

    /// The client's own mode: it negotiates TLS; what is checked is this module's verifier.
    fn client_mode(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
        }
    }
}

/// What `database_url` asks of TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// `None`: the system's CA store.
    pub root_cert: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum PgTlsError {
    #[error("invalid sslmode {0:?}: expected disable, prefer, require, verify-ca or verify-full")]
    BadMode(String),
    #[error("sslrootcert {path}: {source}")]
    RootCert {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("sslrootcert {path}: no usable CA certificate in the file")]
    NoRootCert { path: PathBuf },
    #[error("sslmode={0:?} without sslrootcert, and the system's CA store is empty")]
    NoSystemRoots(SslMode),
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Takes `sslmode` and `sslrootcert` out of `url`'s query; `sslmode` goes back in as the mode the
/// client negotiates with. A URL without `sslmode` is `prefer`, libpq's and the client's default.
pub fn split(url: &str) -> Result<(String, TlsSettings), PgTlsError> {
    let mut settings = TlsSettings {
        mode: SslMode::Prefer,
        root_cert: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), settings));
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let value = || percent_decode_str(v).decode_utf8_lossy().into_owned();
        match k {
            "sslmode" => settings.mode = SslMode::parse(&value())?,
            "sslrootcert" => {
                let v = value();
                settings.root_cert = (v != "system").then(|| PathBuf::from(v));
            }
            _ => kept.push(pair),
        }
    }
    kept.push(match settings.mode.client_mode() {
        "disable" => "sslmode=disable",
        "prefer" => "sslmode=prefer",
        _ => "sslmode=require",
    });
    Ok((format!("{base}?{}", kept.join("&")), settings))
}

/// The connector for `settings`. Reads `sslrootcert` (or the system's store) now, so a bad file
/// stops the start rather than the first connection.
pub fn connector(settings: &TlsSettings) -> Result<MakeRustlsConnect, PgTlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algs = provider.signature_verification_algorithms;
    let mode = match (settings.mode, &settings.root_cert) {
        (SslMode::Require, Some(_)) => SslMode::VerifyCa,
        (mode, _) => mode,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => {
            Arc::new(NoHostCheck { roots: None, algs })
        }
        SslMode::VerifyCa => Arc::new(NoHostCheck {
            roots: Some(roots(settings)?),
            algs,
        }),
        SslMode::VerifyFull => rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots(settings)?),
            provider.clone(),
        )
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?,
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn roots(settings: &TlsSettings) -> Result<RootCertStore, PgTlsError> {
    let mut roots = RootCertStore::empty();
    match &settings.root_cert {
        Some(path) => {
            for cert in read_certs(path)? {
                // A certificate rustls cannot parse is skipped; none at all is an error below.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(PgTlsError::NoRootCert { path: path.clone() });
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                return Err(PgTlsError::NoSystemRoots(settings.mode));
            }
        }
    }
    Ok(roots)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PgTlsError> {
    let err = |source| PgTlsError::RootCert {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(err)?;
    rustls_pemfile::certs(&mut std::io::BufReader::new(file))
        .collect::<Result<_, _>>()
        .map_err(err)
}

/// `prefer`/`require` (`roots: None`): encrypted against a passive listener, whoever the server
/// is. `verify-ca` (`roots`): the chain up to a trusted CA, whatever host name the certificate
/// carries. Either way the handshake's signatures are checked (the server holds its
/// certificate's key), so SCRAM's channel binding, which the client uses when the server offers
/// it, ties the login to this connection.
#[derive(Debug)]
struct NoHostCheck {
    roots: Option<RootCertStore>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for NoHostCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algs.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

#[cfg(test)]
#[path = "../../tests/common/certs.rs"]
mod certs;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::tests::pg_server::PgServer;
    use crate::db::{ClusterStore, PostgresStore, StoreError};

    /// Against a server that admits TCP clients over TLS only, with a certificate for
    /// `localhost` and 127.0.0.1 signed by a test CA: each mode connects or is refused as libpq's
    /// would be, and a refusal says why.
    #[test]
    fn each_sslmode_against_a_server_that_requires_tls() {
        let ca = certs::TestCa::new("livepack test CA");
        let other = certs::TestCa::new("someone else's CA");
        let (cert, key) = ca.server(&["localhost", "127.0.0.1"]);
        let server = PgServer::start_tls(&cert, &key);
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = (dir.path().join("ca.pem"), dir.path().join("other.pem"));
        std::fs::write(&ours, &ca.pem).unwrap();
        std::fs::write(&theirs, &other.pem).unwrap();
        let base = server.url("postgres");
        let url = |params: &str| format!("{base}?{params}");
        let root = |path: &Path| path.display().to_string();
        let connects = |u: String| match PostgresStore::connect(&u) {
            Ok(store) => store.nodes().map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        for ok in [
            url("sslmode=require"),
            url("sslmode=prefer"),
            url(&format!("sslmode=verify-ca&sslrootcert={}", root(&ours))),
            url(&format!("sslmode=verify-full&sslrootcert={}", root(&ours))),
            // The name checked is the host's, whatever address is dialled.
            format!(
                "postgres://postgres@localhost:{}/postgres?hostaddr=127.0.0.1&\
                 sslmode=verify-full&sslrootcert={}",
                server.port(),
                root(&ours)
            ),
        ] {
            connects(ok.clone()).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let refused = |u: String| connects(u.clone()).err().unwrap_or_else(|| panic!("{u}"));
        let e = refused(url(&format!(
            "sslmode=verify-full&sslrootcert={}",
            root(&theirs)
        )));
        assert!(
            e.contains("TLS") && e.contains("UnknownIssuer") && e.contains("sslrootcert"),
            "{e}"
        );
        // libpq's rule: `require` with a root file checks the chain.
        let e = refused(url(&format!(
            "sslmode=require&sslrootcert={}",
            root(&theirs)
        )));
        assert!(e.contains("UnknownIssuer"), "{e}");
        // A certificate that does not name the host: refused by verify-full only.
        let misnamed = |mode: &str| {
            format!(
                "postgres://postgres@db.example:{}/postgres?hostaddr=127.0.0.1&\
                 sslmode={mode}&sslrootcert={}",
                server.port(),
                root(&ours)
            )
        };
        let e = refused(misnamed("verify-full"));
        assert!(
            e.contains("TLS") && e.contains("not valid for name \"db.example\""),
            "{e}"
        );
        connects(misnamed("verify-ca")).unwrap();
        // Plaintext: the server's pg_hba.conf has no entry for it.
        let e = refused(url("sslmode=disable"));
        assert!(e.contains("no encryption"), "{e}");
        // A bad root file stops the connect before any connection, naming the file.
        let e = PostgresStore::connect(&url("sslmode=verify-full&sslrootcert=/nonexistent.pem"))
            .err()
            .expect("refused");
        assert!(matches!(e, StoreError::Tls(_)), "{e}");
        assert!(e.to_string().contains("/nonexistent.pem"), "{e}");
    }

    #[test]
    fn libpq_parameters_are_taken_out_and_the_client_mode_put_back() {
        let (url, s) = split("postgres://u:p@h/db").unwrap();
        assert_eq!(
            (url.as_str(), s.mode, s.root_cert),
            ("postgres://u:p@h/db", SslMode::Prefer, None)
        );
        let (url, s) =
            split("postgres://h/db?connect_timeout=3&sslmode=verify-full&sslrootcert=%2Fca.pem")
                .unwrap();
        assert_eq!(url, "postgres://h/db?connect_timeout=3&sslmode=require");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.root_cert, Some(PathBuf::from("/ca.pem")));
        let (url, s) = split("postgres://h/db?sslmode=disable&sslrootcert=system").unwrap();
        assert_eq!(url, "postgres://h/db?sslmode=disable");
        assert_eq!((s.mode, s.root_cert), (SslMode::Disable, None));
        for mode in ["verify-ca", "require", "prefer"] {
            assert!(split(&format!("postgres://h/db?sslmode={mode}")).is_ok());
        }
        let e = split("postgres://h/db?sslmode=allow").unwrap_err();
        assert!(e.to_string().contains("verify-full"), "{e}");
    }

    #[test]
    fn a_missing_or_empty_root_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        for path in [dir.path().join("absent.pem"), empty] {
            let e = connector(&TlsSettings {
                mode: SslMode::VerifyFull,
                root_cert: Some(path.clone()),
            })
            .err()
            .expect("refused");
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        }
    }
}
