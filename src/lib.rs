//! # livepack — live-media ingest and packaging daemon
//!
//! # Layout
//! Data flows one way (see `ARCHITECTURE.md` in the shared notes for the reasons):
//!
//! ```text
//! ingest::{rtmp,srt,whip,pull} ─► media ─► live ─► hub (per stream: Source feed)
//!                                 (frames)  (sessions,  │ readers: pipeline, [restream origin]
//!                                            switch)    ▼
//!   pipeline (GStreamer: decode, ladder, encode)
//!        └─ taps: each rung's H.264, AAC, on-demand Opus ─► hub (Video/Audio/Opus feeds)
//!              readers: package (cmafmux per rendition → sink API → state, storage ─► http::delivery),
//!                       [WHEP, SRT read, rung restreams]
//! events: live, record, api, pull, overlays emit ─► record, overlays, webhooks follow
//! http::api ─► db (one query layer, per-aggregate stores) ; live ◄─ http::api (status, kick)
//! ```
//!
//! - [`config`]: TOML file ← `LIVEPACK_*` environment ← flags, validated into one `Config`.
//! - `db`: persistence of the control-plane records: per-aggregate store traits (streams,
//!   broadcasts, videos, apps, overlays, statistics, settings, cluster, webhooks with their
//!   outbox; `Store` is all of them)
//!   implemented once as SQL over a small connection abstraction (`conn`, `dialect`,
//!   `schema`), on SQLite by default or PostgreSQL, which several daemons can share.
//! - `events`: the domain events — one typed stream (publish, live, switch, recording, video,
//!   stream record, overlay) of plain data; producers emit, consumers subscribe.
//! - `hub`: per stream, the fan-out of its media to readers — the switched source, each rung's
//!   encoded video, the AAC, the Opus encoded only while read — with a bounded queue per
//!   reader, header replay for late readers, whether a feed is read, and keyframe requests to
//!   the encoders.
//! - `cluster`: this daemon as one node of several on one store — heartbeat, the leases on
//!   the streams it serves (refusals elsewhere), the live state other nodes wrote, and how
//!   nodes vouch for the requests they relay (`cluster::node_auth`).
//! - `media`: frames, tracks and codec configs — the only types that cross from ingest to the
//!   pipeline; the timestamp unwrap (`timeline`) and the one re-timer (`retime`).
//! - `formats`: container parsers shared by ingest and package (MPEG-TS), and the MPEG-TS
//!   writer of the real-time readers.
//! - `ingest`: RTMP/RTMPS, SRT and WHIP listeners and the PULL fetcher; each turns what it
//!   receives into `media` messages for `live`. Never imports `pipeline` or `package`.
//!   `ingest::listeners` is the daemon's ingest part: every port bound, then served. Each PULL
//!   source is fetched by GStreamer in a process of its own ([`pull_source`]), killed to stop.
//! - `live`: who publishes what — the sessions table and slots, publish permits, the input
//!   switch, the grace lifecycle, the record-change feed, live status and counters. Gets its
//!   pipelines from a `PipelineFactory`; imports neither `pipeline` nor `http`.
//! - `pipeline`: one GStreamer pipeline per session, the first reader of the hub's source
//!   (decode once, ABR ladder, CMAF + TS, screenshots): `plan` (pure), `elements`, `build`,
//!   `taps` (the encoded rungs back into the hub), `package_reader` (the package as one
//!   reader of each rendition's feed, muxing it to CMAF); it writes only through the
//!   package's sink API.
//! - `realtime`: hub readers that send a stream as it is encoded — WHEP viewers (`whep`:
//!   signalling, the send-only peer connection on WHIP's ICE ports, RFC 6184 packetizer, the
//!   sending session) and SRT readers (`play:{id}` on the SRT port, MPEG-TS of a rung or of
//!   the source).
//! - `egress`: restreams — a live stream sent on to other servers (RTMP/RTMPS through our FLV
//!   writer on rml_rtmp's client session, SRT through srt-tokio and the MPEG-TS writer), the
//!   target as the URL policy reads it, one task per restream reconnecting with backoff, and
//!   the manager that runs a stream's restreams on the node serving it.
//! - [`package`]: the sink API, the per-stream state (renditions, segments, parts), segment
//!   storage (disk, memory) with its writer thread, and the LL-HLS, LL-DASH and MPEG-TS HLS
//!   renderers (read-only views).
//! - [`http`]: the daemon's edge — the listener shared by every server, the HTTP part
//!   (`http::server`: bound, then served), the router, the one JSON error shape
//!   (`http::error`), CORS (`http::cors`), body limits ([`http::body`]), the relay to the node
//!   serving a stream (`http::relay`, a reverse proxy; `cluster` says which node that is), the
//!   control API (`http::api`) and media delivery ([`http::delivery`]: blocking reload, chunked
//!   DASH, the player page, metrics).
//! - `url_policy`: the one policy for outbound URLs (schemes per use, host rules, the DNS
//!   guard), the one outbound HTTP client builder that checks every hop (`url_policy::client`:
//!   overlay pages, PULL's gateway, the relay, webhooks) and the one redaction helper for logs.
//! - `webhooks`: the live facts of the events bus written to the outbox (record changes are
//!   written there by `db` in their own transactions) and the outbox delivered — signed
//!   (`webhooks::sign`), in order per stream, retried for a day, once across the nodes.
//! - `broadcast`: spectator counting for broadcasts' player pages (records in `db`, API in
//!   `http::api::broadcasts`, page in `http::delivery::player`).
//! - `storage`: videos on S3-compatible object storage (`storage_url`): the client, uploads
//!   checked against the local files, ranged reads, deletion; `record::upload` moves finished
//!   recordings there.
//! - `quality`: the ABR ladders (`pipelines/quality_sets.toml`). `secret`: constant-time
//!   comparison of tokens and keys. `data_dir`: the data directory the owner's only (0700,
//!   files 0600, looser ones tightened at start).
//! - [`admission`]: who may connect — the file budget, per-listener and per-address caps
//!   (stated by [`config::Config::admission`]), trusted proxies.
//! - `capacity`: whether the node takes one more transcode (a count, its CPU, its running
//!   transcodes' speed), and the overload policy for a publish that finds it full.
//! - [`daemon`]: assembles the parts, each built by its own constructor (the store, the
//!   registry with its GStreamer pipeline factory, the cluster, the recorder, ingest, HTTP),
//!   and runs until shutdown.
//! - `shutdown`: the stop as the listeners see it — refusing newcomers and telling publishers,
//!   then closed.
//! - [`service_notify`]: the service manager's readiness protocol (systemd `Type=notify`).
//! - `tls`: the listeners' TLS configuration (RTMPS, HTTPS), configured or self-signed.
//! - `tasks`: the set of tasks a subsystem owns, and its bounded drain at the stop.
//!
//! Modules are `pub(crate)` unless a bench, test or fuzz target needs them, so rustc reports
//! dead code.
#![forbid(unsafe_code)]

pub mod admission;
#[doc(hidden)]
pub mod benching;
pub(crate) mod broadcast;
pub(crate) mod capacity;
pub(crate) mod cluster;
pub mod config;
pub mod daemon;
pub(crate) mod data_dir;
pub(crate) mod db;
pub(crate) mod egress;
pub(crate) mod events;
pub(crate) mod formats;
#[doc(hidden)]
pub mod fuzzing;
pub mod heap;
pub mod http;
pub(crate) mod hub;
pub(crate) mod ingest;
pub(crate) mod live;
pub mod logging;
pub(crate) mod media;
pub(crate) mod overlay;
pub mod package;
pub mod page_proxy;
pub(crate) mod pipeline;
pub(crate) mod playback_auth;
pub(crate) mod quality;
pub(crate) mod realtime;
pub(crate) mod record;
pub(crate) mod secret;
pub mod service_notify;
pub(crate) mod shutdown;
pub(crate) mod storage;
pub(crate) mod tasks;
pub(crate) mod tls;
pub(crate) mod url_policy;
pub(crate) mod webhooks;

/// A PULL source's process (`livepack pull-source`, started by the daemon): the binary's entry
/// into `ingest::pull::source`.
#[doc(hidden)]
pub mod pull_source {
    pub use crate::ingest::pull::source::{run_child as run, COMMAND};
}

/// The ladder's scaler element, for its bench (`benches/scale.rs`) against GStreamer's.
#[doc(hidden)]
pub mod scaler {
    pub use crate::pipeline::init;
    pub use crate::pipeline::scale::FACTORY;
}
