//! The embedded default [`Store`]: one SQLite file in the data dir, WAL journal, versioned
//! migrations, `synchronous=FULL` so an acknowledged write survives `kill -9` and power loss.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{params, Connection, OptionalExtension, Row};
use time::OffsetDateTime;

use super::{
    AppFilter, AppOrderKey, AppRow, AppSettings, BroadcastRow, BroadcastSettings, OverlayRow,
    ProfileTemplate, SourceBucket, SourceSample, Store, StoreError, StreamRow, StreamSettings,
    Update, VideoFilter, VideoRow, VideoSettings, VideoState, VideoStatus,
};

pub const DB_FILE_NAME: &str = "livepack.db";

/// Each entry moves the schema from version `index` to `index + 1` (stored in `user_version`).
/// Append only: a shipped migration is never edited.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE streams (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    revision INTEGER NOT NULL,
    token TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    started_at_primary_ms INTEGER,
    started_at_backup_ms INTEGER,
    finished_at_primary_ms INTEGER,
    settings TEXT NOT NULL
);
CREATE TABLE apps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    revision INTEGER NOT NULL,
    name TEXT NOT NULL UNIQUE,
    name_folded TEXT NOT NULL,
    status INTEGER NOT NULL,
    api_type TEXT NOT NULL,
    template INTEGER,
    binary INTEGER,
    plan_id INTEGER NOT NULL,
    plan TEXT NOT NULL,
    settings TEXT NOT NULL
);
CREATE TABLE profile_templates (
    id INTEGER PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"#,
    r#"
CREATE TABLE videos (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    revision INTEGER NOT NULL,
    stream_id INTEGER NOT NULL,
    slug TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER NOT NULL,
    name_folded TEXT NOT NULL,
    status TEXT NOT NULL,
    client_user_id TEXT,
    settings TEXT NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX videos_by_stream ON videos (stream_id, id);
"#,
    r#"
CREATE TABLE overlays (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_id INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    spec TEXT NOT NULL
);
CREATE INDEX overlays_by_stream ON overlays (stream_id, id);
"#,
    r#"
CREATE TABLE source_samples (
    stream_id INTEGER NOT NULL,
    time_ms INTEGER NOT NULL,
    bitrate_kbps REAL NOT NULL,
    frames INTEGER NOT NULL,
    height INTEGER NOT NULL,
    fps REAL NOT NULL,
    keyframe_interval REAL NOT NULL
);
CREATE INDEX source_samples_by_stream ON source_samples (stream_id, time_ms);
CREATE INDEX source_samples_by_time ON source_samples (time_ms);
"#,
    // Broadcasts, and which streams belong to which: `broadcast_streams` is the one record of
    // that link, read both as a stream's `broadcast_ids` and as a broadcast's `stream_ids`.
    // Until now `broadcast_ids` sat in the stream's settings document with no broadcast behind
    // it; such ids named nothing and are dropped.
    r#"
CREATE TABLE broadcasts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    revision INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    settings TEXT NOT NULL
);
CREATE TABLE broadcast_streams (
    broadcast_id INTEGER NOT NULL REFERENCES broadcasts (id) ON DELETE CASCADE,
    stream_id INTEGER NOT NULL REFERENCES streams (id) ON DELETE CASCADE,
    PRIMARY KEY (broadcast_id, stream_id)
) WITHOUT ROWID;
CREATE INDEX broadcast_streams_by_stream ON broadcast_streams (stream_id, broadcast_id);
UPDATE streams SET settings = json_remove(settings, '$.broadcast_ids');
"#,
];

pub struct SqliteStore {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating if needed) `DATA_DIR/livepack.db` and brings its schema up to date.
    pub fn open_in(data_dir: &Path) -> Result<SqliteStore, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        Self::open(&data_dir.join(DB_FILE_NAME))
    }

    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&mut conn)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (the transaction
        // rolls back on drop), so the connection is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version as i64 + 1)?;
        tx.commit()?;
        tracing::info!(version = version + 1, "database schema migrated");
    }
    Ok(())
}

fn to_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

fn from_ms(kind: &'static str, id: i64, ms: i64) -> Result<OffsetDateTime, StoreError> {
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

fn from_json<T: serde::de::DeserializeOwned>(
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

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("record types always serialize")
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
}

const STREAM_COLUMNS: &str = "id, revision, token, created_at_ms, started_at_primary_ms, \
     started_at_backup_ms, finished_at_primary_ms, settings";

type RawStream = (
    i64,
    i64,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    String,
);

fn raw_stream(r: &Row<'_>) -> rusqlite::Result<RawStream> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
    ))
}

fn stream_from_raw(raw: RawStream) -> Result<StreamRow, StoreError> {
    let (id, revision, token, created, started_p, started_b, finished_p, settings) = raw;
    Ok(StreamRow {
        id,
        revision,
        token,
        created_at: from_ms("stream", id, created)?,
        started_at_primary: opt_from_ms(id, started_p)?,
        started_at_backup: opt_from_ms(id, started_b)?,
        finished_at_primary: opt_from_ms(id, finished_p)?,
        settings: from_json("stream", id, &settings)?,
    })
}

fn get_stream_in(conn: &Connection, id: i64) -> Result<Option<StreamRow>, StoreError> {
    conn.query_row(
        &format!("SELECT {STREAM_COLUMNS} FROM streams WHERE id = ?1"),
        [id],
        raw_stream,
    )
    .optional()?
    .map(|raw| stream_with_links(conn, raw))
    .transpose()
}

fn stream_with_links(conn: &Connection, raw: RawStream) -> Result<StreamRow, StoreError> {
    let mut row = stream_from_raw(raw)?;
    row.settings.broadcast_ids = linked(conn, Side::Stream, row.id)?;
    Ok(row)
}

/// A settings document without its link field: the link table holds that (one fact, one
/// place).
fn doc_without<T: serde::Serialize>(value: &T, link_field: &str) -> String {
    let mut doc = serde_json::to_value(value).expect("record types always serialize");
    if let Some(map) = doc.as_object_mut() {
        map.remove(link_field);
    }
    doc.to_string()
}

/// Which end of a broadcast–stream link a record is.
#[derive(Clone, Copy)]
enum Side {
    Stream,
    Broadcast,
}

impl Side {
    /// (this side's column, the other side's column, the other side's table, the field that
    /// names the other side, its kind)
    fn names(
        self,
    ) -> (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ) {
        match self {
            Side::Stream => (
                "stream_id",
                "broadcast_id",
                "broadcasts",
                "broadcast_ids",
                "broadcast",
            ),
            Side::Broadcast => (
                "broadcast_id",
                "stream_id",
                "streams",
                "stream_ids",
                "stream",
            ),
        }
    }
}

/// The other side's ids linked to record `id`, ascending.
fn linked(conn: &Connection, side: Side, id: i64) -> Result<Vec<i64>, StoreError> {
    let (this, other, ..) = side.names();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {other} FROM broadcast_streams WHERE {this} = ?1 ORDER BY {other}"
    ))?;
    let ids = stmt
        .query_map([id], |r| r.get(0))?
        .collect::<Result<Vec<i64>, _>>()?;
    Ok(ids)
}

/// Makes record `id`'s links exactly `wanted` (inside the caller's transaction): every wanted
/// id must exist; the records on the other side that gain or lose a link get a new revision
/// (broadcasts also a new `updated_at`), as their list changed.
fn set_links(
    conn: &Connection,
    side: Side,
    id: i64,
    wanted: &[i64],
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    let (this, other, other_table, field, kind) = side.names();
    let mut wanted = wanted.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let current = linked(conn, side, id)?;
    if current == wanted {
        return Ok(());
    }
    for &w in &wanted {
        let exists = conn
            .query_row(
                &format!("SELECT 1 FROM {other_table} WHERE id = ?1"),
                [w],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if !exists {
            return Err(StoreError::UnknownReference { field, kind, id: w });
        }
    }
    conn.execute(
        &format!("DELETE FROM broadcast_streams WHERE {this} = ?1"),
        [id],
    )?;
    for &w in &wanted {
        conn.execute(
            &format!("INSERT INTO broadcast_streams ({this}, {other}) VALUES (?1, ?2)"),
            [id, w],
        )?;
    }
    let touched = current
        .iter()
        .filter(|c| !wanted.contains(c))
        .chain(wanted.iter().filter(|w| !current.contains(w)));
    for &t in touched {
        bump(conn, side, t, now)?;
    }
    Ok(())
}

/// A new revision for a record on the other side of `side` whose links changed.
fn bump(
    conn: &Connection,
    side: Side,
    other_id: i64,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    match side {
        Side::Stream => conn.execute(
            "UPDATE broadcasts SET revision = revision + 1, updated_at_ms = ?2 WHERE id = ?1",
            params![other_id, to_ms(now)],
        )?,
        Side::Broadcast => conn.execute(
            "UPDATE streams SET revision = revision + 1 WHERE id = ?1",
            [other_id],
        )?,
    };
    Ok(())
}

/// Drops every link of record `id` (it is being deleted), moving the other side's revisions.
fn unlink_all(
    conn: &Connection,
    side: Side,
    id: i64,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    let (this, ..) = side.names();
    for other in linked(conn, side, id)? {
        bump(conn, side, other, now)?;
    }
    conn.execute(
        &format!("DELETE FROM broadcast_streams WHERE {this} = ?1"),
        [id],
    )?;
    Ok(())
}

const BROADCAST_COLUMNS: &str = "id, revision, created_at_ms, updated_at_ms, settings";

type RawBroadcast = (i64, i64, i64, i64, String);

fn raw_broadcast(r: &Row<'_>) -> rusqlite::Result<RawBroadcast> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn broadcast_with_links(conn: &Connection, raw: RawBroadcast) -> Result<BroadcastRow, StoreError> {
    let (id, revision, created, updated, settings) = raw;
    let mut settings: BroadcastSettings = from_json("broadcast", id, &settings)?;
    settings.stream_ids = linked(conn, Side::Broadcast, id)?;
    Ok(BroadcastRow {
        id,
        revision,
        created_at: from_ms("broadcast", id, created)?,
        updated_at: from_ms("broadcast", id, updated)?,
        settings,
    })
}

fn get_broadcast_in(conn: &Connection, id: i64) -> Result<Option<BroadcastRow>, StoreError> {
    conn.query_row(
        &format!("SELECT {BROADCAST_COLUMNS} FROM broadcasts WHERE id = ?1"),
        [id],
        raw_broadcast,
    )
    .optional()?
    .map(|raw| broadcast_with_links(conn, raw))
    .transpose()
}

const VIDEO_COLUMNS: &str = "id, revision, stream_id, slug, created_at_ms, updated_at_ms, \
     started_at_ms, settings, state";

type RawVideo = (i64, i64, i64, String, i64, i64, i64, String, String);

fn raw_video(r: &Row<'_>) -> rusqlite::Result<RawVideo> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

fn video_from_raw(raw: RawVideo) -> Result<VideoRow, StoreError> {
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

fn get_video_in(conn: &Connection, id: i64) -> Result<Option<VideoRow>, StoreError> {
    conn.query_row(
        &format!("SELECT {VIDEO_COLUMNS} FROM videos WHERE id = ?1"),
        [id],
        raw_video,
    )
    .optional()?
    .map(video_from_raw)
    .transpose()
}

fn list_overlays_in(conn: &Connection, stream_id: i64) -> Result<Vec<OverlayRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, created_at_ms, updated_at_ms, spec FROM overlays \
         WHERE stream_id = ?1 ORDER BY id",
    )?;
    let raw = stmt
        .query_map([stream_id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    raw.into_iter()
        .map(|(id, created, updated, spec)| {
            Ok(OverlayRow {
                id,
                stream_id,
                spec: from_json("overlay", id, &spec)?,
                created_at: from_ms("overlay", id, created)?,
                updated_at: from_ms("overlay", id, updated)?,
            })
        })
        .collect()
}

/// The client id as the filter compares it: the JSON number's text.
fn client_key(n: &Option<serde_json::Number>) -> Option<String> {
    n.as_ref().map(ToString::to_string)
}

const APP_COLUMNS: &str = "id, revision, settings";

fn app_from_raw((id, revision, settings): (i64, i64, String)) -> Result<AppRow, StoreError> {
    Ok(AppRow {
        id,
        revision,
        settings: from_json("app", id, &settings)?,
    })
}

fn get_app_in(conn: &Connection, id: i64) -> Result<Option<AppRow>, StoreError> {
    conn.query_row(
        &format!("SELECT {APP_COLUMNS} FROM apps WHERE id = ?1"),
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .optional()?
    .map(app_from_raw)
    .transpose()
}

/// Unicode-aware folding done here rather than by SQLite's ASCII-only `lower()`.
fn fold(name: &str) -> String {
    name.to_lowercase()
}

fn order_column(key: AppOrderKey) -> &'static str {
    match key {
        AppOrderKey::Name => "name",
        AppOrderKey::Status => "status",
        AppOrderKey::Id => "id",
        AppOrderKey::Template => "template",
        AppOrderKey::Binary => "binary",
        AppOrderKey::Plan => "plan",
    }
}

impl Store for SqliteStore {
    fn create_video(
        &self,
        stream_id: i64,
        slug: &str,
        settings: &VideoSettings,
        state: &VideoState,
        started_at: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Result<VideoRow, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO videos (revision, stream_id, slug, created_at_ms, updated_at_ms, \
             started_at_ms, name_folded, status, client_user_id, settings, state) \
             VALUES (1, ?1, ?2, ?3, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                stream_id,
                slug,
                to_ms(now),
                to_ms(started_at),
                fold(&settings.name),
                state.status.as_str(),
                client_key(&settings.client_user_id),
                to_json(settings),
                to_json(state)
            ],
        )?;
        let id = conn.last_insert_rowid();
        get_video_in(&conn, id)?.ok_or(StoreError::Corrupt {
            kind: "video",
            id,
            reason: "vanished after insert".into(),
        })
    }

    fn get_video(&self, id: i64) -> Result<Option<VideoRow>, StoreError> {
        get_video_in(&self.conn(), id)
    }

    fn list_videos(&self, f: &VideoFilter) -> Result<(Vec<VideoRow>, u64), StoreError> {
        let conn = self.conn();
        let filter = "WHERE (?1 IS NULL OR stream_id = ?1) AND (?2 IS NULL OR status = ?2) \
             AND (?3 IS NULL OR instr(name_folded, ?3) > 0) \
             AND (?4 IS NULL OR client_user_id = ?4)";
        let args = params![
            f.stream_id,
            f.status.map(VideoStatus::as_str),
            f.search.as_deref().map(fold),
            client_key(&f.client_user_id),
        ];
        let total: i64 = conn.query_row(
            &format!("SELECT COUNT(*) FROM videos {filter}"),
            args,
            |r| r.get(0),
        )?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {VIDEO_COLUMNS} FROM videos {filter} ORDER BY id DESC LIMIT ?5 OFFSET ?6"
        ))?;
        let raws = stmt
            .query_map(
                params![
                    f.stream_id,
                    f.status.map(VideoStatus::as_str),
                    f.search.as_deref().map(fold),
                    client_key(&f.client_user_id),
                    f.limit,
                    f.offset.min(i64::MAX as u64) as i64
                ],
                raw_video,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let rows = raws
            .into_iter()
            .map(video_from_raw)
            .collect::<Result<_, _>>()?;
        Ok((rows, total as u64))
    }

    fn update_video(
        &self,
        id: i64,
        revision: i64,
        settings: &VideoSettings,
        now: OffsetDateTime,
    ) -> Result<Update<VideoRow>, StoreError> {
        let conn = self.conn();
        let changed = conn.execute(
            "UPDATE videos SET settings = ?1, name_folded = ?2, client_user_id = ?3, \
             updated_at_ms = ?4, revision = revision + 1 WHERE id = ?5 AND revision = ?6",
            params![
                to_json(settings),
                fold(&settings.name),
                client_key(&settings.client_user_id),
                to_ms(now),
                id,
                revision
            ],
        )?;
        Ok(match (changed, get_video_in(&conn, id)?) {
            (1, Some(row)) => Update::Done(row),
            (_, None) => Update::NotFound,
            _ => Update::Stale,
        })
    }

    fn set_video_state(
        &self,
        id: i64,
        state: &VideoState,
        now: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        Ok(self.conn().execute(
            "UPDATE videos SET state = ?1, status = ?2, updated_at_ms = ?3 WHERE id = ?4",
            params![to_json(state), state.status.as_str(), to_ms(now), id],
        )? == 1)
    }

    fn delete_video(&self, id: i64) -> Result<Option<VideoRow>, StoreError> {
        let conn = self.conn();
        let row = get_video_in(&conn, id)?;
        conn.execute("DELETE FROM videos WHERE id = ?1", [id])?;
        Ok(row)
    }

    fn create_stream(
        &self,
        settings: &StreamSettings,
        token: &str,
        now: OffsetDateTime,
    ) -> Result<StreamRow, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO streams (revision, token, created_at_ms, settings) VALUES (1, ?1, ?2, ?3)",
            params![token, to_ms(now), doc_without(settings, "broadcast_ids")],
        )?;
        let id = tx.last_insert_rowid();
        set_links(&tx, Side::Stream, id, &settings.broadcast_ids, now)?;
        let row = get_stream_in(&tx, id)?.ok_or(StoreError::Corrupt {
            kind: "stream",
            id,
            reason: "vanished after insert".into(),
        })?;
        tx.commit()?;
        Ok(row)
    }

    fn get_stream(&self, id: i64) -> Result<Option<StreamRow>, StoreError> {
        get_stream_in(&self.conn(), id)
    }

    fn list_streams(&self, offset: u64, limit: u32) -> Result<(Vec<StreamRow>, u64), StoreError> {
        let conn = self.conn();
        let total: i64 = conn.query_row("SELECT COUNT(*) FROM streams", [], |r| r.get(0))?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {STREAM_COLUMNS} FROM streams ORDER BY id DESC LIMIT ?1 OFFSET ?2"
        ))?;
        let raws = stmt
            .query_map(
                params![limit, offset.min(i64::MAX as u64) as i64],
                raw_stream,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let rows = raws
            .into_iter()
            .map(|raw| stream_with_links(&conn, raw))
            .collect::<Result<_, _>>()?;
        Ok((rows, total as u64))
    }

    fn update_stream(
        &self,
        id: i64,
        revision: i64,
        settings: &StreamSettings,
    ) -> Result<Update<StreamRow>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let changed = tx.execute(
            "UPDATE streams SET settings = ?1, revision = revision + 1 WHERE id = ?2 AND revision = ?3",
            params![doc_without(settings, "broadcast_ids"), id, revision],
        )?;
        if changed == 1 {
            // An unknown broadcast drops the transaction: nothing of the update is kept.
            set_links(
                &tx,
                Side::Stream,
                id,
                &settings.broadcast_ids,
                OffsetDateTime::now_utc(),
            )?;
        }
        let outcome = match (changed, get_stream_in(&tx, id)?) {
            (1, Some(row)) => Update::Done(row),
            (_, None) => Update::NotFound,
            _ => Update::Stale,
        };
        tx.commit()?;
        Ok(outcome)
    }

    fn delete_stream(&self, id: i64) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        unlink_all(&tx, Side::Stream, id, OffsetDateTime::now_utc())?;
        let deleted = tx.execute("DELETE FROM streams WHERE id = ?1", [id])? == 1;
        tx.execute("DELETE FROM overlays WHERE stream_id = ?1", [id])?;
        tx.execute("DELETE FROM source_samples WHERE stream_id = ?1", [id])?;
        tx.commit()?;
        Ok(deleted)
    }

    fn add_source_sample(&self, stream_id: i64, sample: &SourceSample) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO source_samples \
             (stream_id, time_ms, bitrate_kbps, frames, height, fps, keyframe_interval) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                stream_id,
                to_ms(sample.time),
                sample.bitrate_kbps,
                sample.frames as i64,
                sample.height,
                sample.fps,
                sample.keyframe_interval
            ],
        )?;
        Ok(())
    }

    fn source_buckets(
        &self,
        stream_id: i64,
        from_ms: i64,
        to_ms: i64,
        bucket_ms: i64,
        offset_ms: i64,
    ) -> Result<Vec<SourceBucket>, StoreError> {
        let conn = self.conn();
        // Samples are never before the epoch, so `time_ms - offset` (offset < a week) divides
        // the same way in SQLite and PostgreSQL only once shifted non-negative: + one bucket.
        let mut stmt = conn.prepare_cached(
            "SELECT ((time_ms - ?5 + ?4) / ?4) * ?4 + ?5 - ?4 AS bucket, COUNT(*), \
             AVG(bitrate_kbps), SUM(frames), MAX(height), MAX(fps), MAX(keyframe_interval) \
             FROM source_samples WHERE stream_id = ?1 AND time_ms >= ?2 AND time_ms < ?3 \
             GROUP BY bucket ORDER BY bucket",
        )?;
        let args = params![stream_id, from_ms, to_ms, bucket_ms.max(1), offset_ms];
        let rows = stmt.query_map(args, |r| {
            Ok(SourceBucket {
                time_ms: r.get(0)?,
                samples: r.get::<_, i64>(1)?.max(0) as u64,
                avg_bitrate_kbps: r.get(2)?,
                sum_frames: r.get::<_, i64>(3)?.max(0) as u64,
                max_height: r.get(4)?,
                max_fps: r.get(5)?,
                max_keyframe_interval: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn prune_source_samples(&self, before_ms: i64) -> Result<u64, StoreError> {
        let n = self
            .conn()
            .execute("DELETE FROM source_samples WHERE time_ms < ?1", [before_ms])?;
        Ok(n as u64)
    }

    fn create_broadcast(
        &self,
        settings: &BroadcastSettings,
        now: OffsetDateTime,
    ) -> Result<BroadcastRow, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO broadcasts (revision, created_at_ms, updated_at_ms, settings) \
             VALUES (1, ?1, ?1, ?2)",
            params![to_ms(now), doc_without(settings, "stream_ids")],
        )?;
        let id = tx.last_insert_rowid();
        set_links(&tx, Side::Broadcast, id, &settings.stream_ids, now)?;
        let row = get_broadcast_in(&tx, id)?.ok_or(StoreError::Corrupt {
            kind: "broadcast",
            id,
            reason: "vanished after insert".into(),
        })?;
        tx.commit()?;
        Ok(row)
    }

    fn get_broadcast(&self, id: i64) -> Result<Option<BroadcastRow>, StoreError> {
        get_broadcast_in(&self.conn(), id)
    }

    fn list_broadcasts(
        &self,
        offset: u64,
        limit: u32,
    ) -> Result<(Vec<BroadcastRow>, u64), StoreError> {
        let conn = self.conn();
        let total: i64 = conn.query_row("SELECT COUNT(*) FROM broadcasts", [], |r| r.get(0))?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {BROADCAST_COLUMNS} FROM broadcasts ORDER BY id DESC LIMIT ?1 OFFSET ?2"
        ))?;
        let raws = stmt
            .query_map(
                params![limit, offset.min(i64::MAX as u64) as i64],
                raw_broadcast,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let rows = raws
            .into_iter()
            .map(|raw| broadcast_with_links(&conn, raw))
            .collect::<Result<_, _>>()?;
        Ok((rows, total as u64))
    }

    fn update_broadcast(
        &self,
        id: i64,
        revision: i64,
        settings: &BroadcastSettings,
        now: OffsetDateTime,
    ) -> Result<Update<BroadcastRow>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let changed = tx.execute(
            "UPDATE broadcasts SET settings = ?1, updated_at_ms = ?2, revision = revision + 1 \
             WHERE id = ?3 AND revision = ?4",
            params![
                doc_without(settings, "stream_ids"),
                to_ms(now),
                id,
                revision
            ],
        )?;
        if changed == 1 {
            set_links(&tx, Side::Broadcast, id, &settings.stream_ids, now)?;
        }
        let outcome = match (changed, get_broadcast_in(&tx, id)?) {
            (1, Some(row)) => Update::Done(row),
            (_, None) => Update::NotFound,
            _ => Update::Stale,
        };
        tx.commit()?;
        Ok(outcome)
    }

    fn delete_broadcast(&self, id: i64) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        unlink_all(&tx, Side::Broadcast, id, OffsetDateTime::now_utc())?;
        let deleted = tx.execute("DELETE FROM broadcasts WHERE id = ?1", [id])? == 1;
        tx.commit()?;
        Ok(deleted)
    }

    fn list_overlays(&self, stream_id: i64) -> Result<Vec<OverlayRow>, StoreError> {
        list_overlays_in(&self.conn(), stream_id)
    }

    fn create_overlays(
        &self,
        stream_id: i64,
        specs: &[crate::overlay::OverlaySpec],
        max: usize,
        now: OffsetDateTime,
    ) -> Result<Option<Vec<OverlayRow>>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let exists: bool = tx
            .query_row("SELECT 1 FROM streams WHERE id = ?1", [stream_id], |_| {
                Ok(())
            })
            .optional()?
            .is_some();
        let count: i64 = tx.query_row(
            "SELECT COUNT(*) FROM overlays WHERE stream_id = ?1",
            [stream_id],
            |r| r.get(0),
        )?;
        if !exists || count as usize + specs.len() > max {
            return Ok(None);
        }
        let mut ids = Vec::with_capacity(specs.len());
        for spec in specs {
            tx.execute(
                "INSERT INTO overlays (stream_id, created_at_ms, updated_at_ms, spec) \
                 VALUES (?1, ?2, ?2, ?3)",
                params![stream_id, to_ms(now), to_json(spec)],
            )?;
            ids.push(tx.last_insert_rowid());
        }
        let rows = list_overlays_in(&tx, stream_id)?;
        tx.commit()?;
        Ok(Some(
            rows.into_iter().filter(|r| ids.contains(&r.id)).collect(),
        ))
    }

    fn update_overlays(
        &self,
        stream_id: i64,
        updates: &[(i64, crate::overlay::OverlaySpec)],
        now: OffsetDateTime,
    ) -> Result<Option<Vec<OverlayRow>>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for (id, spec) in updates {
            let changed = tx.execute(
                "UPDATE overlays SET spec = ?1, updated_at_ms = ?2 WHERE id = ?3 AND stream_id = ?4",
                params![to_json(spec), to_ms(now), id, stream_id],
            )?;
            if changed != 1 {
                return Ok(None); // dropped: rolls back
            }
        }
        let rows = list_overlays_in(&tx, stream_id)?;
        tx.commit()?;
        Ok(Some(
            rows.into_iter()
                .filter(|r| updates.iter().any(|(id, _)| *id == r.id))
                .collect(),
        ))
    }

    fn delete_overlay(&self, stream_id: i64, id: i64) -> Result<bool, StoreError> {
        Ok(self.conn().execute(
            "DELETE FROM overlays WHERE id = ?1 AND stream_id = ?2",
            [id, stream_id],
        )? == 1)
    }

    fn set_stream_times(
        &self,
        id: i64,
        started_at_primary: Option<OffsetDateTime>,
        started_at_backup: Option<OffsetDateTime>,
        finished_at_primary: Option<OffsetDateTime>,
    ) -> Result<bool, StoreError> {
        let changed = self.conn().execute(
            "UPDATE streams SET \
               started_at_primary_ms = COALESCE(?2, started_at_primary_ms), \
               started_at_backup_ms = COALESCE(?3, started_at_backup_ms), \
               finished_at_primary_ms = COALESCE(?4, finished_at_primary_ms) \
             WHERE id = ?1",
            params![
                id,
                started_at_primary.map(to_ms),
                started_at_backup.map(to_ms),
                finished_at_primary.map(to_ms)
            ],
        )?;
        Ok(changed == 1)
    }

    fn create_app(&self, s: &AppSettings) -> Result<Update<AppRow>, StoreError> {
        let conn = self.conn();
        let inserted = conn.execute(
            "INSERT INTO apps (revision, name, name_folded, status, api_type, template, binary, \
               plan_id, plan, settings) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                s.name,
                fold(&s.name),
                s.status,
                s.api_type.as_str(),
                s.template,
                s.binary,
                s.plan_id,
                s.plan,
                to_json(s)
            ],
        );
        match inserted {
            Err(e) if is_unique_violation(&e) => return Ok(Update::NameTaken),
            other => other?,
        };
        let id = conn.last_insert_rowid();
        Ok(get_app_in(&conn, id)?.map_or(Update::NotFound, Update::Done))
    }

    fn get_app(&self, id: i64) -> Result<Option<AppRow>, StoreError> {
        get_app_in(&self.conn(), id)
    }

    fn list_apps(&self, f: &AppFilter) -> Result<(Vec<AppRow>, u64), StoreError> {
        let mut clauses: Vec<&str> = Vec::new();
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some(name) = &f.name {
            clauses.push("instr(name_folded, ?) > 0");
            args.push(fold(name).into());
        }
        if let Some(t) = f.api_type {
            clauses.push("api_type = ?");
            args.push(t.as_str().to_owned().into());
        }
        if let Some(s) = f.status {
            clauses.push("status = ?");
            args.push(i64::from(s).into());
        }
        if let Some(t) = f.template {
            clauses.push("template = ?");
            args.push(t.into());
        }
        if let Some(b) = f.binary {
            clauses.push("binary = ?");
            args.push(b.into());
        }
        if let Some(p) = f.plan {
            clauses.push("plan_id = ?");
            args.push(p.into());
        }
        let where_sql = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let (key, descending) = f.order.unwrap_or((AppOrderKey::Id, false));
        let dir = if descending { "DESC" } else { "ASC" };
        // id (ascending) breaks ties so paging through equal keys neither repeats nor skips a row.
        let order_sql = format!("ORDER BY {} {dir}, id ASC", order_column(key));

        let conn = self.conn();
        let count: i64 = conn.query_row(
            &format!("SELECT COUNT(*) FROM apps {where_sql}"),
            rusqlite::params_from_iter(args.iter()),
            |r| r.get(0),
        )?;
        let mut page_args = args.clone();
        page_args.push(i64::from(f.limit).into());
        page_args.push((f.offset.min(i64::MAX as u64) as i64).into());
        let mut stmt = conn.prepare(&format!(
            "SELECT {APP_COLUMNS} FROM apps {where_sql} {order_sql} LIMIT ? OFFSET ?"
        ))?;
        let raws = stmt
            .query_map(rusqlite::params_from_iter(page_args.iter()), |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let rows = raws
            .into_iter()
            .map(app_from_raw)
            .collect::<Result<_, _>>()?;
        Ok((rows, count as u64))
    }

    fn update_app(
        &self,
        id: i64,
        revision: i64,
        s: &AppSettings,
    ) -> Result<Update<AppRow>, StoreError> {
        let conn = self.conn();
        let changed = conn.execute(
            "UPDATE apps SET name = ?1, name_folded = ?2, status = ?3, api_type = ?4, \
               template = ?5, binary = ?6, plan_id = ?7, plan = ?8, settings = ?9, \
               revision = revision + 1 WHERE id = ?10 AND revision = ?11",
            params![
                s.name,
                fold(&s.name),
                s.status,
                s.api_type.as_str(),
                s.template,
                s.binary,
                s.plan_id,
                s.plan,
                to_json(s),
                id,
                revision
            ],
        );
        let changed = match changed {
            Err(e) if is_unique_violation(&e) => return Ok(Update::NameTaken),
            other => other?,
        };
        Ok(match (changed, get_app_in(&conn, id)?) {
            (1, Some(row)) => Update::Done(row),
            (_, None) => Update::NotFound,
            _ => Update::Stale,
        })
    }

    fn delete_app(&self, id: i64) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .execute("DELETE FROM apps WHERE id = ?1", [id])?
            == 1)
    }

    fn upsert_profile_templates(&self, templates: &[ProfileTemplate]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for t in templates {
            tx.execute(
                "INSERT INTO profile_templates (id, body) VALUES (?1, ?2) \
                 ON CONFLICT(id) DO UPDATE SET body = excluded.body",
                params![t.id, to_json(t)],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    fn list_profile_templates(&self) -> Result<Vec<ProfileTemplate>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT id, body FROM profile_templates ORDER BY id")?;
        let raws = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        raws.into_iter()
            .map(|(id, body)| from_json("profile template", id, &body))
            .collect()
    }

    fn get_setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT value FROM settings WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()?)
    }

    fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO settings (key, value) VALUES (?1, ?2) \
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{ApiType, Projection};

    fn app(name: &str, status: u8, plan_id: i64) -> AppSettings {
        AppSettings {
            name: name.into(),
            status,
            binary: Some(1),
            comment: String::new(),
            api_type: ApiType::WasiHttp,
            debug_until: None,
            template: None,
            template_name: None,
            networks: vec![],
            upgradeable_to: None,
            plan_id,
            plan: "basic".into(),
        }
    }

    #[test]
    fn source_samples_aggregate_per_bucket_prune_and_go_with_their_stream() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let now = OffsetDateTime::now_utc();
        let settings = StreamSettings {
            name: "cam".into(),
            ..StreamSettings::default()
        };
        let id = store.create_stream(&settings, "t", now).unwrap().id;
        let other = store.create_stream(&settings, "u", now).unwrap().id;
        let sample = |secs: i64, kbps: f64, height: u32| SourceSample {
            time: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(secs),
            bitrate_kbps: kbps,
            frames: 300,
            height,
            fps: 30.0,
            keyframe_interval: 2.0,
        };
        // 10 s samples at 0, 10, 20 s, then a gap, then 70 s; one of another stream.
        for (t, kbps, h) in [
            (0, 1000.0, 720),
            (10, 2000.0, 1080),
            (20, 3000.0, 720),
            (70, 500.0, 360),
        ] {
            store.add_source_sample(id, &sample(t, kbps, h)).unwrap();
        }
        store
            .add_source_sample(other, &sample(0, 9999.0, 2160))
            .unwrap();
        // 30 s buckets: [0,30) and [60,90); [30,60) is absent.
        let b = store.source_buckets(id, 0, 100_000, 30_000, 0).unwrap();
        assert_eq!(b.iter().map(|b| b.time_ms).collect::<Vec<_>>(), [0, 60_000]);
        assert_eq!(
            (b[0].samples, b[0].sum_frames, b[0].max_height),
            (3, 900, 1080)
        );
        assert_eq!(b[0].avg_bitrate_kbps, 2000.0);
        assert_eq!((b[1].samples, b[1].max_height), (1, 360));
        // The window is half-open and buckets may start at an offset.
        let b = store
            .source_buckets(id, 10_000, 70_000, 30_000, 5_000)
            .unwrap();
        assert_eq!(
            b.iter().map(|b| (b.time_ms, b.samples)).collect::<Vec<_>>(),
            [(5_000, 2)]
        );
        assert_eq!(
            store.prune_source_samples(15_000).unwrap(),
            3,
            "two of ours, one other"
        );
        assert!(store.delete_stream(id).unwrap());
        assert!(store
            .source_buckets(id, 0, 100_000, 30_000, 0)
            .unwrap()
            .is_empty());
        assert_eq!(
            store
                .source_buckets(other, 0, 100_000, 30_000, 0)
                .unwrap()
                .len(),
            0
        );
    }

    #[test]
    fn stream_round_trip_and_compare_and_set() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let mut s = StreamSettings {
            name: "a".into(),
            projection: Projection::Vr180,
            ..StreamSettings::default()
        };
        let now = OffsetDateTime::now_utc();
        let row = store.create_stream(&s, "tok", now).unwrap();
        assert_eq!(row.settings, s);
        assert_eq!(to_ms(row.created_at), to_ms(now));
        s.name = "b".into();
        let Update::Done(updated) = store.update_stream(row.id, row.revision, &s).unwrap() else {
            panic!("first update must apply")
        };
        assert_eq!(updated.revision, row.revision + 1);
        assert!(matches!(
            store.update_stream(row.id, row.revision, &s).unwrap(),
            Update::Stale
        ));
        assert!(matches!(
            store.update_stream(999, 1, &s).unwrap(),
            Update::NotFound
        ));
        assert!(store.delete_stream(row.id).unwrap());
        assert!(!store.delete_stream(row.id).unwrap());
    }

    #[test]
    fn reopening_keeps_data_and_schema_version() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::open_in(dir.path()).unwrap();
            store.set_setting("k", "v").unwrap();
        }
        let store = SqliteStore::open_in(dir.path()).unwrap();
        assert_eq!(store.get_setting("k").unwrap().as_deref(), Some("v"));
        let v: i64 = store
            .conn()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, MIGRATIONS.len() as i64);
    }

    #[test]
    fn app_names_are_unique_and_filters_fold_unicode() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        assert!(matches!(
            store.create_app(&app("straße-1", 1, 1)).unwrap(),
            Update::Done(_)
        ));
        assert!(matches!(
            store.create_app(&app("straße-1", 1, 1)).unwrap(),
            Update::NameTaken
        ));
        store.create_app(&app("other", 2, 2)).unwrap();
        let filter = AppFilter {
            name: Some("STRASSE".into()),
            limit: 10,
            ..AppFilter::default()
        };
        // to_lowercase does not map ß to ss: only a case fold, not full normalisation.
        assert_eq!(store.list_apps(&filter).unwrap().1, 0);
        let filter = AppFilter {
            name: Some("STRAßE".into()),
            limit: 10,
            ..AppFilter::default()
        };
        assert_eq!(store.list_apps(&filter).unwrap().1, 1);
        let filter = AppFilter {
            order: Some((AppOrderKey::Status, true)),
            limit: 1,
            ..AppFilter::default()
        };
        let (page, count) = store.list_apps(&filter).unwrap();
        assert_eq!(count, 2);
        assert_eq!(page[0].settings.name, "other");
    }

    #[test]
    fn videos_filter_page_edit_and_delete() {
        use super::super::{RecordType, VideoRendition};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let now = OffsetDateTime::now_utc();
        let state = |status| VideoState {
            status,
            ..VideoState::pending(RecordType::Transcoded)
        };
        let settings = |name: &str, client: Option<i64>| VideoSettings {
            name: name.into(),
            description: String::new(),
            client_user_id: client.map(serde_json::Number::from),
        };
        let a = store
            .create_video(
                1,
                "s1",
                &settings("Stream Record: Ünïcode", Some(7)),
                &state(VideoStatus::Pending),
                now,
                now,
            )
            .unwrap();
        let b = store
            .create_video(
                2,
                "s2",
                &settings("other", None),
                &state(VideoStatus::Pending),
                now,
                now,
            )
            .unwrap();
        let ready = VideoState {
            duration_ms: 8000,
            size: 12345,
            renditions: vec![VideoRendition {
                name: "720p".into(),
                width: 1280,
                height: 720,
                size: 12345,
            }],
            ..state(VideoStatus::Ready)
        };
        assert!(store.set_video_state(a.id, &ready, now).unwrap());
        let list = |f: VideoFilter| {
            let (rows, total) = store.list_videos(&VideoFilter { limit: 10, ..f }).unwrap();
            (rows.iter().map(|r| r.id).collect::<Vec<_>>(), total)
        };
        assert_eq!(list(VideoFilter::default()), (vec![b.id, a.id], 2));
        assert_eq!(
            list(VideoFilter {
                stream_id: Some(1),
                ..Default::default()
            }),
            (vec![a.id], 1)
        );
        assert_eq!(
            list(VideoFilter {
                status: Some(VideoStatus::Pending),
                ..Default::default()
            }),
            (vec![b.id], 1)
        );
        assert_eq!(
            list(VideoFilter {
                search: Some("ÜNÏ".into()),
                ..Default::default()
            }),
            (vec![a.id], 1)
        );
        assert_eq!(
            list(VideoFilter {
                client_user_id: Some(7.into()),
                ..Default::default()
            }),
            (vec![a.id], 1)
        );
        let (page, total) = store
            .list_videos(&VideoFilter {
                limit: 1,
                offset: 1,
                ..Default::default()
            })
            .unwrap();
        assert_eq!((page[0].id, total), (a.id, 2));
        assert_eq!(store.get_video(a.id).unwrap().unwrap().state, ready);
        let Update::Done(edited) = store
            .update_video(a.id, a.revision, &settings("renamed", None), now)
            .unwrap()
        else {
            panic!("first edit applies")
        };
        assert_eq!(
            edited.state, ready,
            "the owner's edit keeps the recorder's fields"
        );
        assert!(matches!(
            store
                .update_video(a.id, a.revision, &settings("x", None), now)
                .unwrap(),
            Update::Stale
        ));
        assert_eq!(
            store.delete_video(a.id).unwrap().map(|r| r.slug),
            Some("s1".into())
        );
        assert!(store.get_video(a.id).unwrap().is_none());
        assert!(!store.set_video_state(a.id, &ready, now).unwrap());
    }

    #[test]
    fn broadcast_links_are_one_fact_seen_from_both_sides() {
        use super::super::{BroadcastSettings, BroadcastStatus};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path()).unwrap();
        let now = OffsetDateTime::now_utc();
        let stream = |name: &str, broadcast_ids: Vec<i64>| StreamSettings {
            name: name.into(),
            broadcast_ids,
            ..StreamSettings::default()
        };
        let s1 = store
            .create_stream(&stream("s1", vec![]), "t", now)
            .unwrap();
        let s2 = store
            .create_stream(&stream("s2", vec![]), "t", now)
            .unwrap();
        let b = store
            .create_broadcast(
                &BroadcastSettings {
                    name: "b".into(),
                    stream_ids: vec![s2.id, s1.id, s2.id],
                    ..BroadcastSettings::default()
                },
                now,
            )
            .unwrap();
        assert_eq!(
            b.settings.stream_ids,
            vec![s1.id, s2.id],
            "a set, ascending"
        );
        assert_eq!(b.settings.status, BroadcastStatus::Pending);
        let s1_now = store.get_stream(s1.id).unwrap().unwrap();
        assert_eq!(s1_now.settings.broadcast_ids, vec![b.id]);
        assert_eq!(s1_now.revision, s1.revision + 1, "its links changed");
        // A stream PATCH read before the link changed cannot write the old links back.
        assert!(matches!(
            store
                .update_stream(s1.id, s1.revision, &s1.settings)
                .unwrap(),
            Update::Stale
        ));
        // From the stream's side: leave the broadcast.
        let Update::Done(s1_left) = store
            .update_stream(s1.id, s1_now.revision, &stream("s1", vec![]))
            .unwrap()
        else {
            panic!("current revision applies")
        };
        assert!(s1_left.settings.broadcast_ids.is_empty());
        let b_now = store.get_broadcast(b.id).unwrap().unwrap();
        assert_eq!(b_now.settings.stream_ids, vec![s2.id]);
        assert_eq!(b_now.revision, b.revision + 1);
        // Unknown ids: refused, nothing written on either side.
        let e = store
            .update_stream(s1.id, s1_left.revision, &stream("renamed", vec![b.id, 999]))
            .unwrap_err();
        assert!(matches!(
            e,
            StoreError::UnknownReference {
                field: "broadcast_ids",
                id: 999,
                ..
            }
        ));
        let s1_after = store.get_stream(s1.id).unwrap().unwrap();
        assert_eq!(
            (s1_after.settings.name.as_str(), s1_after.revision),
            ("s1", s1_left.revision)
        );
        let mut bad = b_now.settings.clone();
        bad.stream_ids = vec![12345];
        assert!(matches!(
            store
                .update_broadcast(b.id, b_now.revision, &bad, now)
                .unwrap_err(),
            StoreError::UnknownReference {
                field: "stream_ids",
                id: 12345,
                ..
            }
        ));
        assert!(store
            .create_stream(&stream("x", vec![777]), "t", now)
            .is_err());
        assert_eq!(store.list_streams(0, 10).unwrap().1, 2, "nothing created");
        // Deleting a stream removes it from its broadcasts; deleting a broadcast from streams.
        assert!(store.delete_stream(s2.id).unwrap());
        assert!(store
            .get_broadcast(b.id)
            .unwrap()
            .unwrap()
            .settings
            .stream_ids
            .is_empty());
        let Update::Done(_) = store
            .update_stream(s1.id, s1_left.revision, &stream("s1", vec![b.id]))
            .unwrap()
        else {
            panic!("applies")
        };
        assert!(store.delete_broadcast(b.id).unwrap());
        assert!(!store.delete_broadcast(b.id).unwrap());
        assert!(store
            .get_stream(s1.id)
            .unwrap()
            .unwrap()
            .settings
            .broadcast_ids
            .is_empty());
        let (page, total) = store.list_broadcasts(0, 10).unwrap();
        assert_eq!((page.len(), total), (0, 0));
    }

    #[test]
    fn migration_drops_broadcast_ids_that_named_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE_NAME);
        {
            // A database as the previous build left it: schema 3, ids in the document.
            let mut conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..3] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            let tx = conn.transaction().unwrap();
            tx.execute(
                "INSERT INTO streams (revision, token, created_at_ms, settings) \
                 VALUES (1, 't', 0, '{\"name\":\"old\",\"broadcast_ids\":[5,6]}')",
                [],
            )
            .unwrap();
            tx.commit().unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let (rows, _) = store.list_streams(0, 10).unwrap();
        assert_eq!(rows[0].settings.name, "old");
        assert!(rows[0].settings.broadcast_ids.is_empty());
    }
}
