//! A session's inputs, run by the stream's owner: the main and backup publishers' media through
//! the input switch ([`super::switch`]) into the one pipeline, `live`/`backup_live` kept current.
//! Never blocks a publisher: a full pipeline queue drops and counts.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::publisher::Slot;
use super::sessions::{Attach, Control};
use super::stats::SourceStats;
use super::status::{SharedStatus, HEALTH_PERIOD};
use super::switch::{Switch, SwitchEvent};
use super::{PipelineFailure, Registry, StreamHandles, SWITCH_TICK};
use crate::db::SourceSample;
use crate::hub::{Feed, Hub};
use crate::media::MediaMessage;
use time::OffsetDateTime;

/// How a session's pipeline task ended.
pub(super) type PipelineEnd = Result<Result<(), PipelineFailure>, tokio::task::JoinError>;

/// A session's inputs: its publishers' queues and the switch between them.
pub(super) struct Inputs<'a> {
    registry: &'a Registry,
    id: i64,
    status: SharedStatus,
    hub: Arc<Hub>,
    switch: Switch,
    queues: [Option<mpsc::Receiver<MediaMessage>>; 2],
    stats: SourceStats,
    /// The same measures over [`HEALTH_PERIOD`], for the record (not stored).
    health: SourceStats,
    /// Deliveries lost to a full reader queue other than the pipeline's.
    dropped: u64,
}

impl<'a> Inputs<'a> {
    pub(super) fn new(registry: &'a Registry, stream: &StreamHandles, first: Attach) -> Inputs<'a> {
        let mut inputs = Inputs {
            registry,
            id: stream.id,
            status: stream.status.clone(),
            hub: stream.hub.clone(),
            switch: Switch::new(registry.config.switch_timeout),
            queues: [None, None],
            stats: SourceStats::new(OffsetDateTime::now_utc(), registry.config.stats_period),
            health: SourceStats::new(OffsetDateTime::now_utc(), HEALTH_PERIOD),
            dropped: 0,
        };
        let (slot, _, media) = first;
        inputs.queues[slot.index()] = Some(media);
        inputs.switch.attach(slot, tokio::time::Instant::now());
        inputs
    }

    /// Runs until both publishers have left, the session is told to stop (its publishers are
    /// cut at once, not after the pipeline has drained: a kicked or fenced stream stops taking
    /// media now), or the pipeline ends (how, returned).
    pub(super) async fn run(
        &mut self,
        control: &mut mpsc::Receiver<Control>,
        pipeline: &mut tokio::task::JoinHandle<Result<(), PipelineFailure>>,
        mut stop: watch::Receiver<bool>,
    ) -> Option<PipelineEnd> {
        let (id, registry) = (self.id, self.registry);
        let mut tick = tokio::time::interval(SWITCH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut out = Vec::new();
        let mut shown = (false, false);
        loop {
            let now = tokio::time::Instant::now();
            enum Got {
                Control(Control),
                Media(Slot, Option<MediaMessage>),
                Tick,
                PipelineEnded(PipelineEnd),
                Stopped,
            }
            let [main_rx, backup_rx] = &mut self.queues;
            let got = tokio::select! {
                Some(c) = control.recv() => Got::Control(c),
                m = recv(main_rx) => Got::Media(Slot::Main, m),
                m = recv(backup_rx) => Got::Media(Slot::Backup, m),
                _ = tick.tick() => Got::Tick,
                ended = &mut *pipeline => Got::PipelineEnded(ended),
                _ = stopped(&mut stop) => Got::Stopped,
            };
            match got {
                Got::Control(Control::Attach(attach)) => self.attach(attach, now),
                // A start is only sent while no session runs.
                Got::Control(Control::Start(_)) => {}
                Got::Media(slot, Some(m)) => self.switch.media(slot, m, now, &mut out),
                // Dropping the receiver ends the evicted publisher's sends and its `closed()`.
                Got::Control(Control::Evict(slot)) | Got::Media(slot, None) => {
                    self.queues[slot.index()] = None;
                    self.switch.detach(slot, now, &mut out);
                    let protocol = registry.sessions.slot_left(id, slot);
                    registry.slot_left(id, slot, protocol);
                }
                Got::Tick => {
                    self.switch.tick(now, &mut out);
                    let wall = OffsetDateTime::now_utc();
                    if self.stats.due(wall) {
                        registry.save_sample(id, self.stats.cut(wall));
                    }
                    if self.health.due(wall) {
                        // Nothing received in the window: no figures rather than stale ones.
                        let h = self.health.cut(wall);
                        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
                        s.set_input(h.map(|h| (h.bitrate_kbps, h.keyframe_interval)));
                    }
                }
                Got::PipelineEnded(ended) => return Some(ended),
                Got::Stopped => return None,
            }
            self.forward(&mut out);
            let receiving = (
                self.switch.receiving(Slot::Main, now),
                self.switch.receiving(Slot::Backup, now),
            );
            if receiving != shown {
                shown = receiving;
                let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
                s.set_receiving(receiving.0, receiving.1);
            }
            if self.switch.is_empty() {
                match registry.sessions.close_unless_attaching(id, control) {
                    Some(attach) => self.attach(attach, now),
                    None => return None,
                }
            }
        }
    }

    fn attach(&mut self, (slot, protocol, media): Attach, now: tokio::time::Instant) {
        self.queues[slot.index()] = Some(media);
        self.switch.attach(slot, now);
        self.registry.slot_started(self.id, slot, protocol);
    }

    /// The inputs' last words: the publishers' queues close, the source's readers (the
    /// pipeline first) see the end of their media, the last statistics window is saved, losses
    /// are logged.
    pub(super) fn end(mut self) {
        let id = self.id;
        self.queues = [None, None];
        self.hub.end(&Feed::Source);
        self.registry
            .save_sample(id, self.stats.cut(OffsetDateTime::now_utc()));
        let (dropped, overlapped) = (self.dropped, self.switch.overlapped());
        if dropped > 0 || overlapped > 0 {
            tracing::warn!(
                stream = id,
                dropped,
                overlapped,
                "input switch dropped media"
            );
        }
    }

    /// Hands the switch's output to the source's readers, counting the deliveries lost to a
    /// full reader queue (the pipeline's are counted in `frames_dropped` by its reader).
    fn forward(&mut self, out: &mut Vec<SwitchEvent>) {
        let id = self.id;
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
                    self.registry
                        .events
                        .emit(crate::events::Event::InputSwitched {
                            stream_id: id,
                            from,
                            to,
                        });
                    MediaMessage::Discontinuity { at }
                }
            };
            self.stats.observe(&msg);
            self.health.observe(&msg);
            let codecs = match &msg {
                MediaMessage::VideoConfig(c) => Some((Some(c.codec.name()), None)),
                MediaMessage::AudioConfig(c) => Some((None, Some(c.codec_name()))),
                _ => None,
            };
            if let Some((video, audio)) = codecs {
                let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
                s.set_codecs(video, audio);
            }
            self.dropped += self.hub.publish(&Feed::Source, msg).dropped as u64;
        }
    }
}

impl Registry {
    /// Stores a window's source statistics, off the input task (a slow disk never holds media).
    fn save_sample(&self, id: i64, sample: Option<SourceSample>) {
        let Some(mut sample) = sample else { return };
        let live = self.status(id);
        sample.frames_dropped = live.frames_dropped();
        sample.transcoding_speed = live.transcoding_speed();
        sample.viewers = live.viewers_total() as u64;
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.add_source_sample(id, &sample) {
                tracing::warn!(stream = id, error = %e, "cannot store source statistics");
            }
        });
    }
}

/// The next message of a slot's publisher; never, for an empty slot.
async fn recv(rx: &mut Option<mpsc::Receiver<MediaMessage>>) -> Option<MediaMessage> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Resolves once the session is told to stop (never, if its stop signal is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}
