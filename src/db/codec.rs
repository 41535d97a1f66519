//! How records are stored: millisecond timestamps, JSON documents (with the broadcast–stream
//! link kept out of them), the folded names searches compare, and rows turned into records.
//! Inputs: rows of the `*_COLUMNS` lists; outputs: records or [`StoreError::Corrupt`].

use time::OffsetDateTime;

use super::conn::Row;
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

pub(super) const STREAM_COLUMNS: &str = "id, revision, token, created_at_ms, \
     started_at_primary_ms, started_at_backup_ms, finished_at_primary_ms, settings";

/// A stream record from a row of [`STREAM_COLUMNS`] then its links (`broadcast_ids`).
pub(super) fn stream_from_row(r: &Row) -> Result<StreamRow, StoreError> {
    let id = r.i64(0)?;
    let mut row = StreamRow {
        id,
        revision: r.i64(1)?,
        token: r.string(2)?,
        created_at: from_ms("stream", id, r.i64(3)?)?,
        started_at_primary: opt_from_ms(id, r.opt_i64(4)?)?,
        started_at_backup: opt_from_ms(id, r.opt_i64(5)?)?,
        finished_at_primary: opt_from_ms(id, r.opt_i64(6)?)?,
        settings: from_json("stream", id, &r.string(7)?)?,
    };
    row.settings.broadcast_ids = r.ids(8)?;
    Ok(row)
}

pub(super) const BROADCAST_COLUMNS: &str = "id, revision, created_at_ms, updated_at_ms, settings";

/// A broadcast record from a row of [`BROADCAST_COLUMNS`] then its links (`stream_ids`).
pub(super) fn broadcast_from_row(r: &Row) -> Result<BroadcastRow, StoreError> {
    let id = r.i64(0)?;
    let mut settings: super::BroadcastSettings = from_json("broadcast", id, &r.string(4)?)?;
    settings.stream_ids = r.ids(5)?;
    Ok(BroadcastRow {
        id,
        revision: r.i64(1)?,
        created_at: from_ms("broadcast", id, r.i64(2)?)?,
        updated_at: from_ms("broadcast", id, r.i64(3)?)?,
        settings,
    })
}

pub(super) const VIDEO_COLUMNS: &str = "id, revision, stream_id, slug, created_at_ms, \
     updated_at_ms, started_at_ms, settings, state";

/// A video record from a row of [`VIDEO_COLUMNS`].
pub(super) fn video_from_row(r: &Row) -> Result<VideoRow, StoreError> {
    let id = r.i64(0)?;
    Ok(VideoRow {
        id,
        revision: r.i64(1)?,
        stream_id: r.i64(2)?,
        slug: r.string(3)?,
        created_at: from_ms("video", id, r.i64(4)?)?,
        updated_at: from_ms("video", id, r.i64(5)?)?,
        recording_started_at: from_ms("video", id, r.i64(6)?)?,
        settings: from_json("video", id, &r.string(7)?)?,
        state: from_json("video", id, &r.string(8)?)?,
    })
}

pub(super) const APP_COLUMNS: &str = "id, revision, settings";

/// An app record from a row of [`APP_COLUMNS`].
pub(super) fn app_from_row(r: &Row) -> Result<AppRow, StoreError> {
    let id = r.i64(0)?;
    Ok(AppRow {
        id,
        revision: r.i64(1)?,
        settings: from_json("app", id, &r.string(2)?)?,
    })
}

pub(super) const OVERLAY_COLUMNS: &str = "id, stream_id, created_at_ms, updated_at_ms, spec";

/// An overlay record from a row of [`OVERLAY_COLUMNS`].
pub(super) fn overlay_from_row(r: &Row) -> Result<OverlayRow, StoreError> {
    let id = r.i64(0)?;
    Ok(OverlayRow {
        id,
        stream_id: r.i64(1)?,
        spec: from_json("overlay", id, &r.string(4)?)?,
        created_at: from_ms("overlay", id, r.i64(2)?)?,
        updated_at: from_ms("overlay", id, r.i64(3)?)?,
    })
}
