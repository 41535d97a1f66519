//! The one place timestamps are unwrapped and normalised: wrapping source clocks in (32-bit
//! millisecond RTMP timestamps, 33-bit 90 kHz MPEG-TS PTS/DTS), monotonic nanoseconds from 0 out,
//! with wrap-around and jumps absorbed.

use super::TrackKind;

/// A jump larger than this (either way) is a discontinuity in the source, not media time: the
/// output continues from where it was instead of leaving a gap or going back.
pub const MAX_TIMESTAMP_JUMP: std::time::Duration = std::time::Duration::from_secs(10);
/// Spacing assumed for a frame that arrives after a discontinuity.
const RESYNC_STEP: std::time::Duration = std::time::Duration::from_millis(20);

/// A source clock: its tick rate and the width at which it wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    pub hz: u64,
    pub bits: u32,
}

impl Clock {
    /// RTMP chunk timestamps: milliseconds, 32 bits (RTMP spec §5.3.1.2.1).
    pub const RTMP: Clock = Clock { hz: 1000, bits: 32 };
    /// MPEG-TS PTS/DTS: 90 kHz, 33 bits (ISO 13818-1 §2.4.3.7).
    pub const MPEG_TS: Clock = Clock {
        hz: 90_000,
        bits: 33,
    };

    fn ticks(&self, d: std::time::Duration) -> i64 {
        (d.as_nanos() as u64 * self.hz / 1_000_000_000) as i64
    }

    pub fn to_ns(self, ticks: u64) -> u64 {
        (u128::from(ticks) * 1_000_000_000 / u128::from(self.hz)) as u64
    }

    /// The shortest signed distance from `from` to `to` on the clock's circle (serial-number
    /// arithmetic), so a wrap (RTMP 0xFFFF_FFF0 → 0x10) is a small step forward.
    pub fn delta(&self, from: u64, to: u64) -> i64 {
        let modulus = 1i128 << self.bits;
        let mut d = (i128::from(to) - i128::from(from)).rem_euclid(modulus);
        if d >= modulus / 2 {
            d -= modulus;
        }
        d as i64
    }

    /// The unwrapped value of the reading `raw` nearest to `last`, an unwrapped value: for a
    /// reader that keeps its own 64-bit time (the TS-HLS segmenter) rather than a [`Timeline`].
    /// A step back from before the first wrap cannot go below 0: it is read one wrap ahead.
    pub fn unwrap_near(&self, last: u64, raw: u64) -> u64 {
        let raw = raw & ((1u64 << self.bits) - 1);
        last.checked_add_signed(self.delta(last, raw))
            .unwrap_or(raw)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::RTMP
    }
}

#[derive(Debug, Default)]
pub struct Timeline {
    clock: Clock,
    /// Last raw value seen and its unwrapped 64-bit form.
    last_raw: Option<u64>,
    unwrapped: i64,
    /// Added to unwrapped input so that output starts at 0 and stays continuous across jumps.
    offset: i64,
    last_out: [Option<i64>; 2],
    /// Count of discontinuities absorbed (exposed as a metric).
    pub discontinuities: u64,
}

impl Timeline {
    pub fn new(clock: Clock) -> Self {
        Timeline {
            clock,
            ..Timeline::default()
        }
    }

    /// [`Clock::delta`] on this timeline's clock.
    pub fn delta(&self, from: u64, to: u64) -> i64 {
        self.clock.delta(from, to)
    }

    /// Maps a raw decode timestamp in clock ticks to output ticks.
    pub fn map_ticks(&mut self, track: TrackKind, raw: u64) -> i64 {
        let raw = raw & ((1u64 << self.clock.bits) - 1);
        match self.last_raw {
            None => {
                self.unwrapped = raw as i64;
                self.offset = -self.unwrapped;
            }
            Some(last) => {
                let delta = self.delta(last, raw);
                self.unwrapped += delta;
                if delta.abs() > self.clock.ticks(MAX_TIMESTAMP_JUMP) {
                    let last_out = self.last_out.iter().flatten().copied().max().unwrap_or(0);
                    self.offset = last_out + self.clock.ticks(RESYNC_STEP) - self.unwrapped;
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

    /// Maps a raw decode timestamp to output nanoseconds.
    pub fn map_ns(&mut self, track: TrackKind, raw: u64) -> u64 {
        let ticks = self.map_ticks(track, raw);
        self.clock.to_ns(ticks as u64)
    }

    /// RTMP: a 32-bit millisecond timestamp to output milliseconds.
    #[cfg(test)]
    pub fn map_ms(&mut self, track: TrackKind, raw: u32) -> i64 {
        self.map_ticks(track, u64::from(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TrackKind::*;

    #[test]
    fn starts_at_zero_and_follows_the_source() {
        let mut t = Timeline::new(Clock::RTMP);
        assert_eq!(t.map_ms(Video, 5000), 0);
        assert_eq!(t.map_ms(Audio, 5021), 21);
        assert_eq!(t.map_ms(Video, 5033), 33);
    }

    #[test]
    fn unwraps_the_32_bit_wrap() {
        let mut t = Timeline::new(Clock::RTMP);
        assert_eq!(t.map_ms(Video, u32::MAX - 32), 0);
        assert_eq!(t.map_ms(Video, u32::MAX), 32);
        assert_eq!(t.map_ms(Video, 0), 33);
        assert_eq!(t.map_ms(Video, 33), 66);
        assert_eq!(t.discontinuities, 0);
    }

    #[test]
    fn backward_and_forward_jumps_continue_the_output() {
        let mut t = Timeline::new(Clock::RTMP);
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
    fn unwraps_the_33_bit_mpeg_ts_clock() {
        let mut t = Timeline::new(Clock::MPEG_TS);
        let wrap = 1u64 << 33;
        assert_eq!(t.map_ns(Video, wrap - 3000), 0);
        // 3000 ticks later, past the wrap: 1/30 s.
        assert_eq!(t.map_ns(Video, 0), 33_333_333);
        assert_eq!(t.map_ns(Audio, 1920), 54_666_666);
        assert_eq!(t.discontinuities, 0);
        assert_eq!(t.delta(wrap - 1, 1), 2);
        assert_eq!(t.delta(1, wrap - 1), -2);
    }

    #[test]
    fn unwrap_near_a_64_bit_time() {
        let c = Clock::MPEG_TS;
        let wrap = 1u64 << 33;
        assert_eq!(c.unwrap_near(wrap - 100, 50), wrap + 50);
        assert_eq!(c.unwrap_near(3 * wrap + 10, wrap - 10), 3 * wrap - 10);
        assert_eq!(c.unwrap_near(5 * wrap, 90_000), 5 * wrap + 90_000);
        // Back past 0 before any wrap: one wrap ahead, not negative.
        assert_eq!(c.unwrap_near(100, wrap - 10), wrap - 10);
    }

    #[test]
    fn per_track_output_never_goes_back() {
        let mut t = Timeline::new(Clock::RTMP);
        t.map_ms(Video, 1000);
        t.map_ms(Video, 1100);
        assert_eq!(t.map_ms(Video, 1090), 100);
    }
}
