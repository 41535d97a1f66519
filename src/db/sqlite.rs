//! The embedded default [`Store`]: one SQLite file in the data dir, WAL journal, versioned
//! migrations, `synchronous=FULL` so an acknowledged write survives `kill -9` and power loss.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{params, Connection, OptionalExtension, Row};
use time::OffsetDateTime;

use super::codec::{
    app_from_raw, broadcast_from_raw, client_key, doc_without, fold, from_json, from_ms, id_set,
    overlay_from_raw, stream_from_raw, to_json, to_ms, touched, video_from_raw, RawBroadcast,
    RawStream, RawVideo, Side, SideNames, APP_COLUMNS, BROADCAST_COLUMNS, OVERLAY_COLUMNS,
    STREAM_COLUMNS, VIDEO_COLUMNS,
};
use super::{
    AppFilter, AppOrderKey, AppRow, AppSettings, BroadcastRow, BroadcastSettings, LeaseRow,
    LeaseState, LeaseTake, NodeBeat, NodeRow, OverlayRow, ProfileTemplate, SourceBucket,
    SourceSample, Store, StoreError, StreamRow, StreamSettings, Update, VideoFilter, VideoRow,
    VideoSettings, VideoState, VideoStatus,
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
    // The cluster: daemons sharing the store, and which one serves each live stream. Times
    // are the store's clock (PostgreSQL's for several nodes), so nodes' clocks may differ.
    r#"
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    heartbeat_ms INTEGER NOT NULL
);
CREATE TABLE leases (
    stream_id INTEGER PRIMARY KEY REFERENCES streams (id) ON DELETE CASCADE,
    node_id TEXT NOT NULL,
    publishing INTEGER NOT NULL,
    status TEXT NOT NULL,
    taken_at_ms INTEGER NOT NULL
);
CREATE INDEX leases_by_node ON leases (node_id);
"#,
];

/// A lease and its holder's URL (left join: a holder that never beat has none).
const LEASE_SELECT: &str = "SELECT l.stream_id, l.node_id, COALESCE(n.url, ''), l.publishing, \
    l.status FROM leases l LEFT JOIN nodes n ON n.id = l.node_id";

fn lease_row(r: &Row<'_>) -> rusqlite::Result<LeaseRow> {
    Ok(LeaseRow {
        stream_id: r.get(0)?,
        node_id: r.get(1)?,
        node_url: r.get(2)?,
        publishing: r.get(3)?,
        status: r.get(4)?,
    })
}

/// The store's clock: one machine's, since SQLite is one node's store.
fn now_ms() -> i64 {
    to_ms(OffsetDateTime::now_utc())
}

fn dead_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

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
        let path = data_dir.join(DB_FILE_NAME);
        // Tokens, passphrases and PULL credentials: the file is created 0600 whatever the umask.
        crate::data_dir::create_private(&path).map_err(|e| StoreError::DataDir {
            path: e.path,
            source: e.source,
        })?;
        Self::open(&path)
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

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
}

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
    let links = linked(conn, Side::Stream, raw.0)?;
    stream_from_raw(raw, links)
}

/// The other side's ids linked to record `id`, ascending.
fn linked(conn: &Connection, side: Side, id: i64) -> Result<Vec<i64>, StoreError> {
    let SideNames { this, other, .. } = side.names();
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
    let SideNames {
        this,
        other,
        other_table,
        field,
        kind,
    } = side.names();
    let wanted = id_set(wanted);
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
    for t in touched(&current, &wanted) {
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
    let SideNames { this, .. } = side.names();
    for other in linked(conn, side, id)? {
        bump(conn, side, other, now)?;
    }
    conn.execute(
        &format!("DELETE FROM broadcast_streams WHERE {this} = ?1"),
        [id],
    )?;
    Ok(())
}

fn raw_broadcast(r: &Row<'_>) -> rusqlite::Result<RawBroadcast> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn broadcast_with_links(conn: &Connection, raw: RawBroadcast) -> Result<BroadcastRow, StoreError> {
    let links = linked(conn, Side::Broadcast, raw.0)?;
    broadcast_from_raw(raw, links)
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
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {OVERLAY_COLUMNS} FROM overlays WHERE stream_id = ?1 ORDER BY id"
    ))?;
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
        .map(|raw| overlay_from_raw(stream_id, raw))
        .collect()
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

    fn setting_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError> {
        // One connection, one writer: the insert and the read cannot interleave with another.
        let conn = self.conn();
        conn.execute(
            "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO NOTHING",
            params![key, value],
        )?;
        Ok(
            conn.query_row("SELECT value FROM settings WHERE key = ?1", [key], |r| {
                r.get(0)
            })?,
        )
    }

    fn heartbeat(
        &self,
        node: &NodeBeat<'_>,
        leases: &[LeaseState],
    ) -> Result<Vec<i64>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO nodes (id, url, started_at_ms, heartbeat_ms) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (id) DO UPDATE SET url = excluded.url, \
               started_at_ms = excluded.started_at_ms, heartbeat_ms = excluded.heartbeat_ms",
            params![node.id, node.url, to_ms(node.started_at), now_ms()],
        )?;
        for l in leases {
            tx.execute(
                "UPDATE leases SET publishing = ?1, status = ?2 WHERE stream_id = ?3 AND node_id = ?4",
                params![l.publishing, l.status, l.stream_id, node.id],
            )?;
        }
        let held = tx
            .prepare("SELECT stream_id FROM leases WHERE node_id = ?1 ORDER BY stream_id")?
            .query_map(params![node.id], |r| r.get(0))?
            .collect::<Result<Vec<i64>, _>>()?;
        tx.commit()?;
        Ok(held)
    }

    fn take_lease(
        &self,
        stream_id: i64,
        node: &str,
        take: LeaseTake,
    ) -> Result<Result<(), LeaseRow>, StoreError> {
        let conn = self.conn();
        let now = now_ms();
        let taken = conn
            .query_row(
                "INSERT INTO leases (stream_id, node_id, publishing, status, taken_at_ms) \
                 VALUES (?1, ?2, 1, '{}', ?3) \
                 ON CONFLICT (stream_id) DO UPDATE SET node_id = excluded.node_id, publishing = 1, \
                   status = CASE WHEN leases.node_id = excluded.node_id THEN leases.status \
                     ELSE excluded.status END, \
                   taken_at_ms = excluded.taken_at_ms \
                 WHERE leases.node_id = excluded.node_id OR (?4 AND NOT leases.publishing) \
                   OR NOT EXISTS (SELECT 1 FROM nodes \
                     WHERE nodes.id = leases.node_id AND nodes.heartbeat_ms > ?5) \
                 RETURNING stream_id",
                params![
                    stream_id,
                    node,
                    now,
                    take.from_idle,
                    now - dead_ms(take.dead_after)
                ],
                |_| Ok(()),
            )
            .optional()?;
        if taken.is_some() {
            return Ok(Ok(()));
        }
        let holder = conn
            .query_row(
                &format!("{LEASE_SELECT} WHERE l.stream_id = ?1"),
                params![stream_id],
                lease_row,
            )
            .optional()?;
        // Released between the two statements: the next attempt takes it.
        Ok(holder.map_or(Ok(()), Err))
    }

    fn release_lease(&self, stream_id: i64, node: &str) -> Result<bool, StoreError> {
        Ok(self.conn().execute(
            "DELETE FROM leases WHERE stream_id = ?1 AND node_id = ?2",
            params![stream_id, node],
        )? == 1)
    }

    fn live_leases(
        &self,
        stream_id: Option<i64>,
        dead_after: std::time::Duration,
    ) -> Result<Vec<LeaseRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "{LEASE_SELECT} WHERE n.heartbeat_ms > ?1 AND (?2 IS NULL OR l.stream_id = ?2) \
             ORDER BY l.stream_id"
        ))?;
        let rows = stmt
            .query_map(
                params![now_ms() - dead_ms(dead_after), stream_id],
                lease_row,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn node_left(&self, node: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM leases WHERE node_id = ?1", params![node])?;
        tx.execute(
            "UPDATE nodes SET heartbeat_ms = 0 WHERE id = ?1",
            params![node],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn nodes(&self) -> Result<Vec<NodeRow>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT id, url, started_at_ms, heartbeat_ms FROM nodes ORDER BY id")?;
        let now = now_ms();
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter()
            .map(|(id, url, started, beat)| {
                Ok(NodeRow {
                    started_at: from_ms("node", 0, started)?,
                    silent: std::time::Duration::from_millis((now - beat).max(0) as u64),
                    id,
                    url,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
