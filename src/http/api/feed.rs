//! `GET /streaming/events`: the live feed the console follows instead of polling its tables —
//! server-sent events carrying this node's domain events as they happen and, every 2 s, a
//! health sample of every stream on air in the cluster (the numbers of its record). Ends with
//! a `bye` event when the node starts shutting down, so a client reconnects to another node.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde::Serialize;
use tokio::sync::mpsc::Sender;

use super::stream_view::LiveView;
use super::{query_int, query_pairs, Api, ApiError};
use crate::events::Next;
use crate::http::listener::{channel_body, Body};
use crate::live::RestreamStatus;

/// How often a health sample goes out: the input meters' period, so each sample is new.
pub const HEALTH_EVERY: Duration = crate::live::status::HEALTH_PERIOD;
/// A comment line this often keeps proxies from closing a quiet feed.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Feeds open at once on a node; one more is refused (503), not queued.
pub const MAX_FEEDS: usize = 64;
/// A client that takes nothing for this long is dropped: its events would only pile up.
const STUCK_AFTER: Duration = Duration::from_secs(30);
/// Frames waiting for a slow reader before the feed waits on it.
const QUEUE: usize = 32;
/// How long the browser's EventSource (or our console) waits before reconnecting.
const RETRY_MS: u64 = 2000;
/// How long a sample waits for the store's leases: a sick store costs the other nodes'
/// streams in it, never the feed's turn (shutdown, a client leaving).
const STORE_WAIT: Duration = Duration::from_secs(1);

/// The feeds a node serves, and the health sample they share: however many consoles are
/// open, the store is asked once per period.
#[derive(Default)]
pub struct Feeds {
    open: AtomicUsize,
    sample: tokio::sync::Mutex<Option<(Instant, Sample)>>,
}

/// Each stream on air with its health as JSON, by id.
type Sample = Arc<Vec<(i64, String)>>;

/// One stream's health as a sample carries it: the record's live fields.
#[derive(Serialize)]
struct Health<'a> {
    id: i64,
    live: bool,
    backup_live: bool,
    input_protocol: Option<&'a str>,
    backup_input_protocol: Option<&'a str>,
    #[serde(flatten)]
    measures: LiveView,
    storage_error: Option<&'a str>,
    /// Each restream's state, by restream id, on the node serving the stream.
    restreams: &'a BTreeMap<i64, RestreamStatus>,
}

/// A feed's place among the open ones, given back when it ends.
struct Slot(Arc<Api>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.feeds.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One server-sent event.
fn frame(event: &str, id: Option<u64>, data: &str) -> Bytes {
    let id = id.map(|id| format!("id: {id}\n")).unwrap_or_default();
    Bytes::from(format!("event: {event}\n{id}data: {data}\n\n"))
}

/// Opens a feed; `stream_id` narrows it to one stream's events and health.
pub async fn open(api: &Arc<Api>, query: Option<&str>) -> Result<Response<Body>, ApiError> {
    let mut only = None;
    for (k, v) in query_pairs(query)? {
        if k == "stream_id" {
            only = Some(query_int("stream_id", &v, 1..=i64::MAX)?);
        }
    }
    if api.stopping.refusing() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "this node is shutting down: follow another node's feed",
        ));
    }
    if api.feeds.open.fetch_add(1, Ordering::Relaxed) >= MAX_FEEDS {
        api.feeds.open.fetch_sub(1, Ordering::Relaxed);
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_feeds",
            format!("{MAX_FEEDS} event feeds are open on this node: close one"),
        ));
    }
    let slot = Slot(api.clone());
    let (tx, body) = channel_body(QUEUE);
    let events = api.registry.events().subscribe();
    tokio::spawn(async move {
        let api = slot.0.clone();
        if let Err(why) = follow(&api, only, events, &tx).await {
            tracing::debug!(why, "events feed ended");
        }
        drop(slot);
    });
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // nginx would otherwise hold the events back to fill its buffer.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

type Tx = Sender<Result<Bytes, std::io::Error>>;

async fn send(tx: &Tx, bytes: Bytes) -> Result<(), &'static str> {
    match tokio::time::timeout(STUCK_AFTER, tx.send(Ok(bytes))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err("the client left"),
        Err(_) => Err("the client read nothing for 30 s"),
    }
}

/// Writes the feed until the client leaves, lags past recovery, or the node stops.
async fn follow(
    api: &Arc<Api>,
    only: Option<i64>,
    mut events: crate::events::Subscription,
    tx: &Tx,
) -> Result<(), &'static str> {
    let hello = serde_json::json!({
        "node": api.cluster.node_id(),
        "health_every_ms": HEALTH_EVERY.as_millis() as u64,
    });
    send(tx, Bytes::from(format!("retry: {RETRY_MS}\n\n"))).await?;
    send(tx, frame("hello", None, &hello.to_string())).await?;
    let mut stopping = api.stopping.clone();
    let mut health = tokio::time::interval(HEALTH_EVERY);
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.tick().await;
    loop {
        let out = tokio::select! {
            _ = stopping.until_refusing() => {
                let bye = r#"{"reason":"shutting_down"}"#;
                send(tx, frame("bye", None, bye)).await?;
                return Ok(());
            }
            _ = tx.closed() => return Err("the client left"),
            next = events.next() => match next {
                Some(Next::Event(e)) if only.is_none_or(|id| e.event.stream_id() == id) => {
                    let json = serde_json::to_value(&*e).map_err(|_| "unserialisable event")?;
                    let kind = json["type"].as_str().unwrap_or("event");
                    frame(kind, Some(e.seq), &json.to_string())
                }
                Some(Next::Event(_)) => continue,
                Some(Next::Lost(n)) => frame("lost", None, &format!(r#"{{"lost":{n}}}"#)),
                None => return Ok(()),
            },
            _ = health.tick() => {
                // A client behind on its reading skips this sample: the next one says it all.
                if tx.capacity() == 0 {
                    continue;
                }
                let sample = api.feeds.sample(api).await;
                let streams: Vec<&str> = sample
                    .iter()
                    .filter(|(id, _)| only.is_none_or(|o| o == *id))
                    .map(|(_, json)| json.as_str())
                    .collect();
                let time = super::format::iso8601(time::OffsetDateTime::now_utc());
                let data = format!(r#"{{"time":"{time}","streams":[{}]}}"#, streams.join(","));
                frame("health", None, &data)
            }
            _ = keepalive.tick() => Bytes::from_static(b": keep-alive\n\n"),
        };
        send(tx, out).await?;
    }
}

impl Feeds {
    /// Feeds open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Every stream on air in the cluster (this node's in session, the others' by their
    /// leases) with its health, as JSON; computed at most once per half period for
    /// all feeds.
    async fn sample(&self, api: &Arc<Api>) -> Sample {
        let mut cached = self.sample.lock().await;
        if let Some((at, sample)) = &*cached {
            if at.elapsed() < HEALTH_EVERY / 2 {
                return sample.clone();
            }
        }
        // The cluster's shared snapshot of the leases (a second old at most, the last one while
        // the store is slow); a store that cannot answer in time costs the other nodes'
        // streams, not the sample.
        let leases = tokio::time::timeout(STORE_WAIT, api.cluster.lookups().live_leases())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|view| view.held.clone())
            .unwrap_or_default();
        let mut ids: Vec<i64> = api.registry.stream_ids();
        ids.extend(leases.iter().map(|l| l.stream_id));
        ids.sort_unstable();
        ids.dedup();
        let sample: Vec<(i64, String)> = ids
            .into_iter()
            .filter_map(|id| {
                let live = api.live_status(id, &leases);
                let (input_protocol, backup_input_protocol) = live.protocols();
                let health = Health {
                    id,
                    live: live.live(),
                    backup_live: live.backup_live(),
                    input_protocol,
                    backup_input_protocol,
                    measures: api.live_view(id, &live),
                    storage_error: live.storage_error(),
                    restreams: live.restreams(),
                };
                Some((id, serde_json::to_string(&health).ok()?))
            })
            .collect();
        let sample = Arc::new(sample);
        *cached = Some((Instant::now(), sample.clone()));
        sample
    }
}
