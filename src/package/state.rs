//! The segment store of one stream: per rendition the init segment and a window of CMAF segments
//! made of parts (LL-HLS partial segments = LL-DASH chunks). Sans-IO: parts in, state out; the
//! HLS/DASH renderers and the HTTP layer read it.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

pub use super::config::{PackagingConfig, DEFAULT_MPEGTS_IDLE};

pub use super::rendition::{
    Part, PartIn, PushOutcome, Rendition, RenditionKind, Retention, Segment, MEMORY_SEGMENTS,
};

/// Everything packaged for one stream: its renditions and whether the broadcast ended.
/// Written only through the package's API (under its lock, see `Package::update`); the
/// renderers and every other reader go through the accessors.
#[derive(Debug)]
pub struct PackageState {
    config: PackagingConfig,
    /// The part duration as configured: `config.part` becomes the running layout's announced
    /// target (a whole number of frames, 0.52 s at 25 fps for 0.5 s), and a new pipeline's
    /// layout is cut from this one, not from the last one's target.
    configured_part: Duration,
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
    /// Where each rendition's numbering starts ([`Self::numbered_from`]).
    first: super::Numbering,
    /// Where the MPD times the segments of an encoder behind real time.
    dash_clock: super::dash::clock::Clock,
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
            configured_part: config.part,
            renditions,
            ts_renditions: Vec::new(),
            ended: false,
            endlist_tag: true,
            screenshot: None,
            dvr_window: None,
            storage_error: None,
            session_msn: 0,
            first: super::Numbering::default(),
            dash_clock: super::dash::clock::Clock::default(),
            version: 0,
            playlist_cache: Mutex::new(Vec::new()),
        }
    }

    /// Renditions installed later start their numbering at `first` (a live stream's package
    /// starts at [`super::Numbering::starting`]; tests and recordings start at 0).
    pub fn numbered_from(mut self, first: super::Numbering) -> Self {
        self.first = first;
        self
    }

    /// Where a rendition installed now starts its numbering.
    pub(super) fn first_numbering(&self) -> super::Numbering {
        self.first
    }

    /// Where the numbering of whoever serves the stream next must start: past every segment
    /// and discontinuity number used here.
    pub fn numbering(&self) -> super::Numbering {
        let all = || self.renditions.iter().chain(self.ts_renditions.iter());
        super::Numbering {
            next_msn: all().map(Rendition::next_msn).max().unwrap_or(0),
            next_discontinuity: all().map(|r| r.last_discontinuity() + 1).max().unwrap_or(0),
            handover: None,
        }
        .max(self.first)
    }

    /// The wall-clock end of the newest part of any CMAF rendition: the live edge LL-HLS
    /// viewers reached.
    pub fn edge(&self) -> Option<time::OffsetDateTime> {
        self.renditions
            .iter()
            .filter_map(|r| r.segments().back().map(|s| s.pdt + s.duration()))
            .max()
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
    /// The durations the running layout cuts at (`part`: its announced target).
    pub fn config(&self) -> PackagingConfig {
        self.config
    }

    /// The settings as configured, for a new pipeline's layout.
    pub fn configured(&self) -> PackagingConfig {
        PackagingConfig {
            part: self.configured_part,
            ..self.config
        }
    }

    /// Where the MPD times the segments of an encoder behind real time.
    pub fn dash_clock(&self) -> &super::dash::clock::Clock {
        &self.dash_clock
    }

    pub(super) fn dash_clock_mut(&mut self) -> &mut super::dash::clock::Clock {
        &mut self.dash_clock
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
    use time::OffsetDateTime;

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
    fn a_new_layout_is_cut_from_the_configured_part_not_the_last_target() {
        let config = PackagingConfig::new(2000, 500).unwrap();
        let mut state = PackageState::new(config, vec![]);
        // A 25 fps layout announces 13 frames: 0.52 s.
        state.set_durations(Duration::from_secs(2), Duration::from_millis(520));
        assert_eq!(state.config().part, Duration::from_millis(520));
        assert_eq!(state.configured().part, Duration::from_millis(500));
        assert_eq!(state.configured().segment, Duration::from_secs(2));
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
