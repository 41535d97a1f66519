//! Which restreams run on this node: those active of the streams it serves. Follows the events
//! bus (a stream's outputs starting here start its restreams; their end stops them) and the
//! records (the API says when one changed); each runs as its own task ([`super::runner`]), and
//! what it is doing is kept for the API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::runner::{Restream, Source};
use super::target::Target;
use crate::db::{RestreamRow, RestreamSpec, Store};
use crate::events::{Event, Events, Next};
use crate::live::{Registry, RestreamStatus};

/// Restreams one stream may have by default (`restreams_max_per_stream`): each is a copy of
/// the stream's bits going out.
pub const DEFAULT_MAX_PER_STREAM: u64 = 5;
/// How often the streams served here read their restreams again: a record changed through
/// another node (which does not serve the stream) reaches this one within this long.
const RECONCILE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

struct Running {
    stream_id: i64,
    spec: RestreamSpec,
    stop: watch::Sender<bool>,
    state: Arc<Mutex<RestreamStatus>>,
}

pub struct Restreams {
    registry: Arc<Registry>,
    store: Arc<dyn Store>,
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    max_per_stream: u32,
    running: Mutex<HashMap<i64, Running>>,
    /// The streams whose outputs run here (LiveStarted seen, LiveEnded not yet).
    live: Mutex<std::collections::BTreeSet<i64>>,
    /// The events follower ([`Restreams::follow`]), ended by [`Restreams::stop_all`].
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

fn source(spec: &RestreamSpec) -> Source {
    match spec.source.as_str() {
        "origin" => Source::Origin,
        rung => Source::Rung(rung.to_owned()),
    }
}

impl Restreams {
    pub fn new(
        registry: Arc<Registry>,
        store: Arc<dyn Store>,
        tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
        max_per_stream: u32,
    ) -> Arc<Restreams> {
        let r = Arc::new(Restreams {
            registry,
            store,
            tls,
            max_per_stream,
            running: Mutex::new(HashMap::new()),
            live: Mutex::new(Default::default()),
            follower: Mutex::new(None),
        });
        r.follow(r.registry.events().clone());
        r
    }

    fn running(&self) -> MutexGuard<'_, HashMap<i64, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many restreams a stream may have (`restreams_max_per_stream`).
    pub fn max_per_stream(&self) -> u32 {
        self.max_per_stream
    }

    /// Follows the events: a stream live here starts its restreams, its end stops them. And
    /// every [`RECONCILE_EVERY`] the streams live here read their restreams again (a record
    /// changed through another node; events lost).
    fn follow(self: &Arc<Self>, events: Events) {
        let me = Arc::downgrade(self);
        let mut sub = events.subscribe();
        let follower = tokio::spawn(async move {
            let mut tick = tokio::time::interval(RECONCILE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let next = tokio::select! {
                    n = sub.next() => n,
                    _ = tick.tick() => {
                        let Some(me) = me.upgrade() else { return };
                        me.reconcile_live().await;
                        continue;
                    }
                };
                let (Some(next), Some(me)) = (next, me.upgrade()) else {
                    return;
                };
                match next {
                    Next::Event(e) => match e.event {
                        Event::LiveStarted { stream_id, .. } => {
                            me.live_set().insert(stream_id);
                            me.reconcile_stream(stream_id).await;
                        }
                        Event::LiveEnded { stream_id } => {
                            me.live_set().remove(&stream_id);
                            me.stop_stream(stream_id);
                        }
                        _ => {}
                    },
                    // Events were lost: the streams served here now are the live ones.
                    Next::Lost(n) => {
                        tracing::warn!(lost = n, "restreams fell behind the events; reconciling");
                        let served = me.registry.metrics().into_iter().map(|m| m.id);
                        *me.live_set() = served.collect();
                    }
                }
            }
        });
        *self.follower.lock().unwrap_or_else(|p| p.into_inner()) = Some(follower);
    }

    fn live_set(&self) -> MutexGuard<'_, std::collections::BTreeSet<i64>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stop_stream(&self, stream_id: i64) {
        self.running().retain(|_, r| {
            let keep = r.stream_id != stream_id;
            if !keep {
                let _ = r.stop.send(true);
            }
            keep
        });
    }

    /// The restream records of `stream` (all of them: `None`).
    async fn read(&self, stream: Option<i64>) -> Option<Vec<RestreamRow>> {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || store.list_restreams(stream)).await {
            Ok(Ok(rows)) => Some(rows),
            _ => {
                tracing::error!(stream, "cannot read the restreams");
                None
            }
        }
    }

    /// Starts, restarts or stops the restreams of `stream_id` as its records say (all of them
    /// stop when the stream is not served here).
    pub async fn reconcile_stream(&self, stream_id: i64) {
        if let Some(rows) = self.read(Some(stream_id)).await {
            self.apply(stream_id, rows);
        }
    }

    /// [`Self::reconcile_stream`] for every stream live here, from one read of the records.
    async fn reconcile_live(&self) {
        let live: Vec<i64> = self.live_set().iter().copied().collect();
        if live.is_empty() {
            return;
        }
        let Some(rows) = self.read(None).await else {
            return;
        };
        for id in live {
            let of_stream = rows.iter().filter(|r| r.spec.stream_id == id).cloned();
            self.apply(id, of_stream.collect());
        }
    }

    fn apply(&self, stream_id: i64, rows: Vec<RestreamRow>) {
        let Some(hub) = self.registry.hub(stream_id) else {
            return self.stop_stream(stream_id);
        };
        let wanted: HashMap<i64, RestreamSpec> = rows
            .into_iter()
            .filter(|r| r.spec.active)
            .map(|r| (r.id, r.spec))
            .collect();
        let mut running = self.running();
        running.retain(|id, r| {
            let keep = r.stream_id != stream_id || wanted.get(id) == Some(&r.spec);
            if !keep {
                let _ = r.stop.send(true);
            }
            keep
        });
        for (id, spec) in wanted {
            if running.contains_key(&id) {
                continue;
            }
            let state = Arc::new(Mutex::new(RestreamStatus::default()));
            let (stop, stop_rx) = watch::channel(false);
            match Target::parse(&spec.uri) {
                Ok(target) => {
                    let task = Restream {
                        id,
                        hub: hub.clone(),
                        source: source(&spec),
                        target,
                        tls: self.tls.clone(),
                        state: state.clone(),
                        stream_id,
                        events: Some(self.registry.events().clone()),
                    };
                    tokio::spawn(task.run(stop_rx));
                }
                // A stored target this daemon's policy refuses (written by another version):
                // not run, and the record says why until it is edited.
                Err(e) => {
                    tracing::warn!(restream = id, error = %e, "restream target refused");
                    state.lock().unwrap_or_else(|p| p.into_inner()).last_error =
                        Some(format!("target refused: {e}"));
                }
            }
            running.insert(
                id,
                Running {
                    stream_id,
                    spec,
                    stop,
                    state,
                },
            );
        }
    }

    /// Stops every restream (shutdown).
    pub fn stop_all(&self) {
        // First the follower, so that no restream starts after the others were told to stop.
        if let Some(follower) = self
            .follower
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            follower.abort();
        }
        for r in self.running().values() {
            let _ = r.stop.send(true);
        }
    }
}

impl Restreams {
    /// The restreams running here: how many are connected and sending, and how many are not
    /// (connecting again after a loss or a refusal).
    pub fn totals(&self) -> (usize, usize) {
        let running = self.running();
        let live = running
            .values()
            .filter(|r| r.state.lock().unwrap_or_else(|p| p.into_inner()).live)
            .count();
        (live, running.len() - live)
    }

    /// The states of `stream`'s restreams running here, by restream id: they join the stream's
    /// live status wherever it is shown (the API, the lease every node reads).
    pub fn states(&self, stream: i64) -> std::collections::BTreeMap<i64, RestreamStatus> {
        self.running()
            .iter()
            .filter(|(_, r)| r.stream_id == stream)
            .map(|(&id, r)| {
                (
                    id,
                    r.state.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                )
            })
            .collect()
    }
}
