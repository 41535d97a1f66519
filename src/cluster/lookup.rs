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
    store: Arc<dyn Store>,
    dead_after: Duration,
    /// The last snapshot; the lock is held across a refresh, so requests arriving meanwhile
    /// wait for its answer instead of asking the store too (one query in flight).
    leases: tokio::sync::Mutex<Option<(Instant, Leases)>>,
    streams: Mutex<HashMap<i64, StreamAnswer>>,
    misses: tokio::sync::Semaphore,
}

impl Lookups {
    pub fn new(store: Arc<dyn Store>, dead_after: Duration) -> Lookups {
        Lookups {
            store,
            dead_after,
            leases: tokio::sync::Mutex::new(None),
            streams: Mutex::new(HashMap::new()),
            misses: tokio::sync::Semaphore::new(MISS_QUERIES),
        }
    }

    /// Every live lease, at most [`TTL`] old.
    pub async fn live_leases(&self) -> Result<Leases, LookupError> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        let mut slot = self.leases.lock().await;
        if let Some((at, leases)) = &*slot {
            if at.elapsed() < TTL {
                return Ok(leases.clone());
            }
        }
        LEASE_QUERIES.fetch_add(1, Ordering::Relaxed);
        let (store, dead_after) = (self.store.clone(), self.dead_after);
        let leases = tokio::task::spawn_blocking(move || store.live_leases(None, dead_after))
            .await
            .map_err(|_| LookupError::Panicked)??;
        let leases = Arc::new(leases);
        *slot = Some((Instant::now(), leases.clone()));
        Ok(leases)
    }

    /// Stream `id`'s row (`None`: no such stream), at most [`TTL`] old.
    pub async fn stream(&self, id: i64) -> Result<Option<Arc<StreamRow>>, LookupError> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        if let Some(row) = self.cached(id) {
            return Ok(row);
        }
        // The semaphore is never closed.
        let _turn = self.misses.acquire().await.ok();
        // Answered while this one waited for its turn?
        if let Some(row) = self.cached(id) {
            return Ok(row);
        }
        STREAM_QUERIES.fetch_add(1, Ordering::Relaxed);
        let store = self.store.clone();
        let row = tokio::task::spawn_blocking(move || store.get_stream(id))
            .await
            .map_err(|_| LookupError::Panicked)??
            .map(Arc::new);
        let mut streams = lock(&self.streams);
        if streams.len() >= MAX_STREAMS {
            streams.retain(|_, (at, _)| at.elapsed() < TTL);
            if streams.len() >= MAX_STREAMS {
                streams.clear();
            }
        }
        streams.insert(id, (Instant::now(), row.clone()));
        Ok(row)
    }

    fn cached(&self, id: i64) -> Option<Option<Arc<StreamRow>>> {
        let streams = lock(&self.streams);
        let (at, row) = streams.get(&id)?;
        (at.elapsed() < TTL).then(|| row.clone())
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
