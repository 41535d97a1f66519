//! The cluster's records: node heartbeats and leases (one per live stream, held by the node
//! serving it). Every time here is the store's clock ([`super::dialect::Dialect::now_ms`]),
//! PostgreSQL's for several nodes, so the nodes' own clocks may differ. Runs on the cluster's
//! own connections ([`Pool::Cluster`]) so a heartbeat never queues behind API calls.

use std::time::Duration;

use super::codec::{from_ms, to_ms};
use super::conn::{args, Backend, Conn, Pool, Row, Tx};
use super::{LeaseRow, LeaseState, LeaseTake, NodeBeat, NodeRow, SqlStore, StoreError};
use crate::package::{Handover, Numbering};

/// How long after a node gave a stream up the node taking it bridges from where the first left
/// its viewers: past it they have long recovered (or gone), and a bridge would span a hole.
const HANDOVER_FOR: Duration = Duration::from_secs(30);

/// Insert-then-read rounds of a lease take before it is reported as contended.
const LEASE_TAKE_ROUNDS: usize = 3;

pub trait ClusterStore {
    /// Records `node`'s heartbeat (registering it), writes `leases`' state and numbering where
    /// `node` still holds them, and returns the ids of every stream `node` holds a lease on, ascending.
    fn heartbeat(&self, node: &NodeBeat<'_>, leases: &[LeaseState])
        -> Result<Vec<i64>, StoreError>;
    /// Takes `stream_id`'s lease for `node` (marked publishing, its status reset unless `node`
    /// held it already) when nobody holds it, `node` does, its holder is dead, or (`from_idle`)
    /// its holder no longer publishes, with the numbering the stream's last holder left.
    /// Otherwise `Ok(Err(holder))`. Atomic: of nodes taking one lease at once, one wins.
    fn take_lease(
        &self,
        stream_id: i64,
        node: &str,
        take: LeaseTake,
    ) -> Result<Result<Numbering, LeaseRow>, StoreError>;
    /// Gives up `stream_id`'s lease if `node` holds it; `true` if it did.
    fn release_lease(&self, stream_id: i64, node: &str) -> Result<bool, StoreError>;
    /// Gives up the leases `node` holds of `streams` at once (a stopping node), leaving each
    /// one's numbering for the next holder; returns the streams released.
    fn give_up_leases(
        &self,
        node: &str,
        streams: &[(i64, Option<Numbering>)],
    ) -> Result<Vec<i64>, StoreError>;
    /// The streams a stopping node gave up within the last `within` that no node has taken
    /// since: moving between nodes, ascending by id.
    fn moving_streams(&self, within: Duration) -> Result<Vec<i64>, StoreError>;
    /// The leases held by nodes heard from within `dead_after` (one stream's, or all),
    /// ascending by stream id.
    fn live_leases(
        &self,
        stream_id: Option<i64>,
        dead_after: Duration,
    ) -> Result<Vec<LeaseRow>, StoreError>;
    /// Every node that ever sent a heartbeat, by id.
    fn nodes(&self) -> Result<Vec<NodeRow>, StoreError>;
    /// A node stopping cleanly: its leases go at once and it counts as dead (not after the
    /// silence bound).
    fn node_left(&self, node: &str) -> Result<(), StoreError>;
}

/// A lease and its holder's URL (left join: a holder that never beat has none).
const LEASE_SELECT: &str = "SELECT l.stream_id, l.node_id, COALESCE(n.url, ''), l.publishing, \
    l.status FROM leases l LEFT JOIN nodes n ON n.id = l.node_id";

fn lease_row(r: &Row) -> Result<LeaseRow, StoreError> {
    Ok(LeaseRow {
        stream_id: r.i64(0)?,
        node_id: r.string(1)?,
        node_url: r.string(2)?,
        publishing: r.bool(3)?,
        status: r.string(4)?,
    })
}

/// Saves where `stream_id`'s numbering goes on (a value that fits: numbers stay far below
/// `i64::MAX`).
fn save_numbering(c: &mut dyn Conn, stream_id: i64, n: Numbering) -> Result<(), StoreError> {
    let (msn, disc) = (
        i64::try_from(n.next_msn).unwrap_or(i64::MAX),
        i64::try_from(n.next_discontinuity).unwrap_or(i64::MAX),
    );
    c.execute(
        "INSERT INTO stream_numbering (stream_id, next_msn, next_discontinuity) \
         VALUES ($1, $2, $3) ON CONFLICT (stream_id) DO UPDATE SET \
           next_msn = excluded.next_msn, next_discontinuity = excluded.next_discontinuity",
        &args![stream_id, msn, disc],
    )?;
    Ok(())
}

fn dead_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

impl<B: Backend> ClusterStore for SqlStore<B> {
    fn heartbeat(
        &self,
        node: &NodeBeat<'_>,
        leases: &[LeaseState],
    ) -> Result<Vec<i64>, StoreError> {
        self.backend().transaction(Pool::Cluster, Tx::Plain, |c| {
            let now = c.dialect().now_ms();
            c.execute(
                &format!(
                    "INSERT INTO nodes (id, url, started_at_ms, heartbeat_ms, headroom) \
                     VALUES ($1, $2, $3, {now}, $4) \
                     ON CONFLICT (id) DO UPDATE SET url = excluded.url, \
                       started_at_ms = excluded.started_at_ms, heartbeat_ms = excluded.heartbeat_ms, \
                       headroom = excluded.headroom"
                ),
                &args![node.id, node.url, to_ms(node.started_at), node.headroom],
            )?;
            for l in leases {
                let held = c.execute(
                    "UPDATE leases SET publishing = $1, status = $2 \
                     WHERE stream_id = $3 AND node_id = $4",
                    &args![l.publishing, l.status.as_str(), l.stream_id, node.id],
                )?;
                if let (1, Some(n)) = (held, l.numbering) {
                    save_numbering(c, l.stream_id, n)?;
                }
            }
            let held = c.query(
                "SELECT stream_id FROM leases WHERE node_id = $1 ORDER BY stream_id",
                &args![node.id],
            )?;
            held.iter().map(|r| r.i64(0)).collect()
        })
    }

    fn take_lease(
        &self,
        stream_id: i64,
        node: &str,
        take: LeaseTake,
    ) -> Result<Result<Numbering, LeaseRow>, StoreError> {
        self.backend().with_conn(Pool::Cluster, |c| {
            let now = c.dialect().now_ms();
            // ON CONFLICT … DO UPDATE … WHERE decides under the row's lock: of nodes taking
            // one lease at once, one wins.
            let take_sql = format!(
                "INSERT INTO leases (stream_id, node_id, publishing, status, taken_at_ms) \
                 VALUES ($1, $2, true, '{{}}', {now}) \
                 ON CONFLICT (stream_id) DO UPDATE SET node_id = excluded.node_id, \
                   publishing = true, \
                   status = CASE WHEN leases.node_id = excluded.node_id THEN leases.status \
                     ELSE excluded.status END, \
                   taken_at_ms = excluded.taken_at_ms \
                 WHERE leases.node_id = excluded.node_id OR ($3 AND NOT leases.publishing) \
                   OR NOT EXISTS (SELECT 1 FROM nodes \
                     WHERE nodes.id = leases.node_id AND nodes.heartbeat_ms > {now} - $4) \
                 RETURNING stream_id"
            );
            let holder_sql = format!("{LEASE_SELECT} WHERE l.stream_id = $1");
            let take_args = args![stream_id, node, take.from_idle, dead_ms(take.dead_after)];
            // A row released between the insert and the read: take it again. Each round means
            // a holder went away meanwhile, so a few rounds end it.
            for _ in 0..LEASE_TAKE_ROUNDS {
                if c.query_opt(&take_sql, &take_args)?.is_some() {
                    // A handover is for the node that takes the stream just after it was given
                    // up (its viewers are still there), and for that node only.
                    let left = c.query_opt(
                        &format!(
                            "SELECT next_msn, next_discontinuity, \
                               CASE WHEN given_up_ms > {now} - $2 THEN handover_msn END, \
                               CASE WHEN given_up_ms > {now} - $2 THEN handover_edge_ms END \
                             FROM stream_numbering WHERE stream_id = $1"
                        ),
                        &args![stream_id, dead_ms(HANDOVER_FOR)],
                    )?;
                    c.execute(
                        "UPDATE stream_numbering SET given_up_ms = NULL, handover_msn = NULL, \
                           handover_edge_ms = NULL \
                         WHERE stream_id = $1 AND (given_up_ms IS NOT NULL \
                           OR handover_msn IS NOT NULL)",
                        &args![stream_id],
                    )?;
                    let numbering = match left {
                        Some(r) => Numbering {
                            next_msn: u64::try_from(r.i64(0)?).unwrap_or(0),
                            next_discontinuity: u64::try_from(r.i64(1)?).unwrap_or(0),
                            handover: match (r.opt_i64(2)?, r.opt_i64(3)?) {
                                (Some(msn), Some(edge_ms)) => Some(Handover {
                                    first_msn: u64::try_from(msn).unwrap_or(0),
                                    edge_ms,
                                }),
                                _ => None,
                            },
                        },
                        None => Numbering::default(),
                    };
                    return Ok(Ok(numbering));
                }
                if let Some(holder) = c.query_opt(&holder_sql, &args![stream_id])? {
                    return Ok(Err(lease_row(&holder)?));
                }
            }
            Err(StoreError::Contended {
                what: format!("the lease of stream {stream_id}"),
            })
        })
    }

    fn release_lease(&self, stream_id: i64, node: &str) -> Result<bool, StoreError> {
        let released = self.backend().with_conn(Pool::Cluster, |c| {
            c.execute(
                "DELETE FROM leases WHERE stream_id = $1 AND node_id = $2",
                &args![stream_id, node],
            )
        })?;
        Ok(released == 1)
    }

    fn give_up_leases(
        &self,
        node: &str,
        streams: &[(i64, Option<Numbering>)],
    ) -> Result<Vec<i64>, StoreError> {
        self.backend().transaction(Pool::Cluster, Tx::Plain, |c| {
            let mut released = Vec::new();
            for &(stream_id, numbering) in streams {
                let gone = c.execute(
                    "DELETE FROM leases WHERE stream_id = $1 AND node_id = $2",
                    &args![stream_id, node],
                )?;
                if gone == 1 {
                    if let Some(n) = numbering {
                        save_numbering(c, stream_id, n)?;
                    }
                    let handover = numbering.and_then(|n| n.handover);
                    let now = c.dialect().now_ms();
                    c.execute(
                        &format!(
                            "UPDATE stream_numbering SET given_up_ms = {now}, handover_msn = $2, \
                               handover_edge_ms = $3 WHERE stream_id = $1"
                        ),
                        &args![
                            stream_id,
                            handover.map(|h| i64::try_from(h.first_msn).unwrap_or(i64::MAX)),
                            handover.map(|h| h.edge_ms)
                        ],
                    )?;
                    released.push(stream_id);
                }
            }
            Ok::<_, StoreError>(released)
        })
    }

    fn moving_streams(&self, within: Duration) -> Result<Vec<i64>, StoreError> {
        let rows = self.backend().with_conn(Pool::Main, |c| {
            let now = c.dialect().now_ms();
            c.query(
                &format!(
                    "SELECT stream_id FROM stream_numbering WHERE given_up_ms > {now} - $1 \
                     ORDER BY stream_id"
                ),
                &args![dead_ms(within)],
            )
        })?;
        rows.iter().map(|r| r.i64(0)).collect()
    }

    fn live_leases(
        &self,
        stream_id: Option<i64>,
        dead_after: Duration,
    ) -> Result<Vec<LeaseRow>, StoreError> {
        let rows = self.backend().with_conn(Pool::Main, |c| {
            let now = c.dialect().now_ms();
            c.query(
                &format!(
                    "{LEASE_SELECT} WHERE n.heartbeat_ms > {now} - $1 \
                     AND ($2::BIGINT IS NULL OR l.stream_id = $2) ORDER BY l.stream_id"
                ),
                &args![dead_ms(dead_after), stream_id],
            )
        })?;
        rows.iter().map(lease_row).collect()
    }

    fn nodes(&self) -> Result<Vec<NodeRow>, StoreError> {
        let rows = self.backend().with_conn(Pool::Cluster, |c| {
            let now = c.dialect().now_ms();
            c.query(
                &format!(
                    "SELECT id, url, started_at_ms, {now} - heartbeat_ms, headroom FROM nodes \
                     ORDER BY id"
                ),
                &[],
            )
        })?;
        rows.iter()
            .map(|r| {
                Ok(NodeRow {
                    id: r.string(0)?,
                    url: r.string(1)?,
                    started_at: from_ms("node", 0, r.i64(2)?)?,
                    silent: Duration::from_millis(r.i64(3)?.max(0) as u64),
                    headroom: r.opt_i64(4)?,
                })
            })
            .collect()
    }

    fn node_left(&self, node: &str) -> Result<(), StoreError> {
        self.backend().transaction(Pool::Cluster, Tx::Plain, |c| {
            c.execute("DELETE FROM leases WHERE node_id = $1", &args![node])?;
            c.execute(
                "UPDATE nodes SET heartbeat_ms = 0 WHERE id = $1",
                &args![node],
            )?;
            Ok(())
        })
    }
}
