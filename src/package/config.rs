//! A stream's packaging targets: segment and part durations and the live window.

use std::time::Duration;

/// Segment and part targets plus the live window, validated by [`PackagingConfig::new`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PackagingConfig {
    pub segment: Duration,
    pub part: Duration,
    /// Complete segments listed in a live playlist (without DVR).
    pub window_segments: usize,
    /// Segments kept fetchable after they leave the playlist, for players that are behind.
    pub retain_segments: usize,
    /// TS-HLS stops being muxed this long after its last request; `None`: muxed always
    /// (`mpegts_idle_secs`, see [`super::Package::request_ts`]).
    pub mpegts_idle: Option<Duration>,
}

pub const DEFAULT_SEGMENT: Duration = Duration::from_secs(2);
pub const DEFAULT_PART: Duration = Duration::from_millis(500);
pub const SEGMENT_RANGE_MS: std::ops::RangeInclusive<u64> = 2000..=4000;
pub const PART_RANGE_MS: std::ops::RangeInclusive<u64> = 500..=1000;
/// Live window: 6 segments = 12 s at the default size, enough for a player's start-up and
/// the 3-target-duration hold-back of regular HLS clients.
pub const DEFAULT_WINDOW_SEGMENTS: usize = 6;
/// Segments kept fetchable behind the live window: GStreamer 1.22.0's dashdemux2 starts 30 s +
/// a segment behind live (see `dash::DashClient`), so at 2 s segments 16 + the growing one + one
/// in flight must exist. Complete segments live on disk, not in memory.
pub const DEFAULT_RETAIN_SEGMENTS: usize = 11;
/// MediaMTX's `hlsMuxerCloseAfter`: a minute without a request stops TS-HLS muxing.
pub const DEFAULT_MPEGTS_IDLE: Duration = Duration::from_secs(60);

impl Default for PackagingConfig {
    fn default() -> Self {
        PackagingConfig {
            segment: DEFAULT_SEGMENT,
            part: DEFAULT_PART,
            window_segments: DEFAULT_WINDOW_SEGMENTS,
            retain_segments: DEFAULT_RETAIN_SEGMENTS,
            mpegts_idle: Some(DEFAULT_MPEGTS_IDLE),
        }
    }
}

impl PackagingConfig {
    pub fn new(segment_ms: u64, part_ms: u64) -> Result<Self, String> {
        if !SEGMENT_RANGE_MS.contains(&segment_ms) {
            return Err(format!(
                "segment duration must be 2000..=4000 ms, not {segment_ms}"
            ));
        }
        if !PART_RANGE_MS.contains(&part_ms) || !segment_ms.is_multiple_of(part_ms) {
            return Err(format!(
                "part duration must be 500..=1000 ms and divide the segment duration, not {part_ms}"
            ));
        }
        Ok(PackagingConfig {
            segment: Duration::from_millis(segment_ms),
            part: Duration::from_millis(part_ms),
            ..PackagingConfig::default()
        })
    }

    /// EXT-X-TARGETDURATION: whole seconds, never below a segment's rounded duration.
    pub fn target_duration_secs(&self) -> u64 {
        self.segment.as_secs_f64().ceil() as u64
    }
}
