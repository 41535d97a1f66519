//! The live media hub: per stream, a fan-out of its media to every reader that subscribes —
//! the source's frames as the input switch forwards them ([`Feed::Source`]: the pipeline, an
//! origin restream) and each rung's encoded output ([`Feed::Video`], [`Feed::Audio`]: the
//! package, which muxes each into its CMAF rendition, real-time readers, rung restreams).
//!
//! Each reader has its own bounded queue. Publishing never waits: a reader whose queue is full
//! loses that message, which is counted on the reader (and reported to its owner's counter if it
//! gave one), and never delays the publisher or the other readers. Readers attach and detach
//! while live (dropping a [`Reader`] detaches it); a new reader first gets the feed's current
//! track declaration and codec configs, so it can start decoding at the next keyframe.
//! [`Hub::wanted`] tells a producer whether a feed has a reader, so a branch only some readers
//! need runs only while one is attached. A reader that must start now (a real-time viewer
//! joining mid-GOP, a lost picture) asks the feed's encoder for a keyframe through
//! [`Hub::request_keyframe`], rate-limited per feed because every other reader of that rung
//! gets the extra keyframe too. A reader that cuts the feed on a schedule (the package's muxer,
//! at each fragment start) asks for a keyframe at a given media time instead
//! ([`Hub::request_keyframe_at`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::media::MediaMessage;

/// Which media of a stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Feed {
    /// The source as received, after the main/backup switch (configs, frames,
    /// discontinuities).
    Source,
    /// A video rung's encoded output (H.264, length-prefixed NAL units, its avcC as config),
    /// by rung name.
    Video(String),
    /// The encoded audio every rung carries (AAC).
    Audio,
    /// The stream's audio as Opus 48 kHz (what WebRTC readers take), encoded only while this
    /// feed has a reader.
    Opus,
}

/// SRT readers' hub readers are named this, then their peer (`/metrics` counts them).
pub const SRT_READER: &str = "srt read";

/// Keyframe requests to one feed's encoder are forwarded at most this often: each one costs
/// every output of the rung a keyframe's bits (an IDR is several P-frames' size).
pub const KEYFRAME_REQUEST_INTERVAL: Duration = Duration::from_millis(500);

/// Asks a feed's encoder for a keyframe (installed by the producer): at the first frame whose
/// presentation time is at or after the given one (nanoseconds, the feed's frame timestamps),
/// or, with `None`, at the next frame.
pub type KeyframeRequest = Arc<dyn Fn(Option<u64>) + Send + Sync>;

/// Called with each message a reader loses (its owner's own counter, e.g. the stream's
/// `frames_dropped` for the pipeline).
pub type OnDrop = Box<dyn Fn(&MediaMessage) + Send + Sync>;

/// How a reader subscribes.
pub struct ReaderOptions {
    /// Named in logs and metrics (`pipeline`, `whep`, `restream 3`).
    pub name: String,
    /// Messages queued for this reader; while it is full, new ones are lost to it (what it holds
    /// is kept: it reads on across one gap).
    pub capacity: usize,
    pub on_drop: Option<OnDrop>,
}

impl ReaderOptions {
    pub fn new(name: impl Into<String>, capacity: usize) -> ReaderOptions {
        ReaderOptions {
            name: name.into(),
            capacity,
            on_drop: None,
        }
    }

    pub fn on_drop(mut self, f: impl Fn(&MediaMessage) + Send + Sync + 'static) -> Self {
        self.on_drop = Some(Box::new(f));
        self
    }
}

struct Slot {
    id: u64,
    name: String,
    tx: mpsc::Sender<MediaMessage>,
    dropped: Arc<AtomicU64>,
    on_drop: Option<OnDrop>,
}

#[derive(Default)]
struct FeedState {
    readers: Vec<Slot>,
    /// What a new reader is given first: the latest track declaration and codec configs.
    header: Header,
    keyframe: Option<KeyframeRequest>,
    last_keyframe_request: Option<Instant>,
}

#[derive(Default, Clone)]
struct Header {
    tracks: Option<MediaMessage>,
    video: Option<MediaMessage>,
    audio: Option<MediaMessage>,
}

impl Header {
    fn note(&mut self, msg: &MediaMessage) {
        match msg {
            MediaMessage::Tracks(_) => self.tracks = Some(msg.clone()),
            MediaMessage::VideoConfig(_) => self.video = Some(msg.clone()),
            MediaMessage::AudioConfig(_) => self.audio = Some(msg.clone()),
            _ => {}
        }
    }

    fn messages(&self) -> impl Iterator<Item = &MediaMessage> {
        [&self.tracks, &self.video, &self.audio]
            .into_iter()
            .flatten()
    }
}

/// One stream's hub. Cheap to share (`Arc`); lives as long as the stream's outputs, so readers
/// can stay attached across a reconnect within the grace period.
#[derive(Default)]
pub struct Hub {
    feeds: Mutex<HashMap<Feed, FeedState>>,
    next_id: AtomicU64,
    /// Messages lost to full reader queues, every reader ever (the metrics' counter).
    dropped: AtomicU64,
}

/// What one publish did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub delivered: usize,
    pub dropped: usize,
}

/// A reader's place in the hub and each reader's losses, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderStats {
    pub feed: Feed,
    pub name: String,
    pub dropped: u64,
}

impl Hub {
    pub fn new() -> Arc<Hub> {
        Arc::new(Hub::default())
    }

    fn feeds(&self) -> MutexGuard<'_, HashMap<Feed, FeedState>> {
        self.feeds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether anyone reads `feed` now: producers skip building messages nobody gets.
    pub fn wanted(&self, feed: &Feed) -> bool {
        self.feeds()
            .get(feed)
            .is_some_and(|f| !f.readers.is_empty())
    }

    /// Sends `msg` to every reader of `feed` without waiting; a full queue loses it for that
    /// reader only. Configs are kept for readers that attach later.
    pub fn publish(&self, feed: &Feed, msg: MediaMessage) -> Published {
        let mut feeds = self.feeds();
        let state = match feeds.get_mut(feed) {
            Some(s) => s,
            None => feeds.entry(feed.clone()).or_default(),
        };
        state.header.note(&msg);
        let mut out = Published::default();
        state.readers.retain(|r| match r.tx.try_send(msg.clone()) {
            Ok(()) => {
                out.delivered += 1;
                true
            }
            Err(mpsc::error::TrySendError::Full(lost)) => {
                out.dropped += 1;
                self.dropped.fetch_add(1, Ordering::Relaxed);
                r.dropped.fetch_add(1, Ordering::Relaxed);
                if let Some(f) = &r.on_drop {
                    f(&lost);
                }
                true
            }
            // The reader was dropped: detached.
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
        out
    }

    /// Attaches a reader to `feed`; it gets the feed's current header first, then everything
    /// published from now on.
    pub fn subscribe(self: &Arc<Self>, feed: Feed, options: ReaderOptions) -> Reader {
        let (tx, rx) = mpsc::channel(options.capacity.max(4));
        let dropped = Arc::new(AtomicU64::new(0));
        let mut feeds = self.feeds();
        let state = feeds.entry(feed.clone()).or_default();
        for msg in state.header.messages() {
            // A fresh queue of at least 4 holds the (at most 3) header messages.
            let _ = tx.try_send(msg.clone());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        state.readers.push(Slot {
            id,
            name: options.name,
            tx,
            dropped: dropped.clone(),
            on_drop: options.on_drop,
        });
        Reader {
            rx,
            dropped,
            closer: Closer {
                hub: Arc::downgrade(self),
                feed,
                id,
            },
        }
    }

    /// The feed's producer is done (the session's inputs are gone, the pipeline stopped): its
    /// readers get the end of their stream, and its header is forgotten (the next session
    /// declares its own).
    pub fn end(&self, feed: &Feed) {
        let mut feeds = self.feeds();
        if let Some(state) = feeds.get_mut(feed) {
            state.readers.clear();
            state.header = Header::default();
        }
    }

    /// Every feed ends (the stream's session is over).
    pub fn end_all(&self) {
        for state in self.feeds().values_mut() {
            state.readers.clear();
            state.header = Header::default();
            state.keyframe = None;
        }
    }

    /// The producer of `feed` can make a keyframe on request (a rebuilt pipeline installs its
    /// own).
    pub fn on_keyframe_request(&self, feed: &Feed, request: KeyframeRequest) {
        self.feeds().entry(feed.clone()).or_default().keyframe = Some(request);
    }

    /// Asks `feed`'s encoder for a keyframe; whether the request went to it (not when one went
    /// within [`KEYFRAME_REQUEST_INTERVAL`], or the feed cannot make one: wait for the next).
    pub fn request_keyframe(&self, feed: &Feed) -> bool {
        let now = Instant::now();
        let mut feeds = self.feeds();
        let Some(state) = feeds.get_mut(feed) else {
            return false;
        };
        let recent = state
            .last_keyframe_request
            .is_some_and(|t| now.duration_since(t) < KEYFRAME_REQUEST_INTERVAL);
        let request = match &state.keyframe {
            Some(request) if !recent => request.clone(),
            _ => return false,
        };
        state.last_keyframe_request = Some(now);
        // Called without the hub's lock: the encoder's side may publish meanwhile.
        drop(feeds);
        request(None);
        true
    }

    /// Asks `feed`'s encoder for a keyframe at media time `pts` (ns): the fragment starts of a
    /// reader that cuts the feed on its own grid. Not rate-limited: one per fragment is the
    /// grid's own cost, which the encoder's GOP already pays. Whether the feed can make one.
    pub fn request_keyframe_at(&self, feed: &Feed, pts: u64) -> bool {
        let request = match self.feeds().get(feed).and_then(|s| s.keyframe.clone()) {
            Some(request) => request,
            None => return false,
        };
        request(Some(pts));
        true
    }

    /// [`Hub::video_rungs`] once the rungs are settled: at least one, and every rung the
    /// pipeline built (a video feed whose encoder takes keyframe requests) has declared its
    /// config. A reader choosing a rung by size must not pick from half a ladder: at go-live
    /// the rungs' first outputs come frames apart, the largest last, so the default (≤ 720p)
    /// would be the 480p. Waits at most `wait`; then what there is.
    pub async fn settled_video_rungs(&self, wait: Duration) -> Vec<RungInfo> {
        let until = tokio::time::Instant::now() + wait;
        loop {
            let pending = self.feeds().iter().any(|(feed, s)| {
                matches!(feed, Feed::Video(_)) && s.keyframe.is_some() && s.header.video.is_none()
            });
            let rungs = self.video_rungs();
            if (!rungs.is_empty() && !pending) || tokio::time::Instant::now() >= until {
                return rungs;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Readers attached now, over every feed.
    pub fn readers(&self) -> usize {
        self.feeds().values().map(|s| s.readers.len()).sum()
    }

    /// Connections among the readers attached now whose names start with `prefix` (one
    /// connection may read several feeds under one name, e.g. [`SRT_READER`] + its peer).
    pub fn readers_named(&self, prefix: &str) -> usize {
        let feeds = self.feeds();
        let names: std::collections::HashSet<&str> = feeds
            .values()
            .flat_map(|s| s.readers.iter().map(|r| r.name.as_str()))
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.len()
    }

    /// Messages lost to full reader queues since the hub was made.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Every attached reader with what it lost.
    pub fn stats(&self) -> Vec<ReaderStats> {
        self.feeds()
            .iter()
            .flat_map(|(feed, s)| {
                s.readers.iter().map(|r| ReaderStats {
                    feed: feed.clone(),
                    name: r.name.clone(),
                    dropped: r.dropped.load(Ordering::Relaxed),
                })
            })
            .collect()
    }

    /// The video configuration `feed` declares now (its encoder's last), if any.
    pub fn video_config(&self, feed: &Feed) -> Option<crate::media::VideoConfig> {
        match &self.feeds().get(feed)?.header.video {
            Some(MediaMessage::VideoConfig(c)) => Some(c.clone()),
            _ => None,
        }
    }

    /// The video rungs the stream carries now (those whose encoder declared its config),
    /// highest first.
    pub fn video_rungs(&self) -> Vec<RungInfo> {
        let mut rungs: Vec<RungInfo> = self
            .feeds()
            .iter()
            .filter_map(|(feed, s)| match (feed, &s.header.video) {
                (Feed::Video(name), Some(MediaMessage::VideoConfig(c))) => Some(RungInfo {
                    name: name.clone(),
                    width: c.width,
                    height: c.height,
                }),
                _ => None,
            })
            .collect();
        rungs.sort_by(|a, b| b.height.cmp(&a.height).then(a.name.cmp(&b.name)));
        rungs
    }

    fn detach(&self, feed: &Feed, id: u64) {
        if let Some(state) = self.feeds().get_mut(feed) {
            state.readers.retain(|r| r.id != id);
        }
    }
}

/// The name every WHEP viewer's readers start with (`whep {session}`): viewer counts (the
/// record, `/metrics`) count them ([`Hub::readers_named`]).
pub const WHEP_READER: &str = "whep";

/// A video rung as a reader chooses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RungInfo {
    pub name: String,
    pub width: u32,
    pub height: u32,
}

/// Real-time readers' default picture: the highest rung at most this tall (720p is what a
/// phone or a laptop window shows; a 1080p rung costs every viewer half again the bits).
pub const DEFAULT_RUNG_MAX_HEIGHT: u32 = 720;

/// The rung a real-time reader gets without asking (`rungs` highest first, as
/// [`Hub::video_rungs`] lists them): the highest at most [`DEFAULT_RUNG_MAX_HEIGHT`] tall, or
/// the lowest when every rung is taller.
pub fn default_rung(rungs: &[RungInfo]) -> Option<&RungInfo> {
    rungs
        .iter()
        .find(|r| r.height <= DEFAULT_RUNG_MAX_HEIGHT)
        .or(rungs.last())
}

/// One reader of one feed. Dropping it detaches it at once.
pub struct Reader {
    rx: mpsc::Receiver<MediaMessage>,
    dropped: Arc<AtomicU64>,
    closer: Closer,
}

/// Ends one reader's feed from elsewhere: it gets what was queued, then the end (`None`). For
/// a reader whose producer knows before the hub that its stream ended (a pipeline's EOS), and
/// to wake a reader blocked in [`Reader::blocking_recv`].
#[derive(Clone)]
pub struct Closer {
    hub: std::sync::Weak<Hub>,
    feed: Feed,
    id: u64,
}

impl Closer {
    pub fn close(&self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.detach(&self.feed, self.id);
        }
    }
}

impl Reader {
    /// The next message; `None` once the feed ended.
    pub async fn recv(&mut self) -> Option<MediaMessage> {
        self.rx.recv().await
    }

    pub fn try_recv(&mut self) -> Option<MediaMessage> {
        self.rx.try_recv().ok()
    }

    /// [`Reader::recv`] for a reader on a thread of its own (never on an async worker: it
    /// blocks, and panics inside a runtime).
    pub fn blocking_recv(&mut self) -> Option<MediaMessage> {
        self.rx.blocking_recv()
    }

    pub fn closer(&self) -> Closer {
        self.closer.clone()
    }

    /// Messages this reader lost because its queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.closer.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::{Frame, TrackKind, Tracks, VideoCodec, VideoConfig};
    use bytes::Bytes;

    fn frame(n: u64) -> MediaMessage {
        MediaMessage::Frame(Frame {
            track: TrackKind::Video,
            dts: n,
            pts: n,
            keyframe: n == 0,
            duration: None,
            data: Bytes::from(vec![n as u8; 8]),
        })
    }

    fn config() -> MediaMessage {
        MediaMessage::VideoConfig(VideoConfig {
            codec: VideoCodec::H264,
            record: Bytes::from_static(&[1, 100, 0, 31]),
            width: 1280,
            height: 720,
        })
    }

    #[test]
    fn rungs_are_listed_by_their_configs_and_the_default_is_the_highest_up_to_720p() {
        let hub = Hub::new();
        let sized = |w, h| {
            MediaMessage::VideoConfig(VideoConfig {
                codec: VideoCodec::H264,
                record: Bytes::from_static(&[1, 100, 0, 31]),
                width: w,
                height: h,
            })
        };
        // A feed with readers but no config yet is not a rung a reader can choose.
        let _early = hub.subscribe(Feed::Video("1080p".into()), ReaderOptions::new("t", 8));
        hub.publish(&Feed::Video("360p".into()), sized(640, 360));
        hub.publish(&Feed::Video("720p".into()), sized(1280, 720));
        hub.publish(&Feed::Audio, frame(1));
        let names = |r: &[RungInfo]| r.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&hub.video_rungs()), ["720p", "360p"]);
        hub.publish(&Feed::Video("1080p".into()), sized(1920, 1080));
        let rungs = hub.video_rungs();
        assert_eq!(names(&rungs), ["1080p", "720p", "360p"]);
        assert_eq!(default_rung(&rungs).unwrap().name, "720p");
        assert_eq!(default_rung(&rungs[..1]).unwrap().name, "1080p");
        assert_eq!(default_rung(&[]), None);
        hub.end(&Feed::Video("720p".into()));
        assert_eq!(names(&hub.video_rungs()), ["1080p", "360p"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_choosing_a_rung_waits_for_the_whole_ladder_to_declare_itself() {
        let hub = Hub::new();
        let sized = |h| {
            MediaMessage::VideoConfig(VideoConfig {
                codec: VideoCodec::H264,
                record: Bytes::from_static(&[1, 100, 0, 31]),
                width: h * 16 / 9,
                height: h,
            })
        };
        for name in ["720p", "480p"] {
            hub.on_keyframe_request(&Feed::Video(name.into()), Arc::new(|_| {}));
        }
        hub.publish(&Feed::Video("480p".into()), sized(480));
        let late = {
            let hub = hub.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                hub.publish(&Feed::Video("720p".into()), sized(720));
            })
        };
        let t0 = tokio::time::Instant::now();
        let rungs = hub.settled_video_rungs(Duration::from_secs(2)).await;
        assert_eq!(default_rung(&rungs).unwrap().name, "720p");
        assert!(t0.elapsed() >= Duration::from_millis(300));
        late.await.unwrap();
        // A rung that never declares itself: what there is, after the wait.
        hub.on_keyframe_request(&Feed::Video("1080p".into()), Arc::new(|_| {}));
        let t0 = tokio::time::Instant::now();
        assert_eq!(
            hub.settled_video_rungs(Duration::from_secs(2)).await.len(),
            2
        );
        assert!(t0.elapsed() >= Duration::from_secs(2));
    }

    #[tokio::test]
    async fn a_slow_reader_loses_and_counts_while_a_fast_one_gets_everything() {
        let hub = Hub::new();
        let lost = Arc::new(AtomicU64::new(0));
        let counted = lost.clone();
        let mut fast = hub.subscribe(Feed::Source, ReaderOptions::new("fast", 100));
        let mut slow = hub.subscribe(
            Feed::Source,
            ReaderOptions::new("slow", 4).on_drop(move |_| {
                counted.fetch_add(1, Ordering::Relaxed);
            }),
        );
        let mut results = Vec::new();
        for n in 0..10 {
            results.push(hub.publish(&Feed::Source, frame(n)));
        }
        assert_eq!(results[0].delivered, 2);
        assert_eq!(
            results[9],
            Published {
                delivered: 1,
                dropped: 1
            }
        );
        for n in 0..10 {
            assert_eq!(fast.recv().await, Some(frame(n)));
        }
        // The slow reader kept the oldest four; the rest are counted, on it and by its owner.
        for n in 0..4 {
            assert_eq!(slow.try_recv(), Some(frame(n)));
        }
        assert_eq!(slow.try_recv(), None);
        assert_eq!(slow.dropped(), 6);
        assert_eq!((hub.readers(), hub.dropped()), (2, 6));
        assert_eq!(lost.load(Ordering::Relaxed), 6);
        let stats = hub.stats();
        assert!(stats.iter().any(|s| s.name == "slow" && s.dropped == 6));
        let _srt = hub.subscribe(Feed::Audio, ReaderOptions::new("srt read 1.2.3.4:5", 4));
        let _srt_video = hub.subscribe(Feed::Source, ReaderOptions::new("srt read 1.2.3.4:5", 4));
        assert_eq!(
            (hub.readers_named(SRT_READER), hub.readers_named("fast")),
            (1, 1)
        );
        assert!(stats.iter().any(|s| s.name == "fast" && s.dropped == 0));
    }

    #[tokio::test]
    async fn a_late_reader_starts_with_the_header_then_what_follows() {
        let hub = Hub::new();
        let feed = Feed::Video("720p".into());
        let tracks = MediaMessage::Tracks(Tracks {
            video: true,
            audio: false,
        });
        hub.publish(&feed, tracks.clone());
        hub.publish(&feed, config());
        hub.publish(&feed, frame(0));
        let mut late = hub.subscribe(feed.clone(), ReaderOptions::new("late", 8));
        hub.publish(&feed, frame(1));
        assert_eq!(late.recv().await, Some(tracks));
        assert_eq!(late.recv().await, Some(config()));
        assert_eq!(late.recv().await, Some(frame(1)));
        // Other feeds are separate.
        hub.publish(&Feed::Audio, frame(2));
        assert_eq!(late.try_recv(), None);
    }

    #[test]
    fn keyframe_requests_reach_the_producer_at_most_once_per_interval() {
        let hub = Hub::new();
        let feed = Feed::Video("720p".into());
        assert!(!hub.request_keyframe(&feed), "nothing can make one yet");
        let asked = Arc::new(AtomicU64::new(0));
        let counted = asked.clone();
        hub.on_keyframe_request(
            &feed,
            Arc::new(move |at| {
                counted.fetch_add(at.unwrap_or(1), Ordering::Relaxed);
            }),
        );
        assert!(hub.request_keyframe(&feed));
        assert!(!hub.request_keyframe(&feed), "within the interval");
        assert_eq!(asked.load(Ordering::Relaxed), 1);
        std::thread::sleep(KEYFRAME_REQUEST_INTERVAL);
        assert!(hub.request_keyframe(&feed));
        assert_eq!(asked.load(Ordering::Relaxed), 2);
        // A keyframe at a media time (a fragment start) is the reader's schedule: not limited.
        assert!(hub.request_keyframe_at(&feed, 40) && hub.request_keyframe_at(&feed, 40));
        assert_eq!(asked.load(Ordering::Relaxed), 82);
        hub.end_all();
        std::thread::sleep(KEYFRAME_REQUEST_INTERVAL);
        assert!(
            !hub.request_keyframe(&feed) && !hub.request_keyframe_at(&feed, 0),
            "the session's encoder is gone"
        );
    }

    #[test]
    fn a_closed_reader_gets_what_was_queued_then_the_end_on_its_own_thread() {
        let hub = Hub::new();
        let mut reader = hub.subscribe(Feed::Audio, ReaderOptions::new("package", 8));
        let closer = reader.closer();
        let thread = std::thread::spawn(move || {
            let mut got = Vec::new();
            while let Some(m) = reader.blocking_recv() {
                got.push(m);
            }
            got
        });
        hub.publish(&Feed::Audio, frame(0));
        hub.publish(&Feed::Audio, frame(1));
        closer.close();
        assert_eq!(thread.join().unwrap(), vec![frame(0), frame(1)]);
        assert!(!hub.wanted(&Feed::Audio), "closed: detached");
    }

    #[tokio::test]
    async fn wanted_follows_readers_attaching_and_detaching_and_the_end_closes_readers() {
        let hub = Hub::new();
        let feed = Feed::Audio;
        assert!(!hub.wanted(&feed));
        let a = hub.subscribe(feed.clone(), ReaderOptions::new("a", 8));
        let mut b = hub.subscribe(feed.clone(), ReaderOptions::new("b", 8));
        assert!(hub.wanted(&feed));
        assert_eq!(hub.readers(), 2);
        drop(a);
        assert_eq!(hub.readers(), 1);
        assert_eq!(hub.publish(&feed, frame(0)).delivered, 1);
        hub.end(&feed);
        assert_eq!(b.recv().await, Some(frame(0)));
        assert_eq!(
            b.recv().await,
            None,
            "the end of the feed closes its readers"
        );
        assert!(!hub.wanted(&feed));
        // The next session's readers start without the previous session's configs.
        hub.publish(&feed, config());
        hub.end(&feed);
        let mut next = hub.subscribe(feed.clone(), ReaderOptions::new("next", 8));
        assert_eq!(next.try_recv(), None);
    }
}
