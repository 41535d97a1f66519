//! The settings table: every setting once — its file key, type, doc, built-in default and
//! check — from which [`setting::settings!`](super::setting) makes the file/env layer, the
//! checked values, and the reference the book and the package print.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::setting::default_addr;
use super::{http, ingest, packaging, CdnResource, IngestRegion};
use crate::ingest::{pull, rtmp, srt, whip};

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
    /// How the log on stderr is written: `text` (lines for a terminal or journald) or `json` (one
    /// object per line: `timestamp`, `level`, `target`, `message` and the event's fields such as
    /// `stream`, for Loki or Elasticsearch). `RUST_LOG` filters either.
    log_format: String = "text".to_owned();

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
