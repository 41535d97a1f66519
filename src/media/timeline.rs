//! The one place timestamps are unwrapped and normalised: 32-bit millisecond RTMP timestamps in,
//! monotonic nanoseconds from 0 out, with wrap-around and backward jumps absorbed.

use super::{TrackKind, NANOS_PER_MILLI};

/// A jump larger than this (either way) is a discontinuity in the source, not media time: the
/// output continues from where it was instead of leaving a gap or going back.
pub const MAX_TIMESTAMP_JUMP_MS: i64 = 10_000;
/// Spacing assumed for a frame that arrives after a discontinuity.
const RESYNC_STEP_MS: i64 = 20;

#[derive(Debug, Default)]
pub struct Timeline {
    /// Last raw 32-bit value seen and its unwrapped 64-bit form.
    last_raw: Option<u32>,
    unwrapped: i64,
    /// Added to unwrapped input so that output starts at 0 and stays continuous across jumps.
    offset: i64,
    last_out: [Option<i64>; 2],
    /// Count of discontinuities absorbed (exposed as a metric).
    pub discontinuities: u64,
}

impl Timeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps a raw 32-bit millisecond timestamp (decode time) to output milliseconds.
    pub fn map_ms(&mut self, track: TrackKind, raw: u32) -> i64 {
        match self.last_raw {
            None => {
                self.unwrapped = i64::from(raw);
                self.offset = -self.unwrapped;
            }
            Some(last) => {
                // The shortest signed distance on the 2^32 circle (RFC-style serial arithmetic),
                // so 0xFFFF_FFF0 → 0x10 is +32 ms, not −4 billion.
                let delta = i64::from(raw.wrapping_sub(last) as i32);
                self.unwrapped += delta;
                if delta.abs() > MAX_TIMESTAMP_JUMP_MS {
                    let last_out = self.last_out.iter().flatten().copied().max().unwrap_or(0);
                    self.offset = last_out + RESYNC_STEP_MS - self.unwrapped;
                    self.discontinuities += 1;
                }
            }
        }
        self.last_raw = Some(raw);
        let slot = track as usize;
        let mut out = self.unwrapped + self.offset;
        // Small backward steps within one track (bad muxers) are clamped to keep DTS monotonic.
        if let Some(prev) = self.last_out[slot] {
            if out < prev {
                out = prev;
            }
        }
        self.last_out[slot] = Some(out);
        out.max(0)
    }

    pub fn map_ns(&mut self, track: TrackKind, raw: u32) -> u64 {
        self.map_ms(track, raw) as u64 * NANOS_PER_MILLI
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TrackKind::*;

    #[test]
    fn starts_at_zero_and_follows_the_source() {
        let mut t = Timeline::new();
        assert_eq!(t.map_ms(Video, 5000), 0);
        assert_eq!(t.map_ms(Audio, 5021), 21);
        assert_eq!(t.map_ms(Video, 5033), 33);
    }

    #[test]
    fn unwraps_the_32_bit_wrap() {
        let mut t = Timeline::new();
        assert_eq!(t.map_ms(Video, u32::MAX - 32), 0);
        assert_eq!(t.map_ms(Video, u32::MAX), 32);
        assert_eq!(t.map_ms(Video, 0), 33);
        assert_eq!(t.map_ms(Video, 33), 66);
        assert_eq!(t.discontinuities, 0);
    }

    #[test]
    fn backward_and_forward_jumps_continue_the_output() {
        let mut t = Timeline::new();
        t.map_ms(Video, 100_000);
        assert_eq!(t.map_ms(Video, 100_040), 40);
        // Encoder restarted its clock.
        assert_eq!(t.map_ms(Video, 0), 60);
        assert_eq!(t.map_ms(Audio, 10), 70);
        assert_eq!(t.map_ms(Video, 40), 100);
        // A jump far ahead.
        assert_eq!(t.map_ms(Video, 3_000_000), 120);
        assert_eq!(t.discontinuities, 2);
    }

    #[test]
    fn per_track_output_never_goes_back() {
        let mut t = Timeline::new();
        t.map_ms(Video, 1000);
        t.map_ms(Video, 1100);
        assert_eq!(t.map_ms(Video, 1090), 100);
    }
}
