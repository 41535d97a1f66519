//! Streams: their settings documents, their links to broadcasts (in [`super::links`]), and the
//! live-state timestamps the ingest side owns.

use time::OffsetDateTime;

use super::codec::{doc_without, fold, stream_from_row, to_ms, STREAM_COLUMNS};
use super::conn::{args, sql_offset, Backend, Conn, Pool, Tx, Value};
use super::links::{links_column, set_links, unlink_all, Side};
use super::webhooks::append_in;
use super::{SqlStore, StoreError, StreamRow, StreamSettings, Update};
use crate::events::Event;

pub trait StreamStore {
    /// `settings.broadcast_ids` must name existing broadcasts ([`StoreError::UnknownReference`]
    /// otherwise), here and in `update_stream`.
    fn create_stream(
        &self,
        settings: &StreamSettings,
        token: &str,
        now: OffsetDateTime,
    ) -> Result<StreamRow, StoreError>;
    fn get_stream(&self, id: i64) -> Result<Option<StreamRow>, StoreError>;
    /// Newest first; returns the page and the total number of streams.
    /// A page of streams, newest first; `search`: only those whose name contains it (case
    /// folded).
    fn list_streams(
        &self,
        search: Option<&str>,
        offset: u64,
        limit: u32,
    ) -> Result<(Vec<StreamRow>, u64), StoreError>;
    /// Replaces the settings if the record is still at `revision`.
    fn update_stream(
        &self,
        id: i64,
        revision: i64,
        settings: &StreamSettings,
    ) -> Result<Update<StreamRow>, StoreError>;
    fn delete_stream(&self, id: i64) -> Result<bool, StoreError>;
    /// Folds the names of the streams that have none folded (written before schema 13, or by
    /// an older node of a cluster since); a record whose document does not parse is left for
    /// its own read to report. Returns how many were folded.
    fn fold_missing_names(&self) -> Result<u64, StoreError>;
    /// Live-state timestamps owned by the ingest side; `None` leaves a column as it is.
    fn set_stream_times(
        &self,
        id: i64,
        started_at_primary: Option<OffsetDateTime>,
        started_at_backup: Option<OffsetDateTime>,
        finished_at_primary: Option<OffsetDateTime>,
    ) -> Result<bool, StoreError>;
}

/// The columns of a stream record, its links last.
fn select(c: &dyn Conn) -> String {
    let links = links_column(c.dialect(), Side::Stream, "streams");
    format!("SELECT {STREAM_COLUMNS}, {links} FROM streams")
}

fn get_in(c: &mut dyn Conn, id: i64) -> Result<Option<StreamRow>, StoreError> {
    let sql = format!("{} WHERE id = $1", select(c));
    c.query_opt(&sql, &args![id])?
        .map(|r| stream_from_row(&r))
        .transpose()
}

impl<B: Backend> StreamStore for SqlStore<B> {
    fn create_stream(
        &self,
        settings: &StreamSettings,
        token: &str,
        now: OffsetDateTime,
    ) -> Result<StreamRow, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            let id = c
                .query_one(
                    "INSERT INTO streams (revision, token, created_at_ms, settings, name_folded) \
                     VALUES (1, $1, $2, $3, $4) RETURNING id",
                    &args![
                        token,
                        to_ms(now),
                        doc_without(settings, "broadcast_ids"),
                        Value::ByteText(fold(&settings.name))
                    ],
                )?
                .i64(0)?;
            set_links(c, Side::Stream, id, &settings.broadcast_ids, now)?;
            append_in(c, &Event::StreamCreated { stream_id: id }, None)?;
            get_in(c, id)?.ok_or(StoreError::Corrupt {
                kind: "stream",
                id,
                reason: "vanished after insert".into(),
            })
        })
    }

    fn get_stream(&self, id: i64) -> Result<Option<StreamRow>, StoreError> {
        self.backend().with_conn(Pool::Main, |c| get_in(c, id))
    }

    fn list_streams(
        &self,
        search: Option<&str>,
        offset: u64,
        limit: u32,
    ) -> Result<(Vec<StreamRow>, u64), StoreError> {
        let search = search.map(|s| Value::ByteText(fold(s)));
        self.backend().transaction(Pool::Main, Tx::Snapshot, |c| {
            let filter = format!(
                "WHERE ($1::BYTEA IS NULL OR {})",
                c.dialect().contains("name_folded", 1)
            );
            let total = c
                .query_one(
                    &format!("SELECT COUNT(*) FROM streams {filter}"),
                    &args![search.clone()],
                )?
                .i64(0)?;
            let sql = format!("{} {filter} ORDER BY id DESC LIMIT $2 OFFSET $3", select(c));
            let rows = c.query(&sql, &args![search, limit, sql_offset(offset)])?;
            let rows = rows.iter().map(stream_from_row).collect::<Result<_, _>>()?;
            Ok((rows, total as u64))
        })
    }

    fn fold_missing_names(&self) -> Result<u64, StoreError> {
        let rows = self.backend().with_conn(Pool::Main, |c| {
            c.query(
                "SELECT id, settings FROM streams WHERE name_folded IS NULL",
                &[],
            )
        })?;
        let mut folded = 0;
        for r in &rows {
            let id = r.i64(0)?;
            let name = serde_json::from_str::<serde_json::Value>(&r.string(1)?)
                .ok()
                .and_then(|doc| Some(doc.get("name")?.as_str()?.to_owned()));
            let Some(name) = name else { continue };
            folded += self.backend().with_conn(Pool::Main, |c| {
                c.execute(
                    "UPDATE streams SET name_folded = $1 WHERE id = $2 AND name_folded IS NULL",
                    &args![Value::ByteText(fold(&name)), id],
                )
            })?;
        }
        Ok(folded)
    }

    fn update_stream(
        &self,
        id: i64,
        revision: i64,
        settings: &StreamSettings,
    ) -> Result<Update<StreamRow>, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            let changed = c.execute(
                "UPDATE streams SET settings = $1, name_folded = $4, revision = revision + 1 \
                 WHERE id = $2 AND revision = $3",
                &args![
                    doc_without(settings, "broadcast_ids"),
                    id,
                    revision,
                    Value::ByteText(fold(&settings.name))
                ],
            )?;
            if changed == 1 {
                // An unknown broadcast drops the transaction: nothing of the update is kept.
                let now = OffsetDateTime::now_utc();
                set_links(c, Side::Stream, id, &settings.broadcast_ids, now)?;
                append_in(c, &Event::StreamUpdated { stream_id: id }, None)?;
            }
            Ok(match (changed, get_in(c, id)?) {
                (1, Some(row)) => Update::Done(row),
                (_, None) => Update::NotFound,
                _ => Update::Stale,
            })
        })
    }

    fn delete_stream(&self, id: i64) -> Result<bool, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            unlink_all(c, Side::Stream, id, OffsetDateTime::now_utc())?;
            let deleted = c.execute("DELETE FROM streams WHERE id = $1", &args![id])? == 1;
            c.execute("DELETE FROM overlays WHERE stream_id = $1", &args![id])?;
            c.execute(
                "DELETE FROM source_samples WHERE stream_id = $1",
                &args![id],
            )?;
            if deleted {
                append_in(c, &Event::StreamDeleted { stream_id: id }, None)?;
            }
            Ok(deleted)
        })
    }

    fn set_stream_times(
        &self,
        id: i64,
        started_at_primary: Option<OffsetDateTime>,
        started_at_backup: Option<OffsetDateTime>,
        finished_at_primary: Option<OffsetDateTime>,
    ) -> Result<bool, StoreError> {
        let changed = self.backend().with_conn(Pool::Main, |c| {
            c.execute(
                "UPDATE streams SET \
                   started_at_primary_ms = COALESCE($2::BIGINT, started_at_primary_ms), \
                   started_at_backup_ms = COALESCE($3::BIGINT, started_at_backup_ms), \
                   finished_at_primary_ms = COALESCE($4::BIGINT, finished_at_primary_ms) \
                 WHERE id = $1",
                &args![
                    id,
                    started_at_primary.map(to_ms),
                    started_at_backup.map(to_ms),
                    finished_at_primary.map(to_ms)
                ],
            )
        })?;
        Ok(changed == 1)
    }
}
