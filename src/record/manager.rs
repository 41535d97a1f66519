//! The recordings of every stream: follows the live events, applies each stream's
//! [`Policy`], runs a [`Recorder`] per open video and keeps the video records in the store
//! (`pending` while recording, `ready` with duration and sizes once finalised). Each live
//! stream's recording state has its own task, so one stream's stop (seconds of flushing and
//! MP4 assembly) never holds another stream's recording or the API.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::budget::{Budget, NoSpace};
use super::fragments;
use super::policy::{Action, EndReason, Policy};
use super::recorder::{Finished, Recorder, Since, Stop};
use crate::db::{RecordType, Store, VideoFilter, VideoRow, VideoSettings, VideoState, VideoStatus};
use crate::events::{Event, Events};
use crate::package::Package;

/// Where the recordings find a live stream's outputs: the live registry in the daemon, a map
/// in the tests. Events carry no handles; the package is looked up when a session starts.
pub trait LivePackages: Send + Sync + 'static {
    fn package(&self, id: i64) -> Option<Arc<Package>>;
    /// The streams with outputs now: what the recordings rebuild from after missing events.
    fn streams(&self) -> Vec<i64>;
}

impl LivePackages for crate::live::Registry {
    fn package(&self, id: i64) -> Option<Arc<Package>> {
        crate::live::Registry::package(self, id)
    }

    fn streams(&self) -> Vec<i64> {
        self.metrics().iter().map(|m| m.id).collect()
    }
}

/// How often resume and maximum-length deadlines are checked.
const TICK: Duration = Duration::from_millis(500);
pub const DEFAULT_RESUME: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX: Duration = Duration::from_secs(14_400);
/// The free-space floor: below 1 GiB free, recordings stop and do not start.
pub const DEFAULT_MIN_FREE: u64 = 1 << 30;

#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// `DATA_DIR/videos`: each video's files under `{id}/`.
    pub root: PathBuf,
    pub resume: Duration,
    pub max: Duration,
    /// `recordings_max_bytes`; `None`: no quota.
    pub max_bytes: Option<u64>,
    /// `recordings_min_free_bytes`.
    pub min_free_bytes: u64,
    /// This node's id: its videos' files are on its disk, and only its own interrupted
    /// recordings are its to recover.
    pub node_id: String,
    /// `storage_url`: finished videos go there.
    pub storage: Option<Arc<crate::storage::Storage>>,
    /// `storage_local_retention_secs`: how long uploaded videos' local files stay.
    pub keep_local: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("stream {0} is not live")]
    NotLive(i64),
    #[error("{0}")]
    NoSpace(#[from] NoSpace),
    #[error("store: {0}")]
    Store(#[from] crate::db::StoreError),
    #[error("recording: {0}")]
    Files(#[from] super::fragments::FragmentsError),
}

struct Open {
    video: VideoRow,
    recorder: Recorder,
    package: Arc<Package>,
    started: Instant,
    /// Its screenshot is written.
    screenshot: bool,
}

struct StreamRec {
    policy: Policy,
    package: Option<Arc<Package>>,
    open: Option<Open>,
}

/// How long shutdown waits for the open videos to be finalised.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(20);

pub struct Recordings {
    pub(super) store: Arc<dyn Store>,
    pub(super) events: Events,
    config: RecordConfig,
    budget: Arc<Budget>,
    /// The task of each stream with a live session (or a video still open).
    streams: Mutex<HashMap<i64, streams::StreamTask>>,
    /// Tasks of ended streams still finalising their video.
    ending: Mutex<Vec<(i64, JoinHandle<()>)>>,
    follower: Mutex<Option<JoinHandle<()>>>,
    /// The hourly retention pass ([`Recordings::spawn_retention`]) and its stop signal.
    pub(super) retention: Mutex<Option<(tokio::sync::watch::Sender<bool>, JoinHandle<()>)>>,
    /// Video id and start of each stream's open video (`recording_duration`).
    since: Mutex<HashMap<i64, (i64, Instant)>>,
    uploader: Option<Arc<super::upload::Uploader>>,
    /// Where each stream's task reads its outputs ([`Recordings::spawn`]).
    packages: std::sync::OnceLock<Arc<dyn LivePackages>>,
    #[cfg(test)]
    close_gate: Mutex<HashMap<i64, Arc<tokio::sync::Semaphore>>>,
}

impl Recordings {
    pub fn new(store: Arc<dyn Store>, config: RecordConfig, events: Events) -> Arc<Recordings> {
        let budget = Arc::new(Budget::new(
            config.root.clone(),
            config.max_bytes,
            config.min_free_bytes,
        ));
        let uploader = config.storage.clone().map(|storage| {
            super::upload::Uploader::new(
                storage,
                store.clone(),
                config.root.clone(),
                budget.clone(),
                config.node_id.clone(),
                config.keep_local,
            )
        });
        Arc::new(Recordings {
            uploader,
            store,
            events,
            budget,
            config,
            streams: Mutex::new(HashMap::new()),
            ending: Mutex::new(Vec::new()),
            follower: Mutex::new(None),
            retention: Mutex::new(None),
            since: Mutex::new(HashMap::new()),
            packages: std::sync::OnceLock::new(),
            #[cfg(test)]
            close_gate: Mutex::new(HashMap::new()),
        })
    }

    /// Finalises the recordings a previous run left open (a crash, `kill -9`, a power loss):
    /// each becomes `ready` with everything up to its last complete fragment, or `error` when
    /// nothing was written. Runs before the daemon accepts publishes.
    pub fn recover_pending(&self) -> Result<usize, RecordError> {
        let (pending, _) = self.store.list_videos(&VideoFilter {
            status: Some(VideoStatus::Pending),
            limit: u32::MAX,
            ..VideoFilter::default()
        })?;
        // Another node's pending video is being recorded there (or is that node's to recover).
        let pending: Vec<_> = pending
            .into_iter()
            .filter(|v| {
                v.state
                    .node
                    .as_deref()
                    .is_none_or(|n| n == self.config.node_id)
            })
            .collect();
        for video in &pending {
            let dir = self.config.root.join(video.id.to_string());
            let now = OffsetDateTime::now_utc();
            let recovered = fragments::recover(&dir)
                .and_then(|summary| fragments::finalize(&dir, &summary).map(|()| summary));
            let state = match recovered {
                Ok(summary) => {
                    if video.state.record_type == RecordType::Origin {
                        assemble_download(video.id, &dir, &summary);
                    }
                    self.to_upload(finished_state(&dir, &video.state, summary, None))
                }
                Err(e) => VideoState {
                    status: VideoStatus::Error,
                    error: Some(format!("interrupted and not recoverable: {e}")),
                    ..video.state.clone()
                },
            };
            let settings = VideoSettings {
                name: format!("{}, {}", video.settings.name, crate::package::utc_ms(now)),
                ..video.settings.clone()
            };
            self.store
                .update_video(video.id, video.revision, &settings, now)?;
            self.store.set_video_state(video.id, &state, now)?;
            self.upload(video.id, &state);
            self.events
                .emit(video_outcome(video.stream_id, video.id, &state));
            tracing::info!(
                video = video.id,
                status = state.status.as_str(),
                duration_ms = state.duration_ms,
                "interrupted recording finalised"
            );
        }
        Ok(pending.len())
    }

    /// Where videos' directories are.
    pub fn root(&self) -> PathBuf {
        self.config.root.clone()
    }

    /// Where a video's files are.
    pub fn dir(&self, video: i64) -> PathBuf {
        self.config.root.join(video.to_string())
    }

    /// Removes a deleted video's files and gives their bytes back to the quota.
    pub fn remove_files(&self, video: i64) -> std::io::Result<()> {
        super::budget::remove_dir(&self.budget, &self.dir(video))
    }

    /// The object store videos go to (`storage_url`), if any.
    pub fn storage(&self) -> Option<Arc<crate::storage::Storage>> {
        self.uploader.as_ref().map(|u| u.storage.clone())
    }

    /// Starts again the uploads a previous run left unfinished (at start).
    pub fn resume_uploads(&self) {
        if let Some(u) = &self.uploader {
            u.resume_unfinished();
        }
    }

    /// A finished video's state as the store should have it: `uploading` rather than `ready`
    /// when there is an object store to upload to.
    fn to_upload(&self, mut state: VideoState) -> VideoState {
        if self.uploader.is_some() && state.status == VideoStatus::Ready {
            state.status = VideoStatus::Uploading;
        }
        state
    }

    fn upload(&self, video: i64, state: &VideoState) {
        if let (Some(u), VideoStatus::Uploading) = (&self.uploader, state.status) {
            u.spawn(video);
        }
    }

    /// Copies the stream's latest screenshot into the video's directory.
    async fn take_screenshot(&self, video: i64, package: &Package) {
        let Some(jpeg) = package.read(|p| p.screenshot().cloned()) else {
            return;
        };
        let dir = self.dir(video);
        let budget = self.budget.clone();
        let saved = tokio::task::spawn_blocking(move || {
            budget.reserve(jpeg.len() as u64).ok()?;
            Some(save_screenshot(&dir, &jpeg))
        })
        .await;
        if let Ok(Some(Err(e))) = saved {
            tracing::warn!(video, error = %e, "cannot save the video's screenshot");
        }
    }

    /// The recordings' disk budget: bytes used, the quota, the filesystem's free bytes (a
    /// statvfs: may block).
    pub fn disk(&self) -> (u64, Option<u64>, Option<u64>) {
        let (max, free) = self.budget.limits();
        (self.budget.used(), max, free)
    }

    /// Bytes the recordings hold (counted, never blocks).
    pub fn disk_used(&self) -> u64 {
        self.budget.used()
    }

    /// Seconds recorded so far in the stream's open video (`recording_duration`).
    pub fn recording_duration(&self, id: i64) -> Option<f64> {
        lock(&self.since)
            .get(&id)
            .map(|(_, t)| t.elapsed().as_secs_f64())
    }

    /// Carries out the policy's actions; a video started opens its recording from `since`.
    async fn apply(&self, id: i64, s: &mut StreamRec, actions: Vec<Action>, mut since: Since) {
        for action in actions {
            match action {
                Action::StartVideo => match self.open_video(id, s, since.clone()).await {
                    Ok(open) => {
                        lock(&self.since).insert(id, (open.video.id, Instant::now()));
                        s.open = Some(open);
                    }
                    Err(e) => tracing::error!(stream = id, error = %e, "cannot start recording"),
                },
                Action::EndVideo(reason) => {
                    let video = s.open.as_ref().map(|o| o.video.id);
                    if let Some(open) = s.open.take() {
                        let how = match reason {
                            EndReason::MaxDuration => Stop::Split,
                            _ if s.policy.is_live() => Stop::Live,
                            _ => Stop::Now,
                        };
                        let recorded = self.close_video(id, open, reason, how).await;
                        // A split: the next video goes on from where this one ended.
                        if let (EndReason::MaxDuration, Some(recorded)) = (reason, recorded) {
                            since = Since::After(recorded);
                        }
                    }
                    // Only now: a client that sees `recording: false` finds the video final
                    // (ready or error), never still pending (a race the quota test met). A new
                    // session's video may have started meanwhile: only this one's entry goes.
                    let mut since = lock(&self.since);
                    if since.get(&id).map(|(v, _)| Some(*v)) == Some(video) {
                        since.remove(&id);
                    }
                }
            }
        }
    }

    async fn open_video(&self, id: i64, s: &StreamRec, since: Since) -> Result<Open, RecordError> {
        let package = s.package.clone().ok_or(RecordError::NotLive(id))?;
        self.budget.check_start()?;
        let store = self.store.clone();
        let now = OffsetDateTime::now_utc();
        let slug = slug();
        let node = self.config.node_id.clone();
        // The record as it is now: a `record_type` changed while live applies to the next video.
        let video = tokio::task::spawn_blocking(move || {
            let Some(stream) = store.get_stream(id)? else {
                return Ok(None); // deleted meanwhile
            };
            let settings = VideoSettings {
                name: format!("Stream Record: {}", stream.settings.name),
                ..VideoSettings::default()
            };
            let state = VideoState {
                node: Some(node),
                secure_playback: stream.settings.secure_playback,
                ..VideoState::pending(stream.settings.record_type)
            };
            store
                .create_video(id, &slug, &settings, &state, now, now)
                .map(Some)
        })
        .await
        .map_err(|_| RecordError::NotLive(id))??
        .ok_or(RecordError::NotLive(id))?;
        let dir = self.config.root.join(video.id.to_string());
        let output = match video.state.record_type {
            RecordType::Origin => crate::package::Output::Source,
            RecordType::Transcoded => crate::package::Output::Cmaf,
        };
        let recorder = Recorder::start(&package, dir, output, self.budget.clone(), since)?;
        tracing::info!(stream = id, video = video.id, "recording started");
        self.events.emit(Event::RecordingStarted {
            stream_id: id,
            video_id: video.id,
        });
        Ok(Open {
            video,
            recorder,
            package,
            started: Instant::now(),
            screenshot: false,
        })
    }

    /// Finalises the video; per rendition, the newest segment it holds (when the recorder
    /// finished).
    async fn close_video(
        &self,
        id: i64,
        open: Open,
        reason: EndReason,
        how: Stop,
    ) -> Option<BTreeMap<String, u64>> {
        let Open {
            video,
            recorder,
            package,
            screenshot,
            ..
        } = open;
        #[cfg(test)]
        {
            let gate = lock(&self.close_gate).get(&id).cloned();
            if let Some(gate) = gate {
                let _ = gate.acquire().await;
            }
        }
        let mut finished = recorder.stop(how).await;
        self.events.emit(Event::RecordingStopped {
            stream_id: id,
            video_id: video.id,
        });
        let recorded = finished.as_mut().map(|f| std::mem::take(&mut f.recorded));
        if !screenshot {
            self.take_screenshot(video.id, &package).await;
        }
        let origin = video.state.record_type == RecordType::Origin;
        let ended = OffsetDateTime::now_utc();
        let state = match finished {
            Some(Finished {
                summary,
                error,
                dropped,
                ..
            }) => {
                let note = error.map(|e| e.to_string()).or_else(|| {
                    (dropped > 0).then(|| {
                        format!("{dropped} segments were lost: the disk could not keep up")
                    })
                });
                let dir = self.dir(video.id);
                let was = video.state.clone();
                let budget = self.budget.clone();
                tokio::task::spawn_blocking(move || {
                    if origin && budget.check(summary.size()).is_ok() {
                        let before = super::budget::dir_size(&dir);
                        assemble_download(video.id, &dir, &summary);
                        let grown = super::budget::dir_size(&dir).saturating_sub(before);
                        budget.add(grown);
                    }
                    finished_state(&dir, &was, summary, note)
                })
                .await
                .unwrap_or_else(|_| VideoState {
                    status: VideoStatus::Error,
                    error: Some("finalising the recording failed".into()),
                    ..video.state.clone()
                })
            }
            None => VideoState {
                status: VideoStatus::Error,
                error: Some("the recorder ended unexpectedly".into()),
                ..video.state.clone()
            },
        };
        let state = self.to_upload(state);
        let store = self.store.clone();
        let name = format!("{}, {}", video.settings.name, crate::package::utc_ms(ended));
        let outcome = video_outcome(id, video.id, &state);
        let stored_state = state.clone();
        let result = tokio::task::spawn_blocking(move || {
            let settings = VideoSettings {
                name,
                ..video.settings.clone()
            };
            store.update_video(video.id, video.revision, &settings, ended)?;
            store.set_video_state(video.id, &state, ended)
        })
        .await;
        tracing::info!(
            stream = id,
            ?reason,
            ok = matches!(result, Ok(Ok(true))),
            "recording ended"
        );
        if matches!(result, Ok(Ok(true))) {
            self.events.emit(outcome);
            self.upload(video.id, &stored_state);
        }
        recorded
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

mod streams;

pub use super::finish::SCREENSHOT;
use super::finish::{assemble_download, finished_state, save_screenshot, video_outcome};
/// A recording this old takes its screenshot (the package renews its own every 10 s, so
/// by then it shows the recording, not what came before).
const SCREENSHOT_AFTER: Duration = Duration::from_secs(12);

/// 16 random bytes as hex: the unguessable part of a video's media URLs.
fn slug() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{SqliteStore, StreamSettings, StreamStore, VideoStore};
    use crate::package::state::tests::video_720p;
    use crate::package::{Output, PackageState, PackagingConfig, PartIn};
    use bytes::Bytes;

    struct Harness {
        store: Arc<SqliteStore>,
        recordings: Arc<Recordings>,
        events: Events,
        packages: Arc<TestPackages>,
        _dir: tempfile::TempDir,
    }

    /// The live sessions' packages, as the registry would hold them.
    #[derive(Default)]
    struct TestPackages(Mutex<HashMap<i64, Arc<Package>>>);

    impl LivePackages for TestPackages {
        fn package(&self, id: i64) -> Option<Arc<Package>> {
            self.0.lock().unwrap().get(&id).cloned()
        }

        fn streams(&self) -> Vec<i64> {
            self.0.lock().unwrap().keys().copied().collect()
        }
    }

    fn harness(resume: Duration) -> Harness {
        harness_with(resume, None)
    }

    fn harness_with(resume: Duration, max_bytes: Option<u64>) -> Harness {
        harness_full(resume, max_bytes, DEFAULT_MAX)
    }

    fn harness_full(resume: Duration, max_bytes: Option<u64>, max: Duration) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open_in(dir.path()).unwrap());
        let recordings = Recordings::new(
            store.clone(),
            RecordConfig {
                max_bytes,
                min_free_bytes: 0,
                root: dir.path().join("videos"),
                resume,
                max,
                node_id: "node-a".into(),
                storage: None,
                keep_local: Duration::ZERO,
            },
            Events::new("node-a"),
        );
        let events = recordings.events.clone();
        let packages = Arc::new(TestPackages::default());
        recordings.spawn(packages.clone());
        Harness {
            store,
            recordings,
            events,
            packages,
            _dir: dir,
        }
    }

    fn stream(h: &Harness, auto_record: bool) -> i64 {
        let settings = StreamSettings {
            name: "cam".into(),
            auto_record,
            record_type: RecordType::Transcoded,
            ..StreamSettings::default()
        };
        h.store
            .create_stream(&settings, "t", OffsetDateTime::now_utc())
            .unwrap()
            .id
    }

    /// A package fed with real fragments as the pipeline would, `seconds` long.
    fn live_package(init: Bytes) -> Arc<Package> {
        let package = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(1_000_000)],
        )));
        package.sink(Output::Cmaf, "720p").unwrap().init(init, None);
        package
    }

    /// The stream goes live on `package` (a first publish, not a resume).
    fn go_live(h: &Harness, id: i64, package: &Arc<Package>) {
        h.packages.0.lock().unwrap().insert(id, package.clone());
        h.events.emit(Event::LiveStarted {
            stream_id: id,
            resumed: false,
        });
    }

    fn feed(package: &Arc<Package>, fragments: &[(Vec<Bytes>, Duration)]) {
        let sink = package.sink(Output::Cmaf, "720p").unwrap();
        for (chunks, d) in fragments {
            sink.part(PartIn {
                starts_segment: true,
                independent: true,
                duration: *d,
                pdt: OffsetDateTime::now_utc(),
                data: Bytes::from(chunks.concat()),
            });
        }
    }

    async fn until<T>(mut f: impl FnMut() -> Option<T>) -> T {
        for _ in 0..100 {
            if let Some(t) = f() {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("condition not met within 2 s")
    }

    fn videos(h: &Harness, id: i64) -> Vec<VideoRow> {
        h.store
            .list_videos(&VideoFilter {
                stream_id: Some(id),
                limit: 10,
                ..VideoFilter::default()
            })
            .unwrap()
            .0
    }

    /// One stream's stop is held in the middle of finalising: another stream's recording
    /// starts and stops meanwhile, and the held one finishes once let go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_stop_holds_no_other_stream() {
        let (init, frags) = fragments::tests::cmaf(4);
        let h = harness(Duration::from_secs(5));
        let (slow, other) = (stream(&h, false), stream(&h, false));
        let (slow_pkg, other_pkg) = (live_package(init.clone()), live_package(init));
        go_live(&h, slow, &slow_pkg);
        go_live(&h, other, &other_pkg);
        for id in [slow, other] {
            until(|| h.recordings.queue(id).map(|_| ())).await;
            h.recordings.start(id).await.unwrap();
        }
        feed(&slow_pkg, &frags);
        feed(&other_pkg, &frags);
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        h.recordings
            .close_gate
            .lock()
            .unwrap()
            .insert(slow, gate.clone());
        let held = {
            let r = h.recordings.clone();
            tokio::spawn(async move { r.stop(slow).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!held.is_finished(), "the gate holds the stop");
        let within = Duration::from_secs(5);
        let video = tokio::time::timeout(within, h.recordings.stop(other))
            .await
            .expect("the other stream's stop waited for the held one")
            .unwrap()
            .expect("a video");
        assert_eq!(video.state.status, VideoStatus::Ready);
        tokio::time::timeout(within, h.recordings.start(other))
            .await
            .expect("the other stream's start waited for the held one")
            .unwrap();
        assert!(h.recordings.recording_duration(other).is_some());
        assert!(!held.is_finished());
        gate.add_permits(1);
        let video = held.await.unwrap().unwrap().expect("a video");
        assert_eq!(video.state.status, VideoStatus::Ready);
    }

    /// Shutdown finalises the open videos: ready, holding everything recorded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_finalises_the_open_videos() {
        let (init, frags) = fragments::tests::cmaf(6);
        let h = harness(Duration::from_secs(5));
        let id = stream(&h, true);
        let package = live_package(init);
        go_live(&h, id, &package);
        until(|| h.recordings.recording_duration(id)).await;
        feed(&package, &frags);
        h.recordings.shutdown(SHUTDOWN_WAIT).await;
        let videos = videos(&h, id);
        assert_eq!(videos.len(), 1);
        assert_eq!(videos[0].state.status, VideoStatus::Ready);
        let expected: Duration = frags.iter().map(|f| f.1).sum();
        assert_eq!(videos[0].state.duration_ms, expected.as_millis() as u64);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn auto_record_makes_one_ready_video_across_a_quick_return() {
        let (init, frags) = fragments::tests::cmaf(12);
        let h = harness(Duration::from_secs(5));
        let id = stream(&h, true);
        let package = live_package(init);
        h.packages.0.lock().unwrap().insert(id, package.clone());
        let started = |resumed| Event::LiveStarted {
            stream_id: id,
            resumed,
        };
        h.events.emit(started(false));
        until(|| (!videos(&h, id).is_empty()).then_some(())).await;
        until(|| h.recordings.recording_duration(id)).await;
        feed(&package, &frags[..3]);
        // The input leaves and comes back within the resume time: the same video goes on.
        h.events.emit(Event::InputsGone { stream_id: id });
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.events.emit(started(true));
        feed(&package, &frags[3..]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let video = h.recordings.stop(id).await.unwrap().expect("a video");
        assert_eq!(videos(&h, id).len(), 1);
        assert_eq!(video.state.status, VideoStatus::Ready, "{:?}", video.state);
        // stop_recording records the segment in progress too: everything pushed.
        let expected: Duration = frags.iter().map(|f| f.1).sum();
        assert_eq!(video.state.duration_ms, expected.as_millis() as u64);
        assert!(video.settings.name.starts_with("Stream Record: cam, "));
        assert_eq!(h.recordings.recording_duration(id), None);
        assert!(
            h.recordings.stop(id).await.unwrap().is_none(),
            "nothing recording"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn start_needs_a_live_stream_and_a_long_absence_ends_the_video() {
        let (init, frags) = fragments::tests::cmaf(6);
        let h = harness(Duration::from_millis(300));
        let id = stream(&h, false);
        assert!(matches!(
            h.recordings.start(id).await,
            Err(RecordError::NotLive(_))
        ));
        let package = live_package(init);
        go_live(&h, id, &package);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(videos(&h, id).is_empty(), "no auto_record");
        h.recordings.start(id).await.unwrap();
        feed(&package, &frags);
        h.events.emit(Event::InputsGone { stream_id: id });
        let ready = until(|| {
            videos(&h, id)
                .into_iter()
                .find(|v| v.state.status == VideoStatus::Ready)
        })
        .await;
        assert!(ready.state.duration_ms > 0);
    }

    /// Stops `id`'s recording: one ready video holding every one of `frags`, no more.
    async fn stop_holding_all(h: &Harness, id: i64, frags: &[(Vec<Bytes>, Duration)]) {
        let video = h.recordings.stop(id).await.unwrap().expect("a video");
        assert_eq!(video.state.status, VideoStatus::Ready, "{:?}", video.state);
        let expected: Duration = frags.iter().map(|f| f.1).sum();
        assert_eq!(video.state.duration_ms, expected.as_millis() as u64);
        let (summary, _) = fragments::read_index(&h.recordings.dir(video.id)).unwrap();
        assert_eq!(summary.tracks["720p"].fragments.len(), frags.len());
    }

    /// The end loss: when the inputs leave, the package closes its open segment
    /// (`mark_discontinuity`). That segment is complete, so a later stop's flush of the one in
    /// progress does not take it: unless the package hands it over, the video ends a segment
    /// short (28 s of a 30 s stream).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_segment_open_when_the_inputs_leave_ends_the_video() {
        let (init, frags) = fragments::tests::cmaf(8);
        let h = harness(Duration::from_secs(5));
        let id = stream(&h, false);
        let package = live_package(init);
        go_live(&h, id, &package);
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.recordings.start(id).await.unwrap();
        feed(&package, &frags);
        // As the stream's owner does when its inputs leave (`live::stream`): the package first,
        // then the event.
        package.mark_discontinuity();
        h.events.emit(Event::InputsGone { stream_id: id });
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop_holding_all(&h, id, &frags).await;
    }

    /// The start loss: `auto_record` opens the video (database writes) after the
    /// stream went live, and the package completes segments meanwhile. The recording starts
    /// with the session: those are in the video too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn auto_record_holds_the_segments_completed_before_it_started() {
        let (init, frags) = fragments::tests::cmaf(8);
        let h = harness(Duration::from_secs(5));
        let id = stream(&h, true);
        let package = live_package(init);
        // Two segments complete and a third open before the recorder could observe anything.
        feed(&package, &frags[..3]);
        go_live(&h, id, &package);
        until(|| h.recordings.recording_duration(id)).await;
        feed(&package, &frags[3..]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop_holding_all(&h, id, &frags).await;
    }

    /// A recording longer than `record_max_secs` continues as a new video: the two hold every
    /// segment once — the one in progress at the split goes to the second, none is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_recording_splits_into_videos_that_together_hold_everything() {
        let (init, frags) = fragments::tests::cmaf(16);
        let h = harness_full(Duration::from_secs(5), None, Duration::from_millis(1500));
        let id = stream(&h, true);
        let package = live_package(init);
        go_live(&h, id, &package);
        until(|| h.recordings.recording_duration(id)).await;
        feed(&package, &frags[..3]);
        until(|| (videos(&h, id).len() == 2).then_some(())).await;
        feed(&package, &frags[3..]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        h.recordings.stop(id).await.unwrap().expect("a video");
        let mut all = videos(&h, id);
        all.sort_by_key(|v| v.id);
        for v in &all {
            assert_eq!(v.state.status, VideoStatus::Ready, "{:?}", v.state);
        }
        let ms = |frags: &[(Vec<Bytes>, Duration)]| {
            frags.iter().map(|f| f.1).sum::<Duration>().as_millis() as u64
        };
        // The third fragment was in progress at the split: it starts the second video. (A slow
        // machine may split the rest once more — 1.5 s of wall clock — which loses nothing.)
        assert_eq!(all[0].state.duration_ms, ms(&frags[..2]));
        let rest: u64 = all[1..].iter().map(|v| v.state.duration_ms).sum();
        assert_eq!(rest, ms(&frags[2..]), "{all:?}");
    }

    /// A recording that reaches `recordings_max_bytes` closes as a ready video with what fits
    /// (the reason noted); another is refused with `NoSpace` until a video is deleted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_quota_closes_a_running_recording_and_refuses_the_next() {
        let (init, frags) = fragments::tests::cmaf(16);
        let size = |f: &(Vec<Bytes>, Duration)| f.0.iter().map(|c| c.len() as u64).sum::<u64>();
        // Room for the init and three fragments, not four.
        let quota =
            init.len() as u64 + frags[..3].iter().map(size).sum::<u64>() + size(&frags[3]) / 2;
        let h = harness_with(Duration::from_secs(5), Some(quota));
        let id = stream(&h, false);
        let package = live_package(init);
        go_live(&h, id, &package);
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.recordings.start(id).await.unwrap();
        feed(&package, &frags);
        let ready = until(|| {
            videos(&h, id)
                .into_iter()
                .find(|v| v.state.status == VideoStatus::Ready)
        })
        .await;
        let expected: Duration = frags[..3].iter().map(|f| f.1).sum();
        assert_eq!(ready.state.duration_ms, expected.as_millis() as u64);
        let note = ready.state.error.clone().unwrap_or_default();
        assert!(note.contains("recordings_max_bytes"), "{note}");
        until(|| h.recordings.recording_duration(id).is_none().then_some(())).await;
        // The stream is still live: a new recording is refused for space, not liveness.
        assert!(matches!(
            h.recordings.start(id).await,
            Err(RecordError::NoSpace(NoSpace::Quota { .. }))
        ));
        h.recordings.remove_files(ready.id).unwrap();
        h.recordings.start(id).await.unwrap();
    }

    /// A daemon killed mid-recording: the video row is pending, the files end in half a
    /// fragment. At the next start it becomes ready with every complete fragment, and plays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_interrupted_recording_is_finalised_at_the_next_start() {
        use std::io::Write as _;
        let (init, frags) = fragments::tests::cmaf(8);
        let h = harness(Duration::from_secs(5));
        let id = stream(&h, false);
        let now = OffsetDateTime::now_utc();
        let pending = VideoState::pending(RecordType::Transcoded);
        let settings = VideoSettings {
            name: "Stream Record: cam".into(),
            ..VideoSettings::default()
        };
        let video = h
            .store
            .create_video(id, "s", &settings, &pending, now, now)
            .unwrap();
        let dir = h.recordings.config.root.join(video.id.to_string());
        let mut w = fragments::Writer::create(&dir).unwrap();
        w.init("720p", &init).unwrap();
        for (chunks, d) in &frags[..3] {
            w.fragment("720p", chunks, *d, now, false).unwrap();
        }
        drop(w);
        let media = fragments::media_path(&dir, "720p");
        let torn = frags[3].0.concat();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&media)
            .unwrap()
            .write_all(&torn[..torn.len() / 3])
            .unwrap();
        assert_eq!(h.recordings.recover_pending().unwrap(), 1);
        let ready = h.store.get_video(video.id).unwrap().unwrap();
        assert_eq!(ready.state.status, VideoStatus::Ready, "{:?}", ready.state);
        let expected: Duration = frags[..3].iter().map(|f| f.1).sum();
        assert_eq!(ready.state.duration_ms, expected.as_millis() as u64);
        assert!(ready.settings.name.starts_with("Stream Record: cam, "));
        let secs = fragments::tests::probed_secs(&media);
        assert!((secs - expected.as_secs_f64()).abs() < 0.1, "{secs}");
        assert_eq!(
            h.recordings.recover_pending().unwrap(),
            0,
            "nothing left pending"
        );
    }

    /// Nodes sharing a store: a pending video another node records is not this node's to
    /// finalise (its files are on the other node's disk); its own, and one from before nodes
    /// were named, are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_this_nodes_interrupted_recordings_are_recovered() {
        let h = harness(Duration::from_secs(5));
        let id = stream(&h, false);
        let now = OffsetDateTime::now_utc();
        let create = |node: Option<&str>| {
            let state = VideoState {
                node: node.map(str::to_owned),
                ..VideoState::pending(RecordType::Transcoded)
            };
            h.store
                .create_video(id, &slug(), &VideoSettings::default(), &state, now, now)
                .unwrap()
                .id
        };
        let (other, own, unnamed) = (create(Some("node-b")), create(Some("node-a")), create(None));
        assert_eq!(h.recordings.recover_pending().unwrap(), 2);
        let state = |v| h.store.get_video(v).unwrap().unwrap().state;
        assert_eq!(
            state(other).status,
            VideoStatus::Pending,
            "node-b's, left alone"
        );
        assert_eq!(state(other).node.as_deref(), Some("node-b"));
        // No files here: recovered as errors, but recovered.
        assert_eq!(state(own).status, VideoStatus::Error);
        assert_eq!(
            state(own).node.as_deref(),
            Some("node-a"),
            "the node is kept"
        );
        assert_eq!(state(unnamed).status, VideoStatus::Error);
    }

    /// `video_retention_days`: a finished video created before the retention goes (record
    /// and files), a newer one and one still recording stay, another node's local one is
    /// that node's to delete.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn videos_past_their_retention_are_deleted() {
        let h = harness(Duration::from_secs(5));
        let id = stream(&h, false);
        let now = OffsetDateTime::now_utc();
        let create = |age_days: i64, status: VideoStatus, node: &str| {
            let state = VideoState {
                status,
                node: Some(node.to_owned()),
                ..VideoState::pending(RecordType::Transcoded)
            };
            let at = now - time::Duration::days(age_days);
            let v = h
                .store
                .create_video(id, &slug(), &VideoSettings::default(), &state, at, at)
                .unwrap();
            std::fs::create_dir_all(h.recordings.dir(v.id)).unwrap();
            v.id
        };
        let old = create(10, VideoStatus::Ready, "node-a");
        let new = create(1, VideoStatus::Ready, "node-a");
        let recording = create(10, VideoStatus::Pending, "node-a");
        let elsewhere = create(10, VideoStatus::Ready, "node-b");
        let keep = Duration::from_secs(7 * 86_400);
        assert_eq!(h.recordings.expire(keep, "node-a").await, 1);
        let exists = |v| h.store.get_video(v).unwrap().is_some();
        assert!(!exists(old) && !h.recordings.dir(old).exists());
        assert!(exists(new) && exists(recording) && exists(elsewhere));
    }
}
