//! Webhooks: the live facts of the events bus go to the outbox as they arrive (record changes
//! are written there by the store, in their own transactions), and the outbox is delivered —
//! signed ([`sign`]), at least once, in order per stream, retried with backoff for a day, by
//! whichever node claims each delivery first.

pub mod sign;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::sync::{watch, Notify};

use crate::db::{Attempt, DueDelivery, OutboxEvent, Store};
use crate::events::{Events, Ledger};
use crate::url_policy::client::{self, Outbound, OutboundClient};

/// A delivery not answered 2xx is retried until this long after its event, then failed.
pub const RETRY_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Finished deliveries stay listed this long.
pub const KEEP_FINISHED: Duration = Duration::from_secs(7 * 24 * 3600);
/// The first retry's delay; each next one doubles, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// A whole attempt (connect, send, answer head) takes at most this long.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of an answer's body read (and ignored) before the connection is let go.
const MAX_ANSWER_BODY: usize = 64 * 1024;
/// Deliveries attempted at once by one node.
const BATCH: u32 = 32;
/// How long a claim holds a delivery against other nodes: beyond any attempt (request and
/// answer, [`REQUEST_TIMEOUT`] each). A node that dies holding claims delays those deliveries
/// by at most this; one that restarts gives its claims back at once.
const CLAIM_LEASE: Duration = Duration::from_secs(30);
/// Deliveries written by other nodes, and retries that came due, are looked for this often.
const POLL: Duration = Duration::from_millis(500);
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// The delay before attempt `attempts + 1`, after `attempts` failed ones.
pub fn backoff(attempts: u32) -> Duration {
    let doubled = FIRST_BACKOFF.saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
    doubled.min(MAX_BACKOFF)
}

/// The outbox writer and the deliverer of this node.
pub struct Webhooks {
    store: Arc<dyn Store>,
    node: String,
    ledger: Arc<Ledger>,
    stop: watch::Sender<bool>,
    writer: tokio::task::JoinHandle<()>,
    deliverer: Option<tokio::task::JoinHandle<()>>,
}

/// Starts the outbox writer and the deliverer of this node; they run until
/// [`Webhooks::shutdown`].
pub fn spawn(store: Arc<dyn Store>, events: &Events, node: String) -> Webhooks {
    let wake = Arc::new(Notify::new());
    let ledger = events.ledger();
    let writer = tokio::spawn(write_live_facts(
        store.clone(),
        ledger.clone(),
        wake.clone(),
    ));
    let (stop, stopped) = watch::channel(false);
    let client = client::build(Outbound::webhook(), |b| {
        b.timeout(REQUEST_TIMEOUT)
            .connect_timeout(REQUEST_TIMEOUT / 2)
            .user_agent(concat!("livepack/", env!("CARGO_PKG_VERSION"), " webhooks"))
    });
    let deliverer = match client {
        Ok(client) => Some(tokio::spawn(deliver(
            store.clone(),
            client,
            node.clone(),
            wake,
            stopped,
        ))),
        Err(e) => {
            tracing::error!(error = %e, "cannot build the webhook client; no webhook is delivered");
            None
        }
    };
    Webhooks {
        store,
        node,
        ledger,
        stop,
        writer,
        deliverer,
    }
}

impl Webhooks {
    /// At shutdown, within `within`: the facts seen so far are written to the outbox, the
    /// deliveries in flight end, and this node's claims are given back, so another node (or
    /// this one restarted) delivers the rest at once — none lost, none twice.
    pub async fn shutdown(self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while !self.ledger.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !self.ledger.is_empty() {
            tracing::warn!("events not all written to the webhook outbox at shutdown");
        }
        self.writer.abort();
        let _ = self.stop.send(true);
        if let Some(deliverer) = self.deliverer {
            if tokio::time::timeout_at(deadline, deliverer).await.is_err() {
                tracing::warn!("webhook deliveries still in flight at shutdown");
                return;
            }
        }
        let (store, node) = (self.store, self.node);
        match tokio::task::spawn_blocking(move || store.release_claims(&node)).await {
            Ok(Ok(n)) if n > 0 => tracing::info!(claims = n, "webhook claims given back"),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot give back the webhook claims"),
            _ => {}
        }
    }
}

/// Live facts written to the outbox in one transaction, at most.
const WRITE_BATCH: usize = 512;

/// Writes each live fact to the outbox, in the order they happened, from a ledger that keeps
/// every one until it is written: a burst or a slow store delays them, never loses them. A
/// batch the store refuses is written again after a backoff. Every batch wakes the deliverer
/// (the store's own writes included: they come through the ledger too).
async fn write_live_facts(store: Arc<dyn Store>, ledger: Arc<Ledger>, wake: Arc<Notify>) {
    let mut failures = 0u32;
    loop {
        let batch = ledger.peek(WRITE_BATCH).await;
        let Some(last) = batch.last().map(|e| e.seq) else {
            continue;
        };
        let s = store.clone();
        let written = tokio::task::spawn_blocking(move || {
            let facts: Vec<(&crate::events::Event, Option<&str>)> = batch
                .iter()
                .filter(|e| !e.event.written_by_store())
                .map(|e| (&e.event, Some(&*e.node)))
                .collect();
            if facts.is_empty() {
                return Ok(0);
            }
            s.append_events(&facts)
        })
        .await;
        let error = match written {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        match error {
            None => {
                failures = 0;
                ledger.taken_through(last);
                wake.notify_one();
            }
            Some(error) => {
                failures += 1;
                let retry = backoff(failures).min(Duration::from_secs(30));
                tracing::error!(%error, ?retry, "cannot write events to the webhook outbox; trying again");
                tokio::time::sleep(retry).await;
            }
        }
    }
}

async fn deliver(
    store: Arc<dyn Store>,
    client: OutboundClient,
    node: String,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let released = {
        let (store, node) = (store.clone(), node.clone());
        tokio::task::spawn_blocking(move || store.release_claims(&node)).await
    };
    if let Ok(Err(e)) = released {
        tracing::error!(error = %e, "cannot release this node's webhook claims");
    }
    let mut last_prune: Option<tokio::time::Instant> = None;
    while !*stop.borrow() {
        if last_prune.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
            last_prune = Some(tokio::time::Instant::now());
            prune(&store).await;
        }
        let due = {
            let (store, node) = (store.clone(), node.clone());
            tokio::task::spawn_blocking(move || store.claim_deliveries(&node, CLAIM_LEASE, BATCH))
                .await
        };
        let due = match due {
            Ok(Ok(due)) => due,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot claim webhook deliveries");
                Vec::new()
            }
            Err(e) => {
                tracing::error!(error = %e, "webhook claim task failed");
                Vec::new()
            }
        };
        if due.is_empty() {
            tokio::select! {
                _ = tokio::time::timeout(POLL, wake.notified()) => {}
                // Its owner gone without a shutdown: nobody is left to deliver for.
                changed = stop.changed() => if changed.is_err() { break },
            }
            continue;
        }
        // One per webhook and stream is claimed at a time, so these may all run at once.
        futures::future::join_all(due.into_iter().map(|d| attempt(&store, &client, &node, d)))
            .await;
    }
}

async fn prune(store: &Arc<dyn Store>) {
    let store = store.clone();
    match tokio::task::spawn_blocking(move || store.prune_deliveries(RETRY_WINDOW, KEEP_FINISHED))
        .await
    {
        Ok(Ok(n)) if n > 0 => tracing::info!(removed = n, "old webhook deliveries removed"),
        Ok(Err(e)) => tracing::error!(error = %e, "cannot prune webhook deliveries"),
        _ => {}
    }
}

/// The body of `event`: `{id, type, created_at, stream_id, data}`.
pub fn body(event: &OutboxEvent) -> Bytes {
    let data: serde_json::Value =
        serde_json::from_str(&event.data).unwrap_or(serde_json::Value::Null);
    let body = serde_json::json!({
        "id": event.id,
        "type": event.kind,
        "created_at": event.created_at.format(&Rfc3339).unwrap_or_default(),
        "stream_id": event.stream_id,
        "data": data,
    });
    Bytes::from(body.to_string())
}

/// One attempt at `d`, and its outcome written back.
async fn attempt(store: &Arc<dyn Store>, client: &OutboundClient, node: &str, d: DueDelivery) {
    let outcome = post(client, &d).await;
    match &outcome {
        Attempt::Delivered { status } => {
            tracing::debug!(
                delivery = d.id,
                event = d.event.id,
                status,
                "webhook delivered"
            )
        }
        Attempt::Failed { status, error, .. } => tracing::info!(
            delivery = d.id,
            event = d.event.id,
            attempt = d.attempts + 1,
            ?status,
            %error,
            "webhook delivery failed; retried later"
        ),
    }
    let (store, node, id) = (store.clone(), node.to_owned(), d.id);
    let written = tokio::task::spawn_blocking(move || {
        store.finish_delivery(id, &node, &outcome, RETRY_WINDOW)
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        tracing::error!(
            delivery = id,
            "cannot record a webhook attempt; it is tried again"
        );
    }
}

async fn post(client: &OutboundClient, d: &DueDelivery) -> Attempt {
    let failed = |status: Option<u16>, error: String| Attempt::Failed {
        status,
        error,
        retry_in: backoff(d.attempts + 1),
    };
    let url = match url::Url::parse(&d.url) {
        Ok(u) => u,
        Err(e) => return failed(None, format!("not a URL: {e}")),
    };
    let body = body(&d.event);
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let request = match client.request(reqwest::Method::POST, &url) {
        Ok(r) => r,
        Err(e) => return failed(None, e.to_string()),
    };
    let answer = request
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(sign::HEADER, sign::header(&d.secret, now, &body))
        .header("livepack-event-id", d.event.id.to_string())
        .header("livepack-event-type", d.event.kind.as_str())
        .header("livepack-delivery-attempt", (d.attempts + 1).to_string())
        .body(body)
        .send()
        .await;
    let answer = match answer {
        Ok(a) => a,
        Err(e) => return failed(None, crate::url_policy::describe(&e)),
    };
    let status = answer.status();
    // The answer's body means nothing here; a little is read so the connection can be reused.
    let mut answer = answer;
    let mut read = 0;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout(REQUEST_TIMEOUT, answer.chunk()).await {
        read += chunk.len();
        if read > MAX_ANSWER_BODY {
            break;
        }
    }
    if status.is_success() {
        Attempt::Delivered {
            status: status.as_u16(),
        }
    } else if status.is_redirection() {
        failed(Some(status.as_u16()), "redirect not followed".into())
    } else {
        failed(Some(status.as_u16()), format!("HTTP {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of live facts far larger than the bus holds: the outbox gets every one, and the
    /// receiver (a real HTTP server) gets each exactly once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_facts_is_delivered_exactly_once_each() {
        const N: i64 = 20_000;
        let dir = tempfile::tempdir().unwrap();
        let burst =
            crate::benching::webhook_burst(dir.path(), N, 16, Duration::from_secs(240)).await;
        assert_eq!(burst.received, (0..N).collect::<Vec<_>>());
        eprintln!(
            "{N} facts written in {:?}, delivered in {:?}",
            burst.written, burst.delivered
        );
    }

    #[test]
    fn backoff_doubles_from_a_second_up_to_an_hour() {
        let secs: Vec<u64> = (1..=14).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(
            secs,
            [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600]
        );
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
