//! Live streams: who publishes which stream, the package its outputs are served from, its live
//! status and counters, and the grace period after a publisher leaves. Ingest asks for a
//! [`PublishPermit`] and turns it into a [`Publisher`] with [`Registry::start`]; HTTP delivery
//! and the API read from it. Pipelines come from a [`PipelineFactory`], so this module does not
//! depend on GStreamer and its lifecycle is unit-tested with a fake one.
//!
//! - [`stream`]: each stream's owner task: its sessions, their facts, the grace period and the
//!   linger after the end.
//! - [`sessions`]: the table of streams and their slots, read by publishes and the API;
//!   eviction; waits for released slots.
//! - [`inputs`] + [`switch`]: a session's inputs and the sans-IO main/backup switch.
//! - [`records`]: what a publish reads of the stream's record (its quality set, the renderers'
//!   options).
//! - [`status`]: the live status and counters shared with the pipeline and the API.
//! - [`stats`]: the source's statistics, sampled into the store.
//! - [`times`]: the record's publish times, stored off the media path.

mod inputs;
mod publish_auth;
mod publisher;
mod records;
mod seams;
mod sessions;
pub mod stats;
pub mod status;
mod stream;
pub mod switch;
mod times;

pub use seams::{Leases, PipelineFactory, PipelineFailure, PipelineJob, StreamHandles};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::db::{Store, StreamSettings};
use crate::events::Events;
use crate::package::{Numbering, Package, PackagingConfig};
use crate::quality::QualitySets;
pub use publish_auth::{Caller, HookRefusal, PublishAuth, PublishAuthConfig};
use publisher::{Admitted, LeaseHold};
pub use publisher::{Protocol, PublishError, PublishPermit, Publisher, Slot};
use records::session_options;
use sessions::{lock, Opened, SessionStart};
pub use status::{Counters, LiveStatus, PipelinePart, RestreamStatus, SharedStatus, StreamMetrics};
pub use times::Times;

/// Media messages buffered between an ingest connection and its pipeline. A full queue means
/// the pipeline is not keeping up: the connection drops and counts, it never blocks.
pub const PUBLISH_QUEUE: usize = 1024;
/// Longest wait for a draining pipeline (it flushes what it has queued, seconds when it was
/// behind) before a new publish is refused. RTMP clients wait for the publish answer; libsrt
/// gives up on a handshake after 3 s, so SRT waits less.
pub const DRAIN_WAIT: Duration = Duration::from_secs(6);
pub const DRAIN_WAIT_HANDSHAKE: Duration = Duration::from_secs(2);
/// How often the input switch looks for a silent main.
const SWITCH_TICK: Duration = Duration::from_millis(100);
/// How long an ended stream's playlists (with EXT-X-ENDLIST) stay fetchable.
pub const ENDED_LINGER: Duration = Duration::from_secs(30);

/// The registry's settings.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub packaging: PackagingConfig,
    /// How long outputs stay after the inputs are gone (`grace_period_secs`).
    pub grace: Duration,
    /// How long an ended stream stays fetchable ([`ENDED_LINGER`]).
    pub linger: Duration,
    /// Silence after which the main is failed over from (or reported not live).
    pub switch_timeout: Duration,
    /// `DATA_DIR/media`: each live stream's segments under `{id}/`.
    pub media_root: PathBuf,
    /// How often the source's statistics are sampled into the store.
    pub stats_period: Duration,
    /// The customer's authorization service asked before each publish (`publish_auth_url`).
    pub publish_auth: Option<Arc<PublishAuth>>,
    /// Whether the node takes one more transcode; `None`: every publish is taken.
    pub capacity: Option<Arc<crate::capacity::Capacity>>,
}

pub struct Registry {
    sessions: sessions::Table,
    store: Arc<dyn Store>,
    quality_sets: Arc<QualitySets>,
    factory: Arc<dyn PipelineFactory>,
    config: LiveConfig,
    /// The streams' owner tasks.
    owners: crate::tasks::Owned,
    /// Set at shutdown: owners between sessions end at once.
    closing: tokio::sync::watch::Sender<bool>,
    events: Events,
    /// With several nodes, the streams' leases: taken before a publish is accepted.
    leases: Option<Arc<dyn Leases>>,
    /// Publish checks per stream whose session has not opened yet ([`publisher::LeaseHold`]).
    holds: Mutex<HashMap<i64, usize>>,
    times: Arc<times::TimesWriter>,
    times_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Registry {
    pub fn new(
        store: Arc<dyn Store>,
        quality_sets: Arc<QualitySets>,
        factory: Arc<dyn PipelineFactory>,
        config: LiveConfig,
        events: Events,
        leases: Option<Arc<dyn Leases>>,
    ) -> Arc<Registry> {
        let times = Arc::new(times::TimesWriter::default());
        let times_task = tokio::spawn(times.clone().run(store.clone()));
        Arc::new(Registry {
            sessions: sessions::Table::default(),
            store,
            quality_sets,
            factory,
            config,
            owners: crate::tasks::Owned::default(),
            closing: tokio::sync::watch::Sender::new(false),
            events,
            leases,
            holds: Mutex::new(HashMap::new()),
            times,
            times_task: Mutex::new(Some(times_task)),
        })
    }

    /// Takes the stream's lease (with several nodes): where the last node that served the
    /// stream left its numbering, if any.
    async fn take_lease(
        &self,
        id: i64,
        from_idle: bool,
    ) -> Result<Option<Numbering>, PublishError> {
        match &self.leases {
            Some(leases) => leases.clone().take(id, from_idle).await.map(Some),
            None => Ok(None),
        }
    }

    fn lease_state_changed(&self, id: i64) {
        if let Some(leases) = &self.leases {
            leases.clone().state_changed(id);
        }
    }

    /// The stream is forgotten here (its linger is over): its lease goes, unless a publish
    /// checked here is about to open a session for it.
    pub(super) fn forgotten(&self, id: i64) {
        if lock(&self.holds).contains_key(&id) {
            return;
        }
        if let Some(leases) = &self.leases {
            leases.clone().release(id);
        }
    }

    fn hold_taken(&self, id: i64) {
        *lock(&self.holds).entry(id).or_default() += 1;
    }

    /// A publish check's hold ended; `unused`: its session never opened, so the lease it took
    /// goes unless the stream is served here anyway.
    fn hold_dropped(&self, id: i64, unused: bool) {
        {
            let mut holds = lock(&self.holds);
            if let Some(n) = holds.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    holds.remove(&id);
                }
            }
        }
        if unused {
            self.release_unserved(id);
        }
    }

    /// The PULL fetcher's claim before it connects: this node pulls the stream unless another
    /// live node does ([`PublishError::LiveElsewhere`]).
    pub async fn claim_pull(&self, id: i64) -> Result<(), PublishError> {
        // A full node leaves the stream to a node with room (or to itself, later).
        if !self.sessions.in_session(id) {
            if let Some(full) = self.full() {
                self.release_unserved(id);
                return Err(PublishError::AtCapacity {
                    id,
                    reason: full.to_string(),
                });
            }
            if let Some(node) = self
                .leases
                .as_ref()
                .and_then(|l| l.better_placed(id, self.headroom()))
            {
                return Err(PublishError::BetterPlaced { id, node });
            }
        }
        self.take_lease(id, false).await.map(drop)
    }

    /// Gives up the stream's lease if this node has no session for it (a PULL that stopped
    /// before or after its session).
    pub fn release_unserved(&self, id: i64) {
        if self.sessions.handles(id).is_none() {
            self.forgotten(id);
        }
    }

    /// Whether a publisher (or the PULL fetcher) feeds the stream here now.
    pub fn publishing(&self, id: i64) -> bool {
        self.sessions.slot_taken(id, Slot::Main) || self.sessions.slot_taken(id, Slot::Backup)
    }

    /// [`Registry::publishing`], or a publish checked here is opening its session: what the
    /// stream's lease says, so no other node takes the stream in the middle of a handshake.
    pub fn claimed(&self, id: i64) -> bool {
        self.publishing(id) || lock(&self.holds).contains_key(&id)
    }

    /// The domain events' bus this registry emits on (publish, switch, live start and end).
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Stops every pipeline (each flushes its last parts and goes to NULL), bounded in time.
    pub async fn shutdown(&self, within: Duration) {
        self.closing.send_replace(true);
        self.sessions.stop_all();
        let deadline = tokio::time::Instant::now() + within;
        if crate::tasks::drain(self.owners.take(), within).await > 0 {
            tracing::warn!("pipelines still running after {within:?}; exiting anyway");
        }
        // The publish times the ended sessions stated, stored before the store closes.
        self.times.close();
        let writer = lock(&self.times_task).take();
        if let Some(writer) = writer {
            if tokio::time::timeout_at(deadline, writer).await.is_err() {
                tracing::warn!("stream times not all stored at shutdown");
            }
        }
    }

    /// Publish times stated for the stream and not stored yet: the API shows them over the
    /// record's, so no reader sees the stream off air beside the previous finish time.
    pub fn unwritten_times(&self, id: i64) -> Times {
        self.times.unwritten(id)
    }

    pub fn packaging(&self) -> PackagingConfig {
        self.config.packaging
    }

    /// The ids of every stream the registry holds (live or in its grace period), in order.
    pub fn stream_ids(&self) -> Vec<i64> {
        self.sessions.ids()
    }

    /// Every stream the registry holds (live or in its grace period), by id.
    pub fn metrics(&self) -> Vec<StreamMetrics> {
        self.sessions.metrics()
    }

    /// Where the numbering of whoever serves the stream next must start, while it has a
    /// package here.
    pub fn numbering(&self, id: i64) -> Option<Numbering> {
        self.read_package(id, |p| p.numbering())
    }

    /// What a node giving the stream up leaves for the next ([`Numbering::past_drain`]). Taken
    /// at the give-up, before the pipelines drain: the next node takes the stream as soon as
    /// its encoder reconnects there, about a second later, while this drain may still run;
    /// the numbers the drain can use are left between (the bridge's gaps, then skipped).
    pub fn handover(&self, id: i64) -> Option<Numbering> {
        self.read_package(id, |p| p.numbering().past_drain(p.edge()))
    }

    fn read_package<T>(
        &self,
        id: i64,
        f: impl FnOnce(&crate::package::PackageState) -> T,
    ) -> Option<T> {
        let handles = self.sessions.handles(id)?;
        Some(handles.package.read(f))
    }

    /// The stream's live status here (its restreams' states are the restreams' to add).
    pub fn status(&self, id: i64) -> LiveStatus {
        self.sessions
            .handles(id)
            .map(|h| h.status_now(std::time::Instant::now()))
            .unwrap_or_default()
    }

    /// Ends a live publish (the stream was deactivated or deleted): its pipeline drains, the
    /// publisher's connection is closed, and the usual grace period follows.
    pub fn kick(&self, id: i64) {
        if self.sessions.stop(id) {
            tracing::info!(stream = id, "stopping the live publish");
        }
    }

    /// Cuts the publisher of `slot` (both slots: `None`) at once, as if it had left: the stream
    /// stays active, so a reconnect is accepted (and resumes the outputs within the grace
    /// period). Returns the slots that had a publisher.
    pub fn cut_publishers(&self, id: i64, slot: Option<Slot>) -> Vec<Slot> {
        let slots = match slot {
            Some(slot) => vec![slot],
            None => vec![Slot::Main, Slot::Backup],
        };
        let cut = self.sessions.cut(id, &slots);
        if !cut.is_empty() {
            tracing::info!(stream = id, slots = ?cut, "publisher kicked");
        }
        cut
    }

    /// Applies changed settings to a live (or lingering) stream: the DVR window and the ENDLIST
    /// choice take effect with the next part, without a restart.
    pub fn apply_settings(&self, id: i64, settings: &StreamSettings) {
        if let Some(package) = self.package(id) {
            package.set_options(session_options(settings));
        }
    }

    /// Empties a stream's rewind window (memory and disk); `false` if it has no outputs.
    pub fn dvr_cleanup(&self, id: i64) -> bool {
        let Some(package) = self.package(id) else {
            return false;
        };
        package.clear_dvr();
        tracing::info!(stream = id, "DVR window emptied");
        true
    }

    /// The package serving a stream's outputs, while it is live or in its grace/linger time.
    pub fn package(&self, id: i64) -> Option<Arc<Package>> {
        self.sessions.handles(id).map(|h| h.package)
    }

    /// The media hub of a stream that is live or in its grace/linger time: what real-time
    /// readers and restreams subscribe to.
    pub fn hub(&self, id: i64) -> Option<Arc<crate::hub::Hub>> {
        self.sessions.handles(id).map(|h| h.hub)
    }

    /// Whether a publish would be accepted now, without allocating anything: for protocols
    /// that must answer their handshake before media flows (SRT reads the record's passphrase).
    /// The permit it returns is what [`Registry::start`] takes.
    pub async fn check_publish(
        self: &Arc<Self>,
        id: i64,
        slot: Slot,
        token: &str,
        caller: (Protocol, &Caller),
        patience: Duration,
    ) -> Result<PublishPermit, PublishError> {
        let (protocol, caller) = caller;
        let row = self
            .load(id)
            .await?
            .ok_or(PublishError::UnknownStream(id))?;
        if !crate::secret::constant_time_eq(row.token.as_bytes(), token.as_bytes()) {
            return Err(PublishError::WrongToken(id));
        }
        if !row.settings.active {
            return Err(PublishError::Inactive(id));
        }
        if row.settings.pull {
            return Err(PublishError::PullStream(id));
        }
        // The customer's say comes after ours (a wrong token never reaches their service) and
        // before anything is taken, so a refusal leaves the running publisher alone.
        if let Some(auth) = &self.config.publish_auth {
            auth.check(id, slot, protocol, caller)
                .await
                .map_err(|refusal| PublishError::Hook { id, refusal })?;
        }
        let hold = LeaseHold::new(self, id);
        self.sessions.wait_released(id, slot, patience).await;
        if self.sessions.evict_silent(id, slot) {
            self.sessions.wait_released(id, slot, patience).await;
        }
        if self.sessions.slot_taken(id, slot) {
            return Err(PublishError::AlreadyLive(id));
        }
        let place = self.admit(id)?;
        // A node whose publisher left (grace period) gives the stream up: behind a load
        // balancer the reconnect may land anywhere.
        let numbering = self.take_lease(id, true).await?;
        Ok(PublishPermit {
            row,
            slot,
            protocol,
            hold,
            numbering,
            place,
        })
    }

    /// The check for a PULL stream's session: the daemon is its only publisher, so there is no
    /// token; refused when the record no longer asks for it.
    pub async fn check_pull(self: &Arc<Self>, id: i64) -> Result<PublishPermit, PublishError> {
        let row = self
            .load(id)
            .await?
            .ok_or(PublishError::UnknownStream(id))?;
        if !row.settings.active {
            return Err(PublishError::Inactive(id));
        }
        let hold = LeaseHold::new(self, id);
        self.sessions
            .wait_released(id, Slot::Main, DRAIN_WAIT)
            .await;
        if self.sessions.slot_taken(id, Slot::Main) {
            return Err(PublishError::AlreadyLive(id));
        }
        let place = self.admit(id)?;
        // One node pulls a stream; its holder keeps it through a source outage.
        let numbering = self.take_lease(id, false).await?;
        Ok(PublishPermit {
            row,
            slot: Slot::Main,
            protocol: Protocol::Pull,
            hold,
            numbering,
            place,
        })
    }

    /// A PULL stream's publish: [`Registry::check_pull`] then [`Registry::start`].
    pub async fn publish_pull(self: &Arc<Self>, id: i64) -> Result<Publisher, PublishError> {
        let permit = self.check_pull(id).await?;
        self.start(permit).await
    }

    /// Authorises a publish and starts (or resumes) the stream's pipeline, or joins the running
    /// session as its other slot (main + backup). Every refusal happens before anything is
    /// allocated.
    pub async fn publish(
        self: &Arc<Self>,
        id: i64,
        slot: Slot,
        token: &str,
        caller: (Protocol, &Caller),
    ) -> Result<Publisher, PublishError> {
        let permit = self
            .check_publish(id, slot, token, caller, DRAIN_WAIT)
            .await?;
        self.start(permit).await
    }

    /// Starts (or joins) the session for a permitted publish; never waits for a slot, so a
    /// protocol that already answered its handshake keeps reading its socket.
    pub async fn start(self: &Arc<Self>, permit: PublishPermit) -> Result<Publisher, PublishError> {
        let PublishPermit {
            row,
            slot,
            protocol,
            hold,
            numbering,
            place,
        } = permit;
        let id = row.id;
        let quality_set = self.quality_set(&row).await;
        let (tx, rx) = mpsc::channel(PUBLISH_QUEUE);
        let start = SessionStart {
            first: (slot, protocol, rx),
            quality_set,
            reduction: place.reduction,
            options: session_options(&row.settings),
        };
        let counters = match self
            .sessions
            .open(id, start, self.config.packaging, numbering)?
        {
            Opened::Told(counters) => counters,
            Opened::New { handles, control } => {
                let counters = handles.counters.clone();
                self.owners.spawn(self.clone().own(handles, control));
                counters
            }
        };
        hold.used();
        // Counted among the running transcodes from here.
        drop(place.place);
        Ok(Publisher::new(id, tx, counters))
    }

    /// The capacity check for a publish: one that joins the stream's running session (a main
    /// beside its backup) adds no transcode; any other gets the node's verdict, refused here
    /// before anything is allocated (the lease is not even taken: another node may take it).
    fn admit(&self, id: i64) -> Result<Admitted, PublishError> {
        use crate::capacity::{Reduction, Verdict};
        let Some(capacity) = &self.config.capacity else {
            return Ok(Admitted::default());
        };
        if self.sessions.in_session(id) {
            return Ok(Admitted::default());
        }
        // Back within its grace period: its load still shows in the CPU the check reads.
        let (verdict, place) = if self.sessions.handles(id).is_some() {
            capacity.judge_returning(|| self.sessions.transcodes())
        } else {
            capacity.judge(|| self.sessions.transcodes())
        };
        match verdict {
            Verdict::Admit => Ok(Admitted {
                place,
                reduction: Reduction::None,
            }),
            Verdict::Shed(full) => {
                tracing::warn!(stream = id, reason = %full, "at capacity: the stream is transcoded to its lowest rung only");
                Ok(Admitted {
                    place,
                    reduction: Reduction::LowestRung,
                })
            }
            Verdict::Passthrough(full) => {
                tracing::warn!(stream = id, reason = %full, "at capacity: the stream's video is passed through, not transcoded");
                Ok(Admitted {
                    place,
                    reduction: Reduction::Passthrough,
                })
            }
            Verdict::Refuse(full) => {
                tracing::warn!(stream = id, reason = %full, "at capacity: publish refused");
                Err(PublishError::AtCapacity {
                    id,
                    reason: full.to_string(),
                })
            }
        }
    }

    /// Whether the node is full now (`/readyz`, the cluster's headroom): `None` when it takes
    /// one more transcode, or has no capacity check.
    pub fn full(&self) -> Option<crate::capacity::Full> {
        let capacity = self.config.capacity.as_ref()?;
        capacity.full_now(&self.sessions.transcodes())
    }

    /// The streams transcoding here now, with their speeds.
    pub fn transcodes(&self) -> Vec<crate::capacity::Transcode> {
        self.sessions.transcodes()
    }

    /// This node's spare transcoding capacity now, ‰ (its heartbeat states it).
    pub fn headroom(&self) -> Option<u32> {
        let capacity = self.config.capacity.as_ref()?;
        capacity.headroom(&self.sessions.transcodes())
    }

    pub fn capacity(&self) -> Option<&Arc<crate::capacity::Capacity>> {
        self.config.capacity.as_ref()
    }
}

#[cfg(test)]
mod tests;
