//! A session's input task: it feeds the main and backup publishers' media through the input
//! switch ([`super::switch`]) into the one pipeline, and keeps `live`/`backup_live` current.
//! Never blocks a publisher: a full pipeline queue drops and counts.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::publisher::Slot;
use super::sessions::{Attach, Control};
use super::stats::SourceStats;
use super::switch::{Switch, SwitchEvent};
use super::{Registry, StreamHandles, SWITCH_TICK};
use crate::db::SourceSample;
use crate::hub::{Feed, Hub};
use crate::media::MediaMessage;
use time::OffsetDateTime;

impl Registry {
    /// Runs until both publishers have left, the session is told to stop (its publishers are
    /// cut at once, not after the pipeline has drained: a kicked or fenced stream stops taking
    /// media now), or the pipeline ends.
    pub(super) async fn run_inputs(
        self: Arc<Self>,
        stream: StreamHandles,
        epoch: u64,
        first: Attach,
        mut control_rx: mpsc::Receiver<Control>,
        mut pipeline_gone: oneshot::Receiver<()>,
        mut stop: watch::Receiver<bool>,
    ) {
        let StreamHandles {
            id, status, hub, ..
        } = stream;
        let mut switch = Switch::new(self.config.switch_timeout);
        let mut inputs: [Option<mpsc::Receiver<MediaMessage>>; 2] = [None, None];
        let mut tick = tokio::time::interval(SWITCH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut out = Vec::new();
        let mut dropped = 0u64;
        let mut shown = (false, false);
        let mut stats = SourceStats::new(OffsetDateTime::now_utc(), self.config.stats_period);
        inputs[first.0.index()] = Some(first.1);
        switch.attach(first.0, tokio::time::Instant::now());
        loop {
            let now = tokio::time::Instant::now();
            enum Got {
                Control(Control),
                Media(Slot, Option<MediaMessage>),
                Tick,
                PipelineGone,
                Stopped,
            }
            let [main_rx, backup_rx] = &mut inputs;
            let got = tokio::select! {
                Some(c) = control_rx.recv() => Got::Control(c),
                m = recv(main_rx) => Got::Media(Slot::Main, m),
                m = recv(backup_rx) => Got::Media(Slot::Backup, m),
                _ = tick.tick() => Got::Tick,
                _ = &mut pipeline_gone => Got::PipelineGone,
                _ = stopped(&mut stop) => Got::Stopped,
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
                Got::Tick => {
                    switch.tick(now, &mut out);
                    let wall = OffsetDateTime::now_utc();
                    if stats.due(wall) {
                        self.save_sample(id, stats.cut(wall));
                    }
                }
                Got::PipelineGone => break,
                Got::Stopped => {
                    self.sessions.close(id, epoch);
                    for slot in [Slot::Main, Slot::Backup] {
                        if inputs[slot.index()].take().is_some() {
                            self.slot_left(id, epoch, slot);
                        }
                    }
                    break;
                }
            }
            dropped += self.forward(id, &mut out, &hub, &mut stats);
            let receiving = (
                switch.receiving(Slot::Main, now),
                switch.receiving(Slot::Backup, now),
            );
            if receiving != shown {
                shown = receiving;
                let mut s = status.lock().unwrap_or_else(|p| p.into_inner());
                s.set_receiving(receiving.0, receiving.1);
            }
            if switch.is_empty() {
                match self
                    .sessions
                    .close_unless_attaching(id, epoch, &mut control_rx)
                {
                    Some((slot, rx)) => {
                        inputs[slot.index()] = Some(rx);
                        switch.attach(slot, now);
                    }
                    None => break,
                }
            }
        }
        self.inputs_ended(id, &hub, stats, dropped, switch.overlapped());
    }

    /// The input task's last words: the source's readers (the pipeline first) see the end of
    /// their media, the last statistics window is saved, losses are logged.
    fn inputs_ended(
        &self,
        id: i64,
        hub: &Hub,
        mut stats: SourceStats,
        dropped: u64,
        overlapped: u64,
    ) {
        hub.end(&Feed::Source);
        self.save_sample(id, stats.cut(OffsetDateTime::now_utc()));
        if dropped > 0 || overlapped > 0 {
            tracing::warn!(
                stream = id,
                dropped,
                overlapped,
                "input switch dropped media"
            );
        }
    }

    /// Hands the switch's output to the source's readers; how many deliveries were lost to a
    /// full reader queue (the pipeline's are counted in `frames_dropped` by its reader).
    fn forward(
        &self,
        id: i64,
        out: &mut Vec<SwitchEvent>,
        hub: &Hub,
        stats: &mut SourceStats,
    ) -> u64 {
        let mut dropped = 0;
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
                    self.events.emit(crate::events::Event::InputSwitched {
                        stream_id: id,
                        from,
                        to,
                    });
                    MediaMessage::Discontinuity { at }
                }
            };
            stats.observe(&msg);
            dropped += hub.publish(&Feed::Source, msg).dropped as u64;
        }
        dropped
    }

    /// Stores a window's source statistics, off the input task (a slow disk never holds media).
    fn save_sample(&self, id: i64, sample: Option<SourceSample>) {
        let Some(sample) = sample else { return };
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.add_source_sample(id, &sample) {
                tracing::warn!(stream = id, error = %e, "cannot store source statistics");
            }
        });
    }
}

/// Resolves once the session is told to stop (never, if its stop signal is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The next message of a slot's publisher; never, for an empty slot.
async fn recv(rx: &mut Option<mpsc::Receiver<MediaMessage>>) -> Option<MediaMessage> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
