//! Statistics of a stream's source as received — video bitrate, frames, height, frame rate and
//! keyframe interval — cut into fixed windows for `GET /streaming/statistics/ffprobe`. Sans-IO:
//! the input task feeds it the switched media and asks for a window's [`SourceSample`] when one
//! is due; nothing here reads a clock.

use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::db::SourceSample;
use crate::media::{MediaMessage, TrackKind};

/// How often a live stream's source is sampled unless `statistics_sample_secs` says otherwise.
pub const DEFAULT_SAMPLE_PERIOD: Duration = Duration::from_secs(10);
/// How long samples are kept unless `statistics_retention_days` says otherwise.
pub const DEFAULT_RETENTION_DAYS: u64 = 30;

/// One window being measured.
#[derive(Debug)]
pub struct SourceStats {
    started: Instant,
    started_wall: OffsetDateTime,
    /// Any media (audio or video) arrived in this window: the stream was received.
    received: bool,
    video_bytes: u64,
    frames: u64,
    first_dts: Option<u64>,
    last_dts: u64,
    /// The source's current picture height (kept across windows).
    height: u32,
    /// Decode time of the last keyframe (kept across windows; cleared at a switch, whose
    /// encoder has its own cadence).
    last_keyframe: Option<u64>,
    /// Longest keyframe interval that ended in this window, ns.
    max_interval: Option<u64>,
    /// The last interval measured (a window without a keyframe reports at least this).
    last_interval: Option<u64>,
}

impl SourceStats {
    pub fn new(now: Instant, wall: OffsetDateTime) -> SourceStats {
        SourceStats {
            started: now,
            started_wall: wall,
            received: false,
            video_bytes: 0,
            frames: 0,
            first_dts: None,
            last_dts: 0,
            height: 0,
            last_keyframe: None,
            max_interval: None,
            last_interval: None,
        }
    }

    /// Takes note of one message going to the pipeline.
    pub fn observe(&mut self, msg: &MediaMessage) {
        match msg {
            MediaMessage::VideoConfig(c) => self.height = c.height,
            MediaMessage::Frame(f) if f.track == TrackKind::Video => {
                self.received = true;
                self.video_bytes += f.data.len() as u64;
                self.frames += 1;
                self.first_dts.get_or_insert(f.dts);
                self.last_dts = f.dts;
                if f.keyframe {
                    if let Some(prev) = self.last_keyframe.filter(|&p| f.dts > p) {
                        let interval = f.dts - prev;
                        self.max_interval = Some(self.max_interval.unwrap_or(0).max(interval));
                        self.last_interval = Some(interval);
                    }
                    self.last_keyframe = Some(f.dts);
                }
            }
            MediaMessage::Frame(_) => self.received = true,
            MediaMessage::Discontinuity { .. } => self.last_keyframe = None,
            MediaMessage::Tracks(_) | MediaMessage::AudioConfig(_) => {}
        }
    }

    /// Whether the window has lasted `period`.
    pub fn due(&self, now: Instant, period: Duration) -> bool {
        now.duration_since(self.started) >= period
    }

    /// Ends the window: its sample (`None` when nothing was received in it) and a new window
    /// from `now`.
    pub fn cut(&mut self, now: Instant, wall: OffsetDateTime) -> Option<SourceSample> {
        let wall_secs = now.duration_since(self.started).as_secs_f64();
        // The frames' own times say the rate exactly for a constant-rate source; arrival
        // times carry the network's jitter. N frames span N - 1 frame durations.
        let (fps, secs) = match self.first_dts {
            Some(first) if self.frames >= 2 && self.last_dts > first => {
                let span = (self.last_dts - first) as f64 / 1e9;
                let fps = (self.frames - 1) as f64 / span;
                (fps, self.frames as f64 / fps)
            }
            _ => (self.frames as f64 / wall_secs.max(1e-3), wall_secs),
        };
        let interval = self.max_interval.or(self.last_interval);
        let sample = self.received.then(|| SourceSample {
            time: self.started_wall,
            bitrate_kbps: self.video_bytes as f64 * 8.0 / 1000.0 / secs.max(1e-3),
            frames: self.frames,
            height: if self.frames > 0 { self.height } else { 0 },
            fps: round2(fps),
            keyframe_interval: interval.map_or(0.0, |ns| round2(ns as f64 / 1e9)),
        });
        *self = SourceStats {
            height: self.height,
            last_keyframe: self.last_keyframe,
            last_interval: self.last_interval,
            ..SourceStats::new(now, wall)
        };
        sample
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::{Frame, VideoCodec, VideoConfig};

    fn video(dts_ms: u64, keyframe: bool, bytes: usize) -> MediaMessage {
        MediaMessage::Frame(Frame {
            track: TrackKind::Video,
            dts: dts_ms * 1_000_000,
            pts: dts_ms * 1_000_000,
            keyframe,
            data: vec![0u8; bytes].into(),
        })
    }

    fn config(height: u32) -> MediaMessage {
        MediaMessage::VideoConfig(VideoConfig {
            codec: VideoCodec::H264,
            record: Default::default(),
            width: height * 16 / 9,
            height,
        })
    }

    #[test]
    fn a_window_reports_rate_bitrate_height_and_keyframe_interval() {
        let t0 = Instant::now();
        let wall = OffsetDateTime::UNIX_EPOCH;
        let mut s = SourceStats::new(t0, wall);
        s.observe(&config(720));
        // 25 fps (40 ms), a keyframe every 2 s, 5 000 bytes a frame = 1 000 kbit/s.
        for i in 0..250u64 {
            s.observe(&video(i * 40, i % 50 == 0, 5_000));
        }
        assert!(s.due(t0 + Duration::from_secs(10), DEFAULT_SAMPLE_PERIOD));
        assert!(!s.due(t0 + Duration::from_secs(9), DEFAULT_SAMPLE_PERIOD));
        let got = s
            .cut(t0 + Duration::from_secs(10), wall + Duration::from_secs(10))
            .unwrap();
        assert_eq!(got.time, wall);
        assert_eq!(got.frames, 250);
        assert_eq!(got.height, 720);
        assert_eq!(got.fps, 25.0);
        assert!((got.bitrate_kbps - 1000.0).abs() < 0.01, "{got:?}");
        assert_eq!(got.keyframe_interval, 2.0);
        // The next window has no keyframe: the last interval stands; height carries over.
        for i in 250..260u64 {
            s.observe(&video(i * 40, false, 100));
        }
        let next = s
            .cut(t0 + Duration::from_secs(11), wall + Duration::from_secs(11))
            .unwrap();
        assert_eq!(next.time, wall + Duration::from_secs(10));
        assert_eq!(
            (next.frames, next.height, next.keyframe_interval),
            (10, 720, 2.0)
        );
    }

    #[test]
    fn nothing_received_is_no_sample_and_audio_alone_is_one_without_video() {
        let t0 = Instant::now();
        let wall = OffsetDateTime::UNIX_EPOCH;
        let mut s = SourceStats::new(t0, wall);
        assert_eq!(s.cut(t0 + Duration::from_secs(10), wall), None);
        s.observe(&MediaMessage::Frame(Frame {
            track: TrackKind::Audio,
            dts: 0,
            pts: 0,
            keyframe: true,
            data: vec![0u8; 10].into(),
        }));
        let got = s.cut(t0 + Duration::from_secs(20), wall).unwrap();
        assert_eq!((got.frames, got.height, got.bitrate_kbps), (0, 0, 0.0));
    }

    #[test]
    fn a_switch_does_not_measure_an_interval_across_two_encoders() {
        let t0 = Instant::now();
        let wall = OffsetDateTime::UNIX_EPOCH;
        let mut s = SourceStats::new(t0, wall);
        s.observe(&video(0, true, 10));
        s.observe(&MediaMessage::Discontinuity { at: 500_000_000 });
        s.observe(&video(9_000, true, 10));
        s.observe(&video(10_000, true, 10));
        let got = s.cut(t0 + Duration::from_secs(10), wall).unwrap();
        assert_eq!(got.keyframe_interval, 1.0);
    }
}
