//! # livepack — live-media ingest and packaging daemon
//!
//! Layout (see `ARCHITECTURE.md` in the shared notes for the reasons):
//! - [`config`]: TOML file ← `LIVEPACK_*` environment ← flags, validated into one `Config`.
//! - [`store`]: persistence of the control-plane records behind the `Store` trait (SQLite).
//! - [`api`]: the control API over the store — streams, quality sets, FastEdge apps, security
//!   profile templates; JSON in and out, `Authorization: apikey` on every request.
//! - [`quality`]: the ABR ladders (`pipelines/quality_sets.toml`).
//! - [`ingest`]: RTMP/RTMPS, SRT and WHIP listeners, and the PULL fetcher; each turns what it
//!   receives into [`media`] messages for the [`registry`] (main/backup switch, live state).
//! - [`pipeline`]: one GStreamer pipeline per live stream (decode once, ABR ladder, CMAF + TS).
//! - `formats`: container parsers shared by ingest and package (MPEG-TS), below both.
//! - [`package`]: the segment store and the LL-HLS, LL-DASH and MPEG-TS HLS renderers.
//! - [`serve`]: media delivery over HTTP (blocking reload, chunked DASH) and the player page.
//! - [`server`]: the HTTP listener shared by the API and media delivery.
//! - [`daemon`]: wires them together and runs until shutdown.
//!
//! Media flows one way: ingest → `media` frames → one GStreamer pipeline per stream → packager →
//! HTTP delivery; ingest never imports the pipeline or the packager.
#![forbid(unsafe_code)]

pub mod config;
pub mod daemon;
pub mod db;
pub(crate) mod formats;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod ingest;
pub mod live;
pub mod media;
pub mod package;
pub mod pipeline;
pub mod quality;
