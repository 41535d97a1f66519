//! Each live stream's recording task: the live events and the API's start/stop reach it
//! through its own queue, in order, so one stream's stop (seconds of flushing and MP4
//! assembly) never holds another stream's recording or the API. Ended at the stream's end or
//! at shutdown, finalising its open video either way.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{lock, LivePackages, RecordError, Recordings, StreamRec, SCREENSHOT_AFTER, TICK};
use crate::db::VideoRow;
use crate::events::{Event, Next};
use crate::package::Package;
use crate::record::policy::{Policy, PolicyError};
use crate::record::recorder::Since;

/// What a stream's recording task is told, in the order it happened.
pub(super) enum Command {
    /// A session started (or resumed) on this package.
    Started(Arc<Package>),
    InputsGone,
    /// The stream ended: the open video is finalised and the task ends.
    Ended,
    /// After missed events: the stream's package now (`None`: it is gone).
    Sync(Option<Arc<Package>>),
    Start(oneshot::Sender<Result<(), RecordError>>),
    Stop(oneshot::Sender<Result<Option<VideoRow>, RecordError>>),
}

/// Commands queued for one stream's task; a stream gets a handful per session, so a full queue
/// means the task is finalising a video: the sender waits for that stream alone.
const STREAM_QUEUE: usize = 32;

/// A stream's recording task and its queue.
pub(super) struct StreamTask {
    tx: mpsc::Sender<Command>,
    task: JoinHandle<()>,
}

impl Recordings {
    /// Follows the live events (subscribed now) until the bus is gone; a session's outputs
    /// come from `packages`. Events missed by a slow follower are made up from `packages`.
    pub fn spawn(self: &Arc<Self>, packages: Arc<dyn LivePackages>) {
        if self.packages.set(packages).is_err() {
            return;
        }
        let this = self.clone();
        let mut events = self.events.subscribe();
        let follower = tokio::spawn(async move {
            while let Some(next) = events.next().await {
                match next {
                    Next::Event(e) => this.dispatch(&e.event).await,
                    Next::Lost(n) => {
                        tracing::warn!(lost = n, "recordings missed live events; resyncing");
                        this.resync().await;
                    }
                }
            }
        });
        *lock(&self.follower) = Some(follower);
    }

    /// Hands a live event to its stream's task (started by a session's start).
    async fn dispatch(self: &Arc<Self>, event: &Event) {
        let (id, command) = match *event {
            Event::LiveStarted { stream_id: id, .. } => {
                // Gone already (a session shorter than this follower's lag): nothing to record.
                let Some(package) = self.packages().package(id) else {
                    return;
                };
                (id, Command::Started(package))
            }
            Event::InputsGone { stream_id: id } => (id, Command::InputsGone),
            Event::LiveEnded { stream_id: id } => (id, Command::Ended),
            _ => return,
        };
        self.send(id, command).await;
    }

    /// After missed events: every stream with outputs, and every stream with a task, is told
    /// what its package is now.
    async fn resync(self: &Arc<Self>) {
        let mut ids = self.packages().streams();
        ids.extend(lock(&self.streams).keys().copied());
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let package = self.packages().package(id);
            self.send(id, Command::Sync(package)).await;
        }
    }

    fn packages(&self) -> &Arc<dyn LivePackages> {
        self.packages.get().expect("Recordings::spawn runs first")
    }

    /// Queues a command for the stream's task, starting one for a session's start; an ended
    /// stream's task is let go (it finalises its video and ends by itself).
    async fn send(self: &Arc<Self>, id: i64, command: Command) {
        let starts = matches!(command, Command::Started(_) | Command::Sync(Some(_)));
        let ends = matches!(command, Command::Ended | Command::Sync(None));
        let tx = {
            let mut streams = lock(&self.streams);
            let tx = match streams.entry(id) {
                std::collections::hash_map::Entry::Occupied(e) => e.get().tx.clone(),
                std::collections::hash_map::Entry::Vacant(_) if !starts => return,
                std::collections::hash_map::Entry::Vacant(e) => {
                    let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                    let task = tokio::spawn(self.clone().run_stream(id, rx));
                    e.insert(StreamTask {
                        tx: tx.clone(),
                        task,
                    });
                    tx
                }
            };
            if ends {
                let ended = streams.remove(&id).expect("present");
                let mut ending = lock(&self.ending);
                ending.retain(|(_, t)| !t.is_finished());
                ending.push((id, ended.task));
            }
            tx
        };
        // Only a task that panicked has dropped its queue: nothing is left to tell it.
        let _ = tx.send(command).await;
    }

    /// A stream's recording task: its policy, its open video; ends when told the stream ended,
    /// or at shutdown (its queue closed), finalising the open video either way.
    async fn run_stream(self: Arc<Self>, id: i64, mut rx: mpsc::Receiver<Command>) {
        let mut s = StreamRec {
            policy: Policy::new(false, self.config.resume, self.config.max),
            package: None,
            open: None,
        };
        let mut tick = tokio::time::interval(TICK);
        loop {
            let command = tokio::select! {
                c = rx.recv() => c,
                _ = tick.tick() => {
                    self.tick(id, &mut s).await;
                    continue;
                }
            };
            let Some(command) = command else { break };
            let now = Instant::now();
            match command {
                Command::Started(package) => self.live_started(id, &mut s, package, now).await,
                Command::InputsGone => s.policy.inputs_gone(now),
                Command::Ended | Command::Sync(None) => break,
                Command::Sync(Some(package)) => {
                    let same = s.package.as_ref().is_some_and(|p| Arc::ptr_eq(p, &package));
                    if !same {
                        self.live_started(id, &mut s, package, now).await;
                    }
                }
                Command::Start(reply) => {
                    let _ = reply.send(self.start_in(id, &mut s).await);
                }
                Command::Stop(reply) => {
                    let _ = reply.send(self.stop_in(id, &mut s).await);
                }
            }
        }
        if s.open.is_some() {
            let mut actions = Vec::new();
            s.policy.stop_requested(&mut actions);
            self.apply(id, &mut s, actions, Since::Now).await;
        }
    }

    async fn live_started(&self, id: i64, s: &mut StreamRec, package: Arc<Package>, now: Instant) {
        let row = {
            let store = self.store.clone();
            tokio::task::spawn_blocking(move || store.get_stream(id))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
        };
        let Some(row) = row else { return };
        s.policy.auto_record = row.settings.auto_record;
        s.package = Some(package);
        let mut actions = Vec::new();
        s.policy.live_started(now, &mut actions);
        self.apply(id, s, actions, Since::SessionStart).await;
    }

    async fn tick(&self, id: i64, s: &mut StreamRec) {
        let mut actions = Vec::new();
        if let Some(open) = s.open.as_mut() {
            if !open.screenshot && open.started.elapsed() >= SCREENSHOT_AFTER {
                open.screenshot = true;
                let (video, package) = (open.video.id, open.package.clone());
                self.take_screenshot(video, &package).await;
            }
        }
        if s.open.as_ref().is_some_and(|o| o.recorder.failed()) {
            // Out of space or a write error: what was written becomes a ready video (the
            // reason noted on it); the stream goes on live, not recording.
            s.policy.stop_requested(&mut actions);
        }
        s.policy.tick(Instant::now(), &mut actions);
        if !actions.is_empty() {
            self.apply(id, s, actions, Since::Now).await;
        }
    }

    /// The stream's task, when it has one (it is live or finalising).
    pub(super) fn queue(&self, id: i64) -> Option<mpsc::Sender<Command>> {
        lock(&self.streams).get(&id).map(|t| t.tx.clone())
    }

    /// `start_recording`.
    pub async fn start(&self, id: i64) -> Result<(), RecordError> {
        let tx = self.queue(id).ok_or(RecordError::NotLive(id))?;
        let (reply, answer) = oneshot::channel();
        tx.send(Command::Start(reply))
            .await
            .map_err(|_| RecordError::NotLive(id))?;
        answer.await.map_err(|_| RecordError::NotLive(id))?
    }

    async fn start_in(&self, id: i64, s: &mut StreamRec) -> Result<(), RecordError> {
        if s.policy.is_live() && s.open.is_none() {
            self.budget.check_start()?;
        }
        let mut actions = Vec::new();
        s.policy
            .start_requested(Instant::now(), &mut actions)
            .map_err(|PolicyError::NotLive| RecordError::NotLive(id))?;
        self.apply(id, s, actions, Since::Now).await;
        Ok(())
    }

    /// `stop_recording`: the finalised video, or `None` when nothing was recording.
    pub async fn stop(&self, id: i64) -> Result<Option<VideoRow>, RecordError> {
        let Some(tx) = self.queue(id) else {
            return Ok(None);
        };
        let (reply, answer) = oneshot::channel();
        if tx.send(Command::Stop(reply)).await.is_err() {
            return Ok(None);
        }
        answer.await.unwrap_or(Ok(None))
    }

    async fn stop_in(&self, id: i64, s: &mut StreamRec) -> Result<Option<VideoRow>, RecordError> {
        let video = s.open.as_ref().map(|o| o.video.id);
        let mut actions = Vec::new();
        if !s.policy.stop_requested(&mut actions) {
            return Ok(None);
        }
        self.apply(id, s, actions, Since::Now).await;
        let Some(video) = video else { return Ok(None) };
        let store = self.store.clone();
        Ok(tokio::task::spawn_blocking(move || store.get_video(video))
            .await
            .ok()
            .transpose()?
            .flatten())
    }

    /// Finalises every open video (each holds everything recorded up to now) and ends the
    /// streams' tasks, then stops the uploads (the next run resumes them), within `within`;
    /// what did not end is named in the log.
    pub async fn shutdown(&self, within: Duration) {
        // No new stream task from here on: the follower never ends while the bus lives.
        if let Some(follower) = lock(&self.follower).take() {
            follower.abort();
        }
        let deadline = Instant::now() + within;
        // A retention pass under way finishes its deletions; none starts after this.
        let retention = lock(&self.retention).take();
        if let Some((stop, task)) = retention {
            stop.send_replace(true);
            let abort = task.abort_handle();
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                tracing::warn!("video retention pass still deleting at shutdown; cut");
                abort.abort();
            }
        }
        let mut tasks: Vec<(i64, JoinHandle<()>)> = lock(&self.streams)
            .drain()
            .map(|(id, t)| (id, t.task))
            .collect();
        tasks.append(&mut lock(&self.ending));
        for (id, task) in tasks {
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                tracing::warn!(stream = id, "recording not finalised at shutdown");
            }
        }
        if let Some(uploader) = &self.uploader {
            uploader
                .shutdown(deadline.saturating_duration_since(Instant::now()))
                .await;
        }
    }
}
