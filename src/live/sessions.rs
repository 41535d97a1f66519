//! The table of streams the registry knows (live, in their grace period, or lingering after
//! the end): per stream its package, status, counters, and the publishing session's slots and
//! epoch. Every change that can let a waiting publish in wakes the waiters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::publisher::{Protocol, PublishError, Slot};
use super::status::{Counters, LiveStatus, SharedStatus, StreamMetrics};
use super::StreamHandles;
use crate::media::MediaMessage;
use crate::package::{Package, PackageState, PackagingConfig};

/// Longest wait for a slot whose publisher is just leaving before a publish to it is refused.
pub(super) const SLOT_RELEASE_WAIT: Duration = Duration::from_millis(1500);

/// A new publisher for a running session: its slot and the media it will send.
pub(super) type Attach = (Slot, mpsc::Receiver<MediaMessage>);

/// What the registry tells a session's input task.
pub(super) enum Control {
    Attach(Attach),
    /// Drop the slot's publisher: it has gone silent and a new one wants the slot.
    Evict(Slot),
}

/// The inputs of a live stream: one task switches between its main and backup publishers and
/// feeds the one pipeline.
struct Session {
    control: mpsc::Sender<Control>,
    /// Which slots have a publisher, by what protocol (a second publish to a taken slot is
    /// refused).
    slots: [Option<Protocol>; 2],
    /// Both publishers have left and the pipeline is draining; a new publish must wait.
    closing: bool,
}

struct Entry {
    handles: StreamHandles,
    /// The publishing session; `None` while in the grace period or ended.
    session: Option<Session>,
    /// Bumped on every publish, so a stale timer or pipeline end cannot touch a newer session.
    epoch: u64,
    /// Tells the current pipeline to drain and stop (deactivation, deletion, shutdown).
    stop: watch::Sender<bool>,
}

/// How a publish got its slot.
pub(super) enum Opened {
    /// The session was running (the other slot publishes): the media goes to its input task.
    Joined(Arc<Counters>),
    /// A new session (first publish, or a reconnect within the grace period on the same
    /// package): its input task and pipeline are to be started.
    Started {
        handles: StreamHandles,
        epoch: u64,
        control: mpsc::Receiver<Control>,
        stop: watch::Receiver<bool>,
        media: mpsc::Receiver<MediaMessage>,
    },
}

pub(super) struct Table {
    streams: Mutex<HashMap<i64, Entry>>,
    /// Fires when a slot is freed or a session ends: what a waiting publish waits for.
    released: watch::Sender<()>,
}

impl Default for Table {
    fn default() -> Table {
        Table {
            streams: Mutex::new(HashMap::new()),
            released: watch::Sender::new(()),
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Table {
    fn streams(&self) -> MutexGuard<'_, HashMap<i64, Entry>> {
        lock(&self.streams)
    }

    /// (closing, taken) of a stream's slot.
    fn slot_state(&self, id: i64, slot: Slot) -> (bool, bool) {
        self.streams()
            .get(&id)
            .and_then(|e| e.session.as_ref())
            .map_or((false, false), |s| {
                (s.closing, s.slots[slot.index()].is_some())
            })
    }

    /// Whether a publish to `slot` must be refused now: it has a publisher, or the session is
    /// closing (its pipeline draining).
    pub fn slot_taken(&self, id: i64, slot: Slot) -> bool {
        let (closing, taken) = self.slot_state(id, slot);
        closing || taken
    }

    /// A reconnect right after the publisher left can find its slot not yet released (SRT
    /// drains for a few hundred ms after a shutdown) or the pipeline still flushing its last
    /// parts: wait for that (bounded) instead of refusing the encoder.
    pub async fn wait_released(&self, id: i64, slot: Slot, patience: Duration) {
        let mut released = self.released.subscribe();
        let start = tokio::time::Instant::now();
        loop {
            released.borrow_and_update();
            let until = match self.slot_state(id, slot) {
                (true, true) => start + patience.max(SLOT_RELEASE_WAIT),
                (true, false) => start + patience,
                (false, true) => start + SLOT_RELEASE_WAIT,
                (false, false) => return,
            };
            if tokio::time::timeout_at(until, released.changed())
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// A publisher holding `slot` without sending (a browser reloaded, an encoder that lost
    /// its network without closing) for the switch timeout is replaced by the new one, instead
    /// of refusing the new one until the old connection times out. A publisher that is
    /// sending is never replaced.
    pub fn evict_silent(&self, id: i64, slot: Slot) -> bool {
        let receiving = self.handles(id).is_some_and(|h| {
            let s = lock(&h.status);
            match slot {
                Slot::Main => s.live(),
                Slot::Backup => s.backup_live(),
            }
        });
        if receiving || self.cut(id, &[slot]).is_empty() {
            return false;
        }
        tracing::info!(
            stream = id,
            ?slot,
            "silent publisher replaced by a new publish"
        );
        true
    }

    /// Gives `slot` to a publisher whose media arrives on `media`: joins the running session,
    /// or starts one (on the package kept through the grace period, or a new one). Everything
    /// happens under one lock, so a main and a backup publishing at the same moment end up in
    /// one session.
    pub fn open(
        &self,
        id: i64,
        slot: Slot,
        protocol: Protocol,
        media: mpsc::Receiver<MediaMessage>,
        packaging: PackagingConfig,
    ) -> Result<Opened, PublishError> {
        let (control_tx, control) = mpsc::channel(4);
        let (stop_tx, stop) = watch::channel(false);
        let mut slots = [None; 2];
        slots[slot.index()] = Some(protocol);
        let session = Session {
            control: control_tx,
            slots,
            closing: false,
        };
        let mut streams = self.streams();
        let (handles, epoch) = match streams.get_mut(&id) {
            Some(Entry {
                session: Some(running),
                handles,
                ..
            }) => {
                if running.closing || running.slots[slot.index()].is_some() {
                    return Err(PublishError::AlreadyLive(id));
                }
                running
                    .control
                    .try_send(Control::Attach((slot, media)))
                    .map_err(|_| PublishError::AlreadyLive(id))?;
                running.slots[slot.index()] = Some(protocol);
                return Ok(Opened::Joined(handles.counters.clone()));
            }
            Some(e) => {
                // A reconnect within the grace period: same package, new epoch.
                e.session = Some(session);
                e.epoch += 1;
                e.stop = stop_tx;
                (e.handles.clone(), e.epoch)
            }
            None => {
                let handles = StreamHandles {
                    id,
                    package: Arc::new(Package::new(PackageState::new(packaging, vec![]))),
                    hub: crate::hub::Hub::new(),
                    status: SharedStatus::default(),
                    counters: Arc::default(),
                };
                streams.insert(
                    id,
                    Entry {
                        handles: handles.clone(),
                        session: Some(session),
                        epoch: 1,
                        stop: stop_tx,
                    },
                );
                (handles, 1)
            }
        };
        Ok(Opened::Started {
            handles,
            epoch,
            control,
            stop,
            media,
        })
    }

    /// Marks the slot receiving in the status as soon as it is taken.
    pub fn slot_started(&self, id: i64, slot: Slot) {
        if let Some(e) = self.streams().get(&id) {
            let mut s = lock(&e.handles.status);
            let (main, backup) = (s.live(), s.backup_live());
            match slot {
                Slot::Main => s.set_receiving(true, backup),
                Slot::Backup => s.set_receiving(main, true),
            }
        }
    }

    /// A publisher left its slot: the slot is free for a new publish. The protocol it
    /// published with, if it still held the slot.
    pub fn slot_left(&self, id: i64, epoch: u64, slot: Slot) -> Option<Protocol> {
        let left = self
            .session_mut(&mut self.streams(), id, epoch)
            .and_then(|s| s.slots[slot.index()].take());
        self.released.send_replace(());
        left
    }

    fn session_mut<'a>(
        &self,
        streams: &'a mut HashMap<i64, Entry>,
        id: i64,
        epoch: u64,
    ) -> Option<&'a mut Session> {
        streams
            .get_mut(&id)
            .filter(|e| e.epoch == epoch)
            .and_then(|e| e.session.as_mut())
    }

    /// Both publishers have left: the session closes, unless a publisher is attaching right
    /// now (attaching happens under the same lock), whose attach is returned.
    pub fn close_unless_attaching(
        &self,
        id: i64,
        epoch: u64,
        control: &mut mpsc::Receiver<Control>,
    ) -> Option<Attach> {
        let mut streams = self.streams();
        match control.try_recv() {
            Ok(Control::Attach(attach)) => Some(attach),
            _ => {
                if let Some(s) = self.session_mut(&mut streams, id, epoch) {
                    s.closing = true;
                }
                None
            }
        }
    }

    /// The session was told to stop: no publisher joins it while its pipeline drains (a new
    /// one waits for the drain and starts the next session).
    pub fn close(&self, id: i64, epoch: u64) {
        if let Some(s) = self.session_mut(&mut self.streams(), id, epoch) {
            s.closing = true;
        }
    }

    /// The pipeline of `epoch` has drained: the session ends, the stream's outputs stay for
    /// the grace period. `None` when a newer session has taken over.
    pub fn session_ended(&self, id: i64, epoch: u64) -> Option<Arc<Package>> {
        let package = {
            let mut streams = self.streams();
            let e = streams.get_mut(&id).filter(|e| e.epoch == epoch)?;
            e.session = None;
            *lock(&e.handles.status) = LiveStatus::default();
            e.handles.package.clone()
        };
        self.released.send_replace(());
        Some(package)
    }

    /// The package of `epoch` if no session has started since it ended.
    pub fn idle_package(&self, id: i64, epoch: u64) -> Option<Arc<Package>> {
        self.streams()
            .get(&id)
            .filter(|e| e.epoch == epoch && e.session.is_none())
            .map(|e| e.handles.package.clone())
    }

    /// Forgets the stream if no session has started since `epoch` ended.
    /// Forgets an idle stream of `epoch`; `true` if it did.
    pub fn remove_idle(&self, id: i64, epoch: u64) -> bool {
        let mut streams = self.streams();
        let idle = streams
            .get(&id)
            .is_some_and(|e| e.epoch == epoch && e.session.is_none());
        if idle {
            streams.remove(&id);
        }
        idle
    }

    /// Tells the stream's pipeline to drain and stop; `false` when it has no session.
    /// Tells the input task to drop the publishers of `slots` that have one; returns those
    /// slots. The session goes on: a slot left alone is a publisher that went away (the other
    /// slot takes over, or the grace period starts and a reconnect resumes the stream).
    pub fn cut(&self, id: i64, slots: &[Slot]) -> Vec<Slot> {
        let streams = self.streams();
        let Some(session) = streams
            .get(&id)
            .and_then(|e| e.session.as_ref())
            .filter(|s| !s.closing)
        else {
            return Vec::new();
        };
        slots
            .iter()
            .copied()
            .filter(|slot| session.slots[slot.index()].is_some())
            .filter(|slot| session.control.try_send(Control::Evict(*slot)).is_ok())
            .collect()
    }

    pub fn stop(&self, id: i64) -> bool {
        match self.streams().get(&id).filter(|e| e.session.is_some()) {
            Some(e) => {
                e.stop.send_replace(true);
                true
            }
            None => false,
        }
    }

    pub fn stop_all(&self) {
        for e in self.streams().values() {
            e.stop.send_replace(true);
        }
    }

    pub fn handles(&self, id: i64) -> Option<StreamHandles> {
        self.streams().get(&id).map(|e| e.handles.clone())
    }

    pub fn metrics(&self) -> Vec<StreamMetrics> {
        let mut all: Vec<StreamMetrics> = self
            .streams()
            .iter()
            .map(|(&id, e)| StreamMetrics {
                id,
                status: lock(&e.handles.status).clone(),
                counters: e.handles.counters.clone(),
                hub_readers: e.handles.hub.readers(),
                hub_dropped: e.handles.hub.dropped(),
                whep_viewers: e.handles.hub.readers_named(crate::hub::WHEP_READER),
                srt_readers: e.handles.hub.readers_named(crate::hub::SRT_READER),
            })
            .collect();
        all.sort_by_key(|m| m.id);
        all
    }
}
