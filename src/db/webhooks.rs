//! Webhooks and their outbox: the endpoints a customer registered, the events written for them
//! (in the transaction of the change that caused them, where there is one), and each event's
//! delivery to each endpoint — claimed by one node at a time, oldest first per stream.
//!
//! Times that decide claims and retries are the store's clock ([`Dialect::now_ms`]), so the
//! nodes' own clocks may differ.

use std::time::Duration;

use time::OffsetDateTime;

use super::codec::{from_json, from_ms, to_json, to_ms};
use super::conn::{args, sql_offset, Backend, Conn, Pool, Row, Tx};
use super::{SqlStore, StoreError};
use crate::events::Event;

/// An endpoint the events are POSTed to.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRow {
    pub id: i64,
    pub spec: WebhookSpec,
    /// The HMAC key of the signature header; shown once, when created or rotated.
    pub secret: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// What the owner sets.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSpec {
    pub url: String,
    /// Event types wanted (`Event`'s `type` names); `None`: all.
    pub events: Option<Vec<String>>,
    pub active: bool,
}

impl WebhookSpec {
    fn wants(&self, kind: &str) -> bool {
        self.events
            .as_ref()
            .is_none_or(|list| list.iter().any(|k| k == kind))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Not yet delivered; retried until delivered or too old.
    Pending,
    Delivered,
    /// Given up: no 2xx within the retry window.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    fn parse(text: &str, id: i64) -> Result<DeliveryStatus, StoreError> {
        match text {
            "pending" => Ok(DeliveryStatus::Pending),
            "delivered" => Ok(DeliveryStatus::Delivered),
            "failed" => Ok(DeliveryStatus::Failed),
            other => Err(StoreError::Corrupt {
                kind: "webhook delivery",
                id,
                reason: format!("unknown status {other:?}"),
            }),
        }
    }
}

/// One event's delivery to one webhook, as the deliveries list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRow {
    pub id: i64,
    pub webhook_id: i64,
    pub event_id: i64,
    pub event_type: String,
    pub stream_id: i64,
    pub status: DeliveryStatus,
    pub attempts: u32,
    /// The HTTP status of the last answer, if one came.
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    /// When a pending delivery is tried next.
    pub next_attempt_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub finished_at: Option<OffsetDateTime>,
}

/// An event as written to the outbox: the body's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEvent {
    pub id: i64,
    pub kind: String,
    pub stream_id: i64,
    pub created_at: OffsetDateTime,
    /// The event's own fields (JSON object text).
    pub data: String,
}

/// A delivery this node claimed: where, how to sign, what.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub id: i64,
    pub webhook_id: i64,
    pub url: String,
    pub secret: String,
    pub attempts: u32,
    pub event: OutboxEvent,
}

/// How an attempt went.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    Delivered {
        status: u16,
    },
    Failed {
        status: Option<u16>,
        error: String,
        /// Tried again this much later, unless that is past the retry window.
        retry_in: Duration,
    },
}

pub trait WebhookStore {
    fn create_webhook(
        &self,
        spec: &WebhookSpec,
        secret: &str,
        now: OffsetDateTime,
    ) -> Result<WebhookRow, StoreError>;
    fn get_webhook(&self, id: i64) -> Result<Option<WebhookRow>, StoreError>;
    /// Oldest first; the page and the total.
    fn list_webhooks(&self, offset: u64, limit: u32) -> Result<(Vec<WebhookRow>, u64), StoreError>;
    /// Replaces the owner's fields; `None` if the webhook is gone.
    fn update_webhook(
        &self,
        id: i64,
        spec: &WebhookSpec,
        now: OffsetDateTime,
    ) -> Result<Option<WebhookRow>, StoreError>;
    /// A new signing secret; `None` if the webhook is gone.
    fn set_webhook_secret(
        &self,
        id: i64,
        secret: &str,
        now: OffsetDateTime,
    ) -> Result<Option<WebhookRow>, StoreError>;
    /// Removes it and its deliveries.
    fn delete_webhook(&self, id: i64) -> Result<bool, StoreError>;
    /// Newest first; the page and the number matching before paging.
    fn list_deliveries(
        &self,
        webhook_id: i64,
        status: Option<DeliveryStatus>,
        offset: u64,
        limit: u32,
    ) -> Result<(Vec<DeliveryRow>, u64), StoreError>;
    /// Writes each of `events` for every active webhook that wants it (nothing when none does),
    /// all in one transaction: live facts, which have no transaction of their own. The node
    /// beside each: where it happened. Returns the deliveries written.
    fn append_events(&self, events: &[(&Event, Option<&str>)]) -> Result<usize, StoreError>;
    /// Claims up to `max` deliveries that are due for `lease`: per webhook and stream only the
    /// oldest pending one, so a stream's events arrive in order; none of an inactive webhook;
    /// none another node holds.
    fn claim_deliveries(
        &self,
        node: &str,
        lease: Duration,
        max: u32,
    ) -> Result<Vec<DueDelivery>, StoreError>;
    /// Records an attempt at a delivery `node` claimed. A failed one that would next be tried
    /// later than `window` after the event is marked failed.
    fn finish_delivery(
        &self,
        id: i64,
        node: &str,
        attempt: &Attempt,
        window: Duration,
    ) -> Result<(), StoreError>;
    /// Gives back the claims `node` holds: a restarted node retries at once what it was
    /// delivering when it stopped, rather than after the lease.
    fn release_claims(&self, node: &str) -> Result<u64, StoreError>;
    /// Marks pending deliveries older than `window` failed (those of an inactive webhook),
    /// removes finished ones older than `keep` and events left without a delivery. Returns
    /// the deliveries removed.
    fn prune_deliveries(&self, window: Duration, keep: Duration) -> Result<u64, StoreError>;
}

const WEBHOOK_COLUMNS: &str = "id, url, events, active, secret, created_at_ms, updated_at_ms";

fn webhook_from_row(r: &Row) -> Result<WebhookRow, StoreError> {
    let id = r.i64(0)?;
    let events = match r.opt_string(2)? {
        Some(text) => Some(from_json("webhook", id, &text)?),
        None => None,
    };
    Ok(WebhookRow {
        id,
        spec: WebhookSpec {
            url: r.string(1)?,
            events,
            active: r.bool(3)?,
        },
        secret: r.string(4)?,
        created_at: from_ms("webhook", id, r.i64(5)?)?,
        updated_at: from_ms("webhook", id, r.i64(6)?)?,
    })
}

const DELIVERY_COLUMNS: &str = "d.id, d.webhook_id, d.event_id, e.type, d.stream_id, d.status, \
    d.attempts, d.last_status, d.last_error, d.next_attempt_ms, d.created_at_ms, d.finished_at_ms";

fn delivery_from_row(r: &Row) -> Result<DeliveryRow, StoreError> {
    let id = r.i64(0)?;
    let status = DeliveryStatus::parse(&r.string(5)?, id)?;
    let at = |ms: Option<i64>| ms.map(|ms| from_ms("webhook delivery", id, ms)).transpose();
    Ok(DeliveryRow {
        id,
        webhook_id: r.i64(1)?,
        event_id: r.i64(2)?,
        event_type: r.string(3)?,
        stream_id: r.i64(4)?,
        status,
        attempts: r.i64(6)?.clamp(0, u32::MAX as i64) as u32,
        last_status: r.opt_i64(7)?.map(|s| s.clamp(0, 999) as u16),
        last_error: r.opt_string(8)?,
        next_attempt_at: match status {
            DeliveryStatus::Pending => at(Some(r.i64(9)?))?,
            _ => None,
        },
        created_at: from_ms("webhook delivery", id, r.i64(10)?)?,
        finished_at: at(r.opt_i64(11)?)?,
    })
}

fn get_in(c: &mut dyn Conn, id: i64) -> Result<Option<WebhookRow>, StoreError> {
    let sql = format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1");
    c.query_opt(&sql, &args![id])?
        .map(|r| webhook_from_row(&r))
        .transpose()
}

fn events_column(spec: &WebhookSpec) -> Option<String> {
    spec.events.as_ref().map(to_json)
}

/// The outbox row of `event` and a pending delivery for each active webhook that wants it,
/// on `c` (inside the caller's transaction when it has one). The body's `data` is the event's
/// own fields, `node` added when given.
pub(super) fn append_in(
    c: &mut dyn Conn,
    event: &Event,
    node: Option<&str>,
) -> Result<usize, StoreError> {
    let mut fields = match serde_json::to_value(event) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => unreachable!("events serialize to objects"),
    };
    let kind = match fields.remove("type") {
        Some(serde_json::Value::String(kind)) => kind,
        _ => unreachable!("events carry their type"),
    };
    fields.remove("stream_id");
    if let Some(node) = node {
        fields.insert("node".into(), node.into());
    }
    let hooks = c.query(
        &format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE active = $1"),
        &args![true],
    )?;
    let mut wanting = Vec::new();
    for row in &hooks {
        let hook = webhook_from_row(row)?;
        if hook.spec.wants(&kind) {
            wanting.push(hook.id);
        }
    }
    if wanting.is_empty() {
        return Ok(0);
    }
    let now = c.dialect().now_ms();
    let written = c.query_one(
        &format!(
            "INSERT INTO webhook_events (type, stream_id, created_at_ms, data) \
             VALUES ($1, $2, {now}, $3) RETURNING id, created_at_ms"
        ),
        &args![
            kind,
            event.stream_id(),
            serde_json::Value::Object(fields).to_string()
        ],
    )?;
    let (event_id, created) = (written.i64(0)?, written.i64(1)?);
    for webhook in &wanting {
        c.execute(
            "INSERT INTO webhook_deliveries (webhook_id, event_id, stream_id, status, attempts, \
               next_attempt_ms, created_at_ms) VALUES ($1, $2, $3, 'pending', 0, $4, $4)",
            &args![*webhook, event_id, event.stream_id(), created],
        )?;
    }
    Ok(wanting.len())
}

/// Runs an update of webhook `id` and reads it back, in one transaction.
fn changed(
    backend: &impl Backend,
    id: i64,
    sql: &str,
    args: &[super::conn::Value],
) -> Result<Option<WebhookRow>, StoreError> {
    backend.transaction(Pool::Main, Tx::Plain, |c| {
        c.execute(sql, args)?;
        get_in(c, id)
    })
}

impl<B: Backend> WebhookStore for SqlStore<B> {
    fn create_webhook(
        &self,
        spec: &WebhookSpec,
        secret: &str,
        now: OffsetDateTime,
    ) -> Result<WebhookRow, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Plain, |c| {
            let id = c
                .query_one(
                    "INSERT INTO webhooks (url, events, active, secret, created_at_ms, \
                       updated_at_ms) VALUES ($1, $2, $3, $4, $5, $5) RETURNING id",
                    &args![
                        spec.url.as_str(),
                        events_column(spec),
                        spec.active,
                        secret,
                        to_ms(now)
                    ],
                )?
                .i64(0)?;
            get_in(c, id)?.ok_or(StoreError::Corrupt {
                kind: "webhook",
                id,
                reason: "vanished after insert".into(),
            })
        })
    }

    fn get_webhook(&self, id: i64) -> Result<Option<WebhookRow>, StoreError> {
        self.backend().with_conn(Pool::Main, |c| get_in(c, id))
    }

    fn list_webhooks(&self, offset: u64, limit: u32) -> Result<(Vec<WebhookRow>, u64), StoreError> {
        self.backend().transaction(Pool::Main, Tx::Snapshot, |c| {
            let total = c.query_one("SELECT COUNT(*) FROM webhooks", &[])?.i64(0)?;
            let sql =
                format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks ORDER BY id LIMIT $1 OFFSET $2");
            let rows = c.query(&sql, &args![limit, sql_offset(offset)])?;
            let rows = rows
                .iter()
                .map(webhook_from_row)
                .collect::<Result<_, _>>()?;
            Ok((rows, total as u64))
        })
    }

    fn update_webhook(
        &self,
        id: i64,
        spec: &WebhookSpec,
        now: OffsetDateTime,
    ) -> Result<Option<WebhookRow>, StoreError> {
        let sql = "UPDATE webhooks SET url = $1, events = $2, active = $3, updated_at_ms = $4 \
                   WHERE id = $5";
        let args = args![
            spec.url.as_str(),
            events_column(spec),
            spec.active,
            to_ms(now),
            id
        ];
        changed(self.backend(), id, sql, &args)
    }

    fn set_webhook_secret(
        &self,
        id: i64,
        secret: &str,
        now: OffsetDateTime,
    ) -> Result<Option<WebhookRow>, StoreError> {
        let sql = "UPDATE webhooks SET secret = $1, updated_at_ms = $2 WHERE id = $3";
        changed(self.backend(), id, sql, &args![secret, to_ms(now), id])
    }

    fn delete_webhook(&self, id: i64) -> Result<bool, StoreError> {
        // Its deliveries go with it (ON DELETE CASCADE); their events are pruned later.
        let deleted = self.backend().with_conn(Pool::Main, |c| {
            c.execute("DELETE FROM webhooks WHERE id = $1", &args![id])
        })?;
        Ok(deleted == 1)
    }

    fn list_deliveries(
        &self,
        webhook_id: i64,
        status: Option<DeliveryStatus>,
        offset: u64,
        limit: u32,
    ) -> Result<(Vec<DeliveryRow>, u64), StoreError> {
        // `$2 = ''` matches every status: one statement for both cases, typed alike.
        let status = status.map_or("", DeliveryStatus::as_str);
        let filter = "d.webhook_id = $1 AND (d.status = $2 OR $2 = '')";
        self.backend().transaction(Pool::Main, Tx::Snapshot, |c| {
            let total = c
                .query_one(
                    &format!("SELECT COUNT(*) FROM webhook_deliveries d WHERE {filter}"),
                    &args![webhook_id, status],
                )?
                .i64(0)?;
            let sql = format!(
                "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d \
                 JOIN webhook_events e ON e.id = d.event_id \
                 WHERE {filter} ORDER BY d.id DESC LIMIT $3 OFFSET $4"
            );
            let rows = c.query(&sql, &args![webhook_id, status, limit, sql_offset(offset)])?;
            let rows = rows
                .iter()
                .map(delivery_from_row)
                .collect::<Result<_, _>>()?;
            Ok((rows, total as u64))
        })
    }

    fn append_events(&self, events: &[(&Event, Option<&str>)]) -> Result<usize, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Plain, |c| {
            let mut deliveries = 0;
            for (event, node) in events {
                deliveries += append_in(c, event, *node)?;
            }
            Ok(deliveries)
        })
    }

    fn claim_deliveries(
        &self,
        node: &str,
        lease: Duration,
        max: u32,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Plain, |c| {
            let now = c.dialect().now_ms();
            // The conditions are repeated on the row itself: under PostgreSQL's read committed,
            // a row another node claimed meanwhile is re-checked after its commit, and skipped.
            let claimed = c.query(
                &format!(
                    "UPDATE webhook_deliveries SET claimed_by = $1, claimed_until_ms = {now} + $2 \
                     WHERE id IN (\
                       SELECT d.id FROM webhook_deliveries d \
                       JOIN webhooks w ON w.id = d.webhook_id AND w.active = $4 \
                       WHERE d.id IN (SELECT MIN(id) FROM webhook_deliveries \
                                      WHERE status = 'pending' GROUP BY webhook_id, stream_id) \
                         AND d.next_attempt_ms <= {now} \
                         AND (d.claimed_until_ms IS NULL OR d.claimed_until_ms < {now}) \
                       ORDER BY d.id LIMIT $3) \
                     AND status = 'pending' \
                     AND (claimed_until_ms IS NULL OR claimed_until_ms < {now}) \
                     RETURNING id"
                ),
                &args![node, lease.as_millis() as i64, max, true],
            )?;
            let mut due = Vec::with_capacity(claimed.len());
            for row in &claimed {
                let r = c.query_one(
                    "SELECT d.id, d.attempts, w.url, w.secret, e.id, e.type, e.stream_id, \
                       e.created_at_ms, e.data, d.webhook_id \
                     FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id \
                     JOIN webhook_events e ON e.id = d.event_id WHERE d.id = $1",
                    &args![row.i64(0)?],
                )?;
                let event_id = r.i64(4)?;
                due.push(DueDelivery {
                    id: r.i64(0)?,
                    attempts: r.i64(1)?.clamp(0, u32::MAX as i64) as u32,
                    webhook_id: r.i64(9)?,
                    url: r.string(2)?,
                    secret: r.string(3)?,
                    event: OutboxEvent {
                        id: event_id,
                        kind: r.string(5)?,
                        stream_id: r.i64(6)?,
                        created_at: from_ms("webhook event", event_id, r.i64(7)?)?,
                        data: r.string(8)?,
                    },
                });
            }
            due.sort_by_key(|d| d.id);
            Ok(due)
        })
    }

    fn finish_delivery(
        &self,
        id: i64,
        node: &str,
        attempt: &Attempt,
        window: Duration,
    ) -> Result<(), StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            let now = c.dialect().now_ms();
            match attempt {
                Attempt::Delivered { status } => c.execute(
                    &format!(
                        "UPDATE webhook_deliveries SET status = 'delivered', \
                           attempts = attempts + 1, last_status = $1, last_error = NULL, \
                           finished_at_ms = {now}, claimed_by = NULL, claimed_until_ms = NULL \
                         WHERE id = $2 AND claimed_by = $3"
                    ),
                    &args![i64::from(*status), id, node],
                )?,
                Attempt::Failed {
                    status,
                    error,
                    retry_in,
                } => c.execute(
                    &format!(
                        "UPDATE webhook_deliveries SET attempts = attempts + 1, \
                           last_status = $1, last_error = $2, \
                           next_attempt_ms = {now} + $3, \
                           status = CASE WHEN {now} + $3 > created_at_ms + $4 \
                                         THEN 'failed' ELSE 'pending' END, \
                           finished_at_ms = CASE WHEN {now} + $3 > created_at_ms + $4 \
                                                 THEN {now} ELSE NULL END, \
                           claimed_by = NULL, claimed_until_ms = NULL \
                         WHERE id = $5 AND claimed_by = $6"
                    ),
                    &args![
                        status.map(i64::from),
                        error.as_str(),
                        retry_in.as_millis() as i64,
                        window.as_millis() as i64,
                        id,
                        node
                    ],
                )?,
            };
            Ok(())
        })
    }

    fn release_claims(&self, node: &str) -> Result<u64, StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            c.execute(
                "UPDATE webhook_deliveries SET claimed_by = NULL, claimed_until_ms = NULL \
                 WHERE claimed_by = $1",
                &args![node],
            )
        })
    }

    fn prune_deliveries(&self, window: Duration, keep: Duration) -> Result<u64, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Plain, |c| {
            let now = c.dialect().now_ms();
            c.execute(
                &format!(
                    "UPDATE webhook_deliveries SET status = 'failed', finished_at_ms = {now}, \
                       last_error = COALESCE(last_error, 'not delivered in time') \
                     WHERE status = 'pending' AND created_at_ms + $1 < {now} \
                       AND (claimed_until_ms IS NULL OR claimed_until_ms < {now})"
                ),
                &args![window.as_millis() as i64],
            )?;
            let removed = c.execute(
                &format!(
                    "DELETE FROM webhook_deliveries \
                     WHERE status <> 'pending' AND finished_at_ms + $1 < {now}"
                ),
                &args![keep.as_millis() as i64],
            )?;
            c.execute(
                "DELETE FROM webhook_events WHERE NOT EXISTS \
                   (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = webhook_events.id)",
                &[],
            )?;
            Ok(removed)
        })
    }
}
