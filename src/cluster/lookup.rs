//! Short-lived answers to the store questions an unauthenticated media or player request asks
//! first — which node serves stream `id`, does stream `id` exist — so that a flood of requests
//! for ids nobody serves costs the store about one query a second, not one or two per request.
//! Inputs: the store; outputs: the live leases (all of them, one snapshot a second) and stream
//! rows (per id, positive and negative answers, bounded).
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
/// Stream rows (or their absence) remembered at most; past it the expired ones go, then all.
const MAX_STREAMS: usize = 4096;
/// Store reads of stream rows in flight at once for cache misses (the pool has 4 connections).
const MISS_QUERIES: usize = 2;

/// Counted for `/metrics`: lookups asked, and the store queries they cost.
static ASKED: AtomicU64 = AtomicU64::new(0);
static LEASE_QUERIES: AtomicU64 = AtomicU64::new(0);
static STREAM_QUERIES: AtomicU64 = AtomicU64::new(0);

type Leases = Arc<Vec<LeaseRow>>;
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
    refreshes: Mutex<tokio::task::JoinSet<()>>,
    misses: Arc<tokio::sync::Semaphore>,
}

/// What the background refreshes write.
struct Shared {
    store: Arc<dyn Store>,
    dead_after: Duration,
    /// The last snapshot; the lock is held across a cold fetch, so requests arriving meanwhile
    /// wait for its answer instead of asking the store too (one query in flight).
    leases: tokio::sync::Mutex<Option<(Instant, Leases)>>,
    leases_refreshing: std::sync::atomic::AtomicBool,
    streams: Mutex<HashMap<i64, StreamAnswer>>,
    /// Stream rows being refreshed in the background.
    streams_refreshing: Mutex<std::collections::HashSet<i64>>,
}

impl Lookups {
    pub fn new(store: Arc<dyn Store>, dead_after: Duration) -> Lookups {
        Lookups {
            shared: Arc::new(Shared {
                store,
                dead_after,
                leases: tokio::sync::Mutex::new(None),
                leases_refreshing: std::sync::atomic::AtomicBool::new(false),
                streams: Mutex::new(HashMap::new()),
                streams_refreshing: Mutex::new(Default::default()),
            }),
            refreshes: Mutex::new(tokio::task::JoinSet::new()),
            misses: Arc::new(tokio::sync::Semaphore::new(MISS_QUERIES)),
        }
    }

    /// Every live lease, at most [`TTL`] old — or up to [`STALE`] old while a fresh one is
    /// fetched in the background: a viewer's request never waits for a slow store when an
    /// answer is at hand.
    pub async fn live_leases(&self) -> Result<Leases, LookupError> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        let mut slot = self.shared.leases.lock().await;
        if let Some((at, leases)) = &*slot {
            if at.elapsed() < TTL {
                return Ok(leases.clone());
            }
            if at.elapsed() < STALE {
                let leases = leases.clone();
                drop(slot);
                if !self.shared.leases_refreshing.swap(true, Ordering::SeqCst) {
                    let shared = self.shared.clone();
                    self.spawn(async move {
                        let fetched = shared.fetch_leases().await;
                        if let Ok(leases) = fetched {
                            *shared.leases.lock().await = Some((Instant::now(), leases));
                        }
                        shared.leases_refreshing.store(false, Ordering::SeqCst);
                    });
                }
                return Ok(leases);
            }
        }
        let leases = self.shared.fetch_leases().await?;
        *slot = Some((Instant::now(), leases.clone()));
        Ok(leases)
    }

    /// Stream `id`'s row (`None`: no such stream), at most [`TTL`] old — or up to [`STALE`]
    /// old while a fresh one is fetched in the background.
    pub async fn stream(&self, id: i64) -> Result<Option<Arc<StreamRow>>, LookupError> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        if let Some((fresh, row)) = self.shared.cached(id) {
            if !fresh && lock(&self.shared.streams_refreshing).insert(id) {
                let (shared, misses) = (self.shared.clone(), self.misses.clone());
                self.spawn(async move {
                    let _turn = misses.acquire().await.ok();
                    let _ = shared.fetch_stream(id).await;
                    lock(&shared.streams_refreshing).remove(&id);
                });
            }
            return Ok(row);
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
        let mut refreshes = lock(&self.refreshes);
        while refreshes.try_join_next().is_some() {}
        refreshes.spawn(refresh);
    }
}

impl Shared {
    async fn fetch_leases(&self) -> Result<Leases, LookupError> {
        LEASE_QUERIES.fetch_add(1, Ordering::Relaxed);
        let (store, dead_after) = (self.store.clone(), self.dead_after);
        let leases = tokio::task::spawn_blocking(move || store.live_leases(None, dead_after))
            .await
            .map_err(|_| LookupError::Panicked)??;
        Ok(Arc::new(leases))
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
