//! The segment store of one stream: per rendition the init segment and a window of CMAF segments
//! made of parts (LL-HLS partial segments = LL-DASH chunks). Sans-IO: parts in, state out; the
//! HLS/DASH renderers and the HTTP layer read it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use time::OffsetDateTime;

pub use super::config::{PackagingConfig, DEFAULT_MPEGTS_IDLE};

#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub data: Bytes,
    pub duration: Duration,
    /// Starts with an IDR frame (EXT-X-PART INDEPENDENT=YES).
    pub independent: bool,
}

#[derive(Debug, Clone)]
pub struct Segment {
    pub msn: u64,
    pub parts: Vec<Part>,
    pub pdt: OffsetDateTime,
    /// Which init segment (`init_{n}.mp4`) its fragments decode with.
    pub init_version: u32,
    /// First segment after a publisher reconnect or source switch.
    pub discontinuity: bool,
    /// The first sequence number of its pipeline epoch: media time restarts at 0 there (a
    /// publisher reconnect); a source switch within an epoch keeps media time going.
    pub epoch_msn: u64,
    pub complete: bool,
    /// Size once written to the data dir; its parts' bytes may then be dropped from memory.
    pub on_disk: Option<usize>,
}

impl Segment {
    pub fn duration(&self) -> Duration {
        self.parts.iter().map(|p| p.duration).sum()
    }

    pub fn bytes(&self) -> usize {
        self.on_disk
            .unwrap_or_else(|| self.parts.iter().map(|p| p.data.len()).sum())
    }

    /// Whether the bytes are still held in memory (recent segments and parts are).
    pub fn in_memory(&self) -> bool {
        self.on_disk.is_none() || self.parts.iter().any(|p| !p.data.is_empty())
    }

    /// (msn, the parts' bytes): what a disk write needs, without concatenating.
    pub fn chunks(&self) -> (u64, Vec<Bytes>) {
        (
            self.msn,
            self.parts.iter().map(|p| p.data.clone()).collect(),
        )
    }

    /// The whole segment from memory: the concatenation of its parts.
    pub fn data(&self) -> Bytes {
        match self.parts.as_slice() {
            [only] => only.data.clone(),
            parts => {
                let mut out = Vec::with_capacity(self.bytes());
                for p in parts {
                    out.extend_from_slice(&p.data);
                }
                Bytes::from(out)
            }
        }
    }
}

/// A segment start this close before a source switch counts as after it: the output frame grid
/// (videorate) may place the switch frame up to one frame earlier.
const DISCONTINUITY_SLACK: Duration = Duration::from_millis(50);

/// Newest segments whose bytes stay in memory after they are on disk: they hold the parts that
/// LL-HLS clients fetch at the live edge.
pub const MEMORY_SEGMENTS: usize = 4;

/// How much a rendition keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Retention {
    /// The live window plus a fetchable tail, by count.
    Segments(usize),
    /// DVR: complete segments covering this much media time.
    Media(Duration),
}

/// What a push changed, for the caller to mirror on disk outside the lock.
#[derive(Debug, Default)]
pub struct PushOutcome {
    /// The completed segment's number and its parts (shared, not copied) to write in order.
    pub completed: Option<(u64, Vec<Bytes>)>,
    pub evicted: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RenditionKind {
    Video {
        width: u32,
        height: u32,
        frame_rate: f64,
    },
    Audio {
        channels: u8,
        sample_rate: u32,
    },
}

/// A part as the pipeline delivers it.
#[derive(Debug, Clone)]
pub struct PartIn {
    /// First part of a new segment (a CMAF fragment start).
    pub starts_segment: bool,
    pub independent: bool,
    pub duration: Duration,
    /// Wall-clock time of the part's first sample (EXT-X-PROGRAM-DATE-TIME).
    pub pdt: OffsetDateTime,
    pub data: Bytes,
}

#[derive(Debug)]
pub struct Rendition {
    /// Path segment in URLs: `1080p`, `audio`.
    pub name: String,
    pub kind: RenditionKind,
    /// RFC 6381 codec string, e.g. `avc1.64001f`, `mp4a.40.2`.
    pub codecs: String,
    /// Configured bitrate in bits/s (a floor for BANDWIDTH before segments exist).
    pub nominal_bitrate: u64,
    /// Init segments by version, newest last; a new one comes with every pipeline epoch whose
    /// encoder headers differ, and older ones stay while segments still refer to them.
    inits: VecDeque<(u32, Bytes)>,
    segments: VecDeque<Segment>,
    next_msn: u64,
    pending_discontinuity: bool,
    /// First sequence number of the current epoch (see [`Segment::epoch_msn`]).
    epoch_msn: u64,
    /// The first segment starting at or after this time carries EXT-X-DISCONTINUITY.
    discontinuity_from: Option<OffsetDateTime>,
    /// Discontinuities among the segments dropped from the store; the renderer adds those among
    /// segments kept but no longer listed (EXT-X-DISCONTINUITY-SEQUENCE).
    discontinuity_sequence: u64,
}

impl Rendition {
    pub fn new(name: &str, kind: RenditionKind, codecs: &str, nominal_bitrate: u64) -> Self {
        Rendition {
            name: name.to_owned(),
            kind,
            codecs: codecs.to_owned(),
            nominal_bitrate,
            inits: VecDeque::new(),
            segments: VecDeque::new(),
            next_msn: 0,
            pending_discontinuity: false,
            epoch_msn: 0,
            discontinuity_from: None,
            discontinuity_sequence: 0,
        }
    }

    /// Installs the init segment for the parts that follow; identical bytes keep the version.
    pub fn set_init(&mut self, init: Bytes) {
        if self.inits.back().is_some_and(|(_, b)| *b == init) {
            return;
        }
        let version = self.inits.back().map_or(0, |(v, _)| v + 1);
        self.inits.push_back((version, init));
        // Keep only versions still referenced by a held segment, plus the newest.
        let oldest_used = self.segments.front().map_or(version, |s| s.init_version);
        while self.inits.len() > 1 && self.inits.front().is_some_and(|(v, _)| *v < oldest_used) {
            self.inits.pop_front();
        }
    }

    pub fn init(&self, version: u32) -> Option<&Bytes> {
        self.inits
            .iter()
            .find(|(v, _)| *v == version)
            .map(|(_, b)| b)
    }

    /// The init segment new fragments decode with.
    pub fn current_init(&self) -> Option<&Bytes> {
        self.inits.back().map(|(_, b)| b)
    }

    pub fn has_init(&self) -> bool {
        !self.inits.is_empty()
    }

    pub(crate) fn current_init_version(&self) -> u32 {
        self.inits.back().map_or(0, |(v, _)| *v)
    }

    pub fn segments(&self) -> &VecDeque<Segment> {
        &self.segments
    }

    pub fn discontinuity_sequence(&self) -> u64 {
        self.discontinuity_sequence
    }

    /// The segment being produced, if its first part exists.
    pub fn open_segment(&self) -> Option<&Segment> {
        self.segments.back().filter(|s| !s.complete)
    }

    /// Segment `msn`, by its number: numbers are increasing but not contiguous. A publisher
    /// leaves mid-segment, so one rendition may have opened a segment that another had not;
    /// the next epoch starts after the highest number any used (`continue_after`), and the
    /// others skip one. Indexing by the offset from the front answered for the skipped number
    /// with its successor, and for the newest with nothing (issue 37: dash.js's `seg_8` 404s).
    pub fn segment(&self, msn: u64) -> Option<&Segment> {
        let i = self.segments.binary_search_by_key(&msn, |s| s.msn).ok()?;
        self.segments.get(i)
    }

    /// (msn, part index) of the newest part, if any.
    pub fn last_part(&self) -> Option<(u64, usize)> {
        self.segments
            .back()
            .map(|s| (s.msn, s.parts.len().saturating_sub(1)))
    }

    /// The newest complete segment's msn.
    pub fn last_complete_msn(&self) -> Option<u64> {
        self.segments
            .iter()
            .rev()
            .find(|s| s.complete)
            .map(|s| s.msn)
    }

    /// Whether part `part` of segment `msn` exists (or can no longer appear because the segment
    /// closed with fewer parts and a later one exists).
    pub fn part_settled(&self, msn: u64, part: usize) -> bool {
        match self.last_part() {
            None => false,
            Some((last_msn, last_idx)) => last_msn > msn || (last_msn == msn && last_idx >= part),
        }
    }

    /// Starts the next segment with EXT-X-DISCONTINUITY (publisher came back, source switched).
    pub fn mark_discontinuity(&mut self) {
        self.pending_discontinuity = true;
        self.close_open_segment();
    }

    /// Between epochs: the publisher left (or the pipeline is being rebuilt) and this
    /// rendition's next segment will open a new epoch; its current epoch has no more segments.
    pub fn awaiting_epoch(&self) -> bool {
        self.pending_discontinuity
    }

    /// Marks the first segment that starts at or after `pdt` (the source changed at that media
    /// time, within one frame): the open segment, already announced to players, is left as is.
    pub fn mark_discontinuity_from(&mut self, pdt: OffsetDateTime) {
        self.discontinuity_from = Some(pdt);
    }

    /// Closes the open segment (end of stream, or before a discontinuity).
    pub fn close_open_segment(&mut self) {
        if let Some(s) = self.segments.back_mut() {
            s.complete = true;
        }
    }

    /// Continues numbering after `msn` (a new epoch must never reuse a sequence number).
    pub fn continue_after(&mut self, msn: u64) {
        self.next_msn = self.next_msn.max(msn + 1);
    }

    pub fn next_msn(&self) -> u64 {
        self.next_msn
    }

    /// Appends a part. Returns the segment it completed (to be written to disk) and the
    /// sequence numbers dropped from the store (their files are to be deleted).
    pub fn push_part(&mut self, part: PartIn, retention: Retention) -> PushOutcome {
        let mut outcome = PushOutcome::default();
        let open = self.segments.back().is_some_and(|s| !s.complete);
        if part.starts_segment || !open {
            if open {
                self.close_open_segment();
                outcome.completed = self.segments.back().map(Segment::chunks);
            }
            let switched = self
                .discontinuity_from
                .take_if(|t| part.pdt + DISCONTINUITY_SLACK >= *t)
                .is_some();
            let new_epoch = std::mem::take(&mut self.pending_discontinuity);
            if new_epoch || self.segments.is_empty() && self.next_msn == 0 {
                self.epoch_msn = self.next_msn;
            }
            let discontinuity = new_epoch || switched;
            let init_version = self.current_init_version();
            self.segments.push_back(Segment {
                msn: self.next_msn,
                parts: Vec::new(),
                pdt: part.pdt,
                init_version,
                discontinuity,
                epoch_msn: self.epoch_msn,
                complete: false,
                on_disk: None,
            });
            self.next_msn += 1;
        }
        let seg = self.segments.back_mut().expect("just ensured");
        seg.parts.push(Part {
            data: part.data,
            duration: part.duration,
            independent: part.independent,
        });
        outcome.evicted = self.evict(retention);
        outcome
    }

    /// Drops segments beyond the retention (never the newest two).
    pub fn evict(&mut self, retention: Retention) -> Vec<u64> {
        let mut evicted = Vec::new();
        loop {
            let too_many = match retention {
                Retention::Segments(n) => self.segments.len() > n.max(2),
                Retention::Media(window) => {
                    // Keep the newest complete segments that fit the window (media time).
                    let held: Duration = self
                        .segments
                        .iter()
                        .filter(|s| s.complete)
                        .map(Segment::duration)
                        .sum();
                    let front = self
                        .segments
                        .front()
                        .map_or(Duration::ZERO, Segment::duration);
                    self.segments.len() > 2 && held.saturating_sub(front) >= window
                }
            };
            if !too_many {
                return evicted;
            }
            evicted.extend(self.drop_oldest());
        }
    }

    fn drop_oldest(&mut self) -> Option<u64> {
        let old = self.segments.pop_front()?;
        if old.discontinuity {
            self.discontinuity_sequence += 1;
        }
        Some(old.msn)
    }

    /// Bounds what a failing disk leaves in memory: the window is cut from the front until at
    /// most `max` complete segments are held in memory only. A playlist cannot skip a hole, so
    /// older segments on disk go with them; the newest two always stay.
    pub fn cap_unwritten(&mut self, max: usize) -> Vec<u64> {
        let mut evicted = Vec::new();
        while self.segments.len() > 2
            && self
                .segments
                .iter()
                .filter(|s| s.complete && s.on_disk.is_none())
                .count()
                > max
        {
            evicted.extend(self.drop_oldest());
        }
        evicted
    }

    /// Empties the window (DVR cleanup): every complete segment goes; the open one stays.
    pub fn clear_complete(&mut self) -> Vec<u64> {
        let mut removed = Vec::new();
        while self.segments.front().is_some_and(|s| s.complete) {
            removed.extend(self.drop_oldest());
        }
        removed
    }

    /// Records that segment `msn` is on disk, and releases the memory of on-disk segments older
    /// than the newest [`MEMORY_SEGMENTS`].
    pub fn mark_on_disk(&mut self, msn: u64, len: usize) {
        if let Some(i) = self.segments.iter().position(|s| s.msn == msn) {
            self.segments[i].on_disk = Some(len);
        }
        let keep_from = self.segments.len().saturating_sub(MEMORY_SEGMENTS);
        for s in self.segments.range_mut(..keep_from) {
            if s.on_disk.is_some() {
                for p in &mut s.parts {
                    p.data = Bytes::new();
                }
            }
        }
    }

    /// Peak bits/s over the complete segments held, or the nominal rate before there are any.
    pub fn peak_bitrate(&self) -> u64 {
        let measured = self
            .segments
            .iter()
            .filter(|s| s.complete && !s.duration().is_zero())
            .map(|s| (s.bytes() as f64 * 8.0 / s.duration().as_secs_f64()) as u64)
            .max()
            .unwrap_or(0);
        measured.max(self.nominal_bitrate)
    }

    pub fn average_bitrate(&self) -> u64 {
        let (bytes, secs) = self
            .segments
            .iter()
            .filter(|s| s.complete)
            .fold((0usize, 0f64), |(b, d), s| {
                (b + s.bytes(), d + s.duration().as_secs_f64())
            });
        if secs > 0.0 {
            (bytes as f64 * 8.0 / secs) as u64
        } else {
            self.nominal_bitrate
        }
    }
}

// Here rather than beside the struct: it reads segments, and the config module stays a leaf.
impl PackagingConfig {
    /// The target duration for a playlist holding `segments`: rfc8216bis §4.4.3.1 "The EXTINF
    /// duration of each Media Segment in a Playlist file, when rounded to the nearest integer,
    /// MUST be less than or equal to the Target Duration".
    pub fn target_duration_for<'a>(&self, segments: impl Iterator<Item = &'a Segment>) -> u64 {
        segments
            .map(|s| s.duration().as_secs_f64().round() as u64)
            .fold(self.target_duration_secs(), u64::max)
    }
}

/// Everything packaged for one stream: its renditions and whether the broadcast ended.
/// Written only through the package's API (under its lock, see `Package::update`); the
/// renderers and every other reader go through the accessors.
#[derive(Debug)]
pub struct PackageState {
    config: PackagingConfig,
    renditions: Vec<Rendition>,
    /// MPEG-TS variants (legacy HLS): one whole-segment "part" per TS segment.
    ts_renditions: Vec<Rendition>,
    /// The broadcast is over: no more parts will come.
    ended: bool,
    /// The record's `hls_mpegts_endlist_tag`: end playlists with EXT-X-ENDLIST once ended.
    endlist_tag: bool,
    /// The latest JPEG screenshot of the source (renewed every 10 s while live).
    screenshot: Option<Bytes>,
    /// DVR rewind window (`dvr_enabled` → `dvr_duration`); `None` is the short live window.
    dvr_window: Option<Duration>,
    /// Set while segments cannot be written (disk full, read-only, …): since when, and why.
    storage_error: Option<(time::OffsetDateTime, String)>,
    /// The first sequence number of the current session ([`super::Package::start_session`]):
    /// a recording started with the session takes its segments from there on.
    session_msn: u64,
    /// Bumped by every [`super::Package::update`]: the state the playlist cache was rendered from.
    version: u64,
    /// Media playlists rendered at `version`. A part landing wakes every held blocking request
    /// of a rendition at once and they all need the same text: the first renders it, the others
    /// share it (a DVR hour is ~1 ms to render; 1000 players would cost 1 s of CPU per part).
    playlist_cache: Mutex<Vec<CachedPlaylist>>,
}

#[derive(Debug)]
struct CachedPlaylist {
    version: u64,
    rendition: String,
    skip: bool,
    endlist: bool,
    text: Bytes,
}

impl PackageState {
    pub fn new(config: PackagingConfig, renditions: Vec<Rendition>) -> Self {
        PackageState {
            config,
            renditions,
            ts_renditions: Vec::new(),
            ended: false,
            endlist_tag: true,
            screenshot: None,
            dvr_window: None,
            storage_error: None,
            session_msn: 0,
            version: 0,
            playlist_cache: Mutex::new(Vec::new()),
        }
    }

    /// `render`'s text for `r`, rendered once per package version (the HLS renderer's cache).
    pub fn cached_playlist(
        &self,
        r: &Rendition,
        skip: bool,
        endlist: bool,
        render: impl FnOnce() -> String,
    ) -> Bytes {
        let mut cache = self
            .playlist_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let hit =
            |c: &CachedPlaylist| c.rendition == r.name && c.skip == skip && c.endlist == endlist;
        if let Some(c) = cache.iter().find(|c| hit(c) && c.version == self.version) {
            return c.text.clone();
        }
        let text = Bytes::from(render());
        cache.retain(|c| !hit(c) && c.version == self.version);
        cache.push(CachedPlaylist {
            version: self.version,
            rendition: r.name.clone(),
            skip,
            endlist,
            text: text.clone(),
        });
        text
    }

    /// The settings the renditions are cut with.
    pub fn config(&self) -> PackagingConfig {
        self.config
    }

    /// The CMAF renditions (LL-HLS, LL-DASH).
    pub fn renditions(&self) -> &[Rendition] {
        &self.renditions
    }

    /// The MPEG-TS variants (legacy HLS).
    pub fn ts_renditions(&self) -> &[Rendition] {
        &self.ts_renditions
    }

    /// The broadcast is over: no more parts will come.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// End playlists with EXT-X-ENDLIST once ended.
    pub fn endlist_tag(&self) -> bool {
        self.endlist_tag
    }

    pub fn screenshot(&self) -> Option<&Bytes> {
        self.screenshot.as_ref()
    }

    pub fn dvr_window(&self) -> Option<Duration> {
        self.dvr_window
    }

    /// Since when and why segments cannot be written; `None` while they are.
    pub fn storage_error(&self) -> Option<&(time::OffsetDateTime, String)> {
        self.storage_error.as_ref()
    }

    /// The first sequence number of the current session.
    pub fn session_msn(&self) -> u64 {
        self.session_msn
    }

    /// Bumped by every change through the package.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A change is being applied (the playlist cache's key).
    pub(super) fn bump_version(&mut self) {
        self.version = self.version.wrapping_add(1);
    }

    /// A (re)started session: not ended, its options, and every rendition numbering its
    /// segments from here on (`install` continues after the highest number used).
    pub(super) fn start_session(&mut self, endlist_tag: bool, dvr_window: Option<Duration>) {
        self.ended = false;
        self.set_options(endlist_tag, dvr_window);
        let all = self.renditions.iter().chain(self.ts_renditions.iter());
        self.session_msn = all.map(Rendition::next_msn).max().unwrap_or(0);
    }

    /// The record's options that apply to a running session.
    pub(super) fn set_options(&mut self, endlist_tag: bool, dvr_window: Option<Duration>) {
        self.endlist_tag = endlist_tag;
        self.dvr_window = dvr_window;
    }

    pub(super) fn set_ended(&mut self, ended: bool) {
        self.ended = ended;
    }

    /// The DVR window alone (tests and benches build states directly).
    pub fn set_dvr_window(&mut self, window: Option<Duration>) {
        self.dvr_window = window;
    }

    /// The durations a new pipeline's layout cuts at.
    pub(super) fn set_durations(&mut self, segment: Duration, part: Duration) {
        self.config.segment = segment;
        self.config.part = part;
    }

    pub(super) fn set_screenshot(&mut self, jpeg: Bytes) {
        self.screenshot = Some(jpeg);
    }

    /// A segment was written: the error, if there was one, is over (handed back).
    pub(super) fn storage_recovered(&mut self) -> Option<(time::OffsetDateTime, String)> {
        self.storage_error.take()
    }

    /// A segment could not be written; `true` when this starts an error (the first since the
    /// last success, which is the one kept).
    pub(super) fn storage_failed(&mut self, now: time::OffsetDateTime, why: String) -> bool {
        if self.storage_error.is_some() {
            return false;
        }
        self.storage_error = Some((now, why));
        true
    }

    pub fn rendition(&self, name: &str) -> Option<&Rendition> {
        self.renditions.iter().find(|r| r.name == name)
    }

    /// The renditions of one output: the one place that chooses between the two lists.
    pub fn list(&self, output: super::Output) -> &[Rendition] {
        match output {
            super::Output::Cmaf => &self.renditions,
            super::Output::Ts => &self.ts_renditions,
            super::Output::Source => &[],
        }
    }

    /// `None` for the observe-only source output.
    pub(super) fn list_mut(&mut self, output: super::Output) -> Option<&mut Vec<Rendition>> {
        match output {
            super::Output::Cmaf => Some(&mut self.renditions),
            super::Output::Ts => Some(&mut self.ts_renditions),
            super::Output::Source => None,
        }
    }

    pub fn rendition_in(&self, output: super::Output, name: &str) -> Option<&Rendition> {
        self.list(output).iter().find(|r| r.name == name)
    }

    pub(super) fn rendition_in_mut(
        &mut self,
        output: super::Output,
        name: &str,
    ) -> Option<&mut Rendition> {
        self.list_mut(output)?.iter_mut().find(|r| r.name == name)
    }

    /// What a rendition keeps: the DVR window, or the live window plus a fetchable tail.
    pub fn retention(&self) -> Retention {
        match self.dvr_window {
            Some(w) => Retention::Media(w),
            None => {
                Retention::Segments(self.config.window_segments + 1 + self.config.retain_segments)
            }
        }
    }

    /// Index of the first segment a playlist lists: all held ones with DVR (they are exactly the
    /// window), else the newest `window_segments` complete ones.
    pub fn first_listed(&self, r: &Rendition) -> usize {
        if self.dvr_window.is_some() {
            return 0;
        }
        let segments = r.segments();
        let complete: Vec<usize> = (0..segments.len())
            .filter(|&i| segments[i].complete)
            .collect();
        complete
            .len()
            .checked_sub(self.config.window_segments)
            .map_or(0, |n| complete[n])
    }

    pub fn push_part(&mut self, rendition: usize, part: PartIn) -> PushOutcome {
        let retention = self.retention();
        self.renditions
            .get_mut(rendition)
            .map(|r| r.push_part(part, retention))
            .unwrap_or_default()
    }

    /// Every rendition has its init segment and at least one part: playable.
    pub fn ready(&self) -> bool {
        !self.renditions.is_empty()
            && self
                .renditions
                .iter()
                .all(|r| r.has_init() && r.last_part().is_some())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn part(starts: bool, ms: u64, t: OffsetDateTime) -> PartIn {
        PartIn {
            starts_segment: starts,
            independent: starts,
            duration: Duration::from_millis(ms),
            pdt: t,
            data: Bytes::from(vec![0u8; 100]),
        }
    }

    pub fn video_720p(bitrate: u64) -> Rendition {
        let kind = RenditionKind::Video {
            width: 1280,
            height: 720,
            frame_rate: 30.0,
        };
        Rendition::new("720p", kind, "avc1.64001f", bitrate)
    }

    pub fn stereo_audio(bitrate: u64) -> Rendition {
        let kind = RenditionKind::Audio {
            channels: 2,
            sample_rate: 48000,
        };
        Rendition::new("audio", kind, "mp4a.40.2", bitrate)
    }

    #[test]
    fn held_requests_share_one_rendering_until_the_package_changes() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let mut video = video_720p(1);
        video.set_init(Bytes::from_static(b"init"));
        let package = crate::package::Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![video],
        ));
        for i in 0..6u64 {
            package.update(|p| p.push_part(0, part(i % 4 == 0, 500, t0)));
        }
        let render = |skip| {
            package.read(|p| super::super::hls::media_playlist(p, &p.renditions[0], skip, false))
        };
        let (a, b) = (render(false), render(false));
        assert_eq!(
            a.as_ptr(),
            b.as_ptr(),
            "the second request reuses the first rendering"
        );
        let direct =
            package.read(|p| crate::package::hls::render_media(p, &p.renditions[0], false, false));
        assert_eq!(a, direct.as_bytes());
        assert_ne!(
            render(true).as_ptr(),
            a.as_ptr(),
            "a delta update is its own entry"
        );
        package.update(|p| p.push_part(0, part(false, 500, t0)));
        let c = render(false);
        let parts = |b: &Bytes| {
            std::str::from_utf8(b)
                .unwrap()
                .matches("#EXT-X-PART:")
                .count()
        };
        assert_eq!(parts(&c), parts(&a) + 1, "the new part is listed at once");
    }

    #[test]
    fn parts_build_segments_and_the_window_slides() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let mut r = video_720p(1);
        for i in 0..40u64 {
            r.push_part(part(i % 4 == 0, 500, t0), Retention::Segments(5));
        }
        assert_eq!(r.segments().len(), 5);
        assert_eq!(r.segments().front().unwrap().msn, 5);
        assert_eq!(r.last_part(), Some((9, 3)));
        assert_eq!(r.last_complete_msn(), Some(8));
        assert!(r.open_segment().is_some());
        assert_eq!(r.segment(8).unwrap().duration(), Duration::from_secs(2));
        assert!(r.segment(4).is_none());
        assert!(r.part_settled(9, 3) && !r.part_settled(9, 4) && r.part_settled(8, 7));
        // 100 bytes every 500 ms.
        assert_eq!(r.peak_bitrate(), 1600);
    }

    #[test]
    fn discontinuity_numbering_never_goes_back() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let mut r = stereo_audio(1);
        r.push_part(part(true, 500, t0), Retention::Segments(3));
        r.push_part(part(false, 500, t0), Retention::Segments(3));
        r.mark_discontinuity();
        r.push_part(part(true, 500, t0), Retention::Segments(3));
        assert!(r.segment(1).unwrap().discontinuity);
        assert!(r.segment(0).unwrap().complete);
        for _ in 0..3 {
            r.push_part(part(true, 500, t0), Retention::Segments(3));
        }
        // The discontinuity segment (msn 1) left the window: the sequence counts it.
        assert_eq!(r.segments().front().unwrap().msn, 2);
        assert_eq!(r.discontinuity_sequence(), 1);
    }

    #[test]
    fn a_number_skipped_at_a_reconnect_is_absent_and_the_rest_found() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let (mut video, mut audio) = (video_720p(1), stereo_audio(1));
        let keep = Retention::Segments(20);
        // The publisher left as the video opened segment 2; the audio had not.
        for i in 0..9u64 {
            video.push_part(part(i % 4 == 0, 500, t0), keep);
        }
        for i in 0..8u64 {
            audio.push_part(part(i % 4 == 0, 500, t0), keep);
        }
        let next = video.next_msn().max(audio.next_msn());
        for r in [&mut video, &mut audio] {
            r.mark_discontinuity();
            r.continue_after(next - 1);
            for i in 0..5u64 {
                r.push_part(part(i % 4 == 0, 500, t0), keep);
            }
        }
        let msns = |r: &Rendition| r.segments().iter().map(|s| s.msn).collect::<Vec<_>>();
        assert_eq!(msns(&video), [0, 1, 2, 3, 4]);
        assert_eq!(msns(&audio), [0, 1, 3, 4], "the audio skips 2");
        assert!(audio.segment(2).is_none());
        for msn in [0, 1, 3, 4] {
            assert_eq!(audio.segment(msn).map(|s| s.msn), Some(msn));
        }
        assert!(audio.segment(5).is_none());
        assert_eq!(audio.open_segment().map(|s| s.msn), Some(4));
    }

    #[test]
    fn dvr_retention_is_by_media_time_and_memory_is_released() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let mut r = video_720p(1);
        let window = Retention::Media(Duration::from_secs(30));
        let mut completed = Vec::new();
        for i in 0..200u64 {
            let out = r.push_part(part(i % 4 == 0, 500, t0), window);
            if let Some((msn, chunks)) = out.completed {
                completed.push(msn);
                r.mark_on_disk(msn, chunks.iter().map(Bytes::len).sum());
            }
        }
        let held: Duration = r
            .segments()
            .iter()
            .filter(|s| s.complete)
            .map(|s| s.duration())
            .sum();
        assert_eq!(held, Duration::from_secs(30), "exactly the window");
        assert_eq!(completed.len(), 49);
        let in_memory = r.segments().iter().filter(|s| s.in_memory()).count();
        assert_eq!(in_memory, MEMORY_SEGMENTS);
        assert_eq!(
            r.segments().front().unwrap().bytes(),
            400,
            "size known after release"
        );
        let removed = r.clear_complete();
        assert_eq!(removed.len(), 15);
        assert!(r.segments().iter().all(|s| !s.complete));
    }

    #[test]
    fn config_ranges() {
        assert!(PackagingConfig::new(2000, 500).is_ok());
        assert!(PackagingConfig::new(4000, 1000).is_ok());
        assert!(PackagingConfig::new(1000, 500).is_err());
        assert!(PackagingConfig::new(2000, 400).is_err());
        assert!(PackagingConfig::new(3000, 800).is_err());
    }
}
