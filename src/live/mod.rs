//! Live streams: who publishes which stream, the package its outputs are served from, its live
//! metrics, and the grace period after a publisher leaves. Ingest talks to it with
//! [`Registry::publish`]; HTTP delivery and the API read from it.

pub mod switch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::mpsc;

use crate::db::{Store, StoreError, StreamRow};
use crate::media::MediaMessage;
use crate::package::{Package, PackageState, PackagingConfig};
use crate::pipeline::{self, Ladder};
use crate::quality::QualitySets;
use switch::{Switch, SwitchEvent};

/// Media messages buffered between an ingest connection and its pipeline. A full queue means
/// the pipeline is not keeping up: the connection drops and counts, it never blocks.
pub const PUBLISH_QUEUE: usize = 1024;
/// Longest wait for a draining pipeline (it flushes what it has queued, seconds when it was
/// behind) before a new publish is refused. RTMP clients wait for the publish answer; libsrt
/// gives up on a handshake after 3 s, so SRT waits less.
pub const DRAIN_WAIT: Duration = Duration::from_secs(6);
pub const DRAIN_WAIT_HANDSHAKE: Duration = Duration::from_secs(2);
/// Longest wait for a slot whose publisher is just leaving before a publish to it is refused.
const SLOT_RELEASE_WAIT: Duration = Duration::from_millis(1500);
/// How often the input switch looks for a silent main.
const SWITCH_TICK: Duration = Duration::from_millis(100);
/// How long outputs stay after the publisher leaves; a reconnect within it continues them.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);
/// How long an ended stream's playlists (with EXT-X-ENDLIST) stay fetchable.
pub const ENDED_LINGER: Duration = Duration::from_secs(30);

/// The receiving/transcoding state of a stream; all off while nothing is received.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveStatus {
    pub live: bool,
    pub backup_live: bool,
    pub transcoded_qualities: Vec<String>,
    pub recording_duration: f64,
    pub transcoding_speed: Option<f64>,
    pub frame_rate: Option<f64>,
    pub video_height: Option<u32>,
    pub video_width: Option<u32>,
    /// Why segments are not being written (disk full, …), since when; `None` when they are.
    pub storage_error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Main,
    Backup,
}

impl Slot {
    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PublishError {
    #[error("stream {0} does not exist")]
    UnknownStream(i64),
    #[error("wrong token for stream {0}")]
    WrongToken(i64),
    #[error("stream {0} is not active")]
    Inactive(i64),
    #[error("stream {0} is a PULL stream")]
    PullStream(i64),
    #[error("stream {0} is already live")]
    AlreadyLive(i64),
    #[error("store unavailable")]
    Store,
}

/// Shared, updated by the pipeline's threads, read by the API.
pub type SharedStatus = Arc<Mutex<LiveStatus>>;

/// Monotonic per-stream counters for `/metrics`, kept while the registry knows the stream
/// (across reconnects within the grace period), updated without locks from the ingest, the
/// input switch and the pipeline's threads.
#[derive(Debug, Default)]
pub struct Counters {
    /// Media frames received from publishers (main and backup).
    pub frames_received: AtomicU64,
    /// Frames lost because a queue between ingest and encoder was full: the pipeline fell
    /// behind real time.
    pub frames_dropped: AtomicU64,
    /// Parts (CMAF chunks) published for the top rendition.
    pub parts_published: AtomicU64,
    /// Wall time from the ingest of the last frame of the newest part to its publication, µs;
    /// assumes a publisher sending in real time, as live encoders do.
    pub output_delay_us: AtomicU64,
}

impl Counters {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A live stream's state for `/metrics`.
pub struct StreamMetrics {
    pub id: i64,
    pub status: LiveStatus,
    pub counters: Arc<Counters>,
}

/// A new publisher for a running session: its slot and the media it will send.
type Attach = (Slot, mpsc::Receiver<MediaMessage>);

/// What the registry tells a session's input task.
enum Control {
    Attach(Attach),
    /// Drop the slot's publisher: it has gone silent and a new one wants the slot.
    Evict(Slot),
}

/// The inputs of a live stream: one task switches between its main and backup publishers and
/// feeds the one pipeline.
struct Session {
    control: mpsc::Sender<Control>,
    /// Which slots have a publisher (a second publish to a taken slot is refused).
    slots: [bool; 2],
    /// Both publishers have left and the pipeline is draining; a new publish must wait.
    closing: bool,
}

struct Entry {
    package: Arc<Package>,
    status: SharedStatus,
    counters: Arc<Counters>,
    /// The publishing session; `None` while in the grace period or ended.
    session: Option<Session>,
    /// Bumped on every publish, so a stale timer or pipeline end cannot touch a newer session.
    epoch: u64,
    /// Tells the current pipeline to drain and stop (deactivation, deletion, shutdown).
    stop: tokio::sync::watch::Sender<bool>,
}

pub struct Registry {
    streams: Mutex<HashMap<i64, Entry>>,
    store: Arc<dyn Store>,
    quality_sets: Arc<QualitySets>,
    packaging: PackagingConfig,
    grace: Duration,
    /// `DATA_DIR/media`: each live stream's segments under `{id}/`.
    media_root: std::path::PathBuf,
    /// Silence after which the main is failed over from (or reported not live).
    switch_timeout: Duration,
    pipelines: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Ids of streams whose record changed (created, updated, deleted), for the PULL fetcher.
    changes: mpsc::Sender<i64>,
    changes_rx: Mutex<Option<mpsc::Receiver<i64>>>,
}

/// Record changes queued for the PULL fetcher; beyond this it rescans every record instead.
const CHANGES_QUEUE: usize = 1024;

/// A publisher's handle: media goes in through [`Publisher::send`]; dropping it ends the
/// publish (the pipeline drains and the grace period starts).
pub struct Publisher {
    pub stream_id: i64,
    tx: mpsc::Sender<MediaMessage>,
    pub dropped: u64,
    counters: Arc<Counters>,
}

impl Publisher {
    /// Resolves when the server has ended this publish (eviction, deactivation, pipeline end),
    /// so a connection waiting for media can stop at once.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Never blocks the connection: a full queue drops the message and counts it.
    pub fn send(&mut self, msg: MediaMessage) -> bool {
        let frame = matches!(msg, MediaMessage::Frame(_));
        if frame {
            Counters::add(&self.counters.frames_received, 1);
        }
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped += 1;
                if frame {
                    Counters::add(&self.counters.frames_dropped, 1);
                }
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if self.dropped > 0 {
            tracing::warn!(
                stream = self.stream_id,
                dropped = self.dropped,
                "media messages dropped: the pipeline fell behind"
            );
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    pub fn new(
        store: Arc<dyn Store>,
        quality_sets: Arc<QualitySets>,
        packaging: PackagingConfig,
        grace: Duration,
        switch_timeout: Duration,
        media_root: std::path::PathBuf,
    ) -> Arc<Registry> {
        let (changes, changes_rx) = mpsc::channel(CHANGES_QUEUE);
        Arc::new(Registry {
            changes,
            changes_rx: Mutex::new(Some(changes_rx)),
            streams: Mutex::new(HashMap::new()),
            store,
            quality_sets,
            packaging,
            grace,
            media_root,
            switch_timeout,
            pipelines: Mutex::new(Vec::new()),
        })
    }

    /// A stream record was created, changed or deleted: its PULL fetcher (if any) follows.
    /// Returns `false` when the queue is full (the fetcher then rescans everything).
    pub fn stream_changed(&self, id: i64) -> bool {
        self.changes.try_send(id).is_ok()
    }

    /// The change feed, taken once by the PULL fetcher.
    pub fn take_changes(&self) -> Option<mpsc::Receiver<i64>> {
        lock(&self.changes_rx).take()
    }

    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Starts (or continues within the grace period) a PULL stream's session: the daemon is
    /// its only publisher, so there is no token; refused when the record no longer asks for it.
    pub async fn publish_pull(self: &Arc<Self>, id: i64) -> Result<Publisher, PublishError> {
        let row = self
            .load(id)
            .await?
            .ok_or(PublishError::UnknownStream(id))?;
        if !row.settings.active {
            return Err(PublishError::Inactive(id));
        }
        self.wait_drained(id, Slot::Main, DRAIN_WAIT).await;
        if self.slot_taken(id, Slot::Main) {
            return Err(PublishError::AlreadyLive(id));
        }
        self.start(row, Slot::Main, "pull").await
    }

    /// Stops every pipeline (each flushes its last parts and goes to NULL), bounded in time.
    pub async fn shutdown(&self, within: Duration) {
        for e in lock(&self.streams).values() {
            e.stop.send_replace(true);
        }
        let handles = std::mem::take(&mut *lock(&self.pipelines));
        let all = futures_join(handles);
        if tokio::time::timeout(within, all).await.is_err() {
            tracing::warn!("pipelines still running after {within:?}; exiting anyway");
        }
    }

    pub fn packaging(&self) -> PackagingConfig {
        self.packaging
    }

    /// Every stream the registry holds (live or in its grace period), by id.
    pub fn metrics(&self) -> Vec<StreamMetrics> {
        let mut all: Vec<StreamMetrics> = lock(&self.streams)
            .iter()
            .map(|(&id, e)| StreamMetrics {
                id,
                status: lock(&e.status).clone(),
                counters: e.counters.clone(),
            })
            .collect();
        all.sort_by_key(|m| m.id);
        all
    }

    pub fn status(&self, id: i64) -> LiveStatus {
        lock(&self.streams)
            .get(&id)
            .map(|e| {
                let mut s = lock(&e.status).clone();
                s.storage_error = e.package.read(|p| {
                    p.storage_error.as_ref().map(|(since, why)| {
                        format!(
                            "cannot write segments since {}: {why}",
                            crate::package::utc_ms(*since)
                        )
                    })
                });
                s
            })
            .unwrap_or_default()
    }

    /// Ends a live publish (the stream was deactivated or deleted): its pipeline drains, the
    /// publisher's connection is closed, and the usual grace period follows.
    pub fn kick(&self, id: i64) {
        if let Some(e) = lock(&self.streams).get(&id).filter(|e| e.session.is_some()) {
            tracing::info!(stream = id, "stopping the live publish");
            e.stop.send_replace(true);
        }
    }

    /// Applies changed settings to a live (or lingering) stream: the DVR window and the ENDLIST
    /// choice take effect with the next part, without a restart.
    pub fn apply_settings(&self, id: i64, settings: &crate::db::StreamSettings) {
        let Some(package) = self.package(id) else {
            return;
        };
        let (window, endlist) = (dvr_window(settings), settings.hls_mpegts_endlist_tag);
        package.update(|p| {
            p.dvr_window = window;
            p.endlist_tag = endlist;
        });
    }

    /// Empties a stream's rewind window (memory and disk); `false` if it has no outputs.
    pub fn dvr_cleanup(&self, id: i64) -> bool {
        let Some(package) = self.package(id) else {
            return false;
        };
        let (removed, dir) = package.update(|p| {
            let dir = p.media_dir.clone();
            let mut removed = Vec::new();
            for (output, list) in [
                (crate::package::Output::Cmaf, &mut p.renditions),
                (crate::package::Output::Ts, &mut p.ts_renditions),
            ] {
                for r in list.iter_mut() {
                    removed.extend(
                        r.clear_complete()
                            .into_iter()
                            .map(|msn| (output, r.name.clone(), msn)),
                    );
                }
            }
            (removed, dir)
        });
        if let Some(dir) = dir {
            for (output, name, msn) in removed {
                let _ = std::fs::remove_file(dir.segment_path(output, &name, msn));
            }
        }
        tracing::info!(stream = id, "DVR window emptied");
        true
    }

    /// The package serving a stream's outputs, while it is live or in its grace/linger time.
    pub fn package(&self, id: i64) -> Option<Arc<Package>> {
        lock(&self.streams).get(&id).map(|e| e.package.clone())
    }

    async fn load(&self, id: i64) -> Result<Option<StreamRow>, PublishError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.get_stream(id))
            .await
            .map_err(|_| PublishError::Store)?
            .map_err(|e: StoreError| {
                tracing::error!(stream = id, error = %e, "store failure during publish");
                PublishError::Store
            })
    }

    async fn default_quality_set(&self) -> i64 {
        let store = self.store.clone();
        let stored = tokio::task::spawn_blocking(move || {
            store.get_setting(crate::quality::DEFAULT_QUALITY_SET_KEY)
        })
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
        self.quality_sets.default_id(stored.as_deref())
    }

    /// Whether a publish would be accepted now, without allocating anything: for protocols
    /// that must answer their handshake before media flows (SRT reads the record's passphrase).
    pub async fn check_publish(
        &self,
        id: i64,
        slot: Slot,
        token: &str,
        patience: Duration,
    ) -> Result<StreamRow, PublishError> {
        let row = self
            .load(id)
            .await?
            .ok_or(PublishError::UnknownStream(id))?;
        if !crate::http::api::auth::constant_time_eq(row.token.as_bytes(), token.as_bytes()) {
            return Err(PublishError::WrongToken(id));
        }
        if !row.settings.active {
            return Err(PublishError::Inactive(id));
        }
        if row.settings.pull {
            return Err(PublishError::PullStream(id));
        }
        self.wait_drained(id, slot, patience).await;
        if self.evict_silent(id, slot) {
            self.wait_drained(id, slot, patience).await;
        }
        if self.slot_taken(id, slot) {
            return Err(PublishError::AlreadyLive(id));
        }
        Ok(row)
    }

    /// Whether a publish to `slot` must be refused now: it has a publisher, or the session is
    /// closing (its pipeline draining).
    fn slot_taken(&self, id: i64, slot: Slot) -> bool {
        lock(&self.streams)
            .get(&id)
            .and_then(|e| e.session.as_ref())
            .is_some_and(|s| s.closing || s.slots[slot.index()])
    }

    /// A publisher holding `slot` without sending (a browser reloaded, an encoder that lost
    /// its network without closing) for the switch timeout is replaced by the new one, instead
    /// of refusing the new one until the old connection times out. A publisher that is
    /// sending is never replaced.
    fn evict_silent(&self, id: i64, slot: Slot) -> bool {
        let streams = lock(&self.streams);
        let Some(e) = streams.get(&id) else {
            return false;
        };
        let Some(session) = e
            .session
            .as_ref()
            .filter(|s| !s.closing && s.slots[slot.index()])
        else {
            return false;
        };
        let receiving = {
            let s = lock(&e.status);
            match slot {
                Slot::Main => s.live,
                Slot::Backup => s.backup_live,
            }
        };
        if receiving {
            return false;
        }
        tracing::info!(
            stream = id,
            ?slot,
            "silent publisher replaced by a new publish"
        );
        session.control.try_send(Control::Evict(slot)).is_ok()
    }

    /// A reconnect right after the publisher left can find its slot not yet released (SRT drains
    /// for a few hundred ms after a shutdown) or the pipeline still flushing its last parts: wait
    /// for that (bounded) instead of refusing the encoder.
    async fn wait_drained(&self, id: i64, slot: Slot, patience: Duration) {
        let start = tokio::time::Instant::now();
        loop {
            let (closing, taken) = lock(&self.streams)
                .get(&id)
                .and_then(|e| e.session.as_ref())
                .map_or((false, false), |s| (s.closing, s.slots[slot.index()]));
            let waited = start.elapsed();
            if !(closing && waited < patience || taken && waited < SLOT_RELEASE_WAIT) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Authorises a publish and starts (or resumes) the stream's pipeline, or joins the running
    /// session as its other slot (main + backup). Every refusal happens before anything is
    /// allocated.
    pub async fn publish(
        self: &Arc<Self>,
        id: i64,
        slot: Slot,
        token: &str,
        protocol: &'static str,
    ) -> Result<Publisher, PublishError> {
        let row = self.check_publish(id, slot, token, DRAIN_WAIT).await?;
        self.start(row, slot, protocol).await
    }

    /// Starts (or joins) the session for a publish [`Registry::check_publish`] allowed; never
    /// waits, so a protocol that already answered its handshake keeps reading its socket.
    pub async fn start(
        self: &Arc<Self>,
        row: StreamRow,
        slot: Slot,
        protocol: &'static str,
    ) -> Result<Publisher, PublishError> {
        let id = row.id;
        let set_id = match row.settings.quality_set_id {
            Some(q) if self.quality_sets.get(q).is_some() => q,
            _ => self.default_quality_set().await,
        };
        let ladder = Ladder::from_set(self.quality_sets.get(set_id).expect("resolved above"));

        let (tx, rx) = mpsc::channel(PUBLISH_QUEUE);
        let publisher = |counters| Publisher {
            stream_id: id,
            tx,
            dropped: 0,
            counters,
        };
        let (pipe_tx, pipe_rx) = mpsc::channel(PUBLISH_QUEUE);
        let (control_tx, control_rx) = mpsc::channel(4);
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut slots = [false; 2];
        slots[slot.index()] = true;
        let session = Session {
            control: control_tx,
            slots,
            closing: false,
        };
        // Everything from here to the insert happens under one lock, so a main and a backup
        // publishing at the same moment end up in one session.
        let (package, status, counters, epoch) = {
            let mut streams = lock(&self.streams);
            match streams.get_mut(&id) {
                Some(Entry {
                    session: Some(running),
                    counters,
                    ..
                }) => {
                    if running.closing || running.slots[slot.index()] {
                        return Err(PublishError::AlreadyLive(id));
                    }
                    running
                        .control
                        .try_send(Control::Attach((slot, rx)))
                        .map_err(|_| PublishError::AlreadyLive(id))?;
                    running.slots[slot.index()] = true;
                    let counters = counters.clone();
                    drop(streams);
                    self.slot_started(id, slot, protocol);
                    return Ok(publisher(counters));
                }
                Some(e) => {
                    // A reconnect within the grace period: same package, new epoch.
                    e.session = Some(session);
                    e.epoch += 1;
                    e.stop = stop_tx;
                    e.package.update(|p| p.ended = false);
                    (
                        e.package.clone(),
                        e.status.clone(),
                        e.counters.clone(),
                        e.epoch,
                    )
                }
                None => {
                    let package = Arc::new(Package::new(PackageState::new(self.packaging, vec![])));
                    let status = SharedStatus::default();
                    let counters = Arc::<Counters>::default();
                    streams.insert(
                        id,
                        Entry {
                            package: package.clone(),
                            status: status.clone(),
                            counters: counters.clone(),
                            session: Some(session),
                            epoch: 1,
                            stop: stop_tx,
                        },
                    );
                    (package, status, counters, 1)
                }
            }
        };
        let media_dir = crate::package::MediaDir::new(self.media_root.join(id.to_string()));
        let (endlist_tag, dvr_window) = (
            row.settings.hls_mpegts_endlist_tag,
            dvr_window(&row.settings),
        );
        package.update(|p| {
            p.endlist_tag = endlist_tag;
            p.dvr_window = dvr_window;
            p.media_dir = Some(media_dir);
        });
        self.slot_started(id, slot, protocol);
        tracing::info!(stream = id, epoch, "session started");

        let registry = self.clone();
        let publisher = publisher(counters.clone());
        let stream = pipeline::Handles {
            id,
            package,
            status,
            counters,
        };
        let inputs = tokio::spawn(self.clone().run_inputs(
            stream.clone(),
            epoch,
            (slot, rx),
            control_rx,
            pipe_tx,
        ));
        let task = tokio::spawn(async move {
            let result = pipeline::run(stream, ladder, pipe_rx, stop).await;
            if let Err(e) = &result {
                tracing::error!(stream = id, error = %e, "pipeline failed; stream ended");
            }
            registry.publisher_left(id, epoch);
        });
        let mut tasks = lock(&self.pipelines);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
        tasks.push(inputs);
        Ok(publisher)
    }

    /// Bookkeeping for a publisher that got a slot: its start time and the receiving flag.
    fn slot_started(&self, id: i64, slot: Slot, protocol: &'static str) {
        let now = Some(OffsetDateTime::now_utc());
        if let Some(e) = lock(&self.streams).get(&id) {
            let mut s = lock(&e.status);
            match slot {
                Slot::Main => s.live = true,
                Slot::Backup => s.backup_live = true,
            }
        }
        match slot {
            Slot::Main => self.record_times(id, now, None, None),
            Slot::Backup => self.record_times(id, None, now, None),
        }
        tracing::info!(stream = id, ?slot, protocol, "publish started");
    }

    /// Switches the session's publishers into its pipeline until both have left or the
    /// pipeline ends. Never blocks a publisher: a full pipeline queue drops and counts.
    async fn run_inputs(
        self: Arc<Self>,
        stream: pipeline::Handles,
        epoch: u64,
        first: Attach,
        mut control_rx: mpsc::Receiver<Control>,
        pipe: mpsc::Sender<MediaMessage>,
    ) {
        let pipeline::Handles {
            id,
            status,
            counters,
            ..
        } = stream;
        async fn recv(rx: &mut Option<mpsc::Receiver<MediaMessage>>) -> Option<MediaMessage> {
            match rx {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        }
        let mut switch = Switch::new(self.switch_timeout);
        let mut inputs: [Option<mpsc::Receiver<MediaMessage>>; 2] = [None, None];
        let mut tick = tokio::time::interval(SWITCH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut out = Vec::new();
        let mut dropped = 0u64;
        let mut shown = (false, false);
        inputs[first.0.index()] = Some(first.1);
        switch.attach(first.0, tokio::time::Instant::now());
        loop {
            let now = tokio::time::Instant::now();
            enum Got {
                Control(Control),
                Media(Slot, Option<MediaMessage>),
                Tick,
                PipelineGone,
            }
            let [main_rx, backup_rx] = &mut inputs;
            let got = tokio::select! {
                Some(c) = control_rx.recv() => Got::Control(c),
                m = recv(main_rx) => Got::Media(Slot::Main, m),
                m = recv(backup_rx) => Got::Media(Slot::Backup, m),
                _ = tick.tick() => Got::Tick,
                _ = pipe.closed() => Got::PipelineGone,
            };
            match got {
                Got::Control(Control::Attach((slot, rx))) => {
                    inputs[slot.index()] = Some(rx);
                    switch.attach(slot, now);
                }
                Got::Media(slot, Some(m)) => switch.media(slot, m, now, &mut out),
                // Dropping the receiver ends the evicted publisher's sends and its `closed()`.
                Got::Control(Control::Evict(slot)) | Got::Media(slot, None) => {
                    inputs[slot.index()] = None;
                    switch.detach(slot, now, &mut out);
                    self.slot_left(id, epoch, slot);
                }
                Got::Tick => switch.tick(now, &mut out),
                Got::PipelineGone => break,
            }
            for event in out.drain(..) {
                let msg = match event {
                    SwitchEvent::Media(m) => m,
                    SwitchEvent::TrackMissing { slot, track } => {
                        tracing::warn!(
                            stream = id,
                            ?slot,
                            ?track,
                            wait_secs = crate::media::TRACK_WAIT.as_secs(),
                            "declared track delivered nothing in time; starting without it"
                        );
                        continue;
                    }
                    SwitchEvent::Switched { from, to, at } => {
                        tracing::info!(
                            stream = id,
                            ?from,
                            ?to,
                            at_ms = at / 1_000_000,
                            "outputs switched"
                        );
                        MediaMessage::Discontinuity { at }
                    }
                };
                let frame = matches!(msg, MediaMessage::Frame(_));
                if pipe.try_send(msg).is_err() {
                    dropped += 1;
                    if frame {
                        Counters::add(&counters.frames_dropped, 1);
                    }
                }
            }
            let receiving = (
                switch.receiving(Slot::Main, now),
                switch.receiving(Slot::Backup, now),
            );
            if receiving != shown {
                shown = receiving;
                let mut s = lock(&status);
                (s.live, s.backup_live) = receiving;
            }
            if switch.is_empty() {
                // Both publishers left: end the session, unless one is attaching right now
                // (publish attaches under the same lock).
                let mut streams = lock(&self.streams);
                match control_rx.try_recv() {
                    Ok(Control::Attach((slot, rx))) => {
                        inputs[slot.index()] = Some(rx);
                        switch.attach(slot, now);
                    }
                    _ => {
                        if let Some(s) = streams
                            .get_mut(&id)
                            .filter(|e| e.epoch == epoch)
                            .and_then(|e| e.session.as_mut())
                        {
                            s.closing = true;
                        }
                        break;
                    }
                }
            }
        }
        if dropped > 0 || switch.overlapped > 0 {
            tracing::warn!(
                stream = id,
                dropped,
                overlapped = switch.overlapped,
                "input switch dropped media"
            );
        }
    }

    /// A publisher left its slot: the slot is free for a new publish.
    fn slot_left(&self, id: i64, epoch: u64, slot: Slot) {
        if let Some(s) = lock(&self.streams)
            .get_mut(&id)
            .filter(|e| e.epoch == epoch)
            .and_then(|e| e.session.as_mut())
        {
            s.slots[slot.index()] = false;
        }
        if slot == Slot::Main {
            self.record_times(id, None, None, Some(OffsetDateTime::now_utc()));
        }
        tracing::info!(stream = id, ?slot, "publisher left");
    }

    fn record_times(
        &self,
        id: i64,
        started: Option<OffsetDateTime>,
        started_backup: Option<OffsetDateTime>,
        finished: Option<OffsetDateTime>,
    ) {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.set_stream_times(id, started, started_backup, finished) {
                tracing::error!(stream = id, error = %e, "cannot record stream times");
            }
        });
    }

    /// The pipeline of `epoch` has drained: start the grace period.
    fn publisher_left(self: &Arc<Self>, id: i64, epoch: u64) {
        {
            let mut streams = lock(&self.streams);
            let Some(e) = streams.get_mut(&id).filter(|e| e.epoch == epoch) else {
                return;
            };
            e.session = None;
            *lock(&e.status) = LiveStatus::default();
            e.package.update(|p| {
                for r in p.renditions.iter_mut().chain(p.ts_renditions.iter_mut()) {
                    r.mark_discontinuity();
                }
            });
        }
        tracing::info!(
            stream = id,
            grace_secs = self.grace.as_secs(),
            "inputs gone; grace period"
        );
        let registry = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(registry.grace).await;
            let package = {
                let streams = lock(&registry.streams);
                match streams.get(&id) {
                    Some(e) if e.epoch == epoch && e.session.is_none() => e.package.clone(),
                    _ => return,
                }
            };
            package.update(|p| p.ended = true);
            tracing::info!(stream = id, "stream ended");
            tokio::time::sleep(ENDED_LINGER).await;
            let mut streams = lock(&registry.streams);
            if streams
                .get(&id)
                .is_some_and(|e| e.epoch == epoch && e.session.is_none())
            {
                streams.remove(&id);
            }
        });
    }
}

/// Awaits every handle (a panicked or cancelled task counts as done).
async fn futures_join(handles: Vec<tokio::task::JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

/// The rewind window a stream's settings ask for.
fn dvr_window(settings: &crate::db::StreamSettings) -> Option<Duration> {
    settings
        .dvr_enabled
        .then(|| Duration::from_secs(u64::from(settings.dvr_duration)))
}
