//! The domain events: one typed stream of what happened to streams, publishers, recordings,
//! videos and overlays — plain data, no handles — for the consumers that follow facts (the
//! recorder now; webhooks, metrics later). Producers call [`Events::emit`]; consumers
//! [`Events::subscribe`] and are never wired into their producers.
//!
//! Bounded (`broadcast` semantics): a consumer that lags loses the oldest events and is told how
//! many; a producer never waits for a consumer. A consumer that must not miss a fact (the
//! webhook outbox) takes a [`Ledger`] instead: every event is kept for it, in order, until it
//! has taken them.

use std::sync::Arc;

use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::broadcast;

/// Events queued per consumer before it loses the oldest (`events_bus_capacity`).
pub const EVENTS_QUEUE: usize = 1024;
/// Events a [`Ledger`] holds before it gives up the oldest (counted and logged): reached only
/// when its consumer has been stuck for long (the store unwritable), at a few hundred bytes an
/// event.
pub const LEDGER_MAX: usize = 1 << 18;

/// Which input of a stream a publisher feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    Main,
    Backup,
}

impl Slot {
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// How the media arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Rtmp,
    Srt,
    Whip,
    /// The daemon itself fetches the source (the stream's `uri`).
    Pull,
}

impl Protocol {
    /// Its name as events and records spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Rtmp => "rtmp",
            Protocol::Srt => "srt",
            Protocol::Whip => "whip",
            Protocol::Pull => "pull",
        }
    }
}

/// What happened. Field names are the ones a webhook body will carry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    StreamCreated {
        stream_id: i64,
    },
    StreamUpdated {
        stream_id: i64,
    },
    StreamDeleted {
        stream_id: i64,
    },
    /// A publisher got a slot (or the PULL fetcher connected).
    PublishStarted {
        stream_id: i64,
        slot: Slot,
        protocol: Protocol,
    },
    /// That publisher left its slot.
    PublishStopped {
        stream_id: i64,
        slot: Slot,
        protocol: Protocol,
    },
    /// The stream's outputs started (first publish), or came back within the grace period on
    /// the same outputs (`resumed`).
    LiveStarted {
        stream_id: i64,
        resumed: bool,
    },
    /// Both inputs are gone; the grace period runs.
    InputsGone {
        stream_id: i64,
    },
    /// The grace period passed: the outputs ended.
    LiveEnded {
        stream_id: i64,
    },
    /// The input switch moved from one slot to the other (main → backup when the main went
    /// silent, and back).
    InputSwitched {
        stream_id: i64,
        from: Slot,
        to: Slot,
    },
    /// A PULL stream that received nothing for its inactivity limit was deactivated.
    PullDeactivated {
        stream_id: i64,
    },
    /// A PULL stream left one of its sources for the next (indexes into its `uri` list; the
    /// URLs themselves may hold credentials). `reason` is why the source was left.
    PullSourceSwitched {
        stream_id: i64,
        from: usize,
        to: usize,
        reason: String,
    },
    RecordingStarted {
        stream_id: i64,
        video_id: i64,
    },
    RecordingStopped {
        stream_id: i64,
        video_id: i64,
    },
    VideoReady {
        stream_id: i64,
        video_id: i64,
        duration_ms: u64,
    },
    VideoFailed {
        stream_id: i64,
        video_id: i64,
        error: String,
    },
    VideoDeleted {
        stream_id: i64,
        video_id: i64,
    },
    /// An overlay's page could not be shown (its stream goes on without it).
    OverlayFailed {
        stream_id: i64,
        overlay_id: Option<i64>,
        error: String,
    },
    /// A restream connected to its target and is sending.
    RestreamStarted {
        stream_id: i64,
        restream_id: i64,
    },
    /// A restream stopped sending: its stream ended, it was deactivated or deleted.
    RestreamStopped {
        stream_id: i64,
        restream_id: i64,
    },
    /// A restream's target failed or refused it; it tries again (`error` never holds the
    /// target's secret).
    RestreamFailed {
        stream_id: i64,
        restream_id: i64,
        error: String,
    },
}

impl Event {
    /// Whether the store writes this event to the webhook outbox itself, in the transaction of
    /// the change (record changes); the other events are live facts, written as they arrive.
    pub fn written_by_store(&self) -> bool {
        use Event::*;
        matches!(
            self,
            StreamCreated { .. }
                | StreamUpdated { .. }
                | StreamDeleted { .. }
                | VideoReady { .. }
                | VideoFailed { .. }
                | VideoDeleted { .. }
        )
    }

    /// The `type` names, as a webhook's `events` list takes them.
    pub const TYPES: &'static [&'static str] = &[
        "stream_created",
        "stream_updated",
        "stream_deleted",
        "publish_started",
        "publish_stopped",
        "live_started",
        "inputs_gone",
        "live_ended",
        "input_switched",
        "pull_deactivated",
        "pull_source_switched",
        "recording_started",
        "recording_stopped",
        "video_ready",
        "video_failed",
        "video_deleted",
        "overlay_failed",
        "restream_started",
        "restream_stopped",
        "restream_failed",
    ];

    /// The stream the event is about (the order webhooks keep is per stream).
    pub fn stream_id(&self) -> i64 {
        use Event::*;
        match self {
            StreamCreated { stream_id }
            | StreamUpdated { stream_id }
            | StreamDeleted { stream_id }
            | PublishStarted { stream_id, .. }
            | PublishStopped { stream_id, .. }
            | LiveStarted { stream_id, .. }
            | InputsGone { stream_id }
            | LiveEnded { stream_id }
            | InputSwitched { stream_id, .. }
            | PullDeactivated { stream_id }
            | PullSourceSwitched { stream_id, .. }
            | RecordingStarted { stream_id, .. }
            | RecordingStopped { stream_id, .. }
            | VideoReady { stream_id, .. }
            | VideoFailed { stream_id, .. }
            | VideoDeleted { stream_id, .. }
            | OverlayFailed { stream_id, .. }
            | RestreamStarted { stream_id, .. }
            | RestreamStopped { stream_id, .. }
            | RestreamFailed { stream_id, .. } => *stream_id,
        }
    }
}

/// An event with when and where it happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Envelope {
    /// Increasing per process: consumers that must not handle one twice compare it.
    pub seq: u64,
    #[serde(serialize_with = "rfc3339")]
    pub at: OffsetDateTime,
    /// The node that saw it (`node_id`).
    #[serde(serialize_with = "shared_str")]
    pub node: Arc<str>,
    #[serde(flatten)]
    pub event: Event,
}

fn rfc3339<S: serde::Serializer>(at: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    let text = at
        .format(&time::format_description::well_known::Rfc3339)
        .map_err(serde::ser::Error::custom)?;
    s.serialize_str(&text)
}

fn shared_str<S: serde::Serializer>(text: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(text)
}

/// The bus: cheap to clone, one per daemon.
#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

struct Inner {
    tx: broadcast::Sender<Arc<Envelope>>,
    node: Arc<str>,
    seq: std::sync::atomic::AtomicU64,
    /// The consumers that get every event. Appended under this lock, with the sequence taken
    /// under it too, so each ledger holds the events in sequence order.
    ledgers: std::sync::Mutex<Vec<Arc<Ledger>>>,
}

impl Events {
    pub fn new(node: &str) -> Events {
        Events::with_capacity(node, EVENTS_QUEUE)
    }

    /// A bus whose lossy subscribers hold `capacity` events each.
    pub fn with_capacity(node: &str, capacity: usize) -> Events {
        Events {
            inner: Arc::new(Inner {
                tx: broadcast::Sender::new(capacity.max(1)),
                node: node.into(),
                seq: std::sync::atomic::AtomicU64::new(0),
                ledgers: std::sync::Mutex::new(Vec::new()),
            }),
        }
    }

    /// Every event from now on, kept until taken: for a consumer that must not miss one.
    pub fn ledger(&self) -> Arc<Ledger> {
        let ledger = Arc::new(Ledger::default());
        lock(&self.inner.ledgers).push(ledger.clone());
        ledger
    }

    pub fn emit(&self, event: Event) {
        let ledgers = lock(&self.inner.ledgers);
        // The sequence is taken and the event sent under one lock: consumers see the numbers
        // in order, never a lost or doubled one.
        let seq = self
            .inner
            .seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let envelope = Arc::new(Envelope {
            seq,
            at: OffsetDateTime::now_utc(),
            node: self.inner.node.clone(),
            event,
        });
        // One JSON line per event at debug level: what a webhook would carry, for operators
        // (`RUST_LOG=livepack::events=debug`) and the end-to-end tests that read the log.
        if tracing::enabled!(tracing::Level::DEBUG) {
            if let Ok(json) = serde_json::to_string(&*envelope) {
                tracing::debug!(event = %json, "event");
            }
        }
        for ledger in ledgers.iter() {
            ledger.keep(envelope.clone());
        }
        // No subscriber is not an error: nobody follows.
        let _ = self.inner.tx.send(envelope);
    }

    /// Follows the events from now on.
    pub fn subscribe(&self) -> Subscription {
        Subscription {
            rx: self.inner.tx.subscribe(),
        }
    }
}

/// One consumer's place in the stream.
pub struct Subscription {
    rx: broadcast::Receiver<Arc<Envelope>>,
}

/// The events kept for one consumer that must not miss any ([`Events::ledger`]).
#[derive(Default)]
pub struct Ledger {
    kept: std::sync::Mutex<std::collections::VecDeque<Arc<Envelope>>>,
    wake: tokio::sync::Notify,
    given_up: std::sync::atomic::AtomicU64,
}

impl Ledger {
    fn keep(&self, envelope: Arc<Envelope>) {
        let mut kept = lock(&self.kept);
        if kept.len() >= LEDGER_MAX {
            kept.pop_front();
            let n = self
                .given_up
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_power_of_two() {
                tracing::error!(
                    given_up = n + 1,
                    "an event ledger is full: its consumer is stuck"
                );
            }
        }
        kept.push_back(envelope);
        drop(kept);
        self.wake.notify_one();
    }

    /// Up to `max` of the oldest events kept, waiting for one; they stay kept until
    /// [`Ledger::taken_through`] says they are done with.
    pub async fn peek(&self, max: usize) -> Vec<Arc<Envelope>> {
        loop {
            {
                let kept = lock(&self.kept);
                if !kept.is_empty() {
                    return kept.iter().take(max).cloned().collect();
                }
            }
            self.wake.notified().await;
        }
    }

    /// The events up to sequence `seq` are done with (written where they go).
    pub fn taken_through(&self, seq: u64) {
        let mut kept = lock(&self.kept);
        while kept.front().is_some_and(|e| e.seq <= seq) {
            kept.pop_front();
        }
    }

    /// Nothing is kept: every event so far was taken.
    pub fn is_empty(&self) -> bool {
        lock(&self.kept).is_empty()
    }

    /// Events given up because the ledger was full.
    pub fn given_up(&self) -> u64 {
        self.given_up.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a consumer gets next.
pub enum Next {
    Event(Arc<Envelope>),
    /// The consumer fell behind; this many events are lost to it.
    Lost(u64),
}

impl Subscription {
    /// The next event, or `None` once the bus is gone.
    pub async fn next(&mut self) -> Option<Next> {
        match self.rx.recv().await {
            Ok(e) => Some(Next::Event(e)),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(Next::Lost(n)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The next event already queued, without waiting.
    pub fn try_next(&mut self) -> Option<Next> {
        match self.rx.try_recv() {
            Ok(e) => Some(Next::Event(e)),
            Err(broadcast::error::TryRecvError::Lagged(n)) => Some(Next::Lost(n)),
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_get_every_event_in_order_with_the_node_and_a_rising_sequence() {
        let events = Events::new("node-a");
        let mut a = events.subscribe();
        events.emit(Event::StreamCreated { stream_id: 1 });
        let mut b = events.subscribe();
        events.emit(Event::LiveStarted {
            stream_id: 1,
            resumed: false,
        });
        let Some(Next::Event(first)) = a.next().await else {
            panic!("no event")
        };
        let Some(Next::Event(second)) = a.next().await else {
            panic!("no event")
        };
        assert_eq!(first.event, Event::StreamCreated { stream_id: 1 });
        assert_eq!(&*first.node, "node-a");
        assert!(second.seq > first.seq);
        // A later subscriber sees only what came after it.
        let Some(Next::Event(only)) = b.try_next() else {
            panic!("no event")
        };
        assert_eq!(only.seq, second.seq);
        assert!(b.try_next().is_none());
    }

    #[tokio::test]
    async fn a_lagging_subscriber_is_told_how_many_it_lost() {
        let events = Events::new("n");
        let mut slow = events.subscribe();
        for i in 0..EVENTS_QUEUE as i64 + 5 {
            events.emit(Event::StreamUpdated { stream_id: i });
        }
        match slow.next().await {
            Some(Next::Lost(n)) => assert_eq!(n, 5),
            _ => panic!("expected a loss report"),
        }
    }

    /// `TYPES` (what a webhook's `events` accepts) names every variant's wire type, and the
    /// store writes exactly the record changes.
    #[test]
    fn the_type_list_names_every_event() {
        let (slot, protocol) = (Slot::Main, Protocol::Rtmp);
        let all = [
            Event::StreamCreated { stream_id: 1 },
            Event::StreamUpdated { stream_id: 1 },
            Event::StreamDeleted { stream_id: 1 },
            Event::PublishStarted {
                stream_id: 1,
                slot,
                protocol,
            },
            Event::PublishStopped {
                stream_id: 1,
                slot,
                protocol,
            },
            Event::LiveStarted {
                stream_id: 1,
                resumed: false,
            },
            Event::InputsGone { stream_id: 1 },
            Event::LiveEnded { stream_id: 1 },
            Event::InputSwitched {
                stream_id: 1,
                from: slot,
                to: Slot::Backup,
            },
            Event::PullDeactivated { stream_id: 1 },
            Event::PullSourceSwitched {
                stream_id: 1,
                from: 0,
                to: 1,
                reason: String::new(),
            },
            Event::RecordingStarted {
                stream_id: 1,
                video_id: 2,
            },
            Event::RecordingStopped {
                stream_id: 1,
                video_id: 2,
            },
            Event::VideoReady {
                stream_id: 1,
                video_id: 2,
                duration_ms: 3,
            },
            Event::VideoFailed {
                stream_id: 1,
                video_id: 2,
                error: String::new(),
            },
            Event::VideoDeleted {
                stream_id: 1,
                video_id: 2,
            },
            Event::OverlayFailed {
                stream_id: 1,
                overlay_id: None,
                error: String::new(),
            },
            Event::RestreamStarted {
                stream_id: 1,
                restream_id: 2,
            },
            Event::RestreamStopped {
                stream_id: 1,
                restream_id: 2,
            },
            Event::RestreamFailed {
                stream_id: 1,
                restream_id: 2,
                error: String::new(),
            },
        ];
        let types: Vec<String> = all
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(types, Event::TYPES);
        let by_store: Vec<&str> = all
            .iter()
            .zip(Event::TYPES)
            .filter(|(e, _)| e.written_by_store())
            .map(|(_, t)| *t)
            .collect();
        assert_eq!(
            by_store,
            [
                "stream_created",
                "stream_updated",
                "stream_deleted",
                "video_ready",
                "video_failed",
                "video_deleted"
            ]
        );
    }

    #[test]
    fn the_wire_shape_is_flat_with_a_snake_case_type() {
        let e = Envelope {
            seq: 7,
            at: time::macros::datetime!(2026-11-26 12:00 UTC),
            node: "n1".into(),
            event: Event::PublishStarted {
                stream_id: 3,
                slot: Slot::Backup,
                protocol: Protocol::Srt,
            },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"seq": 7, "at": "2026-11-26T12:00:00Z", "node": "n1",
                "type": "publish_started", "stream_id": 3, "slot": "backup", "protocol": "srt"})
        );
    }
}
