//! Configuration: defaults ← `livepack.toml` ← `LIVEPACK_*` environment ← command-line flags,
//! merged field by field and validated into one [`Config`]. Every setting is one row of the
//! table below (file key, type, default, check); the environment name is derived from the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

use crate::db::DatabaseUrl;
use crate::ingest::{pull, rtmp, srt, whip};
use crate::package::PackagingConfig;

#[macro_use]
mod setting;
mod http;
mod ingest;
mod packaging;
pub mod reference;

pub use http::{CdnResource, IngestRegion};
use setting::{default_addr, invalid};
pub use setting::{parse_addr, split_keys};

pub const DEFAULT_CONFIG_FILE: &str = "livepack.toml";
/// Loopback by default: the control API holds secrets, so exposing it is an explicit choice.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8080";
pub const DEFAULT_RTMP_ADDR: &str = "0.0.0.0:1935";
pub const DEFAULT_RTMPS_ADDR: &str = "0.0.0.0:1936";
pub const DEFAULT_SRT_ADDR: &str = "0.0.0.0:5001";
pub const DEFAULT_DATA_DIR: &str = "data";
/// Relative to the working directory, as `scripts/run` starts the daemon from the checkout.
pub const DEFAULT_PLAYER_ASSETS_DIR: &str = "node_modules";
pub const DEFAULT_FASTEDGE_APP_DOMAIN: &str = "fastedge.localhost";
/// Enough for any real deployment's control plane plus media players; more are refused at accept.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 4096;
/// A client that has not sent its full request head by then is cut off (slowloris).
pub const DEFAULT_HTTP_HEADER_TIMEOUT_SECS: u64 = 10;
/// Connections one client address may hold on the HTTP listener (trusted proxies exempt): a
/// browser opens up to 6 per host, so this leaves room for a few dozen viewers behind one NAT.
pub const DEFAULT_HTTP_MAX_CONNECTIONS_PER_IP: usize = 256;
/// A request body not complete by then is refused (`408`): 1 MiB, the largest API body, at
/// 300 kbit/s, a poor mobile uplink.
pub const DEFAULT_HTTP_BODY_TIMEOUT_SECS: u64 = 30;
/// A connection on which no byte moves either way for this long while it waits on its peer (a
/// body that stopped, a response nobody reads) is closed.
pub const DEFAULT_HTTP_STALL_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_SEGMENT_MS: u64 = 2000;
pub const DEFAULT_PART_MS: u64 = 500;
/// An ingest peer (RTMP/RTMPS/WHIP) that has not started publishing by then is closed.
pub const DEFAULT_INGEST_HANDSHAKE_TIMEOUT_SECS: u64 = 10;
/// A publisher (any protocol) that sends no media for this long is gone.
pub const DEFAULT_INGEST_IDLE_TIMEOUT_SECS: u64 = 10;
/// Outputs outlive a publisher disconnect by this much; a reconnect continues them.
pub const DEFAULT_GRACE_SECS: u64 = 60;
/// The longest a SIGTERM waits for the open recordings, pipelines and requests to finish.
pub const DEFAULT_SHUTDOWN_TIMEOUT_SECS: u64 = 30;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{origin}: invalid value {value:?} for {key}: {reason}")]
    Invalid {
        origin: &'static str,
        /// The file key, or the environment variable it was read from.
        key: String,
        value: String,
        reason: String,
    },
}

// The settings, once each: `key: Type [= default] [, check];` (see `setting::settings!`). A row
// without a default stays optional; its section's builder decides what absence means. The order
// is the file format's: serde lists the keys in it when it refuses an unknown one.
settings! {
    // Listeners and the control plane.
    /// The control API and media delivery (HTTP/1.1 and h2c). Loopback by default: the control API
    /// holds secrets, so exposing it is an explicit choice. Port 0: an ephemeral port, printed and
    /// logged.
    http_addr: SocketAddr = default_addr(DEFAULT_HTTP_ADDR);
    /// RTMP ingest. Port 0: an ephemeral port, printed and logged.
    rtmp_addr: SocketAddr = default_addr(DEFAULT_RTMP_ADDR);
    /// RTMPS (RTMP over TLS) ingest, with the certificate of `rtmps_cert_file` or a self-signed
    /// one.
    rtmps_addr: SocketAddr = default_addr(DEFAULT_RTMPS_ADDR);
    /// SRT ingest (push) and SRT read (`play:` stream ids), UDP.
    srt_addr: SocketAddr = default_addr(DEFAULT_SRT_ADDR);
    /// The database (SQLite), keys and media. Created 0700, its files 0600; looser ones are
    /// tightened at start.
    data_dir: PathBuf = PathBuf::from(DEFAULT_DATA_DIR);
    /// `postgres://user:password@host:port/dbname` (or `postgresql://`, with the client's
    /// parameters such as `?connect_timeout=5&application_name=x`): the records in PostgreSQL,
    /// which several daemons may share (see Cluster). TLS as libpq spells it:
    /// `sslmode=disable|prefer|require|verify-ca|verify-full` (default `prefer`; `require` encrypts
    /// without checking the server, `verify-full` checks the chain and the host name) and
    /// `sslrootcert=/path/ca.pem` (absent or `system`: the system's CA store). An unparsable URL,
    /// an unreachable server or a failed TLS check stops the start with this setting named, never
    /// the password. Absent or empty: SQLite in `DATA_DIR/livepack.db`.
    database_url: String;
    /// The control API's keys (`Authorization: apikey <token>`). Empty: one is generated into
    /// `DATA_DIR/api_key` (0600) and printed on that first start only.
    api_keys: Vec<String> = Vec::new();
    /// The base of the URLs the API returns (`https://live.example.com`); its host is also the host
    /// of the returned `rtmp://` and `srt://` URLs. Absent: `http://<bound HTTP address>` (a
    /// wildcard bind shows as loopback).
    public_url: String;
    /// This daemon's name among the nodes sharing a PostgreSQL store (see Cluster): 1–64 of `A–Z
    /// a–z 0–9 . _ -`. Absent: the host name.
    node_id: String;
    /// Where the other nodes reach this one. Absent: `http://<bound HTTP address>` (the host name
    /// for a wildcard bind).
    node_url: String;
    /// What the nodes sign relayed requests with (HMAC-SHA256, see Cluster): at least 32 characters
    /// (`openssl rand -hex 32`), never shown; set it on every node or on none. Absent: on
    /// PostgreSQL, one generated by the first node into the store's `settings` table (key
    /// `node_secret`) and read by every node; on SQLite a random one per run.
    node_secret: String, http::node_secret;
    /// A node silent this long is dead: its streams show `live: false`, its leases may be taken.
    node_dead_secs: u64 = crate::cluster::DEFAULT_DEAD_AFTER.as_secs(), 2..=300;
    /// A TOML file of quality sets (transcoding ladders). Absent: the shipped
    /// `pipelines/quality_sets.toml` (embedded in the binary).
    quality_sets_file: PathBuf;
    /// A JSON file of operator security profile templates, upserted by id on every start. Absent:
    /// none.
    profile_templates_file: PathBuf;
    /// The domain of FastEdge apps: an app's `url` is `https://{name}.{domain}`.
    fastedge_app_domain: String = DEFAULT_FASTEDGE_APP_DOMAIN.to_owned(), http::dns_name;
    /// The CDN resources streams may name in `cdn_id`: in the file an array of tables
    /// `[[cdn_resources]]` with `id`, `base_url` and optional `secure_playback = true`; in the
    /// environment `7=https://cdn.example.com,8=https://cdn2.example.com secure`. `secure_playback`
    /// (` secure` after the URL) makes every stream on it need signed playback (needs
    /// `playback_signing_key`).
    cdn_resources: Vec<CdnResource> = Vec::new(), http::cdn_resources;
    /// Regions listed in each record's `multi_region_push_urls`: in the file an array of tables
    /// `[[ingest_regions]]` with `name` and `host`; in the environment
    /// `eu=ingest-eu.example.com,us=ingest-us.example.com`.
    ingest_regions: Vec<IngestRegion> = Vec::new(), http::ingest_regions;
    /// Connections the HTTP listener holds at once; the excess gets `503` and is closed.
    http_max_connections: usize = DEFAULT_HTTP_MAX_CONNECTIONS, 1..;
    /// A request head not complete by then is cut off; also the keep-alive idle time.
    http_header_timeout_secs: u64 = DEFAULT_HTTP_HEADER_TIMEOUT_SECS, 1..=300;
    /// Connections one client address may hold (a browser opens up to 6 per host); the excess gets
    /// `503` and is closed; trusted proxies exempt.
    http_max_connections_per_ip: usize = DEFAULT_HTTP_MAX_CONNECTIONS_PER_IP, 1..=1_000_000;
    /// A request body (API JSON, WHIP offer) not complete by then is refused `408` (1 MiB at 300
    /// kbit/s fits).
    http_body_timeout_secs: u64 = DEFAULT_HTTP_BODY_TIMEOUT_SECS, 1..=600;
    /// A connection on which no byte moves either way for this long while it waits on its peer (a
    /// body that stopped, a response nobody reads) is closed.
    http_stall_timeout_secs: u64 = DEFAULT_HTTP_STALL_TIMEOUT_SECS, 1..=600;
    /// Addresses or CIDR networks of proxies and CDN edges in front of the daemon, not capped per
    /// address (≤ 1000 entries).
    trusted_proxies: Vec<String> = Vec::new();
    /// The RTMPS certificate chain (PEM); with `rtmps_key_file`, both or neither. Absent: a
    /// self-signed `DATA_DIR/rtmps-cert.pem`.
    rtmps_cert_file: PathBuf;
    /// The RTMPS private key (PEM); with `rtmps_cert_file`, both or neither. Absent: a self-signed
    /// one in the data dir.
    rtmps_key_file: PathBuf;
    /// The HTTPS listener: the same routes as `http_addr` over TLS, HTTP/2 or HTTP/1.1 by ALPN
    /// (e.g. `0.0.0.0:8443`). Absent: no HTTPS port.
    https_addr: SocketAddr;
    /// The HTTPS certificate chain (PEM); with `https_key_file`, both or neither. Absent: the RTMPS
    /// certificate (configured, or the self-signed `DATA_DIR/rtmps-cert.pem`).
    https_cert_file: PathBuf;
    /// The HTTPS private key (PEM); with `https_cert_file`, both or neither. Absent: the RTMPS key.
    https_key_file: PathBuf;

    // Packaging and the live session.
    /// The length of a media segment: 2000, 3000 or 4000.
    segment_duration_ms: u64 = DEFAULT_SEGMENT_MS, packaging::whole_seconds;
    /// The length of an LL-HLS part: 500..1000, dividing the segment.
    part_duration_ms: u64 = DEFAULT_PART_MS;
    /// TS-HLS is muxed from its first request until none came for this long; `0`: muxed always.
    mpegts_idle_secs: u64 = crate::package::state::DEFAULT_MPEGTS_IDLE.as_secs(), 0..=86_400;
    /// Outputs outlive a publisher's disconnect by this much; a reconnect within it continues them.
    grace_period_secs: u64 = DEFAULT_GRACE_SECS, 0..=3600;
    /// The longest SIGTERM waits for the pipelines' last parts, the open recordings (each finalised
    /// `ready`), the webhook outbox and requests in flight, newcomers refused meanwhile; past it
    /// the daemon exits 1; a second SIGTERM/SIGINT exits at once ("Stopping and rolling restarts").
    shutdown_timeout_secs: u64 = DEFAULT_SHUTDOWN_TIMEOUT_SECS, 1..=600;
    /// The least time a stopping daemon keeps its ports open refusing newcomers (`/readyz` 503,
    /// RTMP/SRT/HTTP "unavailable") before it closes them, however quickly its streams are done;
    /// below `shutdown_timeout_secs`. Set it to a health-checking balancer's check interval × its
    /// fall count, so the balancer takes the node out before its ports close.
    shutdown_accept_grace_secs: u64 = 0, 0..=300;

    // Capacity: how many transcodes this node takes.
    /// The most streams this node transcodes at once. Absent: no count; the measured check
    /// (`admission_cpu_percent`) alone decides.
    max_transcodes: usize, 1..=10_000;
    /// The node is full when its CPU (all cores, last 5 s) with one more transcode at the running
    /// ones' average cost (and the ones admitted in those 5 s) would reach this, or a running
    /// transcode is below 0.97× real time; 100 turns the measured check off ("Capacity").
    admission_cpu_percent: u64 = crate::capacity::DEFAULT_CPU_PERCENT, 10..=100;
    /// What a publish that would start a transcode on a full node gets: `refuse` (refused as
    /// each protocol refuses), `shed` (taken with its lowest rung only) or `passthrough` (taken
    /// with no video transcode: an H.264 source's video is packaged as it came, the only video
    /// rendition; another codec is shed instead).
    overload_policy: String = "refuse".to_owned();
    /// Events a lossy follower of the event bus may lag behind before it resyncs from the live
    /// state; the webhook outbox never loses one whatever this is.
    events_bus_capacity: usize = crate::events::EVENTS_QUEUE, 1..=1_000_000;
    /// A main silent this long fails over to the backup or turns `live` off.
    backup_switch_secs: u64 = crate::live::switch::DEFAULT_SWITCH_TIMEOUT.as_secs(),
        crate::live::switch::SWITCH_TIMEOUT_RANGE_SECS;
    /// A recording whose input returns within this continues the same video.
    record_resume_secs: u64 = crate::record::manager::DEFAULT_RESUME.as_secs(), 0..=3600;
    /// A longer recording continues as a new video.
    record_max_secs: u64 = crate::record::manager::DEFAULT_MAX.as_secs(), 10..=86_400;
    /// The bytes all videos on this node may hold. Absent: no quota (the free-space floor
    /// `recordings_min_free_bytes` still applies).
    recordings_max_bytes: u64, 1..;
    /// Recording stops (and does not start) below this much free disk.
    recordings_min_free_bytes: u64 = crate::record::manager::DEFAULT_MIN_FREE;
    /// `s3://bucket[/prefix]`: finished videos are uploaded to this S3-compatible object store and
    /// every node serves them from there. Absent: videos stay on the recording node's disk.
    storage_url: String;
    /// An S3-compatible server's `http://` or `https://` URL (path-style requests). Absent:
    /// `AWS_ENDPOINT_URL`, else AWS.
    storage_endpoint: String;
    /// The object store's region. Absent: `AWS_REGION`, else `us-east-1`.
    storage_region: String;
    /// The object store's access key id. Absent: `AWS_ACCESS_KEY_ID` (or the instance's role).
    storage_access_key_id: String;
    /// The object store's secret key, never shown. Absent: `AWS_SECRET_ACCESS_KEY` (or the
    /// instance's role).
    storage_secret_access_key: String;
    /// How long an uploaded video's local files stay; 0: removed once the store has them.
    storage_local_retention_secs: u64 = 0, 0..=31_536_000;
    /// Finished videos older than this are deleted, hourly: record, files and objects. Absent: kept
    /// until deleted.
    video_retention_days: u64, 1..=36_500;
    /// How often a live stream's source is sampled for `/streaming/statistics/ffprobe`.
    statistics_sample_secs: u64 = crate::live::stats::DEFAULT_SAMPLE_PERIOD.as_secs(), 1..=60;
    /// Older samples are pruned (at start, then hourly).
    statistics_retention_days: u64 = crate::live::stats::DEFAULT_RETENTION_DAYS, 1..=3650;

    // WHIP's network (absent: `WhipConfig::default()`), PULL, the player.
    /// Only with `whip_udp_mux_addr = "off"`: each WHIP session's own UDP sockets (`127.0.0.1:0` to
    /// offer loopback candidates). Absent: `0.0.0.0:0`.
    whip_udp_addrs: Vec<SocketAddr>, ingest::non_empty;
    /// Public IPs announced instead of the interfaces' own in the host candidates (1:1 NAT), one
    /// candidate per IP of the same family. Absent: none.
    whip_nat_ips: Vec<String>;
    /// The one UDP port every WHIP session shares (wildcard: that port on each interface, loopback
    /// excluded; `127.0.0.1:8189` offers loopback; port 0 picks a free one); `off` (or empty): a
    /// socket per session on `whip_udp_addrs`. Absent: `0.0.0.0:8189`.
    whip_udp_mux_addr: String;
    /// ICE-TCP (passive) for all WHIP sessions, the fallback where UDP is blocked; `off` (or
    /// empty): no ICE-TCP. Absent: `0.0.0.0:8189`.
    whip_tcp_mux_addr: String;
    /// STUN/TURN servers sent to WHIP clients as `Link` headers: `stun:host[:port]`,
    /// `turn[s]:user:credential@host[:port][?transport=udp|tcp]` (≤ 16; credentials printable ASCII
    /// without space, `"` or `\`; from the environment no `,`). Absent: none.
    whip_ice_servers: Vec<String>;
    /// A PULL stream receiving nothing this long is set `active=false`.
    pull_inactivity_secs: u64 = pull::DEFAULT_INACTIVITY.as_secs(), 1..;
    /// A PULL source that gives nothing this long after it opened is left for the next.
    pull_first_data_timeout_ms: u64 = pull::DEFAULT_FIRST_DATA_TIMEOUT.as_millis() as u64,
        200..=600_000;
    /// A PULL source that stops sending this long is left for the next.
    pull_no_data_timeout_ms: u64 = pull::DEFAULT_NO_DATA_TIMEOUT.as_millis() as u64,
        200..=600_000;
    /// The pause after a cycle through a PULL stream's sources in which none delivered.
    pull_cycle_pause_ms: u64 = pull::DEFAULT_CYCLE_PAUSE.as_millis() as u64, 0..=600_000;
    /// The key signed playback tokens are computed from: 16..128 of `A-Z a-z 0-9 _ -`, never
    /// logged. Absent: `secure_playback` cannot be set.
    playback_signing_key: String, http::playback_key;
    /// How long the playback URLs a signed record returns stay valid.
    playback_token_ttl_secs: u64 = 86_400, 60..=31_536_000;
    /// The publish authorization hook, http(s): POSTed `{stream_id, protocol, slot, remote_addr,
    /// query}` before each RTMP, SRT and WHIP publish; only a 2xx within `publish_auth_timeout_ms`
    /// lets it in. A query may carry a key the service checks. Absent: no hook.
    publish_auth_url: String;
    /// The publish hook's whole call; no 2xx by then is a refusal.
    publish_auth_timeout_ms: u64 = 2000, 100..=30_000;
    /// A yes of the publish hook stands this long for the same stream, slot, protocol, address and
    /// query; 0: never cached.
    publish_auth_cache_secs: u64 = 10, 0..=3600;
    /// `true` lets PULL requests reach link-local and metadata addresses; by default they are
    /// refused (the source's, and every playlist entry's or redirect's).
    pull_allow_link_local: bool = false;
    /// Where `hls.js/dist`, `dashjs/dist` and `swagger-ui-dist` are: the libraries the player
    /// page and the API reference (`/docs/api`) load (the package's are in
    /// `/usr/share/livepack/web`).
    player_assets_dir: PathBuf = PathBuf::from(DEFAULT_PLAYER_ASSETS_DIR);
    /// A PEM CA file RTMPS restream targets may be signed by, besides the system's roots. Absent:
    /// the system's roots only.
    restream_ca_file: PathBuf;
    /// Restreams one stream may have; more gets `409`.
    restreams_max_per_stream: u64 = crate::egress::manager::DEFAULT_MAX_PER_STREAM, 1..=50;

    // Limits on what a peer can make the daemon spend.
    /// An RTMP/RTMPS peer not publishing by then (TLS, handshake, connect, publish) is closed; a
    /// WHIP session whose ICE/DTLS has not connected is dropped.
    ingest_handshake_timeout_secs: u64 = DEFAULT_INGEST_HANDSHAKE_TIMEOUT_SECS, 1..=120;
    /// A publisher (RTMP, SRT, WHIP) sending no media this long is closed.
    ingest_idle_timeout_secs: u64 = DEFAULT_INGEST_IDLE_TIMEOUT_SECS, 2..=600;
    /// Connections per listener (RTMP and RTMPS each); the excess is closed at accept.
    rtmp_max_connections: usize = rtmp::listener::DEFAULT_MAX_CONNECTIONS, 1..=1_000_000;
    /// Connections the SRT listener holds at once; the excess is rejected at the handshake
    /// (`SRT_REJX_OVERLOAD`).
    srt_max_connections: usize = srt::listener::DEFAULT_MAX_CONNECTIONS, 1..=1_000_000;
    /// Connections one address may hold, per listener (trusted proxies exempt); the excess is
    /// closed at accept.
    rtmp_max_connections_per_ip: usize = rtmp::listener::DEFAULT_MAX_CONNECTIONS_PER_IP,
        1..=1_000_000;
    /// Callers one address may hold; the excess is rejected (`SRT_REJX_OVERLOAD`).
    srt_max_connections_per_ip: usize = srt::listener::DEFAULT_MAX_CONNECTIONS_PER_IP,
        1..=1_000_000;
    /// ICE-TCP connections one address may hold; the excess is closed at accept.
    whip_tcp_max_connections_per_ip: usize = whip::tcp_mux::DEFAULT_MAX_CONNECTIONS_PER_IP,
        1..=1_000_000;
    /// WHIP sessions this node holds at once; the excess gets `503`.
    whip_max_sessions: usize = whip::DEFAULT_MAX_SESSIONS, 1..=100_000;
    /// WHEP viewers on this node; the excess gets `503 too_many_sessions`.
    whep_max_sessions: usize = crate::realtime::whep::DEFAULT_MAX_SESSIONS, 1..=100_000;
    /// WHEP viewers of one stream; the excess gets `503 too_many_sessions`.
    whep_max_sessions_per_stream: usize = crate::realtime::whep::DEFAULT_MAX_SESSIONS_PER_STREAM,
        1..=100_000;
    /// Declared length of an audio/video message.
    rtmp_max_message_bytes: u64 = u64::from(rtmp::vet::DEFAULT_MAX_MEDIA_MESSAGE),
        64 * 1024..=64 * 1024 * 1024;
    /// Nesting of AMF0 objects/arrays in commands and metadata.
    rtmp_max_amf_depth: usize = rtmp::vet::DEFAULT_MAX_AMF_DEPTH, 4..=256;
    /// Largest WHIP offer (`413` beyond).
    whip_max_sdp_bytes: usize = whip::sdp::DEFAULT_MAX_SDP_BYTES, 8 * 1024..=1024 * 1024;
    /// What an HLS/DASH source may deliver while it proves it is live.
    pull_max_held_bytes: usize = pull::DEFAULT_MAX_HELD_BYTES, 1 << 20..=1 << 30;
    /// An HLS playlist or DASH manifest a PULL fetches; larger fails the request.
    pull_max_playlist_bytes: usize = pull::gateway::DEFAULT_MAX_PLAYLIST_BYTES,
        16 << 10..=256 << 20;
    /// A segment a PULL fetches; larger is cut.
    pull_max_segment_bytes: u64 = pull::gateway::DEFAULT_MAX_SEGMENT_BYTES, 1 << 20..=4 << 30;
}

impl Layer {
    /// Reads a TOML file; a missing file is an empty layer only when `required` is false.
    pub fn from_file(path: &Path, required: bool) -> Result<Layer, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Layer::default())
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })
            }
        };
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })
    }
}

/// The validated configuration the daemon runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub http_addr: SocketAddr,
    /// The HTTPS listener's address, if any.
    pub https_addr: Option<SocketAddr>,
    /// Both or neither: without them HTTPS uses the RTMPS certificate (configured or
    /// self-signed).
    pub https_cert_file: Option<PathBuf>,
    pub https_key_file: Option<PathBuf>,
    pub rtmp_addr: SocketAddr,
    pub rtmps_addr: SocketAddr,
    pub srt_addr: SocketAddr,
    pub data_dir: PathBuf,
    /// The PostgreSQL database holding the records; `None`: SQLite in `data_dir`.
    pub database_url: Option<DatabaseUrl>,
    /// Empty means "generate one into the data dir" (done by the daemon at start).
    pub api_keys: Vec<String>,
    /// Base of every returned URL; `None` means derived from the bound HTTP address.
    pub public_url: Option<Url>,
    /// `None`: the host name.
    pub node_id: Option<String>,
    /// `None`: derived from the bound HTTP address.
    pub node_url: Option<Url>,
    /// `None`: generated into the PostgreSQL store (shared by the nodes), or per run on SQLite.
    pub node_secret: Option<crate::cluster::node_auth::NodeSecret>,
    pub node_dead_after: Duration,
    pub quality_sets_file: Option<PathBuf>,
    pub profile_templates_file: Option<PathBuf>,
    pub fastedge_app_domain: String,
    /// CDN resources streams may name in `cdn_id`.
    pub cdn_resources: Vec<CdnResource>,
    /// Ingest regions listed in each record's `multi_region_push_urls`.
    pub ingest_regions: Vec<IngestRegion>,
    pub http_max_connections: usize,
    pub http_header_timeout_secs: u64,
    pub http_max_connections_per_ip: usize,
    pub http_body_timeout: Duration,
    pub http_stall_timeout: Duration,
    pub trusted_proxies: crate::admission::TrustedProxies,
    /// Both or neither: without them RTMPS uses a self-signed certificate in the data dir.
    pub rtmps_cert_file: Option<PathBuf>,
    pub rtmps_key_file: Option<PathBuf>,
    pub packaging: PackagingConfig,
    /// Signed playback's key and the lifetime of the URLs records return; `None`: no key.
    pub playback: Option<crate::playback_auth::Signing>,
    /// The publish authorization hook (`publish_auth_*`); `None`: none.
    pub publish_auth: Option<crate::live::PublishAuthConfig>,
    pub grace_period: std::time::Duration,
    /// SIGTERM's bound: past it the daemon exits with what is not finished named in the log.
    pub shutdown_timeout: std::time::Duration,
    /// How many transcodes the node takes and what a publish past that gets.
    pub capacity: crate::capacity::CapacityConfig,
    /// The least time from SIGTERM to the listeners' close (balancers' health checks see
    /// `/readyz` fail meanwhile); below `shutdown_timeout`.
    pub shutdown_accept_grace: std::time::Duration,
    pub events_bus_capacity: usize,
    /// A main silent this long is failed over from (to a backup being pushed) or reported off.
    pub backup_switch: std::time::Duration,
    /// A recording whose input returns within this continues the same video.
    pub record_resume: std::time::Duration,
    /// A recording longer than this continues as a new video.
    pub record_max: std::time::Duration,
    /// The bytes all videos may hold; `None`: no quota.
    pub recordings_max_bytes: Option<u64>,
    /// Recording stops (and does not start) below this much free disk.
    pub recordings_min_free_bytes: u64,
    /// How often a live stream's source statistics are sampled.
    pub statistics_sample: std::time::Duration,
    /// Samples older than this are pruned.
    pub statistics_retention: std::time::Duration,
    pub rtmp: crate::ingest::rtmp::RtmpConfig,
    pub srt: crate::ingest::srt::SrtConfig,
    pub whip: crate::ingest::whip::WhipConfig,
    pub whep: crate::realtime::whep::WhepConfig,
    pub pull: crate::ingest::pull::PullConfig,
    /// `node_modules` of the npm install holding hls.js and dash.js for the player page.
    pub player_assets_dir: PathBuf,
    pub restream_ca_file: Option<PathBuf>,
    pub restreams_max_per_stream: u32,
    /// Where finished videos go (`storage_url` and its settings); `None`: local disk only.
    pub storage: Option<crate::storage::StorageSettings>,
    pub storage_local_retention: Duration,
    pub video_retention: Option<Duration>,
}

impl Config {
    pub fn from_layer(layer: Layer) -> Result<Config, ConfigError> {
        let s = Settings::resolve(layer)?;
        check_together(&s)?;
        let storage = storage(&s)?;
        let capacity = capacity(&s)?;
        Ok(Config {
            capacity,
            public_url: http::public_url(s.public_url.as_deref())?,
            node_id: http::node_id(s.node_id.as_deref())?,
            node_url: http::base_url("node_url", s.node_url.as_deref())?,
            node_secret: s
                .node_secret
                .clone()
                .filter(|v| !v.is_empty())
                .map(crate::cluster::node_auth::NodeSecret::new),
            node_dead_after: Duration::from_secs(s.node_dead_secs),
            packaging: packaging::config(&s)?,
            rtmp: ingest::rtmp(&s),
            srt: ingest::srt(&s),
            whip: ingest::whip(&s)?,
            whep: crate::realtime::whep::WhepConfig {
                max_sessions: s.whep_max_sessions,
                max_sessions_per_stream: s.whep_max_sessions_per_stream,
            },
            pull: ingest::pull(&s),
            http_addr: s.http_addr,
            https_addr: s.https_addr,
            https_cert_file: s.https_cert_file,
            https_key_file: s.https_key_file,
            rtmp_addr: s.rtmp_addr,
            rtmps_addr: s.rtmps_addr,
            srt_addr: s.srt_addr,
            database_url: database_url(s.database_url.as_deref())?,
            data_dir: s.data_dir,
            api_keys: s.api_keys,
            quality_sets_file: s.quality_sets_file,
            profile_templates_file: s.profile_templates_file,
            fastedge_app_domain: s.fastedge_app_domain,
            cdn_resources: s.cdn_resources,
            ingest_regions: s.ingest_regions,
            http_max_connections: s.http_max_connections,
            http_header_timeout_secs: s.http_header_timeout_secs,
            http_max_connections_per_ip: s.http_max_connections_per_ip,
            http_body_timeout: Duration::from_secs(s.http_body_timeout_secs),
            http_stall_timeout: Duration::from_secs(s.http_stall_timeout_secs),
            trusted_proxies: http::trusted_proxies(&s.trusted_proxies)?,
            rtmps_cert_file: s.rtmps_cert_file,
            rtmps_key_file: s.rtmps_key_file,
            grace_period: Duration::from_secs(s.grace_period_secs),
            shutdown_timeout: Duration::from_secs(s.shutdown_timeout_secs),
            shutdown_accept_grace: Duration::from_secs(s.shutdown_accept_grace_secs),
            events_bus_capacity: s.events_bus_capacity,
            backup_switch: Duration::from_secs(s.backup_switch_secs),
            record_resume: Duration::from_secs(s.record_resume_secs),
            record_max: Duration::from_secs(s.record_max_secs),
            recordings_max_bytes: s.recordings_max_bytes,
            recordings_min_free_bytes: s.recordings_min_free_bytes,
            statistics_sample: Duration::from_secs(s.statistics_sample_secs),
            statistics_retention: Duration::from_secs(s.statistics_retention_days * 86_400),
            player_assets_dir: s.player_assets_dir,
            restream_ca_file: s.restream_ca_file,
            restreams_max_per_stream: s.restreams_max_per_stream as u32,
            storage,
            storage_local_retention: Duration::from_secs(s.storage_local_retention_secs),
            video_retention: s
                .video_retention_days
                .map(|d| Duration::from_secs(d * 86_400)),
            playback: s
                .playback_signing_key
                .clone()
                .filter(|v| !v.is_empty())
                .map(|key| crate::playback_auth::Signing {
                    key: crate::playback_auth::Key::new(key),
                    ttl: Duration::from_secs(s.playback_token_ttl_secs),
                }),
            publish_auth: http::publish_auth(
                s.publish_auth_url.as_deref(),
                s.publish_auth_timeout_ms,
                s.publish_auth_cache_secs,
            )?,
        })
    }

    /// Every listener's connection caps, for [`crate::admission::Gates`].
    pub fn admission(&self) -> crate::admission::Limits {
        use crate::admission::Caps;
        let caps = |max, per_address| Caps { max, per_address };
        crate::admission::Limits {
            http: caps(self.http_max_connections, self.http_max_connections_per_ip),
            rtmp: caps(self.rtmp.max_connections, self.rtmp.max_connections_per_ip),
            srt: caps(self.srt.max_connections, self.srt.max_connections_per_ip),
            // A WHIP or WHEP session's candidate pairs may each open one.
            ice_tcp: caps(
                (self.whip.max_sessions + self.whep.max_sessions).saturating_mul(4),
                self.whip.tcp_max_connections_per_ip,
            ),
            trusted: self.trusted_proxies.clone(),
        }
    }
}

/// Absent or blank: SQLite. The value is echoed without credentials: it may hold a password.
/// `storage_url` and the settings that go with it; the URL checked now, not at first upload.
fn storage(s: &Settings) -> Result<Option<crate::storage::StorageSettings>, ConfigError> {
    let non_empty = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let Some(url) = non_empty(&s.storage_url) else {
        return Ok(None);
    };
    let parsed = url::Url::parse(&url).ok();
    if !parsed.is_some_and(|u| u.scheme() == "s3" && u.host_str().is_some_and(|h| !h.is_empty())) {
        return Err(invalid(
            "storage_url",
            "",
            "storage_url must be s3://bucket[/prefix]",
        ));
    }
    let endpoint = non_empty(&s.storage_endpoint);
    if let Some(e) = &endpoint {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            return Err(invalid(
                "storage_endpoint",
                "",
                "an http:// or https:// URL",
            ));
        }
    }
    Ok(Some(crate::storage::StorageSettings {
        url,
        endpoint,
        region: non_empty(&s.storage_region),
        access_key_id: non_empty(&s.storage_access_key_id),
        secret_access_key: non_empty(&s.storage_secret_access_key),
    }))
}

/// The checks that read more than one setting.
fn check_together(s: &Settings) -> Result<(), ConfigError> {
    if s.shutdown_accept_grace_secs >= s.shutdown_timeout_secs {
        return Err(invalid(
            "shutdown_accept_grace_secs",
            s.shutdown_accept_grace_secs.to_string(),
            "must be below shutdown_timeout_secs, or the stop never ends in time",
        ));
    }
    if s.https_cert_file.is_some() != s.https_key_file.is_some() {
        return Err(invalid(
            "https_cert_file",
            "",
            "https_cert_file and https_key_file go together",
        ));
    }
    if s.rtmps_cert_file.is_some() != s.rtmps_key_file.is_some() {
        return Err(invalid(
            "rtmps_cert_file",
            "",
            "rtmps_cert_file and rtmps_key_file go together",
        ));
    }
    let has_key = s
        .playback_signing_key
        .as_ref()
        .is_some_and(|k| !k.is_empty());
    if !has_key && s.cdn_resources.iter().any(|r| r.secure_playback) {
        return Err(invalid(
            "cdn_resources",
            "secure_playback",
            "a CDN resource with secure_playback needs playback_signing_key",
        ));
    }
    Ok(())
}

fn capacity(s: &Settings) -> Result<crate::capacity::CapacityConfig, ConfigError> {
    use crate::capacity::OverloadPolicy;
    let policy = OverloadPolicy::parse(&s.overload_policy).ok_or_else(|| {
        invalid(
            "overload_policy",
            s.overload_policy.clone(),
            "one of refuse, shed, passthrough",
        )
    })?;
    Ok(crate::capacity::CapacityConfig {
        max_transcodes: s.max_transcodes,
        cpu_percent: s.admission_cpu_percent as u32,
        policy,
    })
}

fn database_url(v: Option<&str>) -> Result<Option<DatabaseUrl>, ConfigError> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => DatabaseUrl::parse(v).map(Some).map_err(|reason| {
            // Not a URL (a libpq keyword string, say) may hold `password=`: not echoed.
            let shown = crate::url_policy::redact_url(v).unwrap_or_else(|| "<not a URL>".into());
            invalid("database_url", shown, reason)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = Config::from_layer(Layer::default()).unwrap();
        assert_eq!(c.http_addr.to_string(), DEFAULT_HTTP_ADDR);
        assert_eq!(c.rtmp_addr.port(), 1935);
        assert_eq!(c.srt_addr.port(), 5001);
        assert!(c.api_keys.is_empty());
        assert!(c.public_url.is_none());
    }

    #[test]
    fn flags_beat_env_beat_file() {
        let file: Layer = toml::from_str(
            "http_addr = \"127.0.0.1:1\"\nrtmp_addr = \"127.0.0.1:2\"\nsrt_addr = \"127.0.0.1:3\"",
        )
        .unwrap();
        let env = Layer::from_env(env(&[
            ("LIVEPACK_RTMP_ADDR", "127.0.0.1:20"),
            ("LIVEPACK_SRT_ADDR", "127.0.0.1:30"),
            ("LIVEPACK_API_KEYS", "a, b,,c,"),
        ]))
        .unwrap();
        let flags = Layer {
            srt_addr: Some("127.0.0.1:300".parse().unwrap()),
            ..Layer::default()
        };
        let c = Config::from_layer(flags.over(env.over(file))).unwrap();
        assert_eq!(c.http_addr.port(), 1);
        assert_eq!(c.rtmp_addr.port(), 20);
        assert_eq!(c.srt_addr.port(), 300);
        assert_eq!(c.api_keys, vec!["a", "b", "c"]);
    }

    #[test]
    fn bad_env_value_names_the_variable() {
        let err = Layer::from_env(env(&[("LIVEPACK_HTTP_ADDR", "localhost")])).unwrap_err();
        assert!(err.to_string().contains("LIVEPACK_HTTP_ADDR"), "{err}");
    }

    #[test]
    fn limits_come_from_the_configuration_and_are_range_checked() {
        let d = Config::from_layer(Layer::default()).unwrap();
        assert_eq!(d.rtmp.max_connections, 1024);
        assert_eq!(d.rtmp.handshake_timeout, Duration::from_secs(10));
        assert_eq!(d.rtmp.guard.max_media_message, 8 << 20);
        assert_eq!(d.rtmp.guard.max_amf_depth, 32);
        assert_eq!(d.whip.max_sdp_bytes, 128 << 10);
        assert_eq!(d.pull.max_held_bytes, 32 << 20);
        assert_eq!(d.pull.max_playlist_bytes, 4 << 20);
        assert_eq!(d.pull.max_segment_bytes, 128 << 20);
        assert_eq!(d.pull.first_data_timeout, Duration::from_secs(10));
        assert_eq!(d.pull.no_data_timeout, Duration::from_secs(5));
        assert_eq!(d.pull.cycle_pause, Duration::from_secs(2));
        let layer = Layer::from_env(env(&[
            ("LIVEPACK_RTMP_MAX_CONNECTIONS", "7"),
            ("LIVEPACK_INGEST_IDLE_TIMEOUT_SECS", "30"),
            ("LIVEPACK_INGEST_HANDSHAKE_TIMEOUT_SECS", "3"),
            ("LIVEPACK_WHIP_MAX_SDP_BYTES", "16384"),
            ("LIVEPACK_PULL_MAX_SEGMENT_BYTES", "2097152"),
            ("LIVEPACK_PULL_FIRST_DATA_TIMEOUT_MS", "1500"),
            ("LIVEPACK_PULL_CYCLE_PAUSE_MS", "0"),
        ]))
        .unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.rtmp.max_connections, 7);
        assert_eq!(c.srt.idle_timeout, Duration::from_secs(30));
        assert_eq!(c.whip.idle_timeout, Duration::from_secs(30));
        assert_eq!(c.whip.connect_timeout, Duration::from_secs(3));
        assert_eq!(c.whip.max_sdp_bytes, 16384);
        assert_eq!(c.pull.max_segment_bytes, 2 << 20);
        assert_eq!(c.pull.first_data_timeout, Duration::from_millis(1500));
        assert_eq!(c.pull.cycle_pause, Duration::ZERO);
        for (key, value) in [
            ("rtmp_max_amf_depth", "1000"),
            ("ingest_handshake_timeout_secs", "0"),
            ("rtmp_max_message_bytes", "100"),
            ("srt_max_connections", "0"),
            ("whip_max_sdp_bytes", "100000000"),
            ("pull_max_playlist_bytes", "1000"),
            ("pull_max_segment_bytes", "10000000000"),
            ("pull_no_data_timeout_ms", "100"),
        ] {
            let layer: Layer = toml::from_str(&format!("{key} = {value}")).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(value), "{err}");
        }
    }

    #[test]
    fn the_accept_grace_stays_below_the_shutdown_timeout() {
        assert_eq!(
            Config::from_layer(Layer::default())
                .unwrap()
                .shutdown_accept_grace,
            Duration::ZERO
        );
        let layer: Layer = toml::from_str("shutdown_accept_grace_secs = 10").unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.shutdown_accept_grace, Duration::from_secs(10));
        let layer: Layer =
            toml::from_str("shutdown_accept_grace_secs = 30\nshutdown_timeout_secs = 30").unwrap();
        let err = Config::from_layer(layer).unwrap_err().to_string();
        assert!(
            err.contains("shutdown_accept_grace_secs") && err.contains("below shutdown_timeout"),
            "{err}"
        );
    }

    #[test]
    fn capacity_settings_name_their_key() {
        use crate::capacity::OverloadPolicy;
        let d = Config::from_layer(Layer::default()).unwrap().capacity;
        assert_eq!(d, crate::capacity::CapacityConfig::default());
        let layer = Layer::from_env(env(&[
            ("LIVEPACK_MAX_TRANSCODES", "3"),
            ("LIVEPACK_ADMISSION_CPU_PERCENT", "100"),
            ("LIVEPACK_OVERLOAD_POLICY", "shed"),
        ]))
        .unwrap();
        let c = Config::from_layer(layer).unwrap().capacity;
        assert_eq!(
            (c.max_transcodes, c.cpu_percent, c.policy),
            (Some(3), 100, OverloadPolicy::Shed)
        );
        for (key, value) in [
            ("overload_policy", "\"drop\""),
            ("max_transcodes", "0"),
            ("admission_cpu_percent", "101"),
        ] {
            let layer: Layer = toml::from_str(&format!("{key} = {value}")).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn cdn_resources_and_ingest_regions_from_file_and_environment() {
        let file: Layer = toml::from_str(
            "[[cdn_resources]]\nid = 7\nbase_url = \"https://cdn.example.com/live/\"\n\
             [[ingest_regions]]\nname = \"eu\"\nhost = \"ingest-eu.example.com\"\n\
             [[ingest_regions]]\nname = \"v6\"\nhost = \"2001:db8::1\"\n",
        )
        .unwrap();
        let c = Config::from_layer(file).unwrap();
        assert_eq!(
            c.cdn_resources,
            [CdnResource {
                id: 7,
                base_url: "https://cdn.example.com/live".into(),
                secure_playback: false,
            }]
        );
        let hosts: Vec<&str> = c.ingest_regions.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(hosts, ["ingest-eu.example.com", "[2001:db8::1]"]);
        let env = Layer::from_env(env(&[
            (
                "LIVEPACK_CDN_RESOURCES",
                "7=https://a.example, 8=http://b.example:8080",
            ),
            (
                "LIVEPACK_INGEST_REGIONS",
                "eu=ingest-eu.example.com,us=10.0.0.1",
            ),
        ]))
        .unwrap();
        let c = Config::from_layer(env).unwrap();
        assert_eq!(c.cdn_resources.len(), 2);
        assert_eq!(c.cdn_resources[1].base_url, "http://b.example:8080");
        // A CDN resource whose streams all need signed playback: only with a key.
        let secure = [("LIVEPACK_CDN_RESOURCES", "7=https://a.example secure")];
        let layer = Layer::from_env(super::tests::env(&secure)).unwrap();
        assert!(Config::from_layer(layer).is_err(), "secure without a key");
        let keyed = [
            secure[0],
            ("LIVEPACK_PLAYBACK_SIGNING_KEY", "0123456789abcdef0123"),
        ];
        let k = Config::from_layer(Layer::from_env(super::tests::env(&keyed)).unwrap()).unwrap();
        assert!(k.cdn_resources[0].secure_playback);
        assert_eq!(k.cdn_resources[0].base_url, "https://a.example");
        assert_eq!(k.playback.unwrap().ttl.as_secs(), 86_400);
        let short = [("LIVEPACK_PLAYBACK_SIGNING_KEY", "short")];
        let e = Config::from_layer(Layer::from_env(super::tests::env(&short)).unwrap());
        assert!(e.is_err_and(|e| !e.to_string().contains("short")));
        assert_eq!(c.ingest_regions[1].host, "10.0.0.1");
        assert!(Layer::from_env(env_bad("LIVEPACK_CDN_RESOURCES", "https://a.example")).is_err());
        assert!(Layer::from_env(env_bad("LIVEPACK_CDN_RESOURCES", "x=https://a.example")).is_err());
        for (var, value) in [
            (
                "LIVEPACK_CDN_RESOURCES",
                "7=https://a.example,7=https://b.example",
            ),
            ("LIVEPACK_CDN_RESOURCES", "0=https://a.example"),
            ("LIVEPACK_CDN_RESOURCES", "7=ftp://a.example"),
            ("LIVEPACK_CDN_RESOURCES", "7=https://a.example/?token=1"),
            ("LIVEPACK_INGEST_REGIONS", "eu=a.example,eu=b.example"),
            ("LIVEPACK_INGEST_REGIONS", "e u=a.example"),
            ("LIVEPACK_INGEST_REGIONS", "eu=a.example:1935"),
            ("LIVEPACK_INGEST_REGIONS", "eu=http://a.example"),
        ] {
            let layer = Layer::from_env(env_bad(var, value)).unwrap();
            let err = Config::from_layer(layer)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            let key = var.trim_start_matches("LIVEPACK_").to_ascii_lowercase();
            assert!(err.contains(&key), "{value}: {err}");
        }
    }

    fn env_bad(var: &'static str, value: &'static str) -> impl Fn(&str) -> Option<String> {
        move |k| (k == var).then(|| value.to_owned())
    }

    #[test]
    fn database_url_selects_postgres_and_refuses_other_urls_without_echoing_passwords() {
        let d = Config::from_layer(Layer::default()).unwrap();
        assert!(d.database_url.is_none(), "SQLite unless told otherwise");
        for blank in ["", "  "] {
            let layer = Layer::from_env(env(&[("LIVEPACK_DATABASE_URL", blank)])).unwrap();
            assert!(Config::from_layer(layer).unwrap().database_url.is_none());
        }
        for (good, shown) in [
            (
                "postgres://livepack:pw@db.example:5433/livepack",
                "postgres://db.example:5433/livepack",
            ),
            (
                "postgresql://db.example/livepack?connect_timeout=3&password=pw",
                "postgres://db.example:5432/livepack",
            ),
            (
                "postgresql://u:pw@/livepack?host=/run/postgresql",
                "postgres:///run/postgresql/livepack",
            ),
            (
                "postgres://u:pw@[::1]:5433,10.0.0.2:5434/x",
                "postgres://[::1]:5433,10.0.0.2:5434/x",
            ),
        ] {
            let layer = Layer::from_env(env(&[("LIVEPACK_DATABASE_URL", good)])).unwrap();
            let url = Config::from_layer(layer).unwrap().database_url.unwrap();
            assert_eq!(url.redacted(), shown);
            assert!(!format!("{url:?}").contains("pw"), "{url:?}");
        }
        for bad in [
            "mysql://u:secret@db.example/x",
            "postgres://u:secret@db.example:notaport/x",
            "host=db.example password=secret",
            "sqlite:///var/lib/livepack.db",
        ] {
            let layer: Layer = toml::from_str(&format!("database_url = {bad:?}")).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(
                err.contains("database_url") && !err.contains("secret"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn node_secret_is_long_enough_and_never_echoed() {
        assert!(Config::from_layer(Layer::default())
            .unwrap()
            .node_secret
            .is_none());
        let layer = Layer::from_env(env(&[("LIVEPACK_NODE_SECRET", "tooshort-hunter2")])).unwrap();
        let err = Config::from_layer(layer).unwrap_err().to_string();
        assert!(
            err.contains("node_secret") && !err.contains("hunter2"),
            "{err}"
        );
        let good = "0123456789abcdef".repeat(2);
        let layer = Layer::from_env(env(&[("LIVEPACK_NODE_SECRET", &good)])).unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.node_secret.as_ref().map(|s| s.expose()), Some(&*good));
        assert!(!format!("{c:?}").contains(&good));
    }

    #[test]
    fn unknown_file_key_is_rejected() {
        assert!(toml::from_str::<Layer>("htp_addr = \"127.0.0.1:1\"").is_err());
    }

    #[test]
    fn public_url_must_be_http_with_host() {
        for bad in ["ftp://x", "http://", "not a url", "http://h/?q=1"] {
            let layer = Layer {
                public_url: Some(bad.into()),
                ..Layer::default()
            };
            assert!(Config::from_layer(layer).is_err(), "{bad} accepted");
        }
        let layer = Layer {
            public_url: Some("https://live.example.com/base".into()),
            ..Layer::default()
        };
        assert!(Config::from_layer(layer).is_ok());
    }

    #[test]
    fn the_publish_auth_hook_is_an_http_url_and_its_key_is_not_echoed() {
        let none = Config::from_layer(Layer::default()).unwrap();
        assert!(none.publish_auth.is_none());
        let layer = Layer::from_env(env(&[
            (
                "LIVEPACK_PUBLISH_AUTH_URL",
                "https://auth.example/check?key=s3cret",
            ),
            ("LIVEPACK_PUBLISH_AUTH_TIMEOUT_MS", "750"),
            ("LIVEPACK_PUBLISH_AUTH_CACHE_SECS", "0"),
        ]))
        .unwrap();
        let hook = Config::from_layer(layer).unwrap().publish_auth.unwrap();
        assert_eq!(hook.url.as_str(), "https://auth.example/check?key=s3cret");
        assert_eq!((hook.timeout.as_millis(), hook.cache.as_secs()), (750, 0));
        for bad in [
            "ftp://auth.example/?key=s3cret",
            "http://?key=s3cret",
            "nope key=s3cret",
        ] {
            let layer = Layer {
                publish_auth_url: Some(bad.into()),
                ..Layer::default()
            };
            let e = Config::from_layer(layer).unwrap_err().to_string();
            assert!(
                e.contains("publish_auth_url") && !e.contains("s3cret"),
                "{bad}: {e}"
            );
        }
        let layer = Layer {
            publish_auth_timeout_ms: Some(50),
            ..Layer::default()
        };
        assert!(Config::from_layer(layer).is_err());
    }

    #[test]
    fn whip_muxes_default_on_and_can_be_turned_off() {
        let d = Config::from_layer(Layer::default()).unwrap();
        assert_eq!(d.whip.udp_mux_addr, Some("0.0.0.0:8189".parse().unwrap()));
        assert_eq!(d.whip.tcp_mux_addr, Some("0.0.0.0:8189".parse().unwrap()));
        assert!(d.whip.ice_servers.is_empty() && d.whip.nat_ips.is_empty());
        let layer = Layer::from_env(env(&[
            ("LIVEPACK_WHIP_UDP_MUX_ADDR", "127.0.0.1:0"),
            ("LIVEPACK_WHIP_TCP_MUX_ADDR", "off"),
            ("LIVEPACK_WHIP_NAT_IPS", "203.0.113.7"),
            (
                "LIVEPACK_WHIP_ICE_SERVERS",
                "stun:stun.example.net:3478, turn:u:p@turn.example.net?transport=udp",
            ),
        ]))
        .unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.whip.udp_mux_addr, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(c.whip.tcp_mux_addr, None);
        assert_eq!(
            c.whip.nat_ips,
            vec!["203.0.113.7".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(c.whip.ice_servers.len(), 2);
        assert_eq!(
            c.whip.ice_servers[1].url,
            "turn:turn.example.net?transport=udp"
        );
        let file: Layer = toml::from_str("whip_udp_mux_addr = \"\"").unwrap();
        assert_eq!(Config::from_layer(file).unwrap().whip.udp_mux_addr, None);
    }

    #[test]
    fn bad_whip_ice_settings_name_their_key_and_hide_credentials() {
        for (toml_text, key) in [
            ("whip_udp_mux_addr = \"8189\"", "whip_udp_mux_addr"),
            ("whip_tcp_mux_addr = \"host:8189\"", "whip_tcp_mux_addr"),
            ("whip_nat_ips = [\"not-an-ip\"]", "whip_nat_ips"),
            ("whip_ice_servers = [\"http://x\"]", "whip_ice_servers"),
        ] {
            let layer: Layer = toml::from_str(toml_text).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
        let layer: Layer =
            toml::from_str("whip_ice_servers = [\"turn:alice:se\\\"cret@turn.example.net\"]")
                .unwrap();
        let err = Config::from_layer(layer).unwrap_err().to_string();
        assert!(
            err.contains("whip_ice_servers") && !err.contains("cret"),
            "{err}"
        );
    }

    #[test]
    fn every_setting_is_read_from_its_variable() {
        assert_eq!(setting::env_name("http_addr"), "LIVEPACK_HTTP_ADDR");
        for key in KEYS {
            let name = setting::env_name(key);
            // Numbers, addresses and flags refuse this, naming the variable; the rest take it.
            match Layer::from_env(env(&[(&name, "not a value")])) {
                Err(e) => assert!(e.to_string().contains(&name), "{e}"),
                Ok(layer) => assert!(
                    format!("{layer:?}").contains(&format!(" {key}: Some(")),
                    "{name}"
                ),
            }
        }
    }
}
