//! Media frames: the only types that cross from ingest to the pipeline. An adapter per protocol
//! (`ingest::*::to_media`) produces [`MediaMessage`]s; the pipeline consumes them.

pub mod codec;
pub mod retime;
pub mod timeline;

use bytes::Bytes;

pub use timeline::Timeline;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrackKind {
    Video,
    Audio,
}

/// The video codecs the pipeline decodes. Whatever arrives is transcoded to the same H.264
/// ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VideoCodec {
    H264,
    H265,
    Av1,
}

impl VideoCodec {
    pub fn name(self) -> &'static str {
        match self {
            VideoCodec::H264 => "H.264",
            VideoCodec::H265 => "HEVC",
            VideoCodec::Av1 => "AV1",
        }
    }
}

/// Video decoder configuration as MP4 and (Enhanced) FLV carry it, plus the coded size read
/// from its sequence parameters: H.264 `avcC` (ISO 14496-15 §5.3.3.1), HEVC `hvcC` (§8.3.3.1)
/// or AV1 `av1C` (AV1 Codec ISO Media File Format Binding §2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoConfig {
    pub codec: VideoCodec,
    pub record: Bytes,
    pub width: u32,
    pub height: u32,
}

/// The tracks a container says its stream has (MPEG-TS PMT, FLV `onMetaData`, SDP m-lines),
/// known before their first frame: the outputs wait for each, bounded by [`TRACK_WAIT`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tracks {
    pub video: bool,
    pub audio: bool,
}

/// How long a declared track that has not delivered (no decoder config, or no keyframe yet) is
/// waited for before the outputs start without it. Long-GOP encoders are common (OBS's default
/// keyframe interval is up to 10 s with "auto"; hardware encoders use 4–8 s), so a source that
/// joins mid-GOP must be able to wait a full GOP.
pub const TRACK_WAIT: std::time::Duration = std::time::Duration::from_secs(12);

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
    pub fn codec_name(&self) -> &'static str {
        match self {
            AudioConfig::Aac(_) => "AAC",
            AudioConfig::Opus(_) => "Opus",
        }
    }

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
    /// Nanoseconds, when the producer knows it: our encoders do (a muxer reading them then
    /// closes a chunk with its last frame instead of waiting for the next one to learn its
    /// end); what arrives from a publisher does not say.
    pub duration: Option<u64>,
    /// H.264, HEVC: length-prefixed (4-byte) NAL units as in avcC/hvcC; AV1: one temporal unit
    /// of low-overhead OBUs (with size fields), as in MP4; AAC, Opus: one raw frame.
    pub data: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaMessage {
    /// The container declared these tracks (sent when the declaration changes).
    Tracks(Tracks),
    VideoConfig(VideoConfig),
    AudioConfig(AudioConfig),
    Frame(Frame),
    /// The source changed (main/backup switch): frames from decode time `at` (ns) on come from
    /// another encoder. The packager marks the next segment boundary.
    Discontinuity {
        at: u64,
    },
}
