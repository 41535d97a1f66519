//! The table of streams the registry knows (live, in their grace period, or lingering after
//! the end): per stream its package, status, counters, the publishing session's slots, and the
//! queue to the stream's owner task. Publishes and the API read and change it under one lock;
//! only the owner ends a session or removes its stream. Every change that can let a waiting
//! publish in wakes the waiters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};

use super::publisher::{Protocol, PublishError, Slot};
use super::status::{Counters, LiveStatus, SharedStatus, StreamMetrics};
use super::StreamHandles;
use crate::media::MediaMessage;
use crate::package::{Numbering, Package, PackageState, PackagingConfig, SessionOptions};
use crate::quality::QualitySet;

/// Longest wait for a slot whose publisher is just leaving before a publish to it is refused.
pub(super) const SLOT_RELEASE_WAIT: Duration = Duration::from_millis(1500);

/// Commands queued for a stream's owner: a start, an attach and an eviction or two at most.
const CONTROL_QUEUE: usize = 4;

/// A new publisher for a running session: its slot, protocol and the media it will send.
pub(super) type Attach = (Slot, Protocol, mpsc::Receiver<MediaMessage>);

/// What a session starts from: its first publisher, the ladder, and the record's options for
/// the package, as checked at the publish.
pub(super) struct SessionStart {
    pub first: Attach,
    pub quality_set: QualitySet,
    /// The node was full ([`crate::capacity`]): the lowest rung only, or no transcode.
    pub reduction: crate::capacity::Reduction,
    pub options: SessionOptions,
}

/// What the registry tells a stream's owner task ([`super::stream`]).
pub(super) enum Control {
    /// A publish while the stream has no session (new, in its grace period, or ended and
    /// lingering): start one.
    Start(SessionStart),
    /// A publish to the free slot of the running session.
    Attach(Attach),
    /// Drop the slot's publisher: it has gone silent and a new one wants the slot.
    Evict(Slot),
}

/// The publishing session of a live stream, as far as publishes and the API need to see it.
struct Session {
    /// Which slots have a publisher, by what protocol (a second publish to a taken slot is
    /// refused).
    slots: [Option<Protocol>; 2],
    /// Both publishers have left and the pipeline is draining; a new publish must wait.
    closing: bool,
}

impl Session {
    fn new(slot: Slot, protocol: Protocol) -> Session {
        let mut slots = [None; 2];
        slots[slot.index()] = Some(protocol);
        Session {
            slots,
            closing: false,
        }
    }
}

struct Entry {
    handles: StreamHandles,
    /// The stream's owner task: it alone starts and ends sessions and forgets the stream.
    control: mpsc::Sender<Control>,
    /// The publishing session; `None` while in the grace period or ended.
    session: Option<Session>,
    /// Tells the current session's pipeline to drain and stop (deactivation, deletion,
    /// shutdown); reset when a session opens.
    stop: watch::Sender<bool>,
}

/// How a publish got its slot.
pub(super) enum Opened {
    /// The stream had an owner: it was told to start a session or to attach the publisher.
    Told(Arc<Counters>),
    /// A new stream: its owner task is to be started with this feed (the session's start is
    /// already queued on it).
    New {
        handles: StreamHandles,
        control: mpsc::Receiver<Control>,
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

    /// Gives the first slot of `start` to its publisher: tells the stream's owner to attach it
    /// to the running session or to start one (on the package kept through the grace period),
    /// or makes a new stream whose owner the caller starts. Everything happens under one lock,
    /// so a main and a backup publishing at the same moment end up in one session.
    pub fn open(
        &self,
        id: i64,
        start: SessionStart,
        packaging: PackagingConfig,
        numbering: Option<Numbering>,
    ) -> Result<Opened, PublishError> {
        let (slot, protocol) = (start.first.0, start.first.1);
        let mut streams = self.streams();
        let opened = match streams.get_mut(&id) {
            Some(e) => {
                let control = match &mut e.session {
                    Some(running) if running.closing || running.slots[slot.index()].is_some() => {
                        return Err(PublishError::AlreadyLive(id));
                    }
                    Some(_) => Control::Attach(start.first),
                    None => Control::Start(start),
                };
                e.control
                    .try_send(control)
                    .map_err(|_| PublishError::AlreadyLive(id))?;
                match &mut e.session {
                    Some(running) => running.slots[slot.index()] = Some(protocol),
                    None => {
                        e.session = Some(Session::new(slot, protocol));
                        e.stop.send_replace(false);
                    }
                }
                Opened::Told(e.handles.counters.clone())
            }
            None => {
                let handles = StreamHandles {
                    id,
                    package: Arc::new(Package::new(
                        PackageState::new(packaging, vec![]).numbered_from(Numbering::starting(
                            SystemTime::now(),
                            packaging.segment,
                            numbering,
                        )),
                    )),
                    hub: crate::hub::Hub::new(),
                    status: SharedStatus::default(),
                    counters: Arc::default(),
                };
                let (control_tx, control) = mpsc::channel(CONTROL_QUEUE);
                // Cannot fail: the queue is new and empty.
                let _ = control_tx.try_send(Control::Start(start));
                streams.insert(
                    id,
                    Entry {
                        handles: handles.clone(),
                        control: control_tx,
                        session: Some(Session::new(slot, protocol)),
                        stop: watch::Sender::new(false),
                    },
                );
                Opened::New { handles, control }
            }
        };
        // Receiving as soon as the slot is taken: the status never says off air meanwhile.
        if let Some(e) = streams.get(&id) {
            let mut s = lock(&e.handles.status);
            let (main, backup) = (s.live(), s.backup_live());
            match slot {
                Slot::Main => s.set_receiving(true, backup),
                Slot::Backup => s.set_receiving(main, true),
            }
            s.set_protocol(slot == Slot::Backup, protocol.as_str());
        }
        Ok(opened)
    }

    /// A publisher left its slot: the slot is free for a new publish. The protocol it
    /// published with, if it still held the slot.
    pub fn slot_left(&self, id: i64, slot: Slot) -> Option<Protocol> {
        let left = self
            .streams()
            .get_mut(&id)
            .and_then(|e| e.session.as_mut())
            .and_then(|s| s.slots[slot.index()].take());
        self.released.send_replace(());
        left
    }

    /// Both publishers have left: the session closes, unless a publisher is attaching right
    /// now (attaching happens under the same lock), whose attach is returned.
    pub fn close_unless_attaching(
        &self,
        id: i64,
        control: &mut mpsc::Receiver<Control>,
    ) -> Option<Attach> {
        let mut streams = self.streams();
        match control.try_recv() {
            Ok(Control::Attach(attach)) => Some(attach),
            _ => {
                if let Some(s) = streams.get_mut(&id).and_then(|e| e.session.as_mut()) {
                    s.closing = true;
                }
                None
            }
        }
    }

    /// The session's inputs are done (told to stop, or its pipeline ended): no publisher joins
    /// it while its pipeline drains (a new one waits for the drain and starts the next session).
    /// Returns the slots that still had a publisher.
    pub fn close(&self, id: i64) -> Vec<(Slot, Protocol)> {
        let mut streams = self.streams();
        let Some(s) = streams.get_mut(&id).and_then(|e| e.session.as_mut()) else {
            return Vec::new();
        };
        s.closing = true;
        let held = [Slot::Main, Slot::Backup]
            .into_iter()
            .filter_map(|slot| s.slots[slot.index()].take().map(|p| (slot, p)))
            .collect();
        drop(streams);
        self.released.send_replace(());
        held
    }

    /// The session's pipeline has drained: the session ends, the stream's outputs stay for
    /// the grace period.
    pub fn session_ended(&self, id: i64) {
        if let Some(e) = self.streams().get_mut(&id) {
            e.session = None;
            *lock(&e.handles.status) = LiveStatus::default();
        }
        self.released.send_replace(());
    }

    /// The owner's last act: forgets the stream, unless a publish has just told it to start a
    /// session (under the same lock), whose start is returned.
    pub fn remove_unless_starting(
        &self,
        id: i64,
        control: &mut mpsc::Receiver<Control>,
    ) -> Option<SessionStart> {
        let mut streams = self.streams();
        loop {
            match control.try_recv() {
                Ok(Control::Start(start)) => return Some(start),
                // Only a session's publishers are attached or evicted: none is running.
                Ok(Control::Attach(_) | Control::Evict(_)) => continue,
                Err(_) => {
                    streams.remove(&id);
                    return None;
                }
            }
        }
    }

    /// Tells the input task to drop the publishers of `slots` that have one; returns those
    /// slots. The session goes on: a slot left alone is a publisher that went away (the other
    /// slot takes over, or the grace period starts and a reconnect resumes the stream).
    pub fn cut(&self, id: i64, slots: &[Slot]) -> Vec<Slot> {
        let streams = self.streams();
        let Some((e, session)) = streams
            .get(&id)
            .and_then(|e| Some((e, e.session.as_ref()?)))
            .filter(|(_, s)| !s.closing)
        else {
            return Vec::new();
        };
        slots
            .iter()
            .copied()
            .filter(|slot| session.slots[slot.index()].is_some())
            .filter(|slot| e.control.try_send(Control::Evict(*slot)).is_ok())
            .collect()
    }

    /// Tells the stream's pipeline to drain and stop; `false` when it has no session.
    pub fn stop(&self, id: i64) -> bool {
        match self.streams().get(&id).filter(|e| e.session.is_some()) {
            Some(e) => {
                e.stop.send_replace(true);
                true
            }
            None => false,
        }
    }

    /// The stop signal of the stream's current session.
    pub fn stop_signal(&self, id: i64) -> watch::Receiver<bool> {
        match self.streams().get(&id) {
            Some(e) => e.stop.subscribe(),
            None => watch::Sender::new(true).subscribe(),
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

    /// The streams with a publishing session that transcode, with their speeds.
    pub fn transcodes(&self) -> Vec<crate::capacity::Transcode> {
        self.streams()
            .iter()
            // A stream passed through costs no transcode's place.
            .filter(|(_, e)| {
                e.session.is_some()
                    && lock(&e.handles.status).transcoding_preset()
                        != Some(crate::capacity::PASSTHROUGH_PRESET)
            })
            .map(|(&stream, e)| crate::capacity::Transcode {
                stream,
                speed: lock(&e.handles.status).transcoding_speed(),
            })
            .collect()
    }

    /// Whether the stream has a publishing session (a publish joins its transcode).
    pub fn in_session(&self, id: i64) -> bool {
        self.streams().get(&id).is_some_and(|e| e.session.is_some())
    }

    pub fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.streams().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub fn metrics(&self) -> Vec<StreamMetrics> {
        let now = std::time::Instant::now();
        let mut all: Vec<StreamMetrics> = self
            .streams()
            .iter()
            .map(|(&id, e)| StreamMetrics {
                id,
                status: e.handles.status_now(now),
                counters: e.handles.counters.clone(),
                hub_readers: e.handles.hub.readers(),
                hub_dropped: e.handles.hub.dropped(),
            })
            .collect();
        all.sort_by_key(|m| m.id);
        all
    }
}
