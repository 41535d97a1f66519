//! One running recording: it observes the stream's package (the rungs and audio exactly as
//! produced for live — no second encode — or the source remux) and appends each complete
//! segment to the recording directory on a writer thread of its own. A recorder that falls
//! behind loses segments (counted, as the package observer does) and never slows live output.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use time::OffsetDateTime;
use tokio::sync::{oneshot, watch};

use super::budget::Budget;

mod write;
use super::fragments::{FragmentsError, Summary, Writer};
use crate::package::state::Segment;
use crate::package::{Output, Package, PackageEvent};
use write::{write_all, Job, Tracks};

/// Segments queued between the observer and the writer thread (a minute of 2 s segments of a
/// four-rung ladder with audio).
const WRITE_QUEUE: usize = 150;
/// Events held by the package for this recorder before it loses them.
const OBSERVE_QUEUE: usize = 64;
/// The longest a stop waits for a source fragment in progress (a long GOP)…
const SOURCE_WAIT: Duration = Duration::from_secs(10);
/// …beyond the longest fragment the track had: the remux's own delay.
const SLACK: Duration = Duration::from_secs(1);
/// The longest a stop while live waits for the encoded renditions behind the furthest one
/// to reach where it was (encoders behind real time on a busy machine)…
const CATCH_UP_WAIT: Duration = Duration::from_secs(15);
/// …looking at their parts this often (the package tells complete segments only).
const CATCH_UP_POLL: Duration = Duration::from_millis(100);

/// How a recording ended.
#[derive(Debug)]
pub struct Finished {
    pub summary: Summary,
    /// Why it stopped writing early (disk full, …); the video is still everything before.
    pub error: Option<FragmentsError>,
    /// Segments lost because the recorder fell behind.
    pub dropped: u64,
    /// Per rendition, the newest segment recorded.
    pub recorded: BTreeMap<String, u64>,
}

/// How a recording stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A split: each rendition's segment in progress goes to the next video.
    Split,
    /// Everything received until now, with each rendition's segment in progress (its parts are
    /// whole CMAF chunks): the inputs are gone, or the recording failed.
    Now,
    /// Stopped by request while the inputs are live: as `Now`, and each source track's
    /// fragment in progress is awaited (the source remux emits whole GOPs; without it the
    /// picture of an origin recording ended up to a GOP before its sound); each
    /// encoded rendition ends within a part of where the furthest one was at the stop.
    Live,
}

/// Where a recording starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// The next segment completed (`start_recording` mid-stream).
    Now,
    /// The start of the stream's current session (`auto_record` on going live): the segments
    /// completed while the video row was being created belong to it.
    SessionStart,
    /// After the segments the previous video ended with, per rendition ([`Finished::recorded`]):
    /// a split's next video holds what completed while its row was being created.
    After(BTreeMap<String, u64>),
}

pub struct Recorder {
    stop: watch::Sender<Option<Stop>>,
    /// Set by the writer thread when it stopped writing (out of space, a write error).
    failed: Arc<AtomicBool>,
    done: oneshot::Receiver<Finished>,
}

impl Recorder {
    /// Starts recording `package`'s `output` — the CMAF renditions (`transcoded`) or the
    /// source remux (`origin`) — into `dir` (created; it must be new), from `since`.
    pub fn start(
        package: &Arc<Package>,
        dir: PathBuf,
        output: Output,
        budget: Arc<Budget>,
        since: Since,
    ) -> Result<Recorder, FragmentsError> {
        let writer = Writer::create(&dir)?;
        // The pipeline feeds its source branch only while someone wants it.
        let demand = (output == Output::Source).then(|| package.demand_source());
        let (observer, backlog) = match since {
            Since::SessionStart => package.observe_since(OBSERVE_QUEUE, output, &BTreeMap::new()),
            Since::After(recorded) => package.observe_since(OBSERVE_QUEUE, output, &recorded),
            Since::Now => (
                package.observe(OBSERVE_QUEUE),
                current_inits(package, output),
            ),
        };
        let (jobs, rx) = std_mpsc::sync_channel::<Job>(WRITE_QUEUE);
        let failed = Arc::new(AtomicBool::new(false));
        let (done_tx, done) = oneshot::channel();
        let thread = std::thread::Builder::new().name("recorder".into()).spawn({
            let failed = failed.clone();
            move || write_all(writer, rx, dir, &budget, &failed)
        });
        let thread = thread.map_err(|source| FragmentsError::Io {
            path: PathBuf::from("recorder thread"),
            source,
        })?;
        let (stop, stop_rx) = watch::channel(None::<Stop>);
        let feed = Feed {
            output,
            jobs,
            dropped: 0,
            tracks: Tracks::default(),
            recorded: BTreeMap::new(),
            ends: Ends::default(),
        };
        let package = package.clone();
        tokio::spawn(async move {
            let Some((summary, error, dropped, recorded)) =
                feed.run(&package, observer, backlog, stop_rx, thread).await
            else {
                return;
            };
            drop(demand);
            let _ = done_tx.send(Finished {
                summary,
                error,
                dropped,
                recorded,
            });
        });
        Ok(Recorder { stop, failed, done })
    }

    /// Whether it stopped writing early; [`Recorder::stop`] says why.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Stops as `how` says, finalises the files and returns what was recorded.
    pub async fn stop(self, how: Stop) -> Option<Finished> {
        self.stop.send_replace(Some(how));
        self.done.await.ok()
    }
}

/// The recorder's task: package events in, the writer thread's jobs out.
struct Feed {
    output: Output,
    jobs: std_mpsc::SyncSender<Job>,
    /// Jobs the writer's queue had no room for.
    dropped: u64,
    tracks: Tracks,
    /// Per rendition, the newest segment recorded.
    recorded: BTreeMap<String, u64>,
    ends: Ends,
}

type Written = (Summary, Option<FragmentsError>);

impl Feed {
    /// Records until stopped, finishes as the stop says, and waits for the writer thread:
    /// (summary, error, segments lost, newest recorded per rendition).
    async fn run(
        mut self,
        package: &Package,
        mut observer: crate::package::Observer,
        backlog: Vec<PackageEvent>,
        mut stop_rx: watch::Receiver<Option<Stop>>,
        thread: std::thread::JoinHandle<Written>,
    ) -> Option<(Summary, Option<FragmentsError>, u64, BTreeMap<String, u64>)> {
        for e in backlog {
            self.handle(e);
        }
        let stop = loop {
            tokio::select! {
                e = observer.recv() => match e {
                    Some(e) => self.handle(e),
                    None => break Stop::Split,
                },
                s = stop_rx.wait_for(Option::is_some) => {
                    break s.ok().and_then(|s| *s).unwrap_or(Stop::Split);
                }
            };
        };
        // What the package completed before the stop is part of the recording.
        while let Some(e) = observer.try_recv() {
            self.handle(e);
        }
        match (stop, self.output) {
            (Stop::Split, _) => {}
            (Stop::Live, Output::Source) => self.source_tail(&mut observer).await,
            (Stop::Live, _) => self.catch_up(package, &mut observer).await,
            (Stop::Now, Output::Source) => {}
            (Stop::Now, _) => self.in_progress(package),
        }
        let Feed {
            jobs,
            mut dropped,
            recorded,
            ..
        } = self;
        // The writer thread ends when the queue's sender is gone.
        drop(jobs);
        dropped += observer.dropped();
        let (summary, error) = tokio::task::spawn_blocking(move || thread.join())
            .await
            .ok()?
            .ok()?;
        Some((summary, error, dropped, recorded))
    }

    fn send(&mut self, job: Job) {
        if self.jobs.try_send(job).is_err() {
            self.dropped += 1;
        }
    }

    fn handle(&mut self, event: PackageEvent) {
        match event {
            PackageEvent::Init {
                output,
                rendition,
                init,
            } if output == self.output => {
                if let (track, true) = self.tracks.open(&rendition, &init) {
                    self.ends.kind(&rendition, &track, &init);
                    self.send(Job::Init { track, init });
                }
            }
            PackageEvent::Segment(s) if s.key.output == self.output => {
                let Some(track) = self.tracks.current(&s.key.rendition) else {
                    return;
                };
                self.recorded.insert(s.key.rendition.clone(), s.key.msn);
                self.ends.fragment(&track, s.pdt + s.duration, s.duration);
                self.send(Job::Fragment {
                    track,
                    chunks: s.chunks,
                    duration: s.duration,
                    pdt: s.pdt,
                    discontinuity: s.discontinuity,
                });
            }
            _ => {}
        }
    }

    /// A stop while live, source remux: each track's fragment in progress (whole GOPs).
    async fn source_tail(&mut self, observer: &mut crate::package::Observer) {
        let at = OffsetDateTime::now_utc();
        // A fragment in progress completes within a fragment's length (a GOP).
        let deadline = tokio::time::Instant::now() + self.ends.longest() + SLACK;
        // Sound that comes while the picture is awaited is held back: only what ends nearest
        // to the picture is kept (a late picture must not leave seconds of sound after it).
        let mut held = std::collections::VecDeque::new();
        while self.ends.pending(at) {
            if !self.ends.picture_short(at) {
                if let Some(e) = held.pop_front() {
                    self.handle(e);
                    continue;
                }
            }
            match tokio::time::timeout_at(deadline, observer.recv()).await {
                Ok(Some(e)) if self.ends.picture_short(at) && self.ends.is_sound(&e) => {
                    held.push_back(e);
                }
                Ok(Some(e)) => self.handle(e),
                _ => break,
            }
        }
    }

    /// A stop while live, encoded renditions: each ends within a part of where the furthest
    /// one was at the stop, with its segment in progress (its parts are whole CMAF chunks).
    /// A ladder's encoders fall behind real time on a busy machine while the sound, cheap to
    /// encode, keeps up: taken as they were at the stop, the picture ended seconds before the
    /// sound and players stalled there. A rendition that is there at the stop is taken as it
    /// is; one behind is awaited and takes its parts up to the first that gets there, nothing
    /// after; one that does not get there within [`CATCH_UP_WAIT`] ends where it is then.
    async fn catch_up(&mut self, package: &Package, observer: &mut crate::package::Observer) {
        // The renditions this recording has (an init): nothing else is waited for.
        let recorded = |feed: &Feed| {
            let mut all = progress(package, feed.output);
            all.retain(|r| feed.tracks.current(&r.name).is_some());
            all
        };
        let furthest = recorded(self)
            .iter()
            .filter_map(|r| r.ends.last().map(|(_, end)| *end))
            .max();
        let Some(furthest) = furthest else { return };
        // Within a part of the furthest is there: renditions' parts end apart (the sound's on
        // whole frames), and a stop at any moment finds them up to a part apart anyway.
        let mark = furthest - package.read(|p| p.config().part);
        let deadline = tokio::time::Instant::now() + CATCH_UP_WAIT;
        let mut done = std::collections::BTreeSet::new();
        let (mut at_stop, mut open) = (true, true);
        loop {
            let now = recorded(self);
            // Each segment complete in that view was offered to the observer before it.
            while let Some(e) = observer.try_recv() {
                self.handle_unless_done(e, &done);
            }
            let waiting = open && tokio::time::Instant::now() < deadline;
            let mut behind = false;
            for r in now {
                if done.contains(&r.name) {
                    continue;
                }
                match self.reach(&r, waiting.then_some(mark), at_stop) {
                    Reach::Behind => behind = true,
                    Reach::Recorded => {
                        done.insert(r.name);
                    }
                    Reach::InProgress(segment) => {
                        self.send_in_progress(&r.name, segment);
                        done.insert(r.name);
                    }
                }
            }
            if !behind {
                return;
            }
            at_stop = false;
            let wake = deadline.min(tokio::time::Instant::now() + CATCH_UP_POLL);
            match tokio::time::timeout_at(wake, observer.recv()).await {
                Ok(Some(e)) => self.handle_unless_done(e, &done),
                // The package is gone: nothing more comes.
                Ok(None) => open = false,
                Err(_) => {}
            }
        }
    }

    fn handle_unless_done(&mut self, e: PackageEvent, done: &std::collections::BTreeSet<String>) {
        let rendition = match &e {
            PackageEvent::Init { rendition, .. } => rendition,
            PackageEvent::Segment(s) => &s.key.rendition,
        };
        if !done.contains(rendition) {
            self.handle(e);
        }
    }

    /// Whether `r` reached `mark`, and with which of its segment in progress: all of it at
    /// the stop (`at_stop`) or with no mark (the wait is over), as it was taken before there
    /// was a mark; later, its parts up to the first that reaches the mark.
    fn reach(&self, r: &Progress, mark: Option<OffsetDateTime>, at_stop: bool) -> Reach {
        let recorded = self.recorded.get(&r.name);
        let open = r
            .open
            .as_ref()
            .filter(|s| recorded.is_none_or(|m| s.msn > *m));
        let as_is = || open.map_or(Reach::Recorded, |s| Reach::InProgress(s.clone()));
        let Some(mark) = mark else { return as_is() };
        let recorded_end = recorded.and_then(|m| r.ends.iter().find(|(n, _)| n == m));
        let recorded_reaches = recorded_end.is_some_and(|(_, end)| *end >= mark);
        // The first of the open segment's parts that reaches the mark.
        let first = open.and_then(|s| {
            let mut end = s.pdt;
            s.parts.iter().position(|p| {
                end += p.duration;
                end >= mark
            })
        });
        match (open, first) {
            _ if at_stop && (recorded_reaches || first.is_some()) => as_is(),
            _ if recorded_reaches => Reach::Recorded,
            (Some(s), Some(first)) => {
                let mut s = s.clone();
                s.parts.truncate(first + 1);
                Reach::InProgress(s)
            }
            _ => Reach::Behind,
        }
    }

    fn send_in_progress(&mut self, rendition: &str, s: Segment) {
        if let Some(track) = self.tracks.current(rendition) {
            self.send(Job::Fragment {
                track,
                chunks: s.parts.iter().map(|p| p.data.clone()).collect(),
                duration: s.duration(),
                pdt: s.pdt,
                discontinuity: s.discontinuity,
            });
        }
    }

    /// stop_recording: the segment in progress up to now (its parts are whole CMAF chunks)
    /// ends the video, so it holds everything until the request.
    fn in_progress(&mut self, package: &Package) {
        for (rendition, s) in in_progress(package, self.output, &self.recorded) {
            self.send_in_progress(&rendition, s);
        }
    }
}

/// Where each track's recording ends so far: what a stop while live waits on.
#[derive(Default)]
struct Ends {
    /// Tracks, and renditions, whose init declares sound.
    audio: std::collections::BTreeSet<String>,
    /// Per track: where its newest fragment ends, its longest fragment.
    tracks: BTreeMap<String, (OffsetDateTime, Duration)>,
}

impl Ends {
    fn kind(&mut self, rendition: &str, track: &str, init: &[u8]) {
        if super::mp4::describe(init).is_ok_and(|i| i.audio) {
            self.audio.insert(track.to_owned());
            self.audio.insert(rendition.to_owned());
        }
    }

    /// Whether `e` is a fragment of sound.
    fn is_sound(&self, e: &PackageEvent) -> bool {
        matches!(e, PackageEvent::Segment(s) if self.audio.contains(&s.key.rendition))
    }

    /// Whether a picture track ends before `at`.
    fn picture_short(&self, at: OffsetDateTime) -> bool {
        let mut video = self.tracks.iter().filter(|(t, _)| !self.audio.contains(*t));
        video.any(|(_, e)| e.0 < at)
    }

    fn fragment(&mut self, track: &str, end: OffsetDateTime, duration: Duration) {
        let e = self
            .tracks
            .entry(track.to_owned())
            .or_insert((end, duration));
        *e = (end, e.1.max(duration));
    }

    /// How long a fragment in progress may take to complete (capped: a stop is not held long).
    fn longest(&self) -> Duration {
        let longest = self.tracks.values().map(|e| e.1).max();
        longest.unwrap_or(SOURCE_WAIT).min(SOURCE_WAIT)
    }

    /// Whether a track is still short of a stop requested `at`: each picture track until it
    /// covers `at` (its fragment in progress then, a GOP); then each sound track until it ends
    /// nearest to where the picture does — its fragments are cut on their own, by length, so
    /// it ends within half a fragment of the picture rather than up to a whole one before or
    /// after.
    fn pending(&self, at: OffsetDateTime) -> bool {
        if self.picture_short(at) {
            return true;
        }
        let video = self.tracks.iter().filter(|(t, _)| !self.audio.contains(*t));
        let picture_end = video.map(|(_, e)| e.0).max().unwrap_or(at);
        let audio = self.tracks.iter().filter(|(t, _)| self.audio.contains(*t));
        audio.into_iter().any(|(_, e)| e.0 + e.1 / 2 < picture_end)
    }
}

/// Each track's current init, already in the package: a recording started now begins with it.
fn current_inits(package: &Package, output: Output) -> Vec<PackageEvent> {
    let current: Vec<(String, Bytes)> = match output {
        Output::Source => package.current_source_inits(),
        _ => package.read(|p| {
            p.list(output)
                .iter()
                .filter_map(|r| Some((r.name.clone(), r.current_init()?.clone())))
                .collect()
        }),
    };
    let init = |(rendition, init)| PackageEvent::Init {
        output,
        rendition,
        init,
    };
    current.into_iter().map(init).collect()
}

/// One encoded rendition as a stop while live sees it: where each of its segments ends (by
/// number, the newest last) and its segment in progress.
struct Progress {
    name: String,
    ends: Vec<(u64, OffsetDateTime)>,
    open: Option<Segment>,
}

/// Where a rendition is against a stop's mark.
enum Reach {
    Behind,
    /// What is recorded reaches it.
    Recorded,
    /// Its segment in progress reaches it.
    InProgress(Segment),
}

fn progress(package: &Package, output: Output) -> Vec<Progress> {
    package.read(|p| {
        p.list(output)
            .iter()
            .map(|r| Progress {
                name: r.name.clone(),
                ends: (r.segments().iter())
                    .map(|s| (s.msn, s.pdt + s.duration()))
                    .collect(),
                open: (r.segments().back())
                    .filter(|s| !s.complete && !s.parts.is_empty())
                    .cloned(),
            })
            .collect()
    })
}

/// Each rendition's segment in progress, newer than what was recorded, with parts.
fn in_progress(
    package: &Package,
    output: Output,
    recorded: &BTreeMap<String, u64>,
) -> Vec<(String, Segment)> {
    package.read(|p| {
        p.list(output)
            .iter()
            .filter_map(|r| {
                let s = r.segments().back()?;
                let newer = recorded.get(&r.name).is_none_or(|m| s.msn > *m);
                (!s.complete && newer && !s.parts.is_empty()).then(|| (r.name.clone(), s.clone()))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fragments;

    /// A stop while live at t = 10.5: the picture (2 s GOPs, ends at 10) waits for its GOP in
    /// progress; then the sound (2 s fragments) goes on while it ends more than half a
    /// fragment before the picture.
    #[test]
    fn a_stop_while_live_waits_for_the_picture_then_the_nearest_sound() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let s = |secs: f64| t0 + Duration::from_secs_f64(secs);
        let two = Duration::from_secs(2);
        let mut ends = Ends::default();
        ends.audio.insert("source-audio".into());
        ends.fragment("source-video", s(10.0), two);
        ends.fragment("source-audio", s(9.9), two);
        let at = s(10.5);
        assert!(ends.pending(at), "the picture's GOP in progress");
        ends.fragment("source-video", s(12.0), two);
        assert!(ends.pending(at), "the sound ends 2.1 s before the picture");
        ends.fragment("source-audio", s(11.9), two);
        assert!(!ends.pending(at), "0.1 s apart");
        assert_eq!(ends.longest(), two);
        // Sound only: it ends nearest to the stop.
        let mut sound = Ends::default();
        sound.audio.insert("a".into());
        sound.fragment("a", s(9.0), two);
        assert!(sound.pending(at));
        sound.fragment("a", s(11.0), two);
        assert!(!sound.pending(at));
    }
    use crate::package::state::tests::{stereo_audio, video_720p};
    use crate::package::{PackageState, PackagingConfig, PartIn, RenditionSink};

    /// A live package of 720p picture and stereo sound (their inits given) and a recorder of
    /// both into `root/v1` from the session's start: the package, its two sinks, the recorder.
    fn picture_and_sound(
        vinit: Bytes,
        ainit: Bytes,
        root: &std::path::Path,
    ) -> (Arc<Package>, RenditionSink, RenditionSink, Recorder) {
        let package = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(1_000_000), stereo_audio(128_000)],
        )));
        let picture = package.sink(Output::Cmaf, "720p").unwrap();
        let sound = package.sink(Output::Cmaf, "audio").unwrap();
        picture.init(vinit, None);
        sound.init(ainit, None);
        let recorder = Recorder::start(
            &package,
            root.join("v1"),
            Output::Cmaf,
            Arc::new(Budget::new(root.to_owned(), None, 0)),
            Since::SessionStart,
        )
        .unwrap();
        (package, picture, sound, recorder)
    }

    /// Pushes `fragments[range]` to `sink` as a pipeline would (one part per fragment), each
    /// at its time from `t0`.
    fn push_fragments(
        sink: &RenditionSink,
        t0: OffsetDateTime,
        fragments: &[(Vec<Bytes>, Duration)],
        range: std::ops::Range<usize>,
    ) {
        let before: Duration = fragments[..range.start].iter().map(|f| f.1).sum();
        let mut at = t0 + before;
        for (chunks, d) in &fragments[range] {
            sink.part(PartIn {
                starts_segment: true,
                independent: true,
                duration: *d,
                pdt: at,
                data: Bytes::from(chunks.concat()),
            });
            at += *d;
        }
    }

    /// Encoders behind real time: at a stop while live the sound has reached 12 s and the
    /// picture 6 s. The picture is awaited until it reaches where the sound was, and the
    /// sound that comes meanwhile is not taken: the video ends with its sound, not 6 s before.
    /// (Real fragments, one part each.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_while_live_waits_for_the_renditions_behind_to_where_the_furthest_was() {
        let (vinit, video) = fragments::tests::cmaf(12);
        let (ainit, audio) = fragments::tests::cmaf_audio(16);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("v1");
        let (_package, picture, sound, recorder) = picture_and_sound(vinit, ainit, tmp.path());
        let t0 = OffsetDateTime::now_utc();
        // Six fragments of sound (the sixth in progress), three of picture.
        push_fragments(&sound, t0, &audio, 0..6);
        push_fragments(&picture, t0, &video, 0..3);
        let stop = tokio::spawn(recorder.stop(Stop::Live));
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The picture catches up; the sound goes on.
        push_fragments(&sound, t0, &audio, 6..8);
        for n in 3..6 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            push_fragments(&picture, t0, &video, n..n + 1);
        }
        let finished = stop.await.unwrap().unwrap();
        assert!(finished.error.is_none(), "{:?}", finished.error);
        let length = |track: &str| finished.summary.tracks[track].duration();
        let sound_end: Duration = audio[..6].iter().map(|f| f.1).sum();
        assert_eq!(
            length("audio"),
            sound_end,
            "the sound as it was at the stop"
        );
        // The picture up to its first fragment that reaches there.
        let picture_end: Duration = video[..6].iter().map(|f| f.1).sum();
        assert!(video[..5].iter().map(|f| f.1).sum::<Duration>() < sound_end);
        assert_eq!(length("720p"), picture_end);
        let probed = fragments::tests::probed_secs(&fragments::media_path(&dir, "720p"));
        assert!((probed - picture_end.as_secs_f64()).abs() < 0.1, "{probed}");
    }

    /// A rendition that catches up in a burst (parts of half a second, four to a segment)
    /// ends at its first part within a part of where the furthest was, not at the last part
    /// it has by then; the furthest ends as it was.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rendition_caught_up_in_a_burst_ends_at_its_first_part_past_the_mark() {
        let (vinit, _) = fragments::tests::cmaf(1);
        let (ainit, _) = fragments::tests::cmaf_audio(1);
        let tmp = tempfile::tempdir().unwrap();
        let (_package, picture, sound, recorder) = picture_and_sound(vinit, ainit, tmp.path());
        let t0 = OffsetDateTime::now_utc();
        // Parts `from..to` of `length` each, a segment every four.
        let parts = |sink: &RenditionSink, length: Duration, from: u32, to: u32| {
            for n in from..to {
                sink.part(PartIn {
                    starts_segment: n % 4 == 0,
                    independent: n % 4 == 0,
                    duration: length,
                    pdt: t0 + length * n,
                    data: Bytes::from(vec![n as u8; 64]),
                });
            }
        };
        let (half, sound_part) = (Duration::from_millis(500), Duration::from_millis(750));
        // The sound at 9 s, the picture at 6 s.
        parts(&sound, sound_part, 0, 12);
        parts(&picture, half, 0, 12);
        let stop = tokio::spawn(recorder.stop(Stop::Live));
        tokio::time::sleep(Duration::from_millis(300)).await;
        parts(&sound, sound_part, 12, 16);
        parts(&picture, half, 12, 19);
        let finished = stop.await.unwrap().unwrap();
        let length = |track: &str| finished.summary.tracks[track].duration();
        assert_eq!(length("audio"), sound_part * 12);
        assert_eq!(
            length("720p"),
            half * 17,
            "8.5 s (9 s less a part), not 9.5 s"
        );
    }

    /// Feeds real cmafmux fragments to a package as a pipeline would (one part per fragment):
    /// the recorder started in the middle records from its next fragment, with the init the
    /// package already had; stopped, its file holds exactly those fragments and plays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recording_started_mid_stream_holds_the_segments_after_its_start() {
        let (init, fragments) = fragments::tests::cmaf(12);
        let package = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(1_000_000)],
        )));
        let sink = package.sink(Output::Cmaf, "720p").unwrap();
        sink.init(init, None);
        let t0 = OffsetDateTime::now_utc();
        let mut at = Duration::ZERO;
        let mut push = |(chunks, d): &(Vec<Bytes>, Duration)| {
            sink.part(PartIn {
                starts_segment: true,
                independent: true,
                duration: *d,
                pdt: t0 + at,
                data: Bytes::from(chunks.concat()),
            });
            at += *d;
        };
        // Two fragments before the recording starts; the third completes the second.
        push(&fragments[0]);
        push(&fragments[1]);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("v1");
        let recorder = Recorder::start(
            &package,
            dir.clone(),
            Output::Cmaf,
            Arc::new(Budget::new(tmp.path().to_owned(), None, 0)),
            Since::Now,
        )
        .unwrap();
        for f in &fragments[2..] {
            push(f);
        }
        // The last pushed fragment is still open in the package (no next one closed it).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let finished = recorder.stop(Stop::Split).await.unwrap();
        assert!(finished.error.is_none(), "{:?}", finished.error);
        assert_eq!(finished.dropped, 0);
        let track = &finished.summary.tracks["720p"];
        // Completed while recording: fragments 1 ..= len-2.
        let expected: Duration = fragments[1..fragments.len() - 1].iter().map(|f| f.1).sum();
        assert_eq!(track.fragments.len(), fragments.len() - 2);
        assert_eq!(finished.summary.duration(), expected);
        let secs = fragments::tests::probed_secs(&fragments::media_path(&dir, "720p"));
        assert!(
            (secs - expected.as_secs_f64()).abs() < 0.1,
            "{secs} vs {expected:?}"
        );
    }
}
