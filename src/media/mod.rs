//! Media frames: the only types that cross from ingest to the pipeline. An adapter per protocol
//! (`ingest::*::to_media`) produces [`MediaMessage`]s; the pipeline consumes them.

pub mod codec;
pub mod timeline;

use bytes::Bytes;

pub use timeline::Timeline;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrackKind {
    Video,
    Audio,
}

/// H.264 decoder configuration: the `AVCDecoderConfigurationRecord` (ISO 14496-15 §5.3.3.1) as
/// carried in an FLV/MP4 `avcC`, plus what we read from its first SPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H264Config {
    pub avcc: Bytes,
    pub width: u32,
    pub height: u32,
}

/// AAC decoder configuration: the `AudioSpecificConfig` (ISO 14496-3 §1.6.2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AacConfig {
    pub asc: Bytes,
    pub sample_rate: u32,
    pub channels: u8,
}

/// Opus (RFC 6716) as WebRTC carries it (RFC 7587): always 48 kHz on the wire, so the decoder
/// needs only the channel count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpusConfig {
    pub channels: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AudioConfig {
    Aac(AacConfig),
    Opus(OpusConfig),
}

impl AudioConfig {
    /// Whether frames of `other` can go through the decoder built for `self` (a caps change
    /// within one codec is fine; AAC ↔ Opus needs another decoder).
    pub fn same_codec(&self, other: &AudioConfig) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// One access unit. Times are nanoseconds on the stream's own timeline (starting near 0,
/// monotonic per track after [`Timeline`] normalisation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub track: TrackKind,
    pub dts: u64,
    pub pts: u64,
    pub keyframe: bool,
    /// H.264: length-prefixed (4-byte) NAL units as in avcC; AAC, Opus: one raw frame.
    pub data: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaMessage {
    VideoConfig(H264Config),
    AudioConfig(AudioConfig),
    Frame(Frame),
    /// The source changed (main/backup switch): frames from decode time `at` (ns) on come from
    /// another encoder. The packager marks the next segment boundary.
    Discontinuity {
        at: u64,
    },
}

pub const NANOS_PER_MILLI: u64 = 1_000_000;
