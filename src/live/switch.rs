//! Main/backup input switching for one stream: which slot's media feeds the pipeline, when an
//! input can start (every track it declares ready, video at a keyframe, bounded by
//! [`TRACK_WAIT`]), when to fail over and back, and the timestamp rebase that keeps the
//! pipeline's timeline continuous and in step with the wall clock. Sans-IO: media and `now` in,
//! media for the pipeline and switch events out.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::Slot;
use crate::media::retime::Retimer;
use crate::media::{AudioConfig, Frame, MediaMessage, TrackKind, Tracks, VideoConfig, TRACK_WAIT};

/// A main that delivers nothing for this long is switched away from (when a backup is being
/// pushed) or reported not live.
pub const DEFAULT_SWITCH_TIMEOUT: Duration = Duration::from_secs(3);
pub const SWITCH_TIMEOUT_RANGE_SECS: std::ops::RangeInclusive<u64> = 3..=10;

/// What a slot keeps from its last video keyframe on, so a switch can start on that keyframe
/// at once instead of waiting up to a GOP. Bounded: a longer GOP is not kept (the switch then
/// waits for the next keyframe).
const MAX_GOP_SPAN: Duration = Duration::from_secs(10);
const MAX_GOP_FRAMES: usize = 2048;
const MAX_GOP_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq)]
pub enum SwitchEvent {
    Media(MediaMessage),
    /// The outputs now come from `to`; its first frame has decode time `at` (output timeline).
    Switched {
        from: Slot,
        to: Slot,
        at: u64,
    },
    /// `slot` declared `track` but delivered none of it within [`TRACK_WAIT`]: it starts
    /// without it.
    TrackMissing {
        slot: Slot,
        track: TrackKind,
    },
}

#[derive(Debug, Default)]
struct Input {
    attached: bool,
    attached_at: Option<Instant>,
    last_data: Option<Instant>,
    /// What the container says the input carries (TS PMT, FLV metadata, SDP).
    declared: Tracks,
    video: Option<VideoConfig>,
    audio: Option<AudioConfig>,
    /// Frames since the last video keyframe, oldest first (empty for audio-only inputs).
    gop: VecDeque<Frame>,
    gop_bytes: usize,
    /// Audio received while the input's video has no keyframe yet: what an audio-only start
    /// begins with if the declared video never comes. Bounded by [`TRACK_WAIT`].
    early_audio: VecDeque<Frame>,
    /// Whether each track has ever been ready on this input; a track that has can no longer be
    /// given up on (a GOP cut short by the bounds waits for the next keyframe).
    video_seen: bool,
    audio_seen: bool,
}

impl Input {
    fn wants_video(&self) -> bool {
        self.video.is_some() || self.declared.video
    }

    fn wants_audio(&self) -> bool {
        self.audio.is_some() || self.declared.audio
    }

    fn keep(&mut self, f: &Frame) {
        if !self.wants_video() {
            return; // audio-only: any frame is a starting point, nothing to keep
        }
        if f.track == TrackKind::Video && f.keyframe && self.video.is_some() {
            self.gop.clear();
            self.gop_bytes = 0;
            self.early_audio.clear();
            self.video_seen = true;
        } else if self.gop.is_empty() {
            // No keyframe yet to start from.
            if f.track == TrackKind::Audio {
                self.early_audio.push_back(f.clone());
                while self.early_audio.len() > MAX_GOP_FRAMES
                    || self.early_audio.front().is_some_and(|a| {
                        Duration::from_nanos(f.dts.saturating_sub(a.dts)) > TRACK_WAIT
                    })
                {
                    self.early_audio.pop_front();
                }
            }
            return;
        }
        self.gop_bytes += f.data.len();
        self.gop.push_back(f.clone());
        let span = f
            .dts
            .saturating_sub(self.gop.front().map_or(f.dts, |a| a.dts));
        if Duration::from_nanos(span) > MAX_GOP_SPAN
            || self.gop.len() > MAX_GOP_FRAMES
            || self.gop_bytes > MAX_GOP_BYTES
        {
            self.gop.clear();
            self.gop_bytes = 0;
        }
    }

    /// The tracks outputs could start with from this input now, if they can: video from a
    /// keyframe, and every declared track ready — unless it has delivered nothing for
    /// [`TRACK_WAIT`] since the input attached.
    fn startable(&self, now: Instant) -> Option<Tracks> {
        let video = self.video.is_some() && self.gop.front().is_some_and(|f| f.keyframe);
        let audio = self.audio.is_some();
        let waited_out = self
            .attached_at
            .is_some_and(|t| now.saturating_duration_since(t) >= TRACK_WAIT);
        let video_ok = video || !self.wants_video() || (waited_out && !self.video_seen);
        let audio_ok = audio || !self.wants_audio() || (waited_out && !self.audio_seen);
        ((video || audio) && video_ok && audio_ok).then_some(Tracks { video, audio })
    }
}

#[derive(Debug)]
pub struct Switch {
    timeout: Duration,
    inputs: [Input; 2],
    active: Option<Slot>,
    /// The active input's frames on the one output timeline.
    retimer: Retimer,
}

fn index(slot: Slot) -> usize {
    match slot {
        Slot::Main => 0,
        Slot::Backup => 1,
    }
}

impl Switch {
    pub fn new(timeout: Duration) -> Switch {
        Switch {
            timeout,
            inputs: Default::default(),
            active: None,
            retimer: Retimer::default(),
        }
    }

    #[cfg(test)]
    pub fn active(&self) -> Option<Slot> {
        self.active
    }

    pub fn attach(&mut self, slot: Slot, now: Instant) {
        self.inputs[index(slot)] = Input {
            attached: true,
            attached_at: Some(now),
            last_data: Some(now),
            ..Input::default()
        };
    }

    pub fn detach(&mut self, slot: Slot, now: Instant, out: &mut Vec<SwitchEvent>) {
        self.inputs[index(slot)] = Input::default();
        self.decide(now, out);
    }

    pub fn is_empty(&self) -> bool {
        self.inputs.iter().all(|i| !i.attached)
    }

    /// The slot is connected and has delivered data within the timeout.
    pub fn receiving(&self, slot: Slot, now: Instant) -> bool {
        let i = &self.inputs[index(slot)];
        i.attached
            && i.last_data
                .is_some_and(|t| now.saturating_duration_since(t) < self.timeout)
    }

    pub fn media(
        &mut self,
        slot: Slot,
        msg: MediaMessage,
        now: Instant,
        out: &mut Vec<SwitchEvent>,
    ) {
        let active = self.active == Some(slot);
        let input = &mut self.inputs[index(slot)];
        if !input.attached {
            return;
        }
        input.last_data = Some(now);
        match msg {
            MediaMessage::Tracks(t) => {
                input.declared = t;
                if active {
                    out.push(SwitchEvent::Media(MediaMessage::Tracks(t)));
                }
            }
            MediaMessage::VideoConfig(c) => {
                input.video = Some(c.clone());
                if active {
                    out.push(SwitchEvent::Media(MediaMessage::VideoConfig(c)));
                }
            }
            MediaMessage::AudioConfig(c) => {
                input.audio = Some(c.clone());
                input.audio_seen = true;
                if active {
                    out.push(SwitchEvent::Media(MediaMessage::AudioConfig(c)));
                }
            }
            MediaMessage::Discontinuity { at } => {
                // The input's own source changed (a PULL fetcher moving to another URI).
                if let (true, Some(at)) = (active, self.retimer.output_time(at)) {
                    out.push(SwitchEvent::Media(MediaMessage::Discontinuity { at }));
                }
            }
            MediaMessage::Frame(f) => {
                input.keep(&f);
                if active {
                    self.forward(f, now, out);
                }
            }
        }
        self.decide(now, out);
    }

    /// Time passing: a silent active input is failed over from.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<SwitchEvent>) {
        self.decide(now, out);
    }

    /// The main when it delivers (and, to switch to it, can start: see [`Input::startable`]),
    /// else the backup; `None` keeps the current one.
    fn decide(&mut self, now: Instant, out: &mut Vec<SwitchEvent>) {
        let want = [Slot::Main, Slot::Backup].into_iter().find_map(|s| {
            if !self.receiving(s, now) {
                return None;
            }
            if self.active == Some(s) {
                return Some((s, None));
            }
            self.inputs[index(s)].startable(now).map(|t| (s, Some(t)))
        });
        if let Some((s, Some(tracks))) = want {
            self.switch_to(s, tracks, now, out);
        }
    }

    /// Makes `to` the active input, starting with `tracks`: from its buffered keyframe when it
    /// has video, else from the audio it sent meanwhile.
    fn switch_to(&mut self, to: Slot, tracks: Tracks, now: Instant, out: &mut Vec<SwitchEvent>) {
        let from = self.active.replace(to);
        let input = &mut self.inputs[index(to)];
        for (track, wanted, has) in [
            (TrackKind::Video, input.wants_video(), tracks.video),
            (TrackKind::Audio, input.wants_audio(), tracks.audio),
        ] {
            if wanted && !has {
                out.push(SwitchEvent::TrackMissing { slot: to, track });
            }
        }
        let gop: Vec<Frame> = if tracks.video {
            input.gop.iter().cloned().collect()
        } else {
            input.early_audio.drain(..).collect()
        };
        // What the pipeline is to expect: the declared tracks less those given up on. Nothing
        // declared, nothing said: the pipeline then takes what comes within its probe time.
        let declared = (input.declared != Tracks::default()).then_some(tracks);
        let configs: Vec<MediaMessage> = [
            declared.map(MediaMessage::Tracks),
            input
                .video
                .clone()
                .filter(|_| tracks.video)
                .map(MediaMessage::VideoConfig),
            input.audio.clone().map(MediaMessage::AudioConfig),
        ]
        .into_iter()
        .flatten()
        .collect();
        let newest = gop.iter().map(|f| f.dts).max();
        self.retimer.new_source();
        let at = match (gop.first(), newest) {
            (Some(first), Some(newest)) => Some(self.retimer.start(first.dts, newest, now)),
            _ => None, // fixed by the next frame
        };
        if let (Some(from), Some(at)) = (from, at) {
            out.push(SwitchEvent::Switched { from, to, at });
        }
        out.extend(configs.into_iter().map(SwitchEvent::Media));
        for f in gop {
            self.forward(f, now, out);
        }
        // The input left resumes, if ever, at a keyframe it sends after this point.
        if let Some(from) = from {
            let left = &mut self.inputs[index(from)];
            left.gop.clear();
            left.gop_bytes = 0;
            left.early_audio.clear();
        }
    }

    fn forward(&mut self, f: Frame, now: Instant, out: &mut Vec<SwitchEvent>) {
        if let Some(f) = self.retimer.retime(f, now) {
            out.push(SwitchEvent::Media(MediaMessage::Frame(f)));
        }
    }

    /// Frames dropped because a switch would have sent them backwards in time.
    pub fn overlapped(&self) -> u64 {
        self.retimer.overlapped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const MS: u64 = 1_000_000;

    fn video_config() -> MediaMessage {
        MediaMessage::VideoConfig(VideoConfig {
            codec: crate::media::VideoCodec::H264,
            record: Bytes::from_static(b"avcc"),
            width: 1280,
            height: 720,
        })
    }

    fn frame(track: TrackKind, dts_ms: u64, keyframe: bool) -> MediaMessage {
        MediaMessage::Frame(Frame {
            track,
            dts: dts_ms * MS,
            pts: dts_ms * MS,
            keyframe,
            duration: None,
            data: Bytes::from_static(b"x"),
        })
    }

    fn frames(out: &[SwitchEvent]) -> Vec<(TrackKind, u64)> {
        out.iter()
            .filter_map(|e| match e {
                SwitchEvent::Media(MediaMessage::Frame(f)) => Some((f.track, f.dts / MS)),
                _ => None,
            })
            .collect()
    }

    /// Pushes 40 ms video frames (keyframe every `gop`) for `from..to` ms of the slot's own
    /// time, the wall clock advancing with them from `wall`.
    fn push(
        s: &mut Switch,
        slot: Slot,
        wall: Instant,
        own: std::ops::Range<u64>,
        gop: u64,
        out: &mut Vec<SwitchEvent>,
    ) {
        let start = own.start;
        for t in own.step_by(40) {
            let now = wall + Duration::from_millis(t - start);
            s.media(slot, frame(TrackKind::Video, t, t % gop == 0), now, out);
        }
    }

    #[test]
    fn main_first_then_backup_after_the_timeout_then_main_again() {
        let t0 = Instant::now();
        let mut s = Switch::new(DEFAULT_SWITCH_TIMEOUT);
        let mut out = Vec::new();
        s.attach(Slot::Main, t0);
        s.attach(Slot::Backup, t0);
        s.media(Slot::Main, video_config(), t0, &mut out);
        s.media(Slot::Backup, video_config(), t0, &mut out);
        // Both deliver for 2 s; the backup's clock is 50 s ahead of the main's.
        for t in (0..2000).step_by(40) {
            let now = t0 + Duration::from_millis(t);
            s.media(
                Slot::Main,
                frame(TrackKind::Video, t, t % 1000 == 0),
                now,
                &mut out,
            );
            s.media(
                Slot::Backup,
                frame(TrackKind::Video, 50_000 + t, t % 1000 == 0),
                now,
                &mut out,
            );
        }
        assert_eq!(s.active(), Some(Slot::Main));
        let sent = frames(&out);
        assert_eq!(sent.len(), 50, "only the main's frames go out");
        assert_eq!(sent.last(), Some(&(TrackKind::Video, 1960)));
        out.clear();

        // The main goes silent; the backup keeps going. Nothing changes before the timeout.
        let last_main = t0 + Duration::from_millis(1960);
        push(
            &mut s,
            Slot::Backup,
            t0 + Duration::from_millis(2000),
            52_000..54_960,
            1000,
            &mut out,
        );
        assert_eq!(s.active(), Some(Slot::Main));
        assert!(frames(&out).is_empty());
        s.tick(last_main + Duration::from_millis(2999), &mut out);
        assert_eq!(s.active(), Some(Slot::Main));
        // At the timeout it fails over, starting at the backup's last keyframe (54 000).
        let switch_at = last_main + DEFAULT_SWITCH_TIMEOUT;
        s.tick(switch_at, &mut out);
        assert_eq!(s.active(), Some(Slot::Backup));
        assert!(!s.receiving(Slot::Main, switch_at));
        let SwitchEvent::Switched { from, to, at } = out[0].clone() else {
            panic!("{out:?}")
        };
        assert_eq!((from, to), (Slot::Main, Slot::Backup));
        // The output keeps pace with the wall clock: the newest backup frame (54 920) lands
        // 3 s after the last main frame (1960 + 3000), so the keyframe lands 920 ms before.
        assert_eq!(at / MS, 1960 + 3000 - 920);
        // The configs (nothing was declared), then the GOP.
        assert!(matches!(
            out[1],
            SwitchEvent::Media(MediaMessage::VideoConfig(_))
        ));
        let sent = frames(&out);
        assert_eq!(sent.len(), 24, "the buffered GOP 54 000..=54 920");
        assert_eq!(sent.last(), Some(&(TrackKind::Video, 4960)));
        out.clear();

        // The main comes back (a new connection) and returns the outputs to itself at its
        // first keyframe, again continuing the output timeline.
        let back = switch_at + Duration::from_millis(1000);
        push(
            &mut s,
            Slot::Backup,
            switch_at,
            54_960..55_960,
            1000,
            &mut out,
        );
        s.detach(Slot::Main, back, &mut out);
        s.attach(Slot::Main, back);
        s.media(Slot::Main, video_config(), back, &mut out);
        assert_eq!(s.active(), Some(Slot::Backup));
        s.media(Slot::Main, frame(TrackKind::Video, 0, true), back, &mut out);
        assert_eq!(s.active(), Some(Slot::Main));
        let switched = out.iter().find_map(|e| match e {
            SwitchEvent::Switched { from, to, at } => Some((*from, *to, *at / MS)),
            _ => None,
        });
        // 40 ms of wall time passed since the backup's last frame (5960).
        assert_eq!(switched, Some((Slot::Backup, Slot::Main, 6000)));
        let sent = frames(&out);
        let times: Vec<u64> = sent.iter().map(|f| f.1).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    }

    #[test]
    fn without_a_backup_the_main_stays_and_reports_not_receiving() {
        let t0 = Instant::now();
        let mut s = Switch::new(DEFAULT_SWITCH_TIMEOUT);
        let mut out = Vec::new();
        s.attach(Slot::Main, t0);
        s.media(Slot::Main, video_config(), t0, &mut out);
        push(&mut s, Slot::Main, t0, 0..1000, 1000, &mut out);
        let later = t0 + Duration::from_secs(10);
        s.tick(later, &mut out);
        assert_eq!(s.active(), Some(Slot::Main));
        assert!(!s.receiving(Slot::Main, later));
        assert!(!out
            .iter()
            .any(|e| matches!(e, SwitchEvent::Switched { .. })));
    }

    #[test]
    fn a_closed_main_fails_over_at_once_and_a_backup_alone_can_start() {
        let t0 = Instant::now();
        let mut s = Switch::new(DEFAULT_SWITCH_TIMEOUT);
        let mut out = Vec::new();
        s.attach(Slot::Backup, t0);
        s.media(Slot::Backup, video_config(), t0, &mut out);
        push(&mut s, Slot::Backup, t0, 0..500, 1000, &mut out);
        assert_eq!(
            s.active(),
            Some(Slot::Backup),
            "a backup alone feeds the outputs"
        );
        s.attach(Slot::Main, t0);
        s.media(Slot::Main, video_config(), t0, &mut out);
        s.media(Slot::Main, frame(TrackKind::Video, 7, true), t0, &mut out);
        assert_eq!(s.active(), Some(Slot::Main));
        s.detach(Slot::Main, t0, &mut out);
        // The backup has no keyframe buffered since it was left: it resumes at its next one.
        assert_eq!(s.active(), Some(Slot::Main));
        push(&mut s, Slot::Backup, t0, 520..1000, 1000, &mut out);
        assert_eq!(s.active(), Some(Slot::Main));
        s.media(
            Slot::Backup,
            frame(TrackKind::Video, 1000, true),
            t0,
            &mut out,
        );
        assert_eq!(s.active(), Some(Slot::Backup));
        assert!(!s.is_empty());
        s.detach(Slot::Backup, t0, &mut out);
        assert!(s.is_empty());
    }

    #[test]
    fn overlapping_audio_of_the_new_source_is_dropped() {
        let t0 = Instant::now();
        let mut s = Switch::new(DEFAULT_SWITCH_TIMEOUT);
        let mut out = Vec::new();
        s.attach(Slot::Main, t0);
        s.media(Slot::Main, video_config(), t0, &mut out);
        s.media(Slot::Main, frame(TrackKind::Video, 0, true), t0, &mut out);
        s.media(Slot::Main, frame(TrackKind::Audio, 100, true), t0, &mut out);
        s.attach(Slot::Backup, t0);
        s.media(Slot::Backup, video_config(), t0, &mut out);
        s.media(
            Slot::Backup,
            frame(TrackKind::Video, 1000, true),
            t0,
            &mut out,
        );
        // Audio stamped before the keyframe: after the rebase it falls before the main's audio.
        s.media(
            Slot::Backup,
            frame(TrackKind::Audio, 900, true),
            t0,
            &mut out,
        );
        s.detach(Slot::Main, t0, &mut out);
        assert_eq!(s.active(), Some(Slot::Backup));
        assert_eq!(s.overlapped(), 1);
        let sent = frames(&out);
        assert_eq!(
            sent,
            [
                (TrackKind::Video, 0),
                (TrackKind::Audio, 100),
                (TrackKind::Video, 120)
            ]
        );
    }

    fn declared(video: bool, audio: bool) -> MediaMessage {
        MediaMessage::Tracks(Tracks { video, audio })
    }

    fn audio_config() -> MediaMessage {
        MediaMessage::AudioConfig(AudioConfig::Opus(crate::media::OpusConfig { channels: 2 }))
    }

    #[test]
    fn a_source_joining_mid_gop_starts_at_its_first_keyframe_with_its_audio() {
        let t0 = Instant::now();
        let mut s = Switch::new(DEFAULT_SWITCH_TIMEOUT);
        let mut out = Vec::new();
        s.attach(Slot::Main, t0);
        // A TS PMT declares both; audio flows 2 s before the first keyframe, and the video
        // config only comes with that keyframe (in-band parameter sets).
        s.media(Slot::Main, declared(true, true), t0, &mut out);
        s.media(Slot::Main, audio_config(), t0, &mut out);
        for t in (0..2000).step_by(20) {
            let now = t0 + Duration::from_millis(t);
            s.media(Slot::Main, frame(TrackKind::Audio, t, true), now, &mut out);
            s.media(Slot::Main, frame(TrackKind::Video, t, false), now, &mut out);
        }
        assert_eq!(s.active(), None, "no start before the keyframe");
        assert!(out.is_empty());
        let at = t0 + Duration::from_millis(2000);
        s.media(Slot::Main, video_config(), at, &mut out);
        s.media(
            Slot::Main,
            frame(TrackKind::Video, 2000, true),
            at,
            &mut out,
        );
        assert_eq!(s.active(), Some(Slot::Main));
        assert_eq!(
            out[0],
            SwitchEvent::Media(MediaMessage::Tracks(Tracks {
                video: true,
                audio: true
            }))
        );
        s.media(
            Slot::Main,
            frame(TrackKind::Audio, 2000, true),
            at,
            &mut out,
        );
        // Everything out starts at the keyframe; the earlier audio and video are not sent.
        assert_eq!(
            frames(&out),
            [(TrackKind::Video, 2000), (TrackKind::Audio, 2000)]
        );
        assert!(!out
            .iter()
            .any(|e| matches!(e, SwitchEvent::TrackMissing { .. })));
    }

    #[test]
    fn a_declared_track_that_never_comes_is_given_up_after_the_wait() {
        let t0 = Instant::now();
        let mut s = Switch::new(DEFAULT_SWITCH_TIMEOUT);
        let mut out = Vec::new();
        s.attach(Slot::Main, t0);
        s.media(Slot::Main, declared(true, true), t0, &mut out);
        s.media(Slot::Main, audio_config(), t0, &mut out);
        let step = Duration::from_millis(20);
        let mut t = Duration::ZERO;
        while t < TRACK_WAIT {
            let ms = t.as_millis() as u64;
            s.media(
                Slot::Main,
                frame(TrackKind::Audio, ms, true),
                t0 + t,
                &mut out,
            );
            t += step;
        }
        assert_eq!(s.active(), None);
        s.tick(t0 + TRACK_WAIT, &mut out);
        assert_eq!(s.active(), Some(Slot::Main));
        assert_eq!(
            out[0],
            SwitchEvent::TrackMissing {
                slot: Slot::Main,
                track: TrackKind::Video
            }
        );
        assert_eq!(
            out[1],
            SwitchEvent::Media(MediaMessage::Tracks(Tracks {
                video: false,
                audio: true
            }))
        );
        // The audio of the wait is not lost: it starts the outputs, in order.
        let sent = frames(&out);
        assert_eq!(sent.len(), (TRACK_WAIT.as_millis() / 20) as usize);
        assert_eq!(sent.first(), Some(&(TrackKind::Audio, 0)));
        assert!(sent.windows(2).all(|w| w[0].1 < w[1].1));
    }

    #[test]
    fn undeclared_audio_only_starts_at_once_and_a_seen_video_is_not_given_up() {
        let t0 = Instant::now();
        let mut s = Switch::new(DEFAULT_SWITCH_TIMEOUT);
        let mut out = Vec::new();
        s.attach(Slot::Main, t0);
        s.media(Slot::Main, audio_config(), t0, &mut out);
        assert_eq!(s.active(), Some(Slot::Main), "nothing declared: no wait");

        // A backup whose video has been seen waits for its next keyframe even past the wait.
        s.attach(Slot::Backup, t0);
        s.media(Slot::Backup, video_config(), t0, &mut out);
        s.media(Slot::Backup, audio_config(), t0, &mut out);
        s.media(Slot::Backup, frame(TrackKind::Video, 0, true), t0, &mut out);
        let late = t0 + TRACK_WAIT + Duration::from_secs(5);
        // The main goes quiet; the backup's GOP is cut short (past the span bound).
        s.media(
            Slot::Backup,
            frame(TrackKind::Video, 10_001, false),
            late,
            &mut out,
        );
        s.media(
            Slot::Backup,
            frame(TrackKind::Audio, 10_010, true),
            late,
            &mut out,
        );
        s.tick(late, &mut out);
        assert_eq!(s.active(), Some(Slot::Main), "no audio-only switch");
        s.media(
            Slot::Backup,
            frame(TrackKind::Video, 10_040, true),
            late,
            &mut out,
        );
        assert_eq!(s.active(), Some(Slot::Backup));
    }

    #[test]
    fn a_gop_past_the_bounds_is_not_kept() {
        let mut i = Input {
            attached: true,
            video: match video_config() {
                MediaMessage::VideoConfig(c) => Some(c),
                _ => unreachable!(),
            },
            ..Input::default()
        };
        let MediaMessage::Frame(key) = frame(TrackKind::Video, 0, true) else {
            unreachable!()
        };
        let now = Instant::now();
        i.keep(&key);
        assert!(i.startable(now).is_some());
        let MediaMessage::Frame(late) = frame(TrackKind::Video, 10_001, false) else {
            unreachable!()
        };
        i.keep(&late);
        assert!(i.startable(now).is_none());
        assert!(i.gop.is_empty());
    }
}
