//! Assembles a running daemon from a [`Config`], part by part (store, registry, cluster,
//! recorder, ingest, HTTP), each built by its own constructor; serves until told to stop, then
//! stops in order (newcomers refused and publishers told first, the listeners closed last).
//! `main.rs` and the tests both use it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::admission::Gates;
use crate::cluster::{Cluster, ClusterConfig};
use crate::config::Config;
use crate::db::{Store, StoreError};
use crate::http::api::auth::KeyFileError;
pub use crate::http::api::auth::{KeySource, API_KEY_FILE};
use crate::http::api::{self, Api, ApiKeys, Endpoints};
use crate::http::delivery::player::Player;
use crate::http::relay::Relay;
use crate::http::router::Routes;
use crate::ingest::listeners::{Ingest, IngestError, IngestGates};
use crate::live::{LiveConfig, Registry};
use crate::pipeline::overlay::OverlayHub;
use crate::pipeline::{self, PipelineError};
use crate::quality::{QualityError, QualitySets};
use crate::record::manager::{RecordConfig, Recordings};
use crate::shutdown::Shutdown;

mod http_ports;
use http_ports::{bind_http, bind_https, node_url, public_url, serve_http};

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
    "opusenc",
    "cmafmux",
];

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
    #[error("cannot build the publish authorization client (publish_auth_url): {0}")]
    PublishAuth(reqwest::Error),
    #[error("cannot set up the object store (storage_url): {0}")]
    Storage(crate::storage::StorageError),
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
    #[error(transparent)]
    ApiKeyFile(#[from] KeyFileError),
    #[error("startup task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("GStreamer element `{0}` is missing: install the GStreamer plugin packages (scripts/run does)")]
    MissingElement(&'static str),
    #[error(transparent)]
    Ingest(#[from] IngestError),
    #[error(transparent)]
    RestreamTls(#[from] crate::egress::tls::TlsError),
    #[error("overlay page proxy: {0}")]
    PageProxy(std::io::Error),
    #[error("https certificate: {0}")]
    HttpsTls(crate::tls::TlsError),
}

pub struct Running {
    pub http_addr: SocketAddr,
    /// The HTTPS listener's address, if one is configured.
    pub https_addr: Option<SocketAddr>,
    pub rtmp_addr: SocketAddr,
    pub rtmps_addr: SocketAddr,
    pub srt_addr: SocketAddr,
    /// The WHIP ICE ports every session shares (one UDP address per interface), if enabled.
    pub whip_udp_addrs: Vec<SocketAddr>,
    pub whip_tcp_addr: Option<SocketAddr>,
    pub public_url: Url,
    pub key_source: KeySource,
    shutdown: Shutdown,
    /// The HTTP listener's task, and the HTTPS one's if any.
    http: Vec<tokio::task::JoinHandle<()>>,
    /// The ingest listeners' tasks, awaited at shutdown (srt-tokio's `close` panics if the
    /// runtime cancels its task first).
    listeners: Vec<tokio::task::JoinHandle<()>>,
    store: Arc<dyn Store>,
    pub registry: Arc<Registry>,
    cluster: Arc<Cluster>,
    whip: Arc<crate::ingest::whip::Whip>,
    whep: Arc<crate::realtime::whep::Whep>,
    restreams: Arc<crate::egress::manager::Restreams>,
    recordings: Arc<Recordings>,
    webhooks: crate::webhooks::Webhooks,
    /// The hourly pruning of source statistics.
    pruning: tokio::task::JoinHandle<()>,
    overlays: Option<Arc<OverlayHub>>,
}

/// How long the stop waits for the store to take its stream leases back before it goes on
/// (the leases then go at the cluster leave, or when the node counts as dead).
const LEASES_GIVEN_UP: Duration = Duration::from_secs(2);

impl Running {
    /// Stops in order. First newcomers are refused (HTTP 503 for media and new WHIP/WHEP
    /// sessions, `/readyz` 503; RTMP and SRT refusals), connected publishers are told and
    /// closed (their encoders reconnect, to another node behind a load balancer), WHIP and WHEP
    /// sessions end, the streams' leases go (another node takes them at once), while requests
    /// in flight go on. Then the streams end, their recordings are finalised, their webhooks
    /// flushed, the node signs off the cluster; last the listeners close, in-flight requests
    /// finish, and the store closes.
    pub async fn shutdown(mut self) {
        // Each step's end is logged with the time since the signal: where a slow stop spends it.
        let began = tokio::time::Instant::now();
        let done = |step: &str| {
            let ms = began.elapsed().as_millis() as u64;
            tracing::info!(step, ms, "stopping");
        };
        self.shutdown.refuse();
        self.pruning.abort();
        self.whip.stop_all();
        self.whep.stop_all();
        self.restreams.stop_all();
        if tokio::time::timeout(
            LEASES_GIVEN_UP,
            self.cluster.give_up_streams(&self.registry),
        )
        .await
        .is_err()
        {
            tracing::warn!("stream leases not given up in time; they go with the node");
        }
        done("refusing; leases given up");
        self.registry.shutdown(Duration::from_secs(8)).await;
        done("pipelines drained");
        if let Some(overlays) = &self.overlays {
            overlays.shutdown(Duration::from_secs(5)).await;
            done("overlay pages stopped");
        }
        // After the pipelines' last parts: each open video holds everything up to the stop.
        self.recordings
            .shutdown(crate::record::manager::SHUTDOWN_WAIT)
            .await;
        done("recordings finalised");
        // After the recordings: their last facts (recording stopped, video ready) go out too.
        self.webhooks.shutdown(Duration::from_secs(10)).await;
        done("webhook outbox flushed");
        self.cluster.leave().await;
        self.shutdown.close().await;
        done("accept grace over; listeners closed");
        for http in self.http {
            let _ = http.await;
        }
        done("http requests finished");
        for listener in self.listeners {
            // Each waits for its connections, bounded, after the close.
            let _ = listener.await;
        }
        done("ingest connections closed");
        drop(self.store);
    }
}

/// What this node signs relayed requests with and checks others' with: `node_secret`; absent, a
/// secret the first node generated into the shared store (every node reads the same one; the
/// nodes already share the store's credentials, so it is no weaker than they are); on SQLite,
/// with no other node to talk to, a random one per run.
async fn node_auth(
    config: &Config,
    store: &Arc<dyn Store>,
) -> Result<crate::cluster::node_auth::NodeAuth, DaemonError> {
    use crate::cluster::node_auth::{NodeAuth, NodeSecret, STORE_KEY};
    let secret = match (&config.node_secret, config.database_url.is_some()) {
        (Some(secret), _) => secret.clone(),
        (None, false) => NodeSecret::generate(),
        (None, true) => {
            let store = store.clone();
            let candidate = NodeSecret::generate();
            let shared = tokio::task::spawn_blocking(move || {
                store.setting_or_insert(STORE_KEY, candidate.expose())
            })
            .await??;
            NodeSecret::new(shared)
        }
    };
    Ok(NodeAuth::new(secret))
}

/// Prunes source statistics past their retention, at start and then hourly; the daemon's stop
/// ends it before the store closes.
fn spawn_statistics_pruning(
    store: Arc<dyn crate::db::Store>,
    retention: Duration,
) -> tokio::task::JoinHandle<()> {
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
    })
}

/// The store, opened in the prepared data directory and seeded with the profile templates, and
/// the API keys with where they came from.
async fn open_store(config: &Config) -> Result<(Arc<dyn Store>, ApiKeys, KeySource), DaemonError> {
    let data_dir = config.data_dir.clone();
    let templates_file = config.profile_templates_file.clone();
    let configured = config.api_keys.clone();
    let database_url = config.database_url.clone();
    let (store, (keys, key_source)) = tokio::task::spawn_blocking(move || {
        // Keys, certificates and media live here whichever store holds the records: the
        // owner's only, tightened before anything in it is read.
        crate::data_dir::prepare(&data_dir).map_err(|e| DaemonError::DataDir {
            path: e.path,
            source: e.source,
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
        let keys = ApiKeys::load(&configured, &data_dir)?;
        Ok::<_, DaemonError>((store, keys))
    })
    .await??;
    Ok((Arc::from(store), keys, key_source))
}

/// GStreamer initialised, with every element the pipelines need.
async fn check_gstreamer() -> Result<(), DaemonError> {
    tokio::task::spawn_blocking(|| {
        pipeline::init()?;
        for name in REQUIRED_ELEMENTS {
            if gstreamer::ElementFactory::find(name).is_none() {
                return Err(DaemonError::MissingElement(name));
            }
        }
        Ok(())
    })
    .await?
}

/// The HTML overlays' hub, if GStreamer's WPE WebKit plugin is there (without it the daemon
/// runs and refuses `html_overlay: true`), with the page proxy serving its pages' requests.
fn overlays(
    store: &Arc<dyn Store>,
    page_proxy: Option<std::net::TcpListener>,
) -> Result<Option<Arc<OverlayHub>>, DaemonError> {
    if !OverlayHub::available() {
        tracing::warn!("HTML overlays unavailable: GStreamer's wpevideosrc is not installed (Debian: gstreamer1.0-wpe)");
        return Ok(None);
    }
    let hub = OverlayHub::new(store.clone());
    if let Some(listener) = page_proxy {
        let proxy = crate::page_proxy::serve(listener).map_err(DaemonError::PageProxy)?;
        hub.serve_pages_with(proxy);
    } else {
        tracing::warn!("overlay pages fetch through the operator's proxy (http_proxy is set): the URL policy does not check what they load");
    }
    Ok(Some(hub))
}

/// The live registry: sessions get their pipelines from GStreamer and package under
/// `DATA_DIR/media`, emptied first (its segments belong to streams of a previous run); it
/// carries the daemon's domain events' bus.
async fn registry(
    config: &Config,
    store: &Arc<dyn Store>,
    quality_sets: &Arc<QualitySets>,
    overlays: &Option<Arc<OverlayHub>>,
    cluster: &Arc<Cluster>,
) -> Result<Arc<Registry>, DaemonError> {
    let media_root = config.data_dir.join("media");
    {
        let root = media_root.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(root)).await;
    }
    Ok(Registry::new(
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
            publish_auth: publish_auth(config)?,
            capacity: Some(Arc::new(crate::capacity::Capacity::start(config.capacity))),
        },
        crate::events::Events::with_capacity(&node_id(config), config.events_bus_capacity),
        Some(cluster.clone()),
    ))
}

/// The authorization hook's client, when `publish_auth_url` is set.
fn publish_auth(config: &Config) -> Result<Option<Arc<crate::live::PublishAuth>>, DaemonError> {
    let Some(hook) = config.publish_auth.clone() else {
        return Ok(None);
    };
    let auth = crate::live::PublishAuth::new(hook).map_err(DaemonError::PublishAuth)?;
    Ok(Some(Arc::new(auth)))
}

/// This node among the daemons sharing the store; registered by [`join_cluster`] before any
/// publish is accepted, so its leases are never those of a node the others think dead.
fn cluster(config: &Config, store: &Arc<dyn Store>, http_addr: SocketAddr) -> Arc<Cluster> {
    Cluster::new(
        ClusterConfig {
            node_id: node_id(config),
            node_url: node_url(config, http_addr),
            dead_after: config.node_dead_after,
            shared_store: config.database_url.is_some(),
        },
        store.clone(),
    )
}

/// This node joins the daemons sharing the store (its first heartbeat, with the streams' states
/// and their restreams'), before any publish is accepted.
async fn join_cluster(
    cluster: &Arc<Cluster>,
    registry: &Arc<Registry>,
    restreams: &Arc<crate::egress::manager::Restreams>,
) -> Result<(), DaemonError> {
    cluster
        .start(registry, restreams)
        .await
        .map_err(DaemonError::Cluster)
}

/// The restreams of the streams served here; their states join the streams' status.
fn restreams(
    config: &Config,
    store: &Arc<dyn Store>,
    registry: &Arc<Registry>,
) -> Result<Arc<crate::egress::manager::Restreams>, DaemonError> {
    let tls = crate::egress::tls::client_config(config.restream_ca_file.as_deref())?;
    let max = config.restreams_max_per_stream;
    Ok(crate::egress::manager::Restreams::new(
        registry.clone(),
        store.clone(),
        Some(tls),
        max,
    ))
}

fn node_id(config: &Config) -> String {
    config
        .node_id
        .clone()
        .unwrap_or_else(crate::cluster::host_name)
}

/// The recorder, following the registry's events once the recordings a crash interrupted are
/// finalised (before any publish: each becomes one ready video).
async fn recordings(
    config: &Config,
    store: &Arc<dyn Store>,
    registry: &Arc<Registry>,
) -> Result<Arc<Recordings>, DaemonError> {
    let storage = match &config.storage {
        Some(settings) => Some(Arc::new(
            crate::storage::Storage::new(settings).map_err(DaemonError::Storage)?,
        )),
        None => None,
    };
    let recordings = Recordings::new(
        store.clone(),
        RecordConfig {
            root: config.data_dir.join("videos"),
            resume: config.record_resume,
            max: config.record_max,
            max_bytes: config.recordings_max_bytes,
            min_free_bytes: config.recordings_min_free_bytes,
            node_id: node_id(config),
            storage,
            keep_local: config.storage_local_retention,
        },
        registry.events().clone(),
    );
    let recover = recordings.clone();
    match tokio::task::spawn_blocking(move || recover.recover_pending()).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::info!(videos = n, "interrupted recordings finalised"),
        Ok(Err(e)) => tracing::error!(error = %e, "cannot finalise interrupted recordings"),
        Err(e) => tracing::error!(error = %e, "recording recovery panicked"),
    }
    let resume = recordings.clone();
    tokio::task::spawn_blocking(move || resume.resume_uploads()).await?;
    if let Some(keep) = config.video_retention {
        recordings.spawn_retention(keep, node_id(config));
    }
    recordings.spawn(registry.clone());
    Ok(recordings)
}

/// The CDN resources whose streams all need signed playback.
fn secure_cdns(config: &Config) -> std::collections::HashSet<i64> {
    config
        .cdn_resources
        .iter()
        .filter(|r| r.secure_playback)
        .map(|r| r.id)
        .collect()
}

/// The ingest listeners' gates.
fn ingest_gates(gates: &Gates) -> IngestGates {
    IngestGates {
        rtmp: gates.rtmp.clone(),
        rtmps: gates.rtmps.clone(),
        srt: gates.srt.clone(),
        ice_tcp: gates.ice_tcp.clone(),
    }
}

/// Starts every listener and task. `page_proxy` is the loopback listener the process's proxy
/// variables point at ([`crate::page_proxy::install`]); `None` leaves overlay pages' requests
/// to the operator's own proxy, or unguarded.
pub async fn start(
    config: Config,
    page_proxy: Option<std::net::TcpListener>,
) -> Result<Running, DaemonError> {
    let (store, keys, key_source) = open_store(&config).await?;
    let quality_sets = Arc::new(QualitySets::load(config.quality_sets_file.as_deref())?);
    check_gstreamer().await?;
    let overlays = overlays(&store, page_proxy)?;
    let http = bind_http(config.http_addr).await?;
    let https = bind_https(&config).await?;
    let cluster = cluster(&config, &store, http.addr);
    let registry = registry(&config, &store, &quality_sets, &overlays, &cluster).await?;
    let webhooks = crate::webhooks::spawn(store.clone(), registry.events(), node_id(&config));
    let gates = Gates::new(config.admission());
    let ingest = Ingest::bind(&config, ingest_gates(&gates)).await?;
    let public_url = public_url(&config, http.addr);
    let restreams = restreams(&config, &store, &registry)?;
    join_cluster(&cluster, &registry, &restreams).await?;
    let node_auth = node_auth(&config, &store).await?;
    let recordings = recordings(&config, &store, &registry).await?;
    let pruning = spawn_statistics_pruning(store.clone(), config.statistics_retention);
    overlays.iter().for_each(|hub| hub.spawn(registry.events()));
    let spectators = Arc::new(crate::broadcast::Spectators::default());
    let (shutdown, stopping) = Shutdown::with_accept_grace(config.shutdown_accept_grace);
    let api = Arc::new(Api {
        store: store.clone(),
        keys,
        quality_sets,
        endpoints: Endpoints::new(&public_url, ingest.rtmp_addr.port(), ingest.srt_addr.port())
            .with(&public_url, &config.cdn_resources, &config.ingest_regions)
            .signed_with(config.playback.clone()),
        fastedge_app_domain: config.fastedge_app_domain.clone(),
        registry: registry.clone(),
        relay: Relay::new(cluster.clone(), node_auth),
        cluster: cluster.clone(),
        recordings: recordings.clone(),
        overlays: overlays.clone(),
        spectators: spectators.clone(),
        restreams: restreams.clone(),
        feeds: Default::default(),
        stopping: stopping.clone(),
    });
    let player = Player::new(
        registry.clone(),
        cluster.clone(),
        store.clone(),
        config.player_assets_dir.clone(),
        spectators,
    );
    let srt_readers = Arc::new(crate::realtime::srt_read::SrtReads::new(
        registry.clone(),
        store.clone(),
        config.playback.clone(),
        secure_cdns(&config),
    ));
    let ingest = ingest.serve(&config, (&registry, &store), srt_readers, &stopping)?;
    let http_addr = http.addr;
    let whep = crate::realtime::whep::Whep::new(
        registry.clone(),
        config.whep.clone(),
        config.whip.clone(),
        ingest.muxes.clone(),
    );
    let routes = Arc::new(Routes {
        api,
        whip: ingest.whip.clone(),
        whep: whep.clone(),
        player,
        stopping: stopping.clone(),
    });
    let https_addr = https.as_ref().map(|h| h.addr);
    let http = serve_http([Some(http), https], routes, &config, gates.http, stopping);
    tracing::info!(addr = %http_addr, public_url = %public_url, "http listening");
    Ok(Running {
        http_addr,
        https_addr,
        rtmp_addr: ingest.rtmp_addr,
        rtmps_addr: ingest.rtmps_addr,
        srt_addr: ingest.srt_addr,
        whip_udp_addrs: ingest.whip_udp_addrs,
        whip_tcp_addr: ingest.whip_tcp_addr,
        registry,
        cluster,
        public_url,
        key_source,
        shutdown,
        whip: ingest.whip,
        whep,
        restreams,
        recordings,
        webhooks,
        pruning,
        overlays,
        http,
        listeners: ingest.listeners,
        store,
    })
}
