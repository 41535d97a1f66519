//! Assembles a running daemon from a [`Config`]: opens the store, seeds data, binds the
//! listeners, serves until told to stop, then drains. `main.rs` and the tests both use it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use url::Url;

use crate::api::{self, Api, ApiError, ApiKeys, Endpoints};
use crate::config::Config;
use crate::quality::{QualityError, QualitySets};
use crate::server::{self, json_response, Body, HttpLimits};
use crate::store::{SqliteStore, Store, StoreError};

pub const API_KEY_FILE: &str = "api_key";

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Quality(#[from] QualityError),
    #[error(transparent)]
    Templates(#[from] api::security::TemplateError),
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("API key file {path}: {source}")]
    ApiKeyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("startup task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Where the API key in use came from, so the banner prints a generated key but never one the
/// operator configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Configured,
    DataDir { path: PathBuf, key: String },
}

pub struct Running {
    pub http_addr: SocketAddr,
    pub public_url: Url,
    pub key_source: KeySource,
    shutdown: watch::Sender<bool>,
    http: tokio::task::JoinHandle<()>,
    store: Arc<dyn Store>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish, and closes the store.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.http.await;
        drop(self.store);
    }
}

/// Reads `DATA_DIR/api_key`, creating it (mode 0600) with a fresh random key if absent.
fn data_dir_key(data_dir: &Path) -> Result<(PathBuf, String), DaemonError> {
    let path = data_dir.join(API_KEY_FILE);
    let err = |source| DaemonError::ApiKeyFile {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok((path.clone(), text.trim().to_owned())),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let mut bytes = [0u8; 24];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut bytes);
    let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(err)?
    };
    file.write_all(format!("{key}\n").as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(err)?;
    tracing::info!(file = %path.display(), "generated an API key");
    Ok((path, key))
}

/// The base URL clients are told to use: configured, or the bound HTTP address (a wildcard
/// bind is shown as loopback, the only address known to reach it).
fn public_url(config: &Config, bound: SocketAddr) -> Url {
    if let Some(url) = &config.public_url {
        return url.clone();
    }
    let ip = match bound.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".parse().expect("valid"),
        ip if ip.is_unspecified() => "::1".parse().expect("valid"),
        ip => ip,
    };
    let host = SocketAddr::new(ip, bound.port());
    Url::parse(&format!("http://{host}")).expect("a socket address makes a valid URL")
}

pub async fn start(config: Config) -> Result<Running, DaemonError> {
    let data_dir = config.data_dir.clone();
    let templates_file = config.profile_templates_file.clone();
    let (store, key) = tokio::task::spawn_blocking(move || {
        let store = SqliteStore::open_in(&data_dir)?;
        tracing::info!(db = %store.path().display(), "store opened");
        api::security::seed_templates(&store, templates_file.as_deref())?;
        Ok::<_, DaemonError>((store, data_dir_key(&data_dir)?))
    })
    .await??;
    let store: Arc<dyn Store> = Arc::new(store);
    let (keys, key_source) = if config.api_keys.is_empty() {
        let (path, key) = key;
        (
            ApiKeys::new(std::slice::from_ref(&key)),
            KeySource::DataDir { path, key },
        )
    } else {
        (ApiKeys::new(&config.api_keys), KeySource::Configured)
    };
    let quality_sets = QualitySets::load(config.quality_sets_file.as_deref())?;

    let listener = TcpListener::bind(config.http_addr)
        .await
        .map_err(|source| DaemonError::Bind {
            what: "http",
            addr: config.http_addr,
            source,
        })?;
    let http_addr = listener.local_addr().map_err(|source| DaemonError::Bind {
        what: "http",
        addr: config.http_addr,
        source,
    })?;
    let public_url = public_url(&config, http_addr);
    let api = Arc::new(Api {
        store: store.clone(),
        keys,
        quality_sets,
        endpoints: Endpoints::new(&public_url, config.rtmp_addr.port(), config.srt_addr.port()),
        fastedge_app_domain: config.fastedge_app_domain.clone(),
    });
    let (shutdown, shutdown_rx) = watch::channel(false);
    let limits = HttpLimits {
        max_connections: config.http_max_connections,
        header_timeout: Duration::from_secs(config.http_header_timeout_secs),
    };
    let handler = move |req: Request<Incoming>, _peer: SocketAddr| {
        let api = api.clone();
        async move { route(api, req).await }
    };
    let http = tokio::spawn(server::serve(listener, handler, limits, shutdown_rx));
    tracing::info!(addr = %http_addr, public_url = %public_url, "http listening");
    Ok(Running {
        http_addr,
        public_url,
        key_source,
        shutdown,
        http,
        store,
    })
}

/// Top-level HTTP routing: health and OpenAPI are public, the API prefixes need a key.
async fn route(api: Arc<Api>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    let public = |body: Response<Body>| {
        if matches!(*req.method(), Method::GET | Method::HEAD) {
            return body;
        }
        let mut refused = api::error_response(&ApiError::method_not_allowed());
        refused.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        refused
    };
    match path {
        "/healthz" => public(json_response(StatusCode::OK, &json!({"status": "ok"}))),
        "/openapi.json" => public(
            Response::builder()
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(server::full(api::OPENAPI_JSON))
                .expect("static response is valid"),
        ),
        p if api::owns(p) => api.handle(req).await,
        _ => api::error_response(&ApiError::not_found("resource")),
    }
}
