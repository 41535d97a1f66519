//! What every backend stores the same way: millisecond timestamps, JSON documents (with the
//! broadcast–stream link kept out of them), the folded names searches compare, and the raw
//! column tuples turned into records. Inputs: column values; outputs: records or
//! [`StoreError::Corrupt`]. No SQL here: each backend reads its own rows into these tuples.

use time::OffsetDateTime;

use super::{AppRow, BroadcastRow, OverlayRow, StoreError, StreamRow, VideoRow};

pub(super) fn to_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

pub(super) fn from_ms(kind: &'static str, id: i64, ms: i64) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).map_err(|e| {
        StoreError::Corrupt {
            kind,
            id,
            reason: e.to_string(),
        }
    })
}

fn opt_from_ms(id: i64, ms: Option<i64>) -> Result<Option<OffsetDateTime>, StoreError> {
    ms.map(|ms| from_ms("stream", id, ms)).transpose()
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(
    kind: &'static str,
    id: i64,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        kind,
        id,
        reason: e.to_string(),
    })
}

pub(super) fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("record types always serialize")
}

/// A settings document without its link field: the link table holds that (one fact, one
/// place).
pub(super) fn doc_without<T: serde::Serialize>(value: &T, link_field: &str) -> String {
    let mut doc = serde_json::to_value(value).expect("record types always serialize");
    if let Some(map) = doc.as_object_mut() {
        map.remove(link_field);
    }
    doc.to_string()
}

/// Unicode-aware folding done here rather than by the database (SQLite's `lower()` is
/// ASCII-only, PostgreSQL's depends on the database's locale), so both backends match alike.
pub(super) fn fold(name: &str) -> String {
    name.to_lowercase()
}

/// The client id as the filter compares it: the JSON number's text.
pub(super) fn client_key(n: &Option<serde_json::Number>) -> Option<String> {
    n.as_ref().map(ToString::to_string)
}

/// Which end of a broadcast–stream link a record is.
#[derive(Clone, Copy)]
pub(super) enum Side {
    Stream,
    Broadcast,
}

/// The names a link query needs, seen from one side.
pub(super) struct SideNames {
    /// This side's column in `broadcast_streams`.
    pub this: &'static str,
    /// The other side's column.
    pub other: &'static str,
    /// The other side's table.
    pub other_table: &'static str,
    /// The field of this side's settings that names the other side.
    pub field: &'static str,
    /// The other side's kind, for errors.
    pub kind: &'static str,
}

impl Side {
    pub(super) fn names(self) -> SideNames {
        match self {
            Side::Stream => SideNames {
                this: "stream_id",
                other: "broadcast_id",
                other_table: "broadcasts",
                field: "broadcast_ids",
                kind: "broadcast",
            },
            Side::Broadcast => SideNames {
                this: "broadcast_id",
                other: "stream_id",
                other_table: "streams",
                field: "stream_ids",
                kind: "stream",
            },
        }
    }
}

/// The ids of `wanted` as a set: ascending, without repeats.
pub(super) fn id_set(wanted: &[i64]) -> Vec<i64> {
    let mut wanted = wanted.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    wanted
}

/// The records on the other side whose links change going from `current` to `wanted`.
pub(super) fn touched(current: &[i64], wanted: &[i64]) -> Vec<i64> {
    current
        .iter()
        .filter(|c| !wanted.contains(c))
        .chain(wanted.iter().filter(|w| !current.contains(w)))
        .copied()
        .collect()
}

pub(super) const STREAM_COLUMNS: &str = "id, revision, token, created_at_ms, \
     started_at_primary_ms, started_at_backup_ms, finished_at_primary_ms, settings";

/// A `streams` row in [`STREAM_COLUMNS`] order.
pub(super) type RawStream = (
    i64,
    i64,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    String,
);

/// A stream record from its row and its links (`broadcast_ids`, ascending).
pub(super) fn stream_from_raw(raw: RawStream, links: Vec<i64>) -> Result<StreamRow, StoreError> {
    let (id, revision, token, created, started_p, started_b, finished_p, settings) = raw;
    let mut row = StreamRow {
        id,
        revision,
        token,
        created_at: from_ms("stream", id, created)?,
        started_at_primary: opt_from_ms(id, started_p)?,
        started_at_backup: opt_from_ms(id, started_b)?,
        finished_at_primary: opt_from_ms(id, finished_p)?,
        settings: from_json("stream", id, &settings)?,
    };
    row.settings.broadcast_ids = links;
    Ok(row)
}

pub(super) const BROADCAST_COLUMNS: &str = "id, revision, created_at_ms, updated_at_ms, settings";

/// A `broadcasts` row in [`BROADCAST_COLUMNS`] order.
pub(super) type RawBroadcast = (i64, i64, i64, i64, String);

/// A broadcast record from its row and its links (`stream_ids`, ascending).
pub(super) fn broadcast_from_raw(
    raw: RawBroadcast,
    links: Vec<i64>,
) -> Result<BroadcastRow, StoreError> {
    let (id, revision, created, updated, settings) = raw;
    let mut settings: super::BroadcastSettings = from_json("broadcast", id, &settings)?;
    settings.stream_ids = links;
    Ok(BroadcastRow {
        id,
        revision,
        created_at: from_ms("broadcast", id, created)?,
        updated_at: from_ms("broadcast", id, updated)?,
        settings,
    })
}

pub(super) const VIDEO_COLUMNS: &str = "id, revision, stream_id, slug, created_at_ms, \
     updated_at_ms, started_at_ms, settings, state";

/// A `videos` row in [`VIDEO_COLUMNS`] order.
pub(super) type RawVideo = (i64, i64, i64, String, i64, i64, i64, String, String);

pub(super) fn video_from_raw(raw: RawVideo) -> Result<VideoRow, StoreError> {
    let (id, revision, stream_id, slug, created, updated, started, settings, state) = raw;
    Ok(VideoRow {
        id,
        revision,
        stream_id,
        slug,
        created_at: from_ms("video", id, created)?,
        updated_at: from_ms("video", id, updated)?,
        recording_started_at: from_ms("video", id, started)?,
        settings: from_json("video", id, &settings)?,
        state: from_json("video", id, &state)?,
    })
}

pub(super) const APP_COLUMNS: &str = "id, revision, settings";

pub(super) fn app_from_raw(
    (id, revision, settings): (i64, i64, String),
) -> Result<AppRow, StoreError> {
    Ok(AppRow {
        id,
        revision,
        settings: from_json("app", id, &settings)?,
    })
}

pub(super) const OVERLAY_COLUMNS: &str = "id, created_at_ms, updated_at_ms, spec";

pub(super) fn overlay_from_raw(
    stream_id: i64,
    (id, created, updated, spec): (i64, i64, i64, String),
) -> Result<OverlayRow, StoreError> {
    Ok(OverlayRow {
        id,
        stream_id,
        spec: from_json("overlay", id, &spec)?,
        created_at: from_ms("overlay", id, created)?,
        updated_at: from_ms("overlay", id, updated)?,
    })
}
