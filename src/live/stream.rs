//! A live stream's owner: one task per stream the registry knows, from the first publish to the
//! moment the stream is forgotten. It alone runs the stream's sessions (its publishers through
//! the input switch into one pipeline, whose task it holds), states their facts in order
//! (publish started and stopped, live started, inputs gone, live ended), and walks the stream
//! through the grace period and the linger after the end. Publishes reach it through its
//! control queue; the table ([`super::sessions`]) is what everyone else reads.

use std::sync::Arc;

use time::OffsetDateTime;
use tokio::sync::mpsc;

use super::inputs::Inputs;
use super::publisher::{Protocol, Slot};
use super::sessions::{Control, SessionStart};
use super::{PipelineJob, Registry, StreamHandles, Times, PUBLISH_QUEUE};
use crate::events::Event;
use crate::hub::{Feed, ReaderOptions};
use crate::media::MediaMessage;
use crate::package::DiskStorage;

impl Registry {
    /// Runs sessions as publishes start them, with the grace period and the linger between
    /// them, until the stream is forgotten or the registry shuts down.
    pub(super) async fn own(
        self: Arc<Self>,
        stream: StreamHandles,
        mut control: mpsc::Receiver<Control>,
    ) {
        let mut resumed = false;
        let mut next = match control.recv().await {
            Some(Control::Start(start)) => Some(start),
            _ => None,
        };
        while let Some(start) = next {
            self.session(&stream, start, resumed, &mut control).await;
            resumed = true;
            next = self.idle(&stream, &mut control).await;
        }
    }

    /// One session: its publishers come and go through the switch; it ends when both have
    /// left (or were stopped) and the pipeline has drained.
    async fn session(
        &self,
        stream: &StreamHandles,
        start: SessionStart,
        resumed: bool,
        control: &mut mpsc::Receiver<Control>,
    ) {
        let id = stream.id;
        let SessionStart {
            first,
            quality_set,
            reduction,
            options,
        } = start;
        let storage = DiskStorage::new(self.config.media_root.join(id.to_string()));
        stream.package.start_session(options, Arc::new(storage));
        self.slot_started(id, first.0, first.1);
        tracing::info!(stream = id, resumed, "session started");
        self.events.emit(Event::LiveStarted {
            stream_id: id,
            resumed,
        });
        // Attached before the inputs publish anything: the pipeline sees the start.
        let counters = stream.counters.clone();
        let media = stream.hub.subscribe(
            Feed::Source,
            ReaderOptions::new("pipeline", PUBLISH_QUEUE).on_drop(move |m| {
                if matches!(m, MediaMessage::Frame(_)) {
                    super::Counters::add(&counters.frames_dropped, 1);
                }
            }),
        );
        let stop = self.sessions.stop_signal(id);
        let mut pipeline = tokio::spawn(self.factory.run(PipelineJob {
            stream: stream.clone(),
            quality_set,
            reduction,
            media,
            stop: stop.clone(),
        }));
        let mut inputs = Inputs::new(self, stream, first);
        let ended = inputs.run(control, &mut pipeline, stop).await;
        // Told to stop, or the pipeline ended first: the publishers still there are cut now.
        for (slot, protocol) in self.sessions.close(id) {
            self.slot_left(id, slot, Some(protocol));
        }
        inputs.end();
        let result = match ended {
            Some(result) => result,
            None => pipeline.await,
        };
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(stream = id, error = %e, "pipeline failed; stream ended"),
            Err(e) => {
                tracing::error!(stream = id, error = %e, "pipeline task failed; stream ended")
            }
        }
        self.sessions.session_ended(id);
        stream.package.mark_discontinuity();
        self.events.emit(Event::InputsGone { stream_id: id });
        tracing::info!(
            stream = id,
            grace_secs = self.config.grace.as_secs(),
            "inputs gone; grace period"
        );
    }

    /// After a session: the outputs stay for the grace period (a publish continues them after
    /// a discontinuity), then the playlists end and linger before the stream is forgotten. A
    /// publish meanwhile starts the next session, whose start is returned.
    async fn idle(
        &self,
        stream: &StreamHandles,
        control: &mut mpsc::Receiver<Control>,
    ) -> Option<SessionStart> {
        let id = stream.id;
        let mut closing = self.closing.subscribe();
        if *closing.borrow() {
            return None;
        }
        let ended = async {
            tokio::time::sleep(self.config.grace).await;
            stream.package.set_ended();
            self.events.emit(Event::LiveEnded { stream_id: id });
            tracing::info!(stream = id, "stream ended");
            tokio::time::sleep(self.config.linger).await;
        };
        tokio::pin!(ended);
        loop {
            tokio::select! {
                c = control.recv() => match c {
                    Some(Control::Start(start)) => return Some(start),
                    // Only a session's publishers are attached or evicted.
                    Some(_) => continue,
                    None => return None,
                },
                _ = &mut ended => break,
                _ = closing.wait_for(|c| *c) => return None,
            }
        }
        if let Some(start) = self.sessions.remove_unless_starting(id, control) {
            return Some(start);
        }
        self.forgotten(id);
        crate::heap::released();
        None
    }

    /// A publisher got a slot: its start time, the event, the lease's state.
    pub(super) fn slot_started(&self, id: i64, slot: Slot, protocol: Protocol) {
        self.lease_state_changed(id);
        self.events.emit(Event::PublishStarted {
            stream_id: id,
            slot,
            protocol,
        });
        let now = Some(OffsetDateTime::now_utc());
        self.times.set(
            id,
            match slot {
                Slot::Main => Times {
                    started_primary: now,
                    ..Times::default()
                },
                Slot::Backup => Times {
                    started_backup: now,
                    ..Times::default()
                },
            },
        );
        tracing::info!(stream = id, ?slot, ?protocol, "publish started");
    }

    /// A publisher left its slot (`protocol`: the one it held, if it still held it): the slot
    /// is free for a new publish; for the main slot, its finish time goes to the record
    /// (stated, never awaited: the backup takes over meanwhile).
    pub(super) fn slot_left(&self, id: i64, slot: Slot, protocol: Option<Protocol>) {
        self.lease_state_changed(id);
        if let Some(protocol) = protocol {
            self.events.emit(Event::PublishStopped {
                stream_id: id,
                slot,
                protocol,
            });
        }
        tracing::info!(stream = id, ?slot, "publisher left");
        if slot == Slot::Main {
            self.times.set(
                id,
                Times {
                    finished_primary: Some(OffsetDateTime::now_utc()),
                    ..Times::default()
                },
            );
        }
    }
}
