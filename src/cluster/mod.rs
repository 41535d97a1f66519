//! This daemon as one node of several sharing a store: its heartbeat, the leases on the streams
//! it serves (taken when it accepts a publish or starts a PULL, held while it serves the
//! stream, given up when the stream is forgotten), and what the store says about streams other
//! nodes serve. With SQLite there is one node and every lease is its own; the same code runs.
//!
//! Coordination is the store's: a lease is one row, taken atomically
//! ([`crate::db::ClusterStore::take_lease`]); a node is alive while its heartbeat is younger
//! than `node_dead_secs` by the store's clock. No consensus of our own.

pub mod lookup;
pub mod node_auth;
pub mod nodes;
pub use nodes::NodeState;
mod placement;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use time::OffsetDateTime;

use crate::db::{LeaseRow, LeaseState, LeaseTake, NodeBeat, Store};
use crate::egress::manager::Restreams;
use crate::live::{LiveStatus, PublishError, Registry};
use crate::package::Numbering;

/// A node silent this long is dead: its streams show `live: false` and their leases are free.
pub const DEFAULT_DEAD_AFTER: Duration = Duration::from_secs(10);
/// Heartbeats per `dead_after`: a node is declared dead only after missing several in a row.
const BEATS_PER_DEAD_AFTER: u32 = 5;

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's name in the store (`node_id`; default the host name).
    pub node_id: String,
    /// Where the other nodes reach this one (`node_url`; default from the HTTP address).
    pub node_url: String,
    pub dead_after: Duration,
    /// The store may be shared (PostgreSQL): another daemon may already run under this id.
    /// SQLite's file is one daemon's; a restart there is always the same node.
    pub shared_store: bool,
}

/// The node's view of its leases.
pub struct Cluster {
    config: ClusterConfig,
    store: Arc<dyn Store>,
    started_at: OffsetDateTime,
    /// Streams whose lease this node holds.
    held: Mutex<HashSet<i64>>,
    /// The numbering each held stream's heartbeat last wrote: written again only when its
    /// discontinuity number moved (the clock covers the segment numbers of a node that dies).
    numbered: Mutex<HashMap<i64, Numbering>>,
    /// Orders lease changes (take, release, heartbeat) as the node made them: a release that
    /// runs after a new take of the same stream must see it and keep the lease.
    ops: tokio::sync::Mutex<()>,
    /// Asks the heartbeat task for a beat now (a publisher came or left).
    wake: tokio::sync::Notify,
    /// When the last heartbeat that reached the store was sent (it committed after that).
    last_beat: Mutex<Option<Instant>>,
    /// Signed off ([`Cluster::leave`]): no more heartbeats.
    left: AtomicBool,
    /// Other live nodes shared the store at the last heartbeat that landed: only they could
    /// take this node's streams.
    peers: AtomicBool,
    /// What requests ask the store about streams, answered at most a second old.
    lookups: lookup::Lookups,
    /// The peers' headroom, for where a PULL stream goes.
    placement: placement::Placement,
}

impl Cluster {
    pub fn new(config: ClusterConfig, store: Arc<dyn Store>) -> Arc<Cluster> {
        Arc::new(Cluster {
            lookups: lookup::Lookups::new(store.clone(), config.dead_after),
            config,
            store,
            started_at: OffsetDateTime::now_utc(),
            held: Mutex::new(HashSet::new()),
            numbered: Mutex::default(),
            ops: tokio::sync::Mutex::new(()),
            wake: tokio::sync::Notify::new(),
            last_beat: Mutex::new(None),
            left: AtomicBool::new(false),
            peers: AtomicBool::new(false),
            placement: placement::Placement::default(),
        })
    }

    pub fn node_id(&self) -> &str {
        &self.config.node_id
    }

    pub fn dead_after(&self) -> Duration {
        self.config.dead_after
    }

    pub fn lookups(&self) -> &lookup::Lookups {
        &self.lookups
    }

    /// Whether this node serves `id` (holds its lease).
    pub fn holds(&self, id: i64) -> bool {
        lock(&self.held).contains(&id)
    }

    /// The URL of the node serving stream `id` when another node does; `None` when this node
    /// serves it or nobody does. `fresh` asks the store now; otherwise the second-old snapshot
    /// of every live lease answers (see [`lookup`]).
    pub async fn serving_node(&self, id: i64, fresh: bool) -> Option<String> {
        if self.holds(id) || id <= 0 {
            return None;
        }
        let elsewhere = |l: &LeaseRow| {
            l.stream_id == id && l.node_id != self.node_id() && !l.node_url.is_empty()
        };
        if !fresh {
            let leases = self.lookups.live_leases().await.ok()?;
            return leases
                .held
                .iter()
                .find(|l| elsewhere(l))
                .map(|l| l.node_url.clone());
        }
        let store = self.store.clone();
        let dead_after = self.dead_after();
        let leases = tokio::task::spawn_blocking(move || store.live_leases(Some(id), dead_after))
            .await
            .ok()?
            .ok()?;
        leases.into_iter().find(elsewhere).map(|l| l.node_url)
    }

    /// Whether stream `id` is moving between nodes: a stopping node gave it up moments ago and
    /// no node has taken it since (the second-old snapshot of [`lookup`] answers).
    pub async fn moving(&self, id: i64) -> bool {
        !self.holds(id)
            && self
                .lookups
                .live_leases()
                .await
                .is_ok_and(|leases| leases.moving(id))
    }

    /// The URL of node `node` when it is another node that announced one.
    pub async fn node_url(&self, node: &str) -> Option<String> {
        if node == self.node_id() {
            return None;
        }
        let store = self.store.clone();
        let nodes = tokio::task::spawn_blocking(move || store.nodes())
            .await
            .ok()?
            .ok()?;
        nodes
            .into_iter()
            .find(|n| n.id == node)
            .map(|n| n.url)
            .filter(|u| !u.is_empty())
    }

    /// Registers the node (first heartbeat) before anything is accepted, then beats every
    /// `dead_after / 5` (and when a stream's publisher comes or leaves) for as long as
    /// `registry` lives: each beat writes the state of the streams it serves (with their
    /// restreams'), stops the ones whose lease another node took, and gives up leases it holds
    /// without serving the stream (left by an earlier run under the same node id).
    pub async fn start(
        self: &Arc<Self>,
        registry: &Arc<Registry>,
        restreams: &Arc<Restreams>,
    ) -> Result<(), ClusterError> {
        // Two daemons under one id would each take the other's leases for its own. A node
        // restarting (same id, same URL) is itself; another URL heard from recently is not.
        let store = self.store.clone();
        let nodes = tokio::task::spawn_blocking(move || store.nodes())
            .await
            .map_err(|_| ClusterError::Panicked)??;
        if let Some(n) = nodes.iter().find(|n| n.id == self.config.node_id) {
            let alive = self.node_state(n) == NodeState::Alive;
            if self.config.shared_store && alive && n.url != self.config.node_url {
                return Err(ClusterError::NodeIdInUse {
                    id: n.id.clone(),
                    url: n.url.clone(),
                    silent: n.silent,
                });
            }
        }
        self.beat(registry, restreams).await?;
        let period = self.config.dead_after / BEATS_PER_DEAD_AFTER;
        let this = self.clone();
        let (weak, restreams) = (Arc::downgrade(registry), Arc::downgrade(restreams));
        tokio::spawn(async move {
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = this.wake.notified() => {}
                }
                let (Some(registry), Some(restreams)) = (weak.upgrade(), restreams.upgrade())
                else {
                    return;
                };
                if this.left.load(Ordering::Acquire) {
                    return;
                }
                if let Err(e) = this.beat(&registry, &restreams).await {
                    tracing::warn!(error = %e, "cluster heartbeat failed; retrying");
                }
            }
        });
        if !self.config.shared_store {
            // One daemon on its own file: nobody else could take its streams.
            return Ok(());
        }
        // Apart from the beats, which may hang on a store that stopped answering; checked
        // often, so the streams stop well before the others may take them.
        let this = self.clone();
        let weak = Arc::downgrade(registry);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(period / 4);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(registry) = weak.upgrade() else {
                    return;
                };
                this.fence_if_unheard(&registry, Instant::now());
            }
        });
        Ok(())
    }

    /// A node whose heartbeats have not reached the store for `dead_after` is dead to the
    /// others, which then take its streams: so it stops serving them itself two beats before
    /// that (its last heartbeat that landed was sent no later than it committed; the second
    /// beat is room for the stop to take effect), and two nodes never serve one stream. Its
    /// publishers are cut (they reconnect, to whichever node the store lets take the stream),
    /// its PULLs go back to claiming. A node that was alone keeps its streams through a store
    /// outage: nobody could take them, and when the store is back a newcomer's take is seen at
    /// the next heartbeat.
    fn fence_if_unheard(&self, registry: &Registry, now: Instant) {
        let Some(sent) = *lock(&self.last_beat) else {
            return;
        };
        let silent = now.saturating_duration_since(sent);
        if silent < self.fence_after() || !self.peers.load(Ordering::Acquire) {
            return;
        }
        let fenced: Vec<i64> = lock(&self.held).drain().collect();
        for id in fenced {
            tracing::error!(
                stream = id,
                silent_ms = silent.as_millis() as u64,
                "no heartbeat reached the store for too long; stopping the stream here, \
                 another node may take it over"
            );
            registry.kick(id);
        }
    }

    /// How long without a heartbeat in the store before this node stops serving its streams.
    fn fence_after(&self) -> Duration {
        self.config.dead_after - 2 * (self.config.dead_after / BEATS_PER_DEAD_AFTER)
    }

    async fn beat(
        &self,
        registry: &Arc<Registry>,
        restreams: &Restreams,
    ) -> Result<(), ClusterError> {
        let _order = self.ops.lock().await;
        // A beat queued behind `leave` would register the node again after it signed off.
        if self.left.load(Ordering::Acquire) {
            return Ok(());
        }
        let sent = Instant::now();
        let ours: Vec<i64> = lock(&self.held).iter().copied().collect();
        let numbered = std::mem::take(&mut *lock(&self.numbered));
        let moved = |id: i64| {
            let now = registry.numbering(id)?;
            let before = numbered.get(&id);
            (before.map(|b| b.next_discontinuity) != Some(now.next_discontinuity)).then_some(now)
        };
        let states: Vec<LeaseState> = ours
            .iter()
            .map(|&id| LeaseState {
                stream_id: id,
                publishing: registry.claimed(id),
                status: encode_status(&registry.status(id).with_restreams(restreams.states(id))),
                numbering: moved(id),
            })
            .collect();
        // What is written now, and what was before for the rest; a failed beat writes it again.
        let mut written = numbered.clone();
        for s in &states {
            if let Some(n) = s.numbering {
                written.insert(s.stream_id, n);
            }
        }
        written.retain(|id, _| ours.contains(id));
        let store = self.store.clone();
        let (id, url, started_at) = (
            self.config.node_id.clone(),
            self.config.node_url.clone(),
            self.started_at,
        );
        let (shared, dead_after) = (self.config.shared_store, self.config.dead_after);
        let headroom = registry.headroom().map(i64::from);
        let (in_store, nodes) = own_thread(move || {
            let in_store = store.heartbeat(
                &NodeBeat {
                    id: &id,
                    url: &url,
                    started_at,
                    headroom,
                },
                &states,
            )?;
            let nodes = if shared { store.nodes().ok() } else { None };
            Ok::<_, crate::db::StoreError>((in_store, nodes))
        })
        .await??;
        let me = &self.config.node_id;
        // The heartbeat landed whatever the node list says; unread, assume company.
        let peers = shared
            && nodes
                .as_ref()
                .is_none_or(|nodes| nodes.iter().any(|n| &n.id != me && n.silent < dead_after));
        if let Some(nodes) = &nodes {
            self.placement.heard(nodes, me, dead_after);
        }
        *lock(&self.last_beat) = Some(sent);
        *lock(&self.numbered) = written;
        self.peers.store(peers, Ordering::Release);
        let in_store: HashSet<i64> = in_store.into_iter().collect();
        for id in ours.iter().filter(|id| !in_store.contains(id)) {
            lock(&self.held).remove(id);
            tracing::warn!(
                stream = id,
                "another node took this stream over; stopping here"
            );
            registry.kick(*id);
        }
        for &id in in_store.iter().filter(|id| !ours.contains(id)) {
            tracing::info!(
                stream = id,
                "giving up a lease an earlier run of this node held"
            );
            let store = self.store.clone();
            let node = self.config.node_id.clone();
            let _ = tokio::task::spawn_blocking(move || store.release_lease(id, &node)).await;
        }
        Ok(())
    }

    /// The daemon is stopping (its publishers told, new ones refused): every stream's lease
    /// goes now, while the pipelines here still drain, so a publisher reconnecting to another
    /// node is taken there at once, and the other nodes stop passing the streams' viewers to
    /// this one, which refuses them. The heartbeat goes on until [`Cluster::leave`].
    /// Each stream's numbering is left for the node that takes it over.
    pub async fn give_up_streams(&self, registry: &Registry) {
        let _order = self.ops.lock().await;
        let streams: Vec<(i64, Option<Numbering>)> = lock(&self.held)
            .drain()
            .map(|id| (id, registry.handover(id)))
            .collect();
        if streams.is_empty() {
            return;
        }
        let store = self.store.clone();
        let node = self.config.node_id.clone();
        let released =
            tokio::task::spawn_blocking(move || store.give_up_leases(&node, &streams)).await;
        match released {
            Ok(Ok(ids)) => tracing::info!(streams = ?ids, "stopping: stream leases given up"),
            Ok(Err(e)) => tracing::warn!(error = %e, "stopping: cannot give up the stream leases"),
            Err(_) => {}
        }
    }

    /// The daemon stops cleanly (its streams have ended): the leases go at once, so other
    /// nodes take the streams over without waiting for the silence bound, and the node id is
    /// free for its next start.
    pub async fn leave(&self) {
        let _order = self.ops.lock().await;
        self.left.store(true, Ordering::Release);
        lock(&self.held).clear();
        let store = self.store.clone();
        let node = self.config.node_id.clone();
        match tokio::task::spawn_blocking(move || store.node_left(&node)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot sign this node off the store"),
            Err(_) => {}
        }
    }

    /// Takes `id`'s lease for this node, or says which node serves it. A holder whose publisher
    /// left (grace period) gives the stream up to a new publish when `from_idle`.
    pub async fn take(&self, id: i64, from_idle: bool) -> Result<Numbering, Taken> {
        let _order = self.ops.lock().await;
        let store = self.store.clone();
        let node = self.config.node_id.clone();
        let take = LeaseTake {
            dead_after: self.config.dead_after,
            from_idle,
        };
        let outcome = tokio::task::spawn_blocking(move || store.take_lease(id, &node, take))
            .await
            .map_err(|_| Taken::Store)?
            .map_err(|e| {
                tracing::error!(stream = id, error = %e, "cannot take the stream's lease");
                Taken::Store
            })?;
        match outcome {
            Ok(numbering) => {
                lock(&self.held).insert(id);
                Ok(numbering)
            }
            Err(holder) => Err(Taken::By(holder)),
        }
    }

    /// The stream is forgotten here: its lease goes, unless this node took it again since.
    pub fn release(self: &Arc<Self>, id: i64) {
        if !lock(&self.held).remove(&id) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let _order = this.ops.lock().await;
            if this.holds(id) {
                return;
            }
            let store = this.store.clone();
            let node = this.config.node_id.clone();
            match tokio::task::spawn_blocking(move || store.release_lease(id, &node)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(stream = id, error = %e, "cannot give up the stream's lease")
                }
                Err(_) => {}
            }
        });
    }

    /// Writes a stream's state at once (its publisher left, or came back), not at the next beat.
    pub fn state_changed(&self, id: i64) {
        if self.holds(id) {
            self.wake.notify_one();
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("store: {0}")]
    Store(#[from] crate::db::StoreError),
    #[error("the store call panicked")]
    Panicked,
    #[error(
        "node_id {id} is in use by a running node at {url} (heard from {silent:?} ago): \
         give each daemon its own node_id"
    )]
    NodeIdInUse {
        id: String,
        url: String,
        silent: Duration,
    },
}

/// Why a lease was not taken.
#[derive(Debug)]
pub enum Taken {
    /// Another live node serves the stream.
    By(LeaseRow),
    Store,
}

/// The registry's view of the cluster (it does not know this module's types).
impl crate::live::Leases for Cluster {
    fn take(
        self: Arc<Self>,
        id: i64,
        from_idle: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Numbering, PublishError>> + Send>> {
        Box::pin(async move {
            match Cluster::take(&self, id, from_idle).await {
                Ok(n) => Ok(n),
                Err(Taken::Store) => Err(PublishError::Store),
                Err(Taken::By(holder)) => Err(PublishError::LiveElsewhere {
                    id,
                    node: holder.node_id,
                    url: holder.node_url,
                }),
            }
        })
    }

    fn release(self: Arc<Self>, id: i64) {
        Cluster::release(&self, id)
    }

    fn state_changed(self: Arc<Self>, id: i64) {
        Cluster::state_changed(&self, id)
    }

    fn better_placed(&self, id: i64, headroom: Option<u32>) -> Option<String> {
        // Long enough for the roomier peer's PULL to claim it (it tries every few seconds).
        let patience = 3 * self.config.dead_after / BEATS_PER_DEAD_AFTER + Duration::from_secs(5);
        self.placement
            .better_placed(id, headroom.map(i64::from), patience)
    }
}

impl Cluster {
    /// A stream's live state as every node shows it: this node's own (`here`) while it serves
    /// the stream, else what the serving node wrote in its lease (`leases`: the live ones, from
    /// [`crate::db::ClusterStore::live_leases`]).
    pub fn status(
        &self,
        here: impl FnOnce() -> LiveStatus,
        id: i64,
        leases: &[LeaseRow],
    ) -> LiveStatus {
        if self.holds(id) {
            return here();
        }
        leases
            .iter()
            .find(|l| l.stream_id == id)
            .map(|l| decode_status(&l.status))
            .unwrap_or_default()
    }
}

/// The status another node wrote, as the API shows it; what cannot be read shows as not live.
pub fn decode_status(json: &str) -> LiveStatus {
    serde_json::from_str(json).unwrap_or_default()
}

fn encode_status(status: &LiveStatus) -> String {
    serde_json::to_string(status).unwrap_or_else(|_| "{}".into())
}

/// Runs a heartbeat's store calls on a thread of its own, not the blocking pool: a flood of
/// requests can fill that pool with calls waiting for a store connection, and a heartbeat
/// queued behind them would let the node fence itself. (The store gives heartbeats their own
/// connections too.) One short-lived thread every `dead_after / 5`.
async fn own_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ClusterError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("livepack-beat".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|_| ClusterError::Panicked)?;
    rx.await.map_err(|_| ClusterError::Panicked)
}

/// The host name (`node_id`'s default).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "livepack".into())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
