//! Restream records: a live stream sent on to another server — the target's URI
//! (its secret inside), the source (`origin` or a rung's name), whether it is active. What a
//! restream is doing now (live, bytes sent, last error) is the serving node's, not stored.

use time::OffsetDateTime;

use super::codec::{from_ms, to_ms};
use super::conn::{args, Backend, Conn, Pool, Row, Tx};
use super::{SqlStore, StoreError};

#[derive(Debug, Clone, PartialEq)]
pub struct RestreamSpec {
    pub stream_id: i64,
    pub name: String,
    pub uri: String,
    /// `origin`, or a rung's name.
    pub source: String,
    pub active: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RestreamRow {
    pub id: i64,
    pub spec: RestreamSpec,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

pub trait RestreamStore {
    /// `None`: the stream has `max_per_stream` restreams already (counted in the same
    /// transaction, so two creations at once cannot both pass).
    fn create_restream(
        &self,
        spec: &RestreamSpec,
        max_per_stream: u32,
        now: OffsetDateTime,
    ) -> Result<Option<RestreamRow>, StoreError>;
    fn get_restream(&self, id: i64) -> Result<Option<RestreamRow>, StoreError>;
    /// Oldest first, of one stream or of all.
    fn list_restreams(&self, stream_id: Option<i64>) -> Result<Vec<RestreamRow>, StoreError>;
    /// Replaces the owner's fields (the stream stays); `None` if it is gone.
    fn update_restream(
        &self,
        id: i64,
        spec: &RestreamSpec,
        now: OffsetDateTime,
    ) -> Result<Option<RestreamRow>, StoreError>;
    fn delete_restream(&self, id: i64) -> Result<bool, StoreError>;
}

const COLUMNS: &str = "id, stream_id, name, uri, source, active, created_at_ms, updated_at_ms";

fn from_row(r: &Row) -> Result<RestreamRow, StoreError> {
    let id = r.i64(0)?;
    Ok(RestreamRow {
        id,
        spec: RestreamSpec {
            stream_id: r.i64(1)?,
            name: r.string(2)?,
            uri: r.string(3)?,
            source: r.string(4)?,
            active: r.bool(5)?,
        },
        created_at: from_ms("restream", id, r.i64(6)?)?,
        updated_at: from_ms("restream", id, r.i64(7)?)?,
    })
}

fn get_in(c: &mut dyn Conn, id: i64) -> Result<Option<RestreamRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM restreams WHERE id = $1");
    c.query_opt(&sql, &args![id])?
        .map(|r| from_row(&r))
        .transpose()
}

impl<B: Backend> RestreamStore for SqlStore<B> {
    fn create_restream(
        &self,
        spec: &RestreamSpec,
        max_per_stream: u32,
        now: OffsetDateTime,
    ) -> Result<Option<RestreamRow>, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Serial, |c| {
            let count = c
                .query_one(
                    "SELECT COUNT(*) FROM restreams WHERE stream_id = $1",
                    &args![spec.stream_id],
                )?
                .i64(0)?;
            if count >= i64::from(max_per_stream) {
                return Ok(None);
            }
            let id = c
                .query_one(
                    "INSERT INTO restreams (stream_id, name, uri, source, active, created_at_ms, \
                       updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING id",
                    &args![
                        spec.stream_id,
                        spec.name.as_str(),
                        spec.uri.as_str(),
                        spec.source.as_str(),
                        spec.active,
                        to_ms(now)
                    ],
                )?
                .i64(0)?;
            get_in(c, id)
        })
    }

    fn get_restream(&self, id: i64) -> Result<Option<RestreamRow>, StoreError> {
        self.backend().with_conn(Pool::Main, |c| get_in(c, id))
    }

    fn list_restreams(&self, stream_id: Option<i64>) -> Result<Vec<RestreamRow>, StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            let rows = match stream_id {
                Some(id) => c.query(
                    &format!("SELECT {COLUMNS} FROM restreams WHERE stream_id = $1 ORDER BY id"),
                    &args![id],
                )?,
                None => c.query(&format!("SELECT {COLUMNS} FROM restreams ORDER BY id"), &[])?,
            };
            rows.iter().map(from_row).collect()
        })
    }

    fn update_restream(
        &self,
        id: i64,
        spec: &RestreamSpec,
        now: OffsetDateTime,
    ) -> Result<Option<RestreamRow>, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Plain, |c| {
            let changed = c.execute(
                "UPDATE restreams SET name = $1, uri = $2, source = $3, active = $4, \
                   updated_at_ms = $5 WHERE id = $6",
                &args![
                    spec.name.as_str(),
                    spec.uri.as_str(),
                    spec.source.as_str(),
                    spec.active,
                    to_ms(now),
                    id
                ],
            )?;
            if changed == 0 {
                return Ok(None);
            }
            get_in(c, id)
        })
    }

    fn delete_restream(&self, id: i64) -> Result<bool, StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            Ok(c.execute("DELETE FROM restreams WHERE id = $1", &args![id])? > 0)
        })
    }
}
