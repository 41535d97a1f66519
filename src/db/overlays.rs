//! A stream's HTML overlays: added and changed several at a time, all or nothing, within a
//! maximum per stream.

use time::OffsetDateTime;

use super::codec::{overlay_from_row, to_json, to_ms, OVERLAY_COLUMNS};
use super::conn::{args, exists, Backend, Conn, Pool, Tx};
use super::{OverlayRow, SqlStore, StoreError};
use crate::overlay::OverlaySpec;

pub trait OverlayStore {
    /// A stream's overlays, oldest first.
    fn list_overlays(&self, stream_id: i64) -> Result<Vec<OverlayRow>, StoreError>;
    /// Adds overlays to a stream in one transaction, unless it would then have more than
    /// `max` (`Ok(None)`: nothing added) or the stream does not exist (`Ok(None)` too: the
    /// caller looked it up first).
    fn create_overlays(
        &self,
        stream_id: i64,
        specs: &[OverlaySpec],
        max: usize,
        now: OffsetDateTime,
    ) -> Result<Option<Vec<OverlayRow>>, StoreError>;
    /// Replaces overlays' specs in one transaction; `Ok(None)` (nothing changed) when one of
    /// the ids is not an overlay of this stream.
    fn update_overlays(
        &self,
        stream_id: i64,
        updates: &[(i64, OverlaySpec)],
        now: OffsetDateTime,
    ) -> Result<Option<Vec<OverlayRow>>, StoreError>;
    fn delete_overlay(&self, stream_id: i64, id: i64) -> Result<bool, StoreError>;
}

fn list_in(c: &mut dyn Conn, stream_id: i64) -> Result<Vec<OverlayRow>, StoreError> {
    let sql = format!("SELECT {OVERLAY_COLUMNS} FROM overlays WHERE stream_id = $1 ORDER BY id");
    let rows = c.query(&sql, &args![stream_id])?;
    rows.iter().map(overlay_from_row).collect()
}

/// Ends an update transaction without writing: one of the ids is not the stream's.
enum UpdateAbort {
    NotOurs,
    Store(StoreError),
}

impl From<StoreError> for UpdateAbort {
    fn from(e: StoreError) -> Self {
        UpdateAbort::Store(e)
    }
}

impl<B: Backend> OverlayStore for SqlStore<B> {
    fn list_overlays(&self, stream_id: i64) -> Result<Vec<OverlayRow>, StoreError> {
        self.backend()
            .with_conn(Pool::Main, |c| list_in(c, stream_id))
    }

    fn create_overlays(
        &self,
        stream_id: i64,
        specs: &[OverlaySpec],
        max: usize,
        now: OffsetDateTime,
    ) -> Result<Option<Vec<OverlayRow>>, StoreError> {
        // The count and the inserts in one serial transaction: racing adds cannot both pass.
        self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            let stream_exists = exists(c, "streams", stream_id)?;
            let count = c
                .query_one(
                    "SELECT COUNT(*) FROM overlays WHERE stream_id = $1",
                    &args![stream_id],
                )?
                .i64(0)?;
            if !stream_exists || count as usize + specs.len() > max {
                return Ok(None);
            }
            let mut ids = Vec::with_capacity(specs.len());
            for spec in specs {
                let id = c
                    .query_one(
                        "INSERT INTO overlays (stream_id, created_at_ms, updated_at_ms, spec) \
                         VALUES ($1, $2, $2, $3) RETURNING id",
                        &args![stream_id, to_ms(now), to_json(spec)],
                    )?
                    .i64(0)?;
                ids.push(id);
            }
            let rows = list_in(c, stream_id)?;
            Ok(Some(
                rows.into_iter().filter(|r| ids.contains(&r.id)).collect(),
            ))
        })
    }

    fn update_overlays(
        &self,
        stream_id: i64,
        updates: &[(i64, OverlaySpec)],
        now: OffsetDateTime,
    ) -> Result<Option<Vec<OverlayRow>>, StoreError> {
        let updated = self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            for (id, spec) in updates {
                let changed = c.execute(
                    "UPDATE overlays SET spec = $1, updated_at_ms = $2 \
                     WHERE id = $3 AND stream_id = $4",
                    &args![to_json(spec), to_ms(now), *id, stream_id],
                )?;
                if changed != 1 {
                    return Err(UpdateAbort::NotOurs);
                }
            }
            Ok(list_in(c, stream_id)?)
        });
        match updated {
            Ok(rows) => Ok(Some(
                rows.into_iter()
                    .filter(|r| updates.iter().any(|(id, _)| *id == r.id))
                    .collect(),
            )),
            Err(UpdateAbort::NotOurs) => Ok(None),
            Err(UpdateAbort::Store(e)) => Err(e),
        }
    }

    fn delete_overlay(&self, stream_id: i64, id: i64) -> Result<bool, StoreError> {
        let deleted = self.backend().with_conn(Pool::Main, |c| {
            c.execute(
                "DELETE FROM overlays WHERE id = $1 AND stream_id = $2",
                &args![id, stream_id],
            )
        })?;
        Ok(deleted == 1)
    }
}
