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

use crate::admission::{self, Admission};
use crate::config::Config;
use crate::db::{Store, StoreError};
use crate::http::api::{self, Api, ApiError, ApiKeys, Endpoints};
use crate::http::delivery;
use crate::http::listener::{self, json_response, Body, HttpLimits};
use crate::ingest::rtmp::listener as rtmp;
use crate::ingest::srt;
use crate::live::{LiveConfig, Registry};
use crate::pipeline::{self, PipelineError};
use crate::quality::{QualityError, QualitySets};

/// GStreamer elements the pipelines need, checked at start so a missing plugin package is an
/// immediate, named error rather than a failure at the first publish.
const REQUIRED_ELEMENTS: &[&str] = &[
    "appsrc",
    "appsink",
    "h264parse",
    "avdec_h264",
    "videoconvert",
    "videorate",
    "videoscale",
    "x264enc",
    "tee",
    "queue",
    "aacparse",
    "avdec_aac",
    "audioconvert",
    "audioresample",
    "avenc_aac",
    "cmafmux",
];

pub const API_KEY_FILE: &str = "api_key";

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "cannot open the PostgreSQL store at {url} (database_url, LIVEPACK_DATABASE_URL): {source}"
    )]
    Database { url: String, source: StoreError },
    #[error("cannot register this node in the store (node_id, node_url): {0}")]
    Cluster(crate::cluster::ClusterError),
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
    #[error("cannot prepare data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("API key file {path}: {source}")]
    ApiKeyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("startup task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("GStreamer element `{0}` is missing: install the GStreamer plugin packages (scripts/run does)")]
    MissingElement(&'static str),
    #[error("RTMPS: {0}")]
    Tls(#[from] rtmp::TlsError),
    #[error("PULL: {0}")]
    Pull(#[from] crate::ingest::pull::PullError),
    #[error(transparent)]
    WhipMux(#[from] crate::ingest::whip::MuxError),
    #[error("overlay page proxy: {0}")]
    PageProxy(std::io::Error),
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
    pub rtmp_addr: SocketAddr,
    pub rtmps_addr: SocketAddr,
    pub srt_addr: SocketAddr,
    /// The WHIP ICE ports every session shares (one UDP address per interface), if enabled.
    pub whip_udp_addrs: Vec<SocketAddr>,
    pub whip_tcp_addr: Option<SocketAddr>,
    pub public_url: Url,
    pub key_source: KeySource,
    shutdown: watch::Sender<bool>,
    http: tokio::task::JoinHandle<()>,
    /// Awaited at shutdown: srt-tokio's `close` panics if the runtime cancels its task first.
    srt: tokio::task::JoinHandle<()>,
    store: Arc<dyn Store>,
    pub registry: Arc<Registry>,
    cluster: Arc<crate::cluster::Cluster>,
    whip: Arc<crate::ingest::whip::Whip>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish, and closes the store.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        self.whip.stop_all();
        self.registry.shutdown(Duration::from_secs(8)).await;
        self.cluster.leave().await;
        let _ = self.http.await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.srt).await;
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

/// Where the other nodes reach this one: `node_url`, or the bound address (the host name when
/// bound to every interface).
fn node_url(config: &Config, bound: SocketAddr) -> String {
    if let Some(url) = &config.node_url {
        return url.as_str().trim_end_matches('/').to_owned();
    }
    if bound.ip().is_unspecified() {
        return format!("http://{}:{}", crate::cluster::host_name(), bound.port());
    }
    format!("http://{bound}")
}

/// Prunes source statistics past their retention, at start and then hourly.
fn spawn_statistics_pruning(store: Arc<dyn crate::db::Store>, retention: Duration) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every.tick().await;
            let before = time::OffsetDateTime::now_utc() - retention;
            let before_ms = (before.unix_timestamp_nanos() / 1_000_000) as i64;
            let store = store.clone();
            match tokio::task::spawn_blocking(move || store.prune_source_samples(before_ms)).await {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::info!(samples = n, "old source statistics pruned"),
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot prune source statistics"),
                Err(_) => {}
            }
        }
    });
}

/// Starts every listener and task. `page_proxy` is the loopback listener the process's proxy
/// variables point at ([`crate::page_proxy::install`]); `None` leaves overlay pages' requests
/// to the operator's own proxy, or unguarded.
pub async fn start(
    config: Config,
    page_proxy: Option<std::net::TcpListener>,
) -> Result<Running, DaemonError> {
    let data_dir = config.data_dir.clone();
    let templates_file = config.profile_templates_file.clone();
    let need_key = config.api_keys.is_empty();
    let database_url = config.database_url.clone();
    let (store, key) = tokio::task::spawn_blocking(move || {
        // Keys, certificates and media live here whichever store holds the records.
        std::fs::create_dir_all(&data_dir).map_err(|source| DaemonError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        let store =
            crate::db::open(database_url.as_ref(), &data_dir).map_err(
                |source| match &database_url {
                    Some(url) => DaemonError::Database {
                        url: url.redacted(),
                        source,
                    },
                    None => source.into(),
                },
            )?;
        api::security::seed_templates(&*store, templates_file.as_deref())?;
        let key = need_key.then(|| data_dir_key(&data_dir)).transpose()?;
        Ok::<_, DaemonError>((store, key))
    })
    .await??;
    let store: Arc<dyn Store> = Arc::from(store);
    let (keys, key_source) = match key {
        Some((path, key)) => (
            ApiKeys::new(std::slice::from_ref(&key)),
            KeySource::DataDir { path, key },
        ),
        None => (ApiKeys::new(&config.api_keys), KeySource::Configured),
    };
    let quality_sets = Arc::new(QualitySets::load(config.quality_sets_file.as_deref())?);
    tokio::task::spawn_blocking(|| {
        pipeline::init()?;
        for name in REQUIRED_ELEMENTS {
            if gstreamer::ElementFactory::find(name).is_none() {
                return Err(DaemonError::MissingElement(name));
            }
        }
        Ok(())
    })
    .await??;
    // Segments of a previous run belong to streams that are no longer live.
    let media_root = config.data_dir.join("media");
    {
        let root = media_root.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(root)).await;
    }
    // HTML overlays need GStreamer's WPE WebKit plugin; without it the daemon runs and
    // refuses `html_overlay: true`.
    let overlays = pipeline::overlay::OverlayHub::available()
        .then(|| pipeline::overlay::OverlayHub::new(store.clone()));
    if overlays.is_none() {
        tracing::warn!("HTML overlays unavailable: GStreamer's wpevideosrc is not installed (Debian: gstreamer1.0-wpe)");
    } else if let Some(listener) = page_proxy {
        crate::page_proxy::serve(listener).map_err(DaemonError::PageProxy)?;
    } else {
        tracing::warn!("overlay pages fetch through the operator's proxy (http_proxy is set): the URL policy does not check what they load");
    }
    let registry = Registry::new(
        store.clone(),
        quality_sets.clone(),
        Arc::new(pipeline::GstPipelines {
            overlays: overlays.clone(),
        }),
        LiveConfig {
            packaging: config.packaging,
            grace: config.grace_period,
            linger: crate::live::ENDED_LINGER,
            switch_timeout: config.backup_switch,
            media_root,
            stats_period: config.statistics_sample,
        },
    );
    let tls = {
        let (cert, key, dir) = (
            config.rtmps_cert_file.clone(),
            config.rtmps_key_file.clone(),
            config.data_dir.clone(),
        );
        tokio::task::spawn_blocking(move || {
            rtmp::tls_acceptor(cert.as_deref(), key.as_deref(), &dir)
        })
        .await??
    };

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
    let bind = |what: &'static str, addr: SocketAddr| async move {
        let l = TcpListener::bind(addr)
            .await
            .map_err(|source| DaemonError::Bind { what, addr, source })?;
        let bound = l
            .local_addr()
            .map_err(|source| DaemonError::Bind { what, addr, source })?;
        Ok::<_, DaemonError>((l, bound))
    };
    let (rtmp_listener, rtmp_addr) = bind("rtmp", config.rtmp_addr).await?;
    let (rtmps_listener, rtmps_addr) = bind("rtmps", config.rtmps_addr).await?;
    let (srt_socket, srt_addr) = srt::listener::bind(config.srt_addr)
        .await
        .map_err(|source| DaemonError::Bind {
            what: "srt",
            addr: config.srt_addr,
            source,
        })?;
    let public_url = public_url(&config, http_addr);
    let node_id = config
        .node_id
        .clone()
        .unwrap_or_else(crate::cluster::host_name);
    // This node among the daemons sharing the store: registered (first heartbeat) before any
    // publish is accepted, so its leases are never those of a node the others think dead.
    let cluster = crate::cluster::Cluster::new(
        crate::cluster::ClusterConfig {
            node_id: node_id.clone(),
            node_url: node_url(&config, http_addr),
            dead_after: config.node_dead_after,
            shared_store: config.database_url.is_some(),
        },
        store.clone(),
    );
    registry.set_leases(cluster.clone());
    cluster
        .start(&registry)
        .await
        .map_err(DaemonError::Cluster)?;
    let recordings = crate::record::manager::Recordings::new(
        store.clone(),
        crate::record::manager::RecordConfig {
            root: config.data_dir.join("videos"),
            resume: config.record_resume,
            max: config.record_max,
            max_bytes: config.recordings_max_bytes,
            min_free_bytes: config.recordings_min_free_bytes,
            node_id: node_id.clone(),
        },
    );
    {
        // Before any publish: a recording a crash interrupted becomes one ready video.
        let recordings = recordings.clone();
        match tokio::task::spawn_blocking(move || recordings.recover_pending()).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(videos = n, "interrupted recordings finalised"),
            Ok(Err(e)) => tracing::error!(error = %e, "cannot finalise interrupted recordings"),
            Err(e) => tracing::error!(error = %e, "recording recovery panicked"),
        }
    }
    recordings.spawn(registry.events());
    spawn_statistics_pruning(store.clone(), config.statistics_retention);
    let spectators = Arc::new(crate::broadcast::Spectators::default());
    let api = Arc::new(Api {
        store: store.clone(),
        keys,
        quality_sets,
        endpoints: Endpoints::new(&public_url, rtmp_addr.port(), srt_addr.port()).with(
            &public_url,
            &config.cdn_resources,
            &config.ingest_regions,
        ),
        fastedge_app_domain: config.fastedge_app_domain.clone(),
        registry: registry.clone(),
        relay: crate::cluster::relay::Relay::new(cluster.clone(), store.clone()),
        cluster: cluster.clone(),
        recordings: recordings.clone(),
        overlays: overlays.clone(),
        spectators: spectators.clone(),
    });
    if let Some(hub) = &overlays {
        hub.spawn(registry.events());
    }
    let (shutdown, shutdown_rx) = watch::channel(false);
    let limits = HttpLimits {
        header_timeout: Duration::from_secs(config.http_header_timeout_secs),
        body_timeout: config.http_body_timeout,
        stall_timeout: config.http_stall_timeout,
    };
    let gates = Gates::new(&config);
    let muxes = crate::ingest::whip::Muxes::bind(&config.whip, gates.ice_tcp).await?;
    let whip_udp_addrs = muxes
        .udp
        .as_ref()
        .map(|m| m.local_addrs())
        .unwrap_or_default();
    let whip_tcp_addr = muxes.tcp.as_ref().map(|m| m.local_addr());
    let whip = crate::ingest::whip::Whip::new(registry.clone(), config.whip.clone(), muxes);
    let player = crate::http::delivery::player::Player::new(
        registry.clone(),
        cluster.clone(),
        store.clone(),
        config.player_assets_dir.clone(),
        spectators,
    );
    let handler = {
        let whip = whip.clone();
        move |req: Request<Incoming>, _peer: SocketAddr| {
            let (api, whip, player) = (api.clone(), whip.clone(), player.clone());
            async move { route(api, whip, player, req).await }
        }
    };
    tokio::spawn(rtmp::serve(
        rtmp_listener,
        None,
        gates.rtmp,
        registry.clone(),
        config.rtmp,
        shutdown_rx.clone(),
    ));
    tokio::spawn(rtmp::serve(
        rtmps_listener,
        Some(tls),
        gates.rtmps,
        registry.clone(),
        config.rtmp,
        shutdown_rx.clone(),
    ));
    let srt = tokio::spawn(srt::listener::serve(
        srt_socket,
        srt_addr,
        registry.clone(),
        config.srt,
        gates.srt,
        shutdown_rx.clone(),
    ));
    crate::ingest::pull::Puller::spawn(
        registry.clone(),
        store.clone(),
        config.pull,
        shutdown_rx.clone(),
    )
    .map_err(DaemonError::Pull)?;
    let http = tokio::spawn(listener::serve(
        listener,
        handler,
        limits,
        gates.http,
        shutdown_rx,
    ));
    tracing::info!(addr = %http_addr, public_url = %public_url, "http listening");
    tracing::info!(rtmp = %rtmp_addr, rtmps = %rtmps_addr, srt = %srt_addr, "ingest listening");
    tracing::info!(udp = ?whip_udp_addrs, tcp = ?whip_tcp_addr, "WHIP ICE ports");
    Ok(Running {
        http_addr,
        rtmp_addr,
        rtmps_addr,
        srt_addr,
        whip_udp_addrs,
        whip_tcp_addr,
        registry,
        cluster,
        public_url,
        key_source,
        shutdown,
        whip,
        http,
        srt,
        store,
    })
}

/// Each listener's admission gate; the TCP ones share the process's file budget.
struct Gates {
    http: Admission,
    rtmp: Admission,
    rtmps: Admission,
    srt: Admission,
    ice_tcp: Admission,
}

impl Gates {
    fn new(config: &Config) -> Gates {
        let files = admission::file_budget(admission::raise_file_limit());
        let trusted = Arc::new(config.trusted_proxies.clone());
        let tcp = |name, max, per_ip| {
            Admission::new(name, max, per_ip, Some(files.clone()), trusted.clone())
        };
        let (rtmp, whip) = (&config.rtmp, &config.whip);
        Gates {
            http: tcp(
                "http",
                config.http_max_connections,
                config.http_max_connections_per_ip,
            ),
            rtmp: tcp("rtmp", rtmp.max_connections, rtmp.max_connections_per_ip),
            rtmps: tcp("rtmps", rtmp.max_connections, rtmp.max_connections_per_ip),
            // Callers share one UDP socket: no descriptor each.
            srt: Admission::new(
                "srt",
                config.srt.max_connections,
                config.srt.max_connections_per_ip,
                None,
                trusted.clone(),
            ),
            // A session's candidate pairs may each open one.
            ice_tcp: tcp(
                "ice-tcp",
                whip.max_sessions.saturating_mul(4),
                whip.tcp_max_connections_per_ip,
            ),
        }
    }
}

/// `req`, about stream `id`, answered by the node serving that stream when it is another one
/// (the serving node is looked up only with an `id`), else by `here`.
async fn here_or_serving_node<F, Fut>(
    api: &Api,
    id: Option<i64>,
    req: Request<Incoming>,
    here: F,
) -> Response<Body>
where
    F: FnOnce(Request<Incoming>) -> Fut,
    Fut: std::future::Future<Output = Response<Body>>,
{
    let owner = match id {
        Some(id) => api.relay.stream_owner(id, &req).await,
        None => None,
    };
    match owner {
        Some(node) => api.relay.forward(req, &node).await,
        None => here(req).await,
    }
}

/// Top-level HTTP routing: health and OpenAPI are public; the API prefixes and `/metrics` need a
/// key.
async fn route(
    api: Arc<Api>,
    whip: Arc<crate::ingest::whip::Whip>,
    player: Arc<crate::http::delivery::player::Player>,
    req: Request<Incoming>,
) -> Response<Body> {
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
        "/time" => public(delivery::time_response()),
        "/openapi.json" => public(
            Response::builder()
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(listener::full(api::OPENAPI_JSON))
                .expect("static response is valid"),
        ),
        "/metrics" if !api.keys.allows(req.headers()) => {
            api::error_response(&ApiError::unauthorized())
        }
        "/metrics" => public(
            Response::builder()
                .header(hyper::header::CONTENT_TYPE, delivery::metrics::CONTENT_TYPE)
                .header(hyper::header::CACHE_CONTROL, "no-store")
                .body(listener::full(delivery::metrics::scrape(&api.registry)))
                .expect("static response is valid"),
        ),
        p if api::owns(p) => api.handle(req).await,
        p if delivery::owns(p) => {
            let id = delivery::parse_path(p).map(|(id, _)| id);
            here_or_serving_node(&api, id, req, |req| {
                delivery::handle(api.registry.clone(), &api.endpoints.time_url, req)
            })
            .await
        }
        p if delivery::videos::owns(p) => {
            delivery::videos::handle(api.store.clone(), api.recordings.root(), &api.relay, req)
                .await
        }
        p if crate::ingest::whip::owns(p) => {
            let id = whip.session_elsewhere(p);
            here_or_serving_node(&api, id, req, |req| whip.handle(req)).await
        }
        p if delivery::player::owns(p) => player.handle(req).await,
        _ => api::error_response(&ApiError::not_found("resource")),
    }
}
