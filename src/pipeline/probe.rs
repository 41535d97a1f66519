//! The start of a session's media, before its pipeline is built: which tracks there are, their
//! configs, video from a keyframe, the frame rate, the wall clock of the media timeline.

use std::time::Duration;

use super::PipelineError;
use crate::media::{AudioConfig, Frame, MediaMessage, TrackKind, Tracks, VideoConfig, TRACK_WAIT};

/// Media buffered before the pipeline is built, to learn which tracks exist and the frame rate,
/// when the source declared none (an encoder that sends only one kind of track without saying
/// so starts after this much media).
const PROBE_MEDIA: Duration = Duration::from_millis(1000);
/// Frames held while probing; more means the source is broken.
const MAX_PROBE_FRAMES: usize = 2000;
/// Video frames seen before the frame rate is taken as measured.
const PROBE_VIDEO_FRAMES: usize = 12;
/// No usable media within this time after publish → the stream ends. The input switch may
/// wait [`TRACK_WAIT`] for a declared track before it sends anything.
const START_TIMEOUT: Duration = TRACK_WAIT.saturating_add(Duration::from_secs(8));
/// What the first second of media told us.
pub(super) struct Probe {
    pub video: Option<VideoConfig>,
    pub audio: Option<AudioConfig>,
    pub frames: Vec<Frame>,
    /// Measured source frame rate.
    pub fps: Option<f64>,
    /// When the first kept frame arrived, and its decode time: the wall clock of the media
    /// timeline (probing holds frames for up to a second, which must not shift it).
    first: Option<(time::OffsetDateTime, u64)>,
}

impl Probe {
    /// Wall-clock time of decode time `base` (the pipeline's running time 0).
    pub fn wall_time_of(&self, base: u64) -> time::OffsetDateTime {
        let Some((at, dts)) = self.first else {
            return time::OffsetDateTime::now_utc();
        };
        if base >= dts {
            at + Duration::from_nanos(base - dts)
        } else {
            at - Duration::from_nanos(dts - base)
        }
    }
}

/// Collects the start of the media: every expected track's config, video from a keyframe, and
/// enough frames to measure the frame rate. Tracks are expected when the input declared them
/// (the switch forwards what it starts with) or sent their config; undeclared, whatever came
/// within [`PROBE_MEDIA`] is taken. `seed` is what a rebuild carries over from the pipeline
/// before.
pub(super) async fn probe(
    rx: &mut crate::hub::Reader,
    seed: Vec<MediaMessage>,
) -> Result<Option<Probe>, PipelineError> {
    let mut p = Probe {
        video: None,
        audio: None,
        frames: Vec::new(),
        fps: None,
        first: None,
    };
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    let mut declared: Option<Tracks> = None;
    // Bounded wait for declared tracks, from the first frame kept.
    let mut wait_until: Option<tokio::time::Instant> = None;
    let mut seen_keyframe = false;
    let mut seed = seed.into_iter();
    loop {
        let span = p
            .frames
            .first()
            .zip(p.frames.last())
            .map(|(a, b)| Duration::from_nanos(b.dts.saturating_sub(a.dts)));
        let count = |track| p.frames.iter().filter(|f| f.track == track).count();
        let expect_video = p.video.is_some() || declared.is_some_and(|t| t.video);
        let expect_audio = p.audio.is_some() || declared.is_some_and(|t| t.audio);
        let video_ready = p.video.is_some() && count(TrackKind::Video) >= PROBE_VIDEO_FRAMES;
        let audio_ready = p.audio.is_some() && count(TrackKind::Audio) > 0;
        let complete = (expect_video || expect_audio)
            && (!expect_video || video_ready)
            && (!expect_audio || audio_ready);
        // Without a declaration a second track may still come: both, or the probe time.
        if complete && (declared.is_some() || (video_ready && audio_ready)) {
            break;
        }
        let waiting_declared = declared.is_some() && !complete;
        if span.is_some_and(|s| s >= PROBE_MEDIA) && !waiting_declared {
            break;
        }
        if p.frames.len() >= MAX_PROBE_FRAMES {
            break;
        }
        let limit = wait_until.map_or(deadline, |w| w.min(deadline));
        let msg = match seed.next() {
            Some(m) => m,
            None => match tokio::time::timeout_at(limit, rx.recv()).await {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(None), // publisher left before anything usable
                Err(_) if p.frames.is_empty() => return Err(PipelineError::NoMedia(START_TIMEOUT)),
                Err(_) => {
                    tracing::warn!(
                        video = expect_video && !video_ready,
                        audio = expect_audio && !audio_ready,
                        "declared track not ready in time; starting without it"
                    );
                    break;
                }
            },
        };
        match msg {
            MediaMessage::Tracks(t) => declared = Some(t),
            MediaMessage::VideoConfig(c) => p.video = Some(c),
            MediaMessage::AudioConfig(c) => p.audio = Some(c),
            MediaMessage::Frame(f) => {
                // Video starts at a keyframe, so the decoder never sees a headless GOP.
                if f.track == TrackKind::Video {
                    if !seen_keyframe && !f.keyframe {
                        continue;
                    }
                    seen_keyframe = true;
                }
                p.first
                    .get_or_insert_with(|| (time::OffsetDateTime::now_utc(), f.dts));
                wait_until.get_or_insert_with(|| tokio::time::Instant::now() + TRACK_WAIT);
                p.frames.push(f);
            }
            // Nothing is out yet: a switch this early needs no mark.
            MediaMessage::Discontinuity { .. } => {}
        }
    }
    p.settle(seen_keyframe).map(Some)
}

impl Probe {
    /// What the probe collected, made consistent: tracks without a config (or video without a
    /// keyframe) left out, outputs starting together at the first keyframe, the rate measured.
    fn settle(mut self, seen_keyframe: bool) -> Result<Probe, PipelineError> {
        if self.video.is_none() && self.audio.is_none() {
            return Err(PipelineError::NoMedia(START_TIMEOUT));
        }
        if !seen_keyframe {
            self.video = None;
        }
        if self.video.is_none() {
            self.frames.retain(|f| f.track == TrackKind::Audio);
        }
        if self.audio.is_none() {
            self.frames.retain(|f| f.track == TrackKind::Video);
        }
        // Outputs start together at the first keyframe: audio before it is dropped (at most a
        // GOP's worth when joining mid-GOP; the switch already starts at the keyframe).
        if let Some(key) = self
            .frames
            .iter()
            .find(|f| f.track == TrackKind::Video)
            .map(|f| f.dts)
        {
            self.frames
                .retain(|f| f.track == TrackKind::Video || f.dts >= key);
        }
        if self.frames.is_empty() {
            return Err(PipelineError::NoMedia(START_TIMEOUT));
        }
        self.fps = measure_fps(
            self.frames
                .iter()
                .filter(|f| f.track == TrackKind::Video)
                .map(|f| f.dts),
        );
        Ok(self)
    }
}

/// Frames per second from decode timestamps (ns): the median interval, robust to jitter.
pub fn measure_fps(dts: impl Iterator<Item = u64>) -> Option<f64> {
    let times: Vec<u64> = dts.collect();
    let mut gaps: Vec<u64> = times
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .filter(|&g| g > 0)
        .collect();
    if gaps.len() < 3 {
        return None;
    }
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2] as f64;
    Some(1e9 / median)
}
