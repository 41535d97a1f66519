//! Short-lived answers to the store questions an unauthenticated media or player request asks
//! first — which node serves stream `id`, does stream `id` exist — so that a flood of requests
//! for ids nobody serves costs the store about one query a second, not one or two per request.
//! Inputs: the store; outputs: the live leases and the streams moving between nodes (all of
//! them, one snapshot a second) and stream rows (per id, positive and negative answers,
//! bounded).
//!
//! Why a snapshot of every live lease rather than a per-id cache: a flood of distinct unknown
//! ids misses any per-id cache, while the live leases are few (one per stream live anywhere in
//! the cluster) and one query answers every id. A stream row is per id, so its misses are
//! bounded differently: at most [`MISS_QUERIES`] at once, leaving the rest of the store's pool
//! to the API.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::db::{LeaseRow, Store, StoreError, StreamRow};

/// How old an answer may be. A lease moves only when a node dies or a publisher moves (seconds
/// of `node_dead_secs`), and a stream created a second ago not yet playing is harmless.
pub const TTL: Duration = Duration::from_secs(1);
/// How old an answer may still be served while a fresh one is fetched: a store that stalls
/// for this long holds no viewer; past it, requests wait for the store again (a deleted
/// stream or a changed playback setting is not honoured forever on an old answer).
pub const STALE: Duration = Duration::from_secs(60);
/// How long a request waits for a refresh before it takes the older answer: far above a
/// healthy store's answer, so a change made through the API is seen by the next request.
const FRESH_WAIT: Duration = Duration::from_millis(300);
/// Stream rows (or their absence) remembered at most; past it the expired ones go, then all.
const MAX_STREAMS: usize = 4096;
/// Store reads of stream rows in flight at once for cache misses (the pool has 4 connections).
const MISS_QUERIES: usize = 2;

/// Counted for `/metrics`: lookups asked, and the store queries they cost.
static ASKED: AtomicU64 = AtomicU64::new(0);
static LEASE_QUERIES: AtomicU64 = AtomicU64::new(0);
static STREAM_QUERIES: AtomicU64 = AtomicU64::new(0);

/// How long after a stopping node gave a stream up it counts as moving (its publisher
/// reconnects to another node within seconds; past this it is taken to have ended).
pub const MOVING_FOR: Duration = Duration::from_secs(15);

/// Every live lease, and the streams moving between nodes, as the store said at one instant.
#[derive(Debug, Default)]
pub struct LeaseView {
    pub held: Vec<LeaseRow>,
    /// Given up by a stopping node within [`MOVING_FOR`], not yet taken by another: ascending.
    pub moving: Vec<i64>,
}

impl LeaseView {
    pub fn moving(&self, id: i64) -> bool {
        self.moving.binary_search(&id).is_ok()
    }
}

type Leases = Arc<LeaseView>;
/// A stream's row, or `None` for no such stream, and when the store said so.
type StreamAnswer = (Instant, Option<Arc<StreamRow>>);

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the store call panicked")]
    Panicked,
}

pub struct Lookups {
    shared: Arc<Shared>,
    /// The refreshes running in the background (owned here: dropped with the lookups).
    refreshes: crate::tasks::Owned,
    misses: Arc<tokio::sync::Semaphore>,
}

/// What the background refreshes write.
struct Shared {
    store: Arc<dyn Store>,
    dead_after: Duration,
    /// The last snapshot; the lock is held across a cold fetch, so requests arriving meanwhile
    /// wait for its answer instead of asking the store too (one query in flight).
    leases: tokio::sync::Mutex<Option<(Instant, Leases)>>,
    /// When the background refresh of the leases began, while one runs.
    leases_refreshing: Mutex<Option<Instant>>,
    streams: Mutex<HashMap<i64, StreamAnswer>>,
    /// Stream rows being refreshed in the background.
    streams_refreshing: Mutex<HashMap<i64, Instant>>,
}

impl Lookups {
    pub fn new(store: Arc<dyn Store>, dead_after: Duration) -> Lookups {
        Lookups {
            shared: Arc::new(Shared {
                store,
                dead_after,
                leases: tokio::sync::Mutex::new(None),
                leases_refreshing: Mutex::new(None),
                streams: Mutex::new(HashMap::new()),
                streams_refreshing: Mutex::new(Default::default()),
            }),
            refreshes: crate::tasks::Owned::default(),
            misses: Arc::new(tokio::sync::Semaphore::new(MISS_QUERIES)),
        }
    }

    /// Every live lease, at most [`TTL`] old. Past that, a fresh snapshot is fetched; a store
    /// that has not answered within [`FRESH_WAIT`] gets the last snapshot served instead (up to
    /// [`STALE`] old) while the fetch goes on: a viewer's request never waits long for a stuck
    /// store when an answer is at hand, and a healthy store's change is seen at once.
    pub async fn live_leases(&self) -> Result<Leases, LookupError> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        let slot = self.shared.leases.lock().await;
        let stale = match &*slot {
            Some((at, leases)) if at.elapsed() < TTL => return Ok(leases.clone()),
            Some((at, leases)) if at.elapsed() < STALE => leases.clone(),
            _ => {
                let mut slot = slot;
                let leases = self.shared.fetch_leases().await?;
                *slot = Some((Instant::now(), leases.clone()));
                return Ok(leases);
            }
        };
        drop(slot);
        let began = {
            let mut refreshing = lock(&self.shared.leases_refreshing);
            if refreshing.is_none() {
                *refreshing = Some(Instant::now());
                let shared = self.shared.clone();
                self.spawn(async move {
                    if let Ok(leases) = shared.fetch_leases().await {
                        *shared.leases.lock().await = Some((Instant::now(), leases));
                    }
                    *lock(&shared.leases_refreshing) = None;
                });
            }
            refreshing.unwrap_or_else(Instant::now)
        };
        let fresh = fresh_within(began, || {
            let slot = self.shared.leases.try_lock().ok()?;
            let (at, leases) = slot.as_ref()?;
            (at.elapsed() < TTL).then(|| leases.clone())
        })
        .await;
        Ok(fresh.unwrap_or(stale))
    }

    /// Stream `id`'s row (`None`: no such stream), at most [`TTL`] old; past that, as for
    /// [`Lookups::live_leases`], an answer up to [`STALE`] old when the store is slow.
    pub async fn stream(&self, id: i64) -> Result<Option<Arc<StreamRow>>, LookupError> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        if let Some((fresh, row)) = self.shared.cached(id) {
            if fresh {
                return Ok(row);
            }
            let began = *lock(&self.shared.streams_refreshing)
                .entry(id)
                .or_insert_with(|| {
                    let (shared, misses) = (self.shared.clone(), self.misses.clone());
                    self.spawn(async move {
                        let _turn = misses.acquire().await.ok();
                        let _ = shared.fetch_stream(id).await;
                        lock(&shared.streams_refreshing).remove(&id);
                    });
                    Instant::now()
                });
            let fresh = fresh_within(began, || match self.shared.cached(id) {
                Some((true, row)) => Some(row),
                _ => None,
            })
            .await;
            return Ok(fresh.unwrap_or(row));
        }
        // The semaphore is never closed.
        let _turn = self.misses.acquire().await.ok();
        // Answered while this one waited for its turn?
        if let Some((true, row)) = self.shared.cached(id) {
            return Ok(row);
        }
        self.shared.fetch_stream(id).await
    }

    fn spawn(&self, refresh: impl std::future::Future<Output = ()> + Send + 'static) {
        self.refreshes.spawn(refresh);
    }
}

impl Shared {
    async fn fetch_leases(&self) -> Result<Leases, LookupError> {
        LEASE_QUERIES.fetch_add(1, Ordering::Relaxed);
        let (store, dead_after) = (self.store.clone(), self.dead_after);
        let view = tokio::task::spawn_blocking(move || {
            Ok::<_, StoreError>(LeaseView {
                held: store.live_leases(None, dead_after)?,
                moving: store.moving_streams(MOVING_FOR)?,
            })
        })
        .await
        .map_err(|_| LookupError::Panicked)??;
        Ok(Arc::new(view))
    }

    async fn fetch_stream(&self, id: i64) -> Result<Option<Arc<StreamRow>>, LookupError> {
        STREAM_QUERIES.fetch_add(1, Ordering::Relaxed);
        let store = self.store.clone();
        let row = tokio::task::spawn_blocking(move || store.get_stream(id))
            .await
            .map_err(|_| LookupError::Panicked)??
            .map(Arc::new);
        let mut streams = lock(&self.streams);
        if streams.len() >= MAX_STREAMS {
            streams.retain(|_, (at, _)| at.elapsed() < STALE);
            if streams.len() >= MAX_STREAMS {
                streams.clear();
            }
        }
        streams.insert(id, (Instant::now(), row.clone()));
        Ok(row)
    }

    /// A remembered answer no older than [`STALE`], and whether it is fresh (under [`TTL`]).
    fn cached(&self, id: i64) -> Option<(bool, Option<Arc<StreamRow>>)> {
        let streams = lock(&self.streams);
        let (at, row) = streams.get(&id)?;
        (at.elapsed() < STALE).then(|| (at.elapsed() < TTL, row.clone()))
    }
}

/// The counters in Prometheus' text format, for `/metrics`.
pub fn metrics() -> String {
    format!(
        "# HELP livepack_lookups_total Stream owner and existence lookups asked by requests.\n\
         # TYPE livepack_lookups_total counter\nlivepack_lookups_total {}\n\
         # HELP livepack_lookup_store_queries_total Store queries those lookups cost.\n\
         # TYPE livepack_lookup_store_queries_total counter\n\
         livepack_lookup_store_queries_total{{kind=\"live_leases\"}} {}\n\
         livepack_lookup_store_queries_total{{kind=\"stream\"}} {}\n",
        ASKED.load(Ordering::Relaxed),
        LEASE_QUERIES.load(Ordering::Relaxed),
        STREAM_QUERIES.load(Ordering::Relaxed),
    )
}

/// What `fresh` finds before [`FRESH_WAIT`] has passed since `began` (a refresh's start), checked
/// every few milliseconds; `None` once it has passed, at once for a refresh already that late.
async fn fresh_within<T>(began: Instant, mut fresh: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = began + FRESH_WAIT;
    loop {
        if let Some(t) = fresh() {
            return Some(t);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
