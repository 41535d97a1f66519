//! What a live stream reports while it runs: the receiving/transcoding status shown in the
//! record and the monotonic counters behind `/metrics`. Written by the input switch and the
//! pipeline's threads, read by the API and delivery; depends on nothing else in the crate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The receiving/transcoding state of a stream; all off while nothing is received. Serialised
/// into the stream's lease, so the API of every node shows it (fields it lacks default).
///
/// Two owners write it, each only its own part: the input switch the receiving flags
/// ([`LiveStatus::set_receiving`]), the pipeline the rest ([`LiveStatus::set_pipeline_part`]
/// when it is built, then the measures as they change). The registry adds the package's
/// storage error when it hands out a copy.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LiveStatus {
    live: bool,
    backup_live: bool,
    /// How each input's publisher arrives (`rtmp`, `srt`, `whip`, `pull`): the last one that
    /// took the slot, shown only while the slot receives.
    main_protocol: Option<String>,
    backup_protocol: Option<String>,
    transcoded_qualities: Vec<String>,
    /// The quality set's rungs left out because the node was full when the session started.
    shed_qualities: Vec<String>,
    /// x264's preset in use (`veryfast`, or faster after the transcode fell behind).
    transcoding_preset: Option<String>,
    recording_duration: f64,
    transcoding_speed: Option<f64>,
    frame_rate: Option<f64>,
    video_height: Option<u32>,
    video_width: Option<u32>,
    /// The source's codecs as received (`H.264`, `AAC`, …).
    video_codec: Option<String>,
    audio_codec: Option<String>,
    /// The source's video bitrate (kbit/s) and longest keyframe interval (s) over the last
    /// [`HEALTH_PERIOD`].
    video_bitrate: Option<u64>,
    keyframe_interval: Option<f64>,
    /// Frames lost since the stream began here because the transcode fell behind; and the
    /// HLS/DASH players counted by `package::audience`: both added to a copy handed out.
    frames_dropped: u64,
    players: crate::package::audience::Counted,
    /// WHEP viewers and SRT readers of the stream's hub: in the lease, so every node's API
    /// shows the serving node's.
    whep_viewers: usize,
    srt_readers: usize,
    /// Why segments are not being written (disk full, …), since when; `None` when they are.
    storage_error: Option<String>,
    /// What the stream's restreams running here are doing, by restream id: in the lease, so
    /// the API of every node shows the serving node's.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    restreams: std::collections::BTreeMap<i64, RestreamStatus>,
}

/// What one restream is doing on the node serving its stream.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RestreamStatus {
    /// Connected to its target and sending.
    pub live: bool,
    /// When the current connection started (Unix ms).
    pub started_at_ms: Option<i64>,
    pub bytes_sent: u64,
    pub last_error: Option<String>,
    /// Connections lost (or refused) and tried again since the restream started here.
    pub reconnects: u32,
}

/// What a newly built pipeline knows of its stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PipelinePart {
    pub transcoded_qualities: Vec<String>,
    pub shed_qualities: Vec<String>,
    /// x264's preset: faster than the default once the transcode fell behind real time.
    pub transcoding_preset: String,
    pub frame_rate: Option<f64>,
    /// Width and height of the source picture.
    pub video_size: Option<(u32, u32)>,
}

impl LiveStatus {
    /// The main input is receiving.
    pub fn live(&self) -> bool {
        self.live
    }

    /// The backup input is receiving.
    pub fn backup_live(&self) -> bool {
        self.backup_live
    }

    pub fn transcoded_qualities(&self) -> &[String] {
        &self.transcoded_qualities
    }

    pub fn transcoding_preset(&self) -> Option<&str> {
        self.transcoding_preset.as_deref()
    }

    pub fn shed_qualities(&self) -> &[String] {
        &self.shed_qualities
    }

    pub fn recording_duration(&self) -> f64 {
        self.recording_duration
    }

    pub fn transcoding_speed(&self) -> Option<f64> {
        self.transcoding_speed
    }

    pub fn frame_rate(&self) -> Option<f64> {
        self.frame_rate
    }

    pub fn video_width(&self) -> Option<u32> {
        self.video_width
    }

    pub fn video_height(&self) -> Option<u32> {
        self.video_height
    }

    pub fn storage_error(&self) -> Option<&str> {
        self.storage_error.as_deref()
    }

    /// Restream `id`'s state, while it runs on the node serving the stream.
    pub fn restream(&self, id: i64) -> Option<&RestreamStatus> {
        self.restreams.get(&id)
    }

    /// Every restream's state, by restream id.
    pub fn restreams(&self) -> &std::collections::BTreeMap<i64, RestreamStatus> {
        &self.restreams
    }

    /// The input switch's part: which inputs are receiving.
    pub fn set_receiving(&mut self, main: bool, backup: bool) {
        (self.live, self.backup_live) = (main, backup);
    }

    /// A publisher took an input (`backup`: the backup one), arriving by `protocol`.
    pub fn set_protocol(&mut self, backup: bool, protocol: &str) {
        let p = Some(protocol.to_owned());
        match backup {
            false => self.main_protocol = p,
            true => self.backup_protocol = p,
        }
    }

    /// How the receiving inputs arrive (main, backup); `None` for one not receiving.
    pub fn protocols(&self) -> (Option<&str>, Option<&str>) {
        (
            self.main_protocol.as_deref().filter(|_| self.live),
            self.backup_protocol.as_deref().filter(|_| self.backup_live),
        )
    }

    /// The pipeline's part, anew for a new pipeline: what the previous one measured goes.
    pub fn set_pipeline_part(&mut self, part: PipelinePart) {
        *self = LiveStatus {
            live: self.live,
            backup_live: self.backup_live,
            main_protocol: self.main_protocol.take(),
            backup_protocol: self.backup_protocol.take(),
            transcoded_qualities: part.transcoded_qualities,
            shed_qualities: part.shed_qualities,
            transcoding_preset: Some(part.transcoding_preset),
            frame_rate: part.frame_rate,
            video_width: part.video_size.map(|(w, _)| w),
            video_height: part.video_size.map(|(_, h)| h),
            // The input switch's: a new pipeline does not change what is received.
            video_codec: self.video_codec.take(),
            audio_codec: self.audio_codec.take(),
            video_bitrate: self.video_bitrate,
            keyframe_interval: self.keyframe_interval,
            ..LiveStatus::default()
        };
    }

    /// The source frame rate, as the pipeline last measured it.
    pub fn set_frame_rate(&mut self, fps: f64) {
        self.frame_rate = Some(fps);
    }

    /// The source picture's size after a change of parameters.
    pub fn set_video_size(&mut self, width: u32, height: u32) {
        (self.video_width, self.video_height) = (Some(width), Some(height));
    }

    /// Media seconds encoded per wall second.
    pub fn set_transcoding_speed(&mut self, speed: f64) {
        self.transcoding_speed = Some(speed);
    }

    /// The source's codecs, when the input switch sees its configuration.
    pub fn set_codecs(&mut self, video: Option<&str>, audio: Option<&str>) {
        if let Some(v) = video {
            self.video_codec = Some(v.to_owned());
        }
        if let Some(a) = audio {
            self.audio_codec = Some(a.to_owned());
        }
    }

    /// The input switch's last [`HEALTH_PERIOD`] of source video (bitrate in kbit/s,
    /// keyframe interval in s); `None` when nothing was received in it.
    pub fn set_input(&mut self, measured: Option<(f64, f64)>) {
        self.video_bitrate = measured.map(|(kbps, _)| kbps.round() as u64);
        self.keyframe_interval = measured.and_then(|(_, k)| (k > 0.0).then_some(k));
    }

    pub fn video_codec(&self) -> Option<&str> {
        self.video_codec.as_deref()
    }

    pub fn audio_codec(&self) -> Option<&str> {
        self.audio_codec.as_deref()
    }

    pub fn video_bitrate(&self) -> Option<u64> {
        self.video_bitrate
    }

    pub fn keyframe_interval(&self) -> Option<f64> {
        self.keyframe_interval
    }

    pub fn frames_dropped(&self) -> u64 {
        self.frames_dropped
    }

    pub fn players(&self) -> crate::package::audience::Counted {
        self.players
    }

    /// WHEP viewers and SRT readers.
    pub fn realtime_readers(&self) -> (usize, usize) {
        (self.whep_viewers, self.srt_readers)
    }

    /// Viewers of every output together: the players counted, WHEP and SRT readers.
    pub fn viewers_total(&self) -> usize {
        let p = self.players;
        p.hls + p.dash + p.hls_mpegts + self.whep_viewers + self.srt_readers
    }

    /// The counts kept elsewhere (the counters', the package's audience, the hub's real-time
    /// readers: WHEP, SRT), added to a copy handed out.
    pub fn with_counts(
        mut self,
        frames_dropped: u64,
        players: crate::package::audience::Counted,
        (whep, srt): (usize, usize),
    ) -> LiveStatus {
        (self.frames_dropped, self.players) = (frames_dropped, players);
        (self.whep_viewers, self.srt_readers) = (whep, srt);
        self
    }

    /// The package's storage error, added to a copy handed out (the package owns it).
    pub fn with_storage_error(mut self, error: Option<String>) -> LiveStatus {
        self.storage_error = error;
        self
    }

    /// The restreams' states, added to a copy handed out (the restream manager owns them).
    pub fn with_restreams(
        mut self,
        restreams: std::collections::BTreeMap<i64, RestreamStatus>,
    ) -> LiveStatus {
        self.restreams = restreams;
        self
    }
}

/// How often the source's health (video bitrate, keyframe interval) in the record is measured
/// anew: short enough for an operator watching a console, long enough to hold a GOP.
pub const HEALTH_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

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
    /// Source GOPs not transcoded because the transcode was behind real time
    /// ([`crate::pipeline`]'s catch-up).
    pub gops_skipped: AtomicU64,
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
    /// Readers attached to the stream's media hub now.
    pub hub_readers: usize,
    /// Messages the hub's readers lost to full queues.
    pub hub_dropped: u64,
}
