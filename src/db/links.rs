//! The broadcast–stream link, one fact read from both sides: a stream's `broadcast_ids` and a
//! broadcast's `stream_ids` are rows of `broadcast_streams`. Changing a record's links checks
//! the other side exists and moves the revisions of the records that gain or lose a link, so a
//! compare-and-set on either side never writes back links read before the other side changed.
//! Runs inside the caller's [`super::conn::Tx::Serial`] transaction.

use time::OffsetDateTime;

use super::codec::to_ms;
use super::conn::{args, Conn};
use super::dialect::Dialect;
use super::StoreError;

/// Which end of a broadcast–stream link a record is.
#[derive(Clone, Copy)]
pub(super) enum Side {
    Stream,
    Broadcast,
}

/// The names a link query needs, seen from one side.
struct SideNames {
    /// This side's column in `broadcast_streams`.
    this: &'static str,
    /// The other side's column.
    other: &'static str,
    /// The other side's table.
    other_table: &'static str,
    /// The field of this side's settings that names the other side.
    field: &'static str,
    /// The other side's kind, for errors.
    kind: &'static str,
}

impl Side {
    fn names(self) -> SideNames {
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
fn id_set(wanted: &[i64]) -> Vec<i64> {
    let mut wanted = wanted.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    wanted
}

/// The records on the other side whose links change going from `current` to `wanted`.
fn touched(current: &[i64], wanted: &[i64]) -> Vec<i64> {
    current
        .iter()
        .filter(|c| !wanted.contains(c))
        .chain(wanted.iter().filter(|w| !current.contains(w)))
        .copied()
        .collect()
}

/// The column holding `side`'s links, read with [`super::conn::Row::ids`]; `table` is the
/// record's own table (`streams` or `broadcasts`) as the outer query names it.
pub(super) fn links_column(d: Dialect, side: Side, table: &str) -> String {
    let SideNames { this, other, .. } = side.names();
    d.id_array(
        other,
        &format!("FROM broadcast_streams WHERE {this} = {table}.id ORDER BY {other}"),
    )
}

/// The other side's ids linked to record `id`, ascending.
fn linked(c: &mut dyn Conn, side: Side, id: i64) -> Result<Vec<i64>, StoreError> {
    let SideNames { this, other, .. } = side.names();
    let rows = c.query(
        &format!("SELECT {other} FROM broadcast_streams WHERE {this} = $1 ORDER BY {other}"),
        &args![id],
    )?;
    rows.iter().map(|r| r.i64(0)).collect()
}

/// Makes record `id`'s links exactly `wanted`: every wanted id must exist
/// ([`StoreError::UnknownReference`], the first missing in ascending order, otherwise); the
/// records on the other side that gain or lose a link get a new revision (broadcasts also a new
/// `updated_at`), as their list changed.
pub(super) fn set_links(
    c: &mut dyn Conn,
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
    let current = linked(c, side, id)?;
    if current == wanted {
        return Ok(());
    }
    let list = c.dialect().id_list(1);
    let found = c.query(
        &format!("SELECT id FROM {other_table} WHERE id IN {list}"),
        &args![wanted.clone()],
    )?;
    let found: Vec<i64> = found.iter().map(|r| r.i64(0)).collect::<Result<_, _>>()?;
    if let Some(&w) = wanted.iter().find(|w| !found.contains(w)) {
        return Err(StoreError::UnknownReference { field, kind, id: w });
    }
    c.execute(
        &format!("DELETE FROM broadcast_streams WHERE {this} = $1"),
        &args![id],
    )?;
    let list = c.dialect().id_list(2);
    c.execute(
        &format!(
            "INSERT INTO broadcast_streams ({this}, {other}) \
             SELECT $1::BIGINT, value FROM {list} AS ids"
        ),
        &args![id, wanted.clone()],
    )?;
    bump(c, side, touched(&current, &wanted), now)
}

/// A new revision for the records on the other side of `side` whose links changed.
fn bump(
    c: &mut dyn Conn,
    side: Side,
    other_ids: Vec<i64>,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    if other_ids.is_empty() {
        return Ok(());
    }
    let list = c.dialect().id_list(1);
    match side {
        Side::Stream => c.execute(
            &format!(
                "UPDATE broadcasts SET revision = revision + 1, updated_at_ms = $2 \
                 WHERE id IN {list}"
            ),
            &args![other_ids, to_ms(now)],
        )?,
        Side::Broadcast => c.execute(
            &format!("UPDATE streams SET revision = revision + 1 WHERE id IN {list}"),
            &args![other_ids],
        )?,
    };
    Ok(())
}

/// Drops every link of record `id` (it is being deleted), moving the other side's revisions.
pub(super) fn unlink_all(
    c: &mut dyn Conn,
    side: Side,
    id: i64,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    let SideNames { this, .. } = side.names();
    let others = linked(c, side, id)?;
    bump(c, side, others, now)?;
    c.execute(
        &format!("DELETE FROM broadcast_streams WHERE {this} = $1"),
        &args![id],
    )?;
    Ok(())
}
