//! Statistics of a stream's source as received — video bitrate, frames, height, frame rate and
//! keyframe interval — cut into windows for `GET /streaming/statistics/ffprobe`. Windows end on
//! multiples of the sampling period on the wall clock (…:00, :10, :20 for 10 s), so a stream
//! received without a break leaves exactly one sample in every bucket whose size is a multiple
//! of the period: a missing bucket always means the stream was not received. Sans-IO: the input
//! task feeds it the switched media and the wall time; nothing here reads a clock.

use std::time::Duration;

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
    period: Duration,
    /// Start of the window (the session's start, then a period boundary).
    started: OffsetDateTime,
    /// The boundary the window ends at.
    ends: OffsetDateTime,
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
    pub fn new(now: OffsetDateTime, period: Duration) -> SourceStats {
        SourceStats {
            period,
            started: now,
            ends: next_boundary(now, period),
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

    /// Whether the window's end has passed.
    pub fn due(&self, now: OffsetDateTime) -> bool {
        now >= self.ends
    }

    /// Ends the window at `now`: its sample (`None` when nothing was received in it); the next
    /// window starts at the boundary just passed (or at `now` when the stream ends between two).
    pub fn cut(&mut self, now: OffsetDateTime) -> Option<SourceSample> {
        let wall_secs = (now - self.started).as_seconds_f64().max(0.0);
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
            time: self.started,
            bitrate_kbps: self.video_bytes as f64 * 8.0 / 1000.0 / secs.max(1e-3),
            frames: self.frames,
            height: if self.frames > 0 { self.height } else { 0 },
            fps: round2(fps),
            keyframe_interval: interval.map_or(0.0, |ns| round2(ns as f64 / 1e9)),
            // The outputs' part: the registry's, when it stores the sample.
            frames_dropped: 0,
            transcoding_speed: None,
            viewers: 0,
        });
        let next = if now >= self.ends { self.ends } else { now };
        *self = SourceStats {
            height: self.height,
            last_keyframe: self.last_keyframe,
            last_interval: self.last_interval,
            ..SourceStats::new(next, self.period)
        };
        sample
    }
}

/// The first multiple of `period` since the epoch after `t`.
fn next_boundary(t: OffsetDateTime, period: Duration) -> OffsetDateTime {
    let p = period.as_nanos().max(1) as i128;
    let ns = t.unix_timestamp_nanos();
    let next = (ns.div_euclid(p) + 1) * p;
    OffsetDateTime::from_unix_timestamp_nanos(next).unwrap_or(t)
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
            duration: None,
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

    fn at(secs: f64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + Duration::from_secs_f64(secs)
    }

    #[test]
    fn windows_end_on_period_boundaries_of_the_wall_clock() {
        // Started at 3.5 s: the first window ends at 10 s, the next ones every 10 s, however
        // late the cut comes; each sample is stamped with its window's start.
        let mut s = SourceStats::new(at(3.5), DEFAULT_SAMPLE_PERIOD);
        let mut times = Vec::new();
        let mut dts = 0;
        for cut_at in [10.08, 20.1, 30.02, 40.09, 44.0] {
            s.observe(&video(dts, true, 10));
            dts += 1000;
            assert!(s.due(at(cut_at)) || cut_at == 44.0);
            times.push(s.cut(at(cut_at)).unwrap().time);
        }
        let secs: Vec<f64> = times
            .iter()
            .map(|t| (*t - OffsetDateTime::UNIX_EPOCH).as_seconds_f64())
            .collect();
        assert_eq!(secs, [3.5, 10.0, 20.0, 30.0, 40.0]);
        assert!(!s.due(at(49.9)) && s.due(at(50.0)));
    }

    #[test]
    fn a_window_reports_rate_bitrate_height_and_keyframe_interval() {
        let wall = OffsetDateTime::UNIX_EPOCH;
        let mut s = SourceStats::new(wall, DEFAULT_SAMPLE_PERIOD);
        s.observe(&config(720));
        // 25 fps (40 ms), a keyframe every 2 s, 5 000 bytes a frame = 1 000 kbit/s.
        for i in 0..250u64 {
            s.observe(&video(i * 40, i % 50 == 0, 5_000));
        }
        assert!(s.due(wall + Duration::from_secs(10)));
        assert!(!s.due(wall + Duration::from_secs(9)));
        let got = s.cut(wall + Duration::from_secs(10)).unwrap();
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
        let next = s.cut(wall + Duration::from_secs(11)).unwrap();
        assert_eq!(next.time, wall + Duration::from_secs(10));
        assert_eq!(
            (next.frames, next.height, next.keyframe_interval),
            (10, 720, 2.0)
        );
    }

    #[test]
    fn nothing_received_is_no_sample_and_audio_alone_is_one_without_video() {
        let wall = OffsetDateTime::UNIX_EPOCH;
        let mut s = SourceStats::new(wall, DEFAULT_SAMPLE_PERIOD);
        assert_eq!(s.cut(wall + Duration::from_secs(10)), None);
        s.observe(&MediaMessage::Frame(Frame {
            track: TrackKind::Audio,
            dts: 0,
            pts: 0,
            keyframe: true,
            duration: None,
            data: vec![0u8; 10].into(),
        }));
        let got = s.cut(wall + Duration::from_secs(20)).unwrap();
        assert_eq!((got.frames, got.height, got.bitrate_kbps), (0, 0, 0.0));
    }

    #[test]
    fn a_switch_does_not_measure_an_interval_across_two_encoders() {
        let wall = OffsetDateTime::UNIX_EPOCH;
        let mut s = SourceStats::new(wall, DEFAULT_SAMPLE_PERIOD);
        s.observe(&video(0, true, 10));
        s.observe(&MediaMessage::Discontinuity { at: 500_000_000 });
        s.observe(&video(9_000, true, 10));
        s.observe(&video(10_000, true, 10));
        let got = s.cut(wall + Duration::from_secs(10)).unwrap();
        assert_eq!(got.keyframe_interval, 1.0);
    }
}
