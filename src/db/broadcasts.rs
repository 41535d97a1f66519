//! Broadcasts: their settings documents and their links to streams (in [`super::links`]).

use time::OffsetDateTime;

use super::codec::{broadcast_from_row, doc_without, to_ms, BROADCAST_COLUMNS};
use super::conn::{args, sql_offset, Backend, Conn, Pool, Tx};
use super::links::{links_column, set_links, unlink_all, Side};
use super::{BroadcastRow, BroadcastSettings, SqlStore, StoreError, Update};

pub trait BroadcastStore {
    /// `settings.stream_ids` must name existing streams ([`StoreError::UnknownReference`]
    /// otherwise), here and in `update_broadcast`. Changing the links also moves the linked
    /// streams' revisions (and a stream's links move the broadcasts'), so a compare-and-set on
    /// either side never writes back links it read before the other side changed them.
    fn create_broadcast(
        &self,
        settings: &BroadcastSettings,
        now: OffsetDateTime,
    ) -> Result<BroadcastRow, StoreError>;
    fn get_broadcast(&self, id: i64) -> Result<Option<BroadcastRow>, StoreError>;
    /// Newest first; returns the page and the total number of broadcasts.
    fn list_broadcasts(
        &self,
        offset: u64,
        limit: u32,
    ) -> Result<(Vec<BroadcastRow>, u64), StoreError>;
    fn update_broadcast(
        &self,
        id: i64,
        revision: i64,
        settings: &BroadcastSettings,
        now: OffsetDateTime,
    ) -> Result<Update<BroadcastRow>, StoreError>;
    /// Removes the broadcast and its links (the streams stay).
    fn delete_broadcast(&self, id: i64) -> Result<bool, StoreError>;
}

/// The columns of a broadcast record, its links last.
fn select(c: &dyn Conn) -> String {
    let links = links_column(c.dialect(), Side::Broadcast, "broadcasts");
    format!("SELECT {BROADCAST_COLUMNS}, {links} FROM broadcasts")
}

fn get_in(c: &mut dyn Conn, id: i64) -> Result<Option<BroadcastRow>, StoreError> {
    let sql = format!("{} WHERE id = $1", select(c));
    c.query_opt(&sql, &args![id])?
        .map(|r| broadcast_from_row(&r))
        .transpose()
}

impl<B: Backend> BroadcastStore for SqlStore<B> {
    fn create_broadcast(
        &self,
        settings: &BroadcastSettings,
        now: OffsetDateTime,
    ) -> Result<BroadcastRow, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            let id = c
                .query_one(
                    "INSERT INTO broadcasts (revision, created_at_ms, updated_at_ms, settings) \
                     VALUES (1, $1, $1, $2) RETURNING id",
                    &args![to_ms(now), doc_without(settings, "stream_ids")],
                )?
                .i64(0)?;
            set_links(c, Side::Broadcast, id, &settings.stream_ids, now)?;
            get_in(c, id)?.ok_or(StoreError::Corrupt {
                kind: "broadcast",
                id,
                reason: "vanished after insert".into(),
            })
        })
    }

    fn get_broadcast(&self, id: i64) -> Result<Option<BroadcastRow>, StoreError> {
        self.backend().with_conn(Pool::Main, |c| get_in(c, id))
    }

    fn list_broadcasts(
        &self,
        offset: u64,
        limit: u32,
    ) -> Result<(Vec<BroadcastRow>, u64), StoreError> {
        self.backend().transaction(Pool::Main, Tx::Snapshot, |c| {
            let total = c
                .query_one("SELECT COUNT(*) FROM broadcasts", &[])?
                .i64(0)?;
            let sql = format!("{} ORDER BY id DESC LIMIT $1 OFFSET $2", select(c));
            let rows = c.query(&sql, &args![limit, sql_offset(offset)])?;
            let rows = rows
                .iter()
                .map(broadcast_from_row)
                .collect::<Result<_, _>>()?;
            Ok((rows, total as u64))
        })
    }

    fn update_broadcast(
        &self,
        id: i64,
        revision: i64,
        settings: &BroadcastSettings,
        now: OffsetDateTime,
    ) -> Result<Update<BroadcastRow>, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            let changed = c.execute(
                "UPDATE broadcasts SET settings = $1, updated_at_ms = $2, \
                   revision = revision + 1 WHERE id = $3 AND revision = $4",
                &args![
                    doc_without(settings, "stream_ids"),
                    to_ms(now),
                    id,
                    revision
                ],
            )?;
            if changed == 1 {
                set_links(c, Side::Broadcast, id, &settings.stream_ids, now)?;
            }
            Ok(match (changed, get_in(c, id)?) {
                (1, Some(row)) => Update::Done(row),
                (_, None) => Update::NotFound,
                _ => Update::Stale,
            })
        })
    }

    fn delete_broadcast(&self, id: i64) -> Result<bool, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            unlink_all(c, Side::Broadcast, id, OffsetDateTime::now_utc())?;
            Ok(c.execute("DELETE FROM broadcasts WHERE id = $1", &args![id])? == 1)
        })
    }
}
