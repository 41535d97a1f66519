//! The one re-timer: puts frames of successive sources (main/backup inputs, PULL source URIs)
//! on one continuous output timeline. When a source starts, its first frame is placed where
//! the wall clock says the output is, never before the last frame sent; frames that would
//! still go backwards on their track (audio overlapping what the previous source sent) are
//! dropped and counted. Sans-IO: `now` is an input.

use std::time::Duration;

use tokio::time::Instant;

use super::{Frame, TrackKind};

/// Spacing between the last frame out and the first one of a new source when the wall clock
/// gives no room (the new source's buffered GOP is longer than the outage).
pub const MIN_STEP: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
pub struct Retimer {
    /// Added to the current source's timestamps (ns); `None` until its first frame fixes it.
    offset: Option<i64>,
    /// Last decode time sent per track on the output timeline.
    last_out: [Option<u64>; 2],
    /// When the last frame went out.
    last_forward: Option<Instant>,
    /// Frames dropped because they would have gone backwards in time.
    pub overlapped: u64,
}

fn track(t: TrackKind) -> usize {
    match t {
        TrackKind::Video => 0,
        TrackKind::Audio => 1,
    }
}

impl Retimer {
    /// Whether anything has been sent: a new source then continues after a discontinuity.
    pub fn has_output(&self) -> bool {
        self.last_out.iter().any(Option::is_some)
    }

    /// A new source starts; its offset is fixed by [`Retimer::start`] or its first frame.
    pub fn new_source(&mut self) {
        self.offset = None;
    }

    /// Fixes the new source's offset from the span it starts with (`first` and `newest`
    /// decode times of what it has buffered): its newest frame lands at the output's wall-clock
    /// position, so media time keeps pace with real time and an outage becomes a gap the
    /// pipeline fills. Returns where `first` lands on the output timeline.
    pub fn start(&mut self, first: u64, newest: u64, now: Instant) -> u64 {
        let offset = match self.last_out.iter().flatten().copied().max() {
            // The very first source keeps its own timeline.
            None => 0,
            Some(last) => {
                let elapsed = self
                    .last_forward
                    .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
                let aligned =
                    last as i64 + elapsed.as_nanos() as i64 - (newest as i64 - first as i64);
                let target = aligned.max((last + MIN_STEP.as_nanos() as u64) as i64);
                target - first as i64
            }
        };
        self.offset = Some(offset);
        self.map(first)
    }

    /// A time of the current source on the output timeline (`None` before it started).
    pub fn output_time(&self, t: u64) -> Option<u64> {
        self.offset.map(|_| self.map(t))
    }

    fn map(&self, t: u64) -> u64 {
        (t as i64 + self.offset.unwrap_or(0)).max(0) as u64
    }

    /// The frame on the output timeline, or `None` when it would go backwards on its track.
    pub fn retime(&mut self, f: Frame, now: Instant) -> Option<Frame> {
        if self.offset.is_none() {
            self.start(f.dts, f.dts, now);
        }
        let (dts, pts) = (self.map(f.dts), self.map(f.pts));
        let last = &mut self.last_out[track(f.track)];
        if last.is_some_and(|last| dts < last) {
            self.overlapped += 1;
            return None;
        }
        *last = Some(dts);
        self.last_forward = Some(now);
        Some(Frame { dts, pts, ..f })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const MS: u64 = 1_000_000;

    fn frame(track: TrackKind, dts_ms: u64) -> Frame {
        Frame {
            track,
            dts: dts_ms * MS,
            pts: dts_ms * MS,
            keyframe: track == TrackKind::Video,
            duration: None,
            data: Bytes::new(),
        }
    }

    #[test]
    fn the_first_source_keeps_its_timeline() {
        let mut r = Retimer::default();
        let now = Instant::now();
        assert!(!r.has_output());
        let f = r.retime(frame(TrackKind::Video, 5000), now).unwrap();
        assert_eq!(f.dts, 5000 * MS);
        assert!(r.has_output());
    }

    #[test]
    fn a_new_source_continues_at_the_wall_clock_position() {
        let mut r = Retimer::default();
        let t0 = Instant::now();
        r.retime(frame(TrackKind::Video, 1000), t0).unwrap();
        // 3 s later a source whose clock is at 90 s starts.
        r.new_source();
        let at = r.start(90_000 * MS, 90_000 * MS, t0 + Duration::from_secs(3));
        assert_eq!(at, 4000 * MS);
        let f = r
            .retime(frame(TrackKind::Video, 90_040), t0 + Duration::from_secs(3))
            .unwrap();
        assert_eq!(f.dts, 4040 * MS);
    }

    #[test]
    fn a_buffered_gop_lands_with_its_newest_frame_at_now_but_never_before_the_last_frame() {
        let mut r = Retimer::default();
        let t0 = Instant::now();
        r.retime(frame(TrackKind::Video, 1000), t0).unwrap();
        r.new_source();
        // The new source buffered 2 s but only 0.5 s passed: the step keeps time moving on.
        let at = r.start(50_000 * MS, 52_000 * MS, t0 + Duration::from_millis(500));
        assert_eq!(at, 1000 * MS + MIN_STEP.as_nanos() as u64);
    }

    #[test]
    fn frames_that_would_go_backwards_on_their_track_are_dropped_and_counted() {
        let mut r = Retimer::default();
        let t0 = Instant::now();
        r.retime(frame(TrackKind::Audio, 1000), t0).unwrap();
        r.retime(frame(TrackKind::Video, 980), t0).unwrap();
        r.new_source();
        // The new source's audio starts 100 ms before its keyframe.
        r.start(10_000 * MS, 10_000 * MS, t0);
        assert!(r.retime(frame(TrackKind::Audio, 9_900), t0).is_none());
        assert_eq!(r.overlapped, 1);
        assert!(r.retime(frame(TrackKind::Video, 10_000), t0).is_some());
    }
}
