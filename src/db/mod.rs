//! Persistence of the control-plane records (streams, broadcasts, videos, FastEdge apps and
//! profile templates, overlays, source statistics, settings, the cluster's nodes and leases)
//! behind one store trait per aggregate, gathered in [`Store`]. Each aggregate's SQL is written
//! once (`streams.rs`, `videos.rs`, …) in [`SqlStore`] over one connection abstraction
//! (`conn.rs`, dialect differences in `dialect.rs`, the schema in `schema.rs`); the backends
//! only open connections: [`SqliteStore`] is the embedded default, [`PostgresStore`] the one
//! several daemons share. [`open`] picks one from the configuration (`database_url`).
//!
//! The traits are synchronous on purpose: callers run them on the blocking pool, and both
//! backends use sync clients without an async-trait layer.

mod apps;
mod broadcasts;
mod cluster;
mod codec;
mod conn;
mod dialect;
mod links;
mod overlays;
mod pg_tls;
pub mod postgres;
mod restreams;
mod schema;
mod settings;
pub mod sqlite;
mod stats;
mod streams;
#[cfg(test)]
mod tests;
mod videos;
mod webhooks;

use std::path::Path;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

pub use self::apps::AppStore;
pub use self::broadcasts::BroadcastStore;
pub use self::cluster::ClusterStore;
pub use self::overlays::OverlayStore;
pub use self::postgres::{DatabaseUrl, PostgresStore};
pub use self::restreams::{RestreamRow, RestreamSpec, RestreamStore};
pub use self::settings::SettingStore;
pub use self::sqlite::SqliteStore;
pub use self::stats::{Backlog, StatsStore};
pub use self::streams::StreamStore;
pub use self::videos::VideoStore;
pub use self::webhooks::{
    Attempt, DeliveryRow, DeliveryStatus, DueDelivery, OutboxEvent, WebhookRow, WebhookSpec,
    WebhookStore,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("PostgreSQL: {}", postgres_detail(.0))]
    Postgres(#[from] ::postgres::Error),
    #[error("invalid PostgreSQL URL: {0}")]
    BadUrl(String),
    #[error("PostgreSQL TLS (sslmode, sslrootcert in database_url): {0}")]
    Tls(#[from] pg_tls::PgTlsError),
    #[error("stored record {kind} {id} is corrupt: {reason}")]
    Corrupt {
        kind: &'static str,
        id: i64,
        reason: String,
    },
    #[error("cannot prepare data dir {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The thread running a store call ended without its answer (it panicked).
    #[error("a store call did not complete")]
    Interrupted,
    /// A row changed hands between every read and write of several rounds; nothing was written.
    #[error("{what} kept changing hands; try again")]
    Contended { what: String },
    #[error("database schema version {found} is newer than this build knows ({known})")]
    SchemaTooNew { found: i64, known: i64 },
    /// A write names a record that does not exist (checked in the write's transaction, so a
    /// concurrent delete cannot slip in between); nothing was written.
    #[error("{kind} {id} does not exist")]
    UnknownReference {
        /// The field that names it (`broadcast_ids`, `stream_ids`).
        field: &'static str,
        kind: &'static str,
        id: i64,
    },
}

/// `postgres::Error` displays only its kind ("db error"); what the server said is its source.
fn postgres_detail(e: &::postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
    }
    let text = match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    };
    // "error performing TLS handshake: invalid peer certificate: UnknownIssuer" says what
    // failed, not which settings decide it.
    if text.contains("TLS") {
        return format!("{text} (sslmode, sslrootcert in database_url)");
    }
    text
}

/// Opens the configured store: PostgreSQL at `url`, else (the zero-setup default) SQLite in
/// `data_dir`. Blocking: call it off the async workers.
pub fn open(url: Option<&DatabaseUrl>, data_dir: &Path) -> Result<Box<dyn Store>, StoreError> {
    let store = open_backend(url, data_dir)?;
    let folded = store.fold_missing_names()?;
    if folded > 0 {
        tracing::info!(streams = folded, "stream names folded for search");
    }
    Ok(store)
}

fn open_backend(url: Option<&DatabaseUrl>, data_dir: &Path) -> Result<Box<dyn Store>, StoreError> {
    match url {
        Some(url) => {
            let store = PostgresStore::connect(&url.0)?;
            tracing::info!(db = %url.redacted(), "store opened (PostgreSQL)");
            Ok(Box::new(store))
        }
        None => {
            let store = SqliteStore::open_in(data_dir)?;
            tracing::info!(db = %store.path().display(), "store opened");
            Ok(Box::new(store))
        }
    }
}

/// Outcome of a compare-and-set update: the caller re-reads and re-applies on `Stale`.
#[derive(Debug)]
pub enum Update<T> {
    Done(T),
    NotFound,
    /// Another writer changed the record since `revision` was read.
    Stale,
    /// A unique name is already taken by another record.
    NameTaken,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordType {
    Origin,
    Transcoded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Projection {
    Regular,
    Vr360,
    Vr180,
    Vr360tb,
}

pub const DEFAULT_DVR_DURATION_SECS: u32 = 14_400;

/// The writable part of a stream record, stored as one JSON document so that adding a field
/// needs no table migration (missing keys take their serde default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamSettings {
    pub name: String,
    pub active: bool,
    pub pull: bool,
    pub uri: Option<String>,
    pub auto_record: bool,
    pub dvr_enabled: bool,
    pub record_type: RecordType,
    pub hls_mpegts_endlist_tag: bool,
    pub dvr_duration: u32,
    pub cdn_id: Option<i64>,
    /// Kept as the JSON number the client sent, so 64-bit ids round-trip exactly.
    pub client_user_id: Option<serde_json::Number>,
    pub client_entity_data: Option<String>,
    pub html_overlay: bool,
    pub quality_set_id: Option<i64>,
    /// The broadcasts this stream belongs to, ascending. Kept in the `broadcast_streams` link
    /// table, not in the settings document: the link is one fact, also read as a broadcast's
    /// `stream_ids`, so it is stored once.
    pub broadcast_ids: Vec<i64>,
    pub projection: Projection,
    /// SRT encryption passphrase; when set, SRT publishers must use it.
    pub srt_passphrase: Option<String>,
    /// Every playback URL needs a token signed with the daemon's playback key.
    pub secure_playback: bool,
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            name: String::new(),
            active: true,
            pull: false,
            uri: None,
            auto_record: false,
            dvr_enabled: false,
            record_type: RecordType::Origin,
            hls_mpegts_endlist_tag: true,
            dvr_duration: DEFAULT_DVR_DURATION_SECS,
            cdn_id: None,
            client_user_id: None,
            client_entity_data: None,
            html_overlay: false,
            quality_set_id: None,
            broadcast_ids: Vec::new(),
            projection: Projection::Regular,
            srt_passphrase: None,
            secure_playback: false,
        }
    }
}

/// A stream as stored: settings plus what the daemon owns (id, token, timestamps).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRow {
    pub id: i64,
    pub revision: i64,
    pub token: String,
    pub created_at: OffsetDateTime,
    pub started_at_primary: Option<OffsetDateTime>,
    pub started_at_backup: Option<OffsetDateTime>,
    pub finished_at_primary: Option<OffsetDateTime>,
    pub settings: StreamSettings,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApiType {
    #[serde(rename = "wasi-http")]
    WasiHttp,
    #[serde(rename = "proxy-wasm")]
    ProxyWasm,
}

impl ApiType {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiType::WasiHttp => "wasi-http",
            ApiType::ProxyWasm => "proxy-wasm",
        }
    }
}

/// The writable part of a FastEdge app record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppSettings {
    pub name: String,
    pub status: u8,
    pub binary: Option<i64>,
    pub comment: String,
    pub api_type: ApiType,
    pub debug_until: Option<String>,
    pub template: Option<i64>,
    pub template_name: Option<String>,
    pub networks: Vec<String>,
    pub upgradeable_to: Option<i64>,
    pub plan_id: i64,
    pub plan: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AppRow {
    pub id: i64,
    pub revision: i64,
    pub settings: AppSettings,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppOrderKey {
    Name,
    Status,
    Id,
    Template,
    Binary,
    Plan,
}

#[derive(Debug, Clone, Default)]
pub struct AppFilter {
    /// Matched case-insensitively as a substring (Unicode lower-casing).
    pub name: Option<String>,
    pub api_type: Option<ApiType>,
    pub status: Option<u8>,
    pub template: Option<i64>,
    pub binary: Option<i64>,
    pub plan: Option<i64>,
    pub order: Option<(AppOrderKey, bool)>,
    pub limit: u32,
    pub offset: u64,
}

/// A security profile template, kept exactly in the shape the API returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileTemplate {
    pub id: i64,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub fields: Vec<ProfileTemplateField>,
    #[serde(default)]
    pub base_template: Option<i64>,
    pub version: String,
    pub created: String,
    #[serde(default)]
    pub template_sifter: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileTemplateField {
    pub id: i64,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub field_type: String,
    pub required: bool,
    #[serde(default)]
    pub default: Option<String>,
    #[serde(default)]
    pub validation_schema: serde_json::Value,
}

/// Where a video is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VideoStatus {
    /// Recording, or being finalised.
    Pending,
    Ready,
    Error,
    /// Finished and playing from the recording node's disk while its files go to the object
    /// store (`storage_url`).
    Uploading,
    /// Finished and playing from the recording node's disk; the object store failed and the
    /// upload is tried again.
    UploadFailed,
}

impl VideoStatus {
    pub const ALL: [VideoStatus; 5] = [
        VideoStatus::Pending,
        VideoStatus::Ready,
        VideoStatus::Error,
        VideoStatus::Uploading,
        VideoStatus::UploadFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VideoStatus::Pending => "pending",
            VideoStatus::Ready => "ready",
            VideoStatus::Error => "error",
            VideoStatus::Uploading => "uploading",
            VideoStatus::UploadFailed => "upload_failed",
        }
    }

    pub fn parse(s: &str) -> Option<VideoStatus> {
        VideoStatus::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Its files can be played (from the recording node's disk or the object store).
    pub fn playable(self) -> bool {
        matches!(
            self,
            VideoStatus::Ready | VideoStatus::Uploading | VideoStatus::UploadFailed
        )
    }
}

/// The fields of a video its owner edits (the API's PATCH).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VideoSettings {
    pub name: String,
    pub description: String,
    pub client_user_id: Option<serde_json::Number>,
}

/// One rendition of a recorded video (a rung, or the source for `origin`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoRendition {
    pub name: String,
    pub width: u32,
    pub height: u32,
    pub size: u64,
}

/// The fields the recorder owns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoState {
    pub record_type: RecordType,
    pub status: VideoStatus,
    /// Why it is `error`, or a note on a `ready` video (closed by a full disk or the quota).
    pub error: Option<String>,
    pub duration_ms: u64,
    pub size: u64,
    pub renditions: Vec<VideoRendition>,
    /// `screenshot.jpg` is in the video's directory.
    #[serde(default)]
    pub screenshot: bool,
    /// `origin.mp4` (the single audio+video download of an origin recording) is there.
    #[serde(default)]
    pub download: bool,
    /// The node whose disk holds the files (daemons sharing a store); `None`: recorded before
    /// nodes were named, by the only node there was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Its stream had `secure_playback` when it was recorded: its files need a token even if
    /// the stream changes or goes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secure_playback: bool,
    /// Its files are in the object store (`storage_url`): every node serves them from there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stored: bool,
    /// Why its last upload failed (`upload_failed`); gone once uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_error: Option<String>,
}

impl VideoState {
    /// A video being recorded: nothing written yet.
    pub fn pending(record_type: RecordType) -> VideoState {
        VideoState {
            record_type,
            status: VideoStatus::Pending,
            error: None,
            duration_ms: 0,
            size: 0,
            renditions: Vec::new(),
            screenshot: false,
            download: false,
            node: None,
            secure_playback: false,
            stored: false,
            upload_error: None,
        }
    }
}

/// Where a broadcast is in its life; it decides what its player page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BroadcastStatus {
    Pending,
    Live,
    Paused,
    Finished,
}

/// The writable part of a broadcast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BroadcastSettings {
    pub name: String,
    pub status: BroadcastStatus,
    /// Its streams, ascending; stored in the `broadcast_streams` link table (see
    /// [`StreamSettings::broadcast_ids`]), never in the settings document.
    pub stream_ids: Vec<i64>,
    pub show_dvr_after_finish: bool,
    pub pending_message: Option<String>,
    pub poster: Option<String>,
    pub share_url: Option<String>,
    pub custom_iframe_url: Option<String>,
}

impl Default for BroadcastSettings {
    fn default() -> Self {
        BroadcastSettings {
            name: String::new(),
            status: BroadcastStatus::Pending,
            stream_ids: Vec::new(),
            show_dvr_after_finish: false,
            pending_message: None,
            poster: None,
            share_url: None,
            custom_iframe_url: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BroadcastRow {
    pub id: i64,
    pub revision: i64,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub settings: BroadcastSettings,
}

/// An HTML overlay of a stream as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct OverlayRow {
    pub id: i64,
    pub stream_id: i64,
    pub spec: crate::overlay::OverlaySpec,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// What the source of a stream looked like over one sampling window, as received (after the
/// main/backup switch): the figures behind `GET /streaming/statistics/ffprobe`.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSample {
    /// Start of the window.
    pub time: OffsetDateTime,
    /// Video bitrate, kbit/s.
    pub bitrate_kbps: f64,
    /// Video frames received.
    pub frames: u64,
    /// Video height (0: no video).
    pub height: u32,
    pub fps: f64,
    /// Longest keyframe interval seen, seconds (0: not known yet).
    pub keyframe_interval: f64,
    /// What the outputs did at the window's end: frames dropped since the stream began on its
    /// node, the transcoding speed (`None`: not transcoding), viewers of every output.
    pub frames_dropped: u64,
    pub transcoding_speed: Option<f64>,
    pub viewers: u64,
}

/// Samples of one stream aggregated over one time bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceBucket {
    /// Start of the bucket, ms since the epoch.
    pub time_ms: i64,
    /// Samples in the bucket (weights for merging buckets).
    pub samples: u64,
    pub avg_bitrate_kbps: f64,
    pub sum_frames: u64,
    pub max_height: u32,
    pub max_fps: f64,
    pub max_keyframe_interval: f64,
    pub max_frames_dropped: u64,
    /// Over the samples that had one (`None`: none did).
    pub avg_transcoding_speed: Option<f64>,
    pub max_viewers: u64,
}

/// A recorded video as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoRow {
    pub id: i64,
    pub revision: i64,
    pub stream_id: i64,
    /// Unguessable part of its media URLs (ids are sequential).
    pub slug: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub recording_started_at: OffsetDateTime,
    pub settings: VideoSettings,
    pub state: VideoState,
}

#[derive(Debug, Clone, Default)]
pub struct VideoFilter {
    pub stream_id: Option<i64>,
    pub status: Option<VideoStatus>,
    /// Substring of the name, case-insensitive (Unicode lower-casing).
    pub search: Option<String>,
    pub client_user_id: Option<serde_json::Number>,
    /// Made before this instant (retention).
    pub created_before: Option<OffsetDateTime>,
    pub limit: u32,
    pub offset: u64,
}

/// One daemon of a cluster as its heartbeats describe it (`cluster`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    pub id: String,
    /// Where the other nodes reach it (relayed requests).
    pub url: String,
    pub started_at: OffsetDateTime,
    /// Since its last heartbeat, by the store's clock.
    pub silent: std::time::Duration,
    /// Its spare transcoding capacity at that heartbeat, ‰ ([`crate::capacity`]); `None`:
    /// not known (a node without the check, or of an older version).
    pub headroom: Option<i64>,
}

/// What a node's heartbeat says about itself.
#[derive(Debug, Clone)]
pub struct NodeBeat<'a> {
    pub id: &'a str,
    pub url: &'a str,
    pub started_at: OffsetDateTime,
    /// Spare transcoding capacity now, ‰.
    pub headroom: Option<i64>,
}

/// The state a node writes on a lease it holds at each heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    pub stream_id: i64,
    /// A publisher (or the PULL fetcher) feeds the stream now; `false` in the grace period.
    pub publishing: bool,
    /// The stream's live status as the API shows it (JSON, written and read by `cluster`).
    pub status: String,
    /// Where the stream's numbering goes on (`stream_numbering`), when it is to be written.
    pub numbering: Option<crate::package::Numbering>,
}

/// Who serves a live stream: the node that took its lease on accepting the publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub stream_id: i64,
    pub node_id: String,
    /// The holder's URL (empty when the holder never sent a heartbeat).
    pub node_url: String,
    pub publishing: bool,
    pub status: String,
}

/// How [`ClusterStore::take_lease`] may take a lease another node holds.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTake {
    /// A holder silent this long is dead: its leases are free.
    pub dead_after: std::time::Duration,
    /// A holder that no longer publishes the stream (grace period) gives it up.
    pub from_idle: bool,
}

/// Everything the control plane persists, one trait per aggregate. Every mutating call is
/// atomic and durable when it returns `Ok`: the API acknowledges a write only after this.
pub trait Store:
    StreamStore
    + BroadcastStore
    + VideoStore
    + AppStore
    + OverlayStore
    + StatsStore
    + SettingStore
    + ClusterStore
    + WebhookStore
    + RestreamStore
    + Send
    + Sync
    + 'static
{
}

impl<T> Store for T where
    T: StreamStore
        + BroadcastStore
        + VideoStore
        + AppStore
        + OverlayStore
        + StatsStore
        + SettingStore
        + ClusterStore
        + WebhookStore
        + RestreamStore
        + Send
        + Sync
        + 'static
{
}

/// The one implementation of every aggregate's store: its SQL, written once, run on either
/// backend's connections ([`sqlite::Sqlite`], [`postgres::Postgres`]).
pub struct SqlStore<B> {
    backend: B,
}

impl<B> SqlStore<B> {
    fn new(backend: B) -> SqlStore<B> {
        SqlStore { backend }
    }

    fn backend(&self) -> &B {
        &self.backend
    }
}
