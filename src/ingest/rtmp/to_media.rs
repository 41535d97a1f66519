//! FLV tag bodies (as RTMP carries them) → [`MediaMessage`]s: AVC sequence headers and NAL
//! units, AAC sequence headers and raw frames. Sans-IO: bytes and timestamps in, messages out.

use bytes::Bytes;

use crate::media::codec::{parse_asc, parse_avcc, CodecError};
use crate::media::{AacConfig, AudioConfig, Frame, H264Config, MediaMessage, Timeline, TrackKind};

/// FLV video codec id for AVC (E.4.3.1 of the FLV spec v10.1).
const FLV_CODEC_AVC: u8 = 7;
/// FLV sound format for AAC (E.4.2.1).
const FLV_SOUND_AAC: u8 = 10;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlvError {
    #[error("truncated {0} tag")]
    Truncated(&'static str),
    #[error("unsupported video codec id {0} (only H.264/AVC)")]
    VideoCodec(u8),
    #[error("unsupported sound format {0} (only AAC)")]
    AudioCodec(u8),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("{0} frame before its sequence header")]
    NoConfig(&'static str),
}

/// Per-connection state of the adapter.
#[derive(Debug, Default)]
pub struct FlvToMedia {
    timeline: Timeline,
    video: Option<H264Config>,
    audio: Option<AacConfig>,
}

impl FlvToMedia {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn video_config(&self) -> Option<&H264Config> {
        self.video.as_ref()
    }

    pub fn audio_config(&self) -> Option<&AacConfig> {
        self.audio.as_ref()
    }

    pub fn discontinuities(&self) -> u64 {
        self.timeline.discontinuities
    }

    /// A VIDEODATA body. `Ok(None)`: nothing to forward (end of sequence, repeated header,
    /// command frames).
    pub fn video(
        &mut self,
        timestamp: u32,
        body: &Bytes,
    ) -> Result<Option<MediaMessage>, FlvError> {
        let &[first, packet_type, c0, c1, c2, ..] = body.as_ref() else {
            return match body.first() {
                // A 1-byte "video info/command" frame (frame type 5) carries nothing.
                Some(b) if b >> 4 == 5 => Ok(None),
                _ => Err(FlvError::Truncated("video")),
            };
        };
        let frame_type = first >> 4;
        let codec = first & 0x0f;
        if first & 0x80 != 0 || codec != FLV_CODEC_AVC {
            // Bit 7 set is the Enhanced-RTMP extended header (HEVC, AV1, VP9 by FourCC).
            return Err(FlvError::VideoCodec(codec));
        }
        if frame_type == 5 {
            return Ok(None);
        }
        let payload = body.slice(5..);
        match packet_type {
            0 => {
                let config = parse_avcc(payload)?;
                if self.video.as_ref() == Some(&config) {
                    return Ok(None);
                }
                self.video = Some(config.clone());
                Ok(Some(MediaMessage::VideoConfig(config)))
            }
            1 => {
                if self.video.is_none() {
                    return Err(FlvError::NoConfig("video"));
                }
                // Composition time offset: signed 24-bit milliseconds.
                let cts = (i32::from_be_bytes([c0, c1, c2, 0]) >> 8) as i64;
                let dts = self.timeline.map_ns(TrackKind::Video, u64::from(timestamp));
                let pts = (dts as i64 + cts * 1_000_000).max(0) as u64;
                if payload.is_empty() {
                    return Ok(None);
                }
                Ok(Some(MediaMessage::Frame(Frame {
                    track: TrackKind::Video,
                    dts,
                    pts,
                    keyframe: frame_type == 1,
                    data: payload,
                })))
            }
            _ => Ok(None), // 2 = end of sequence
        }
    }

    /// An AUDIODATA body.
    pub fn audio(
        &mut self,
        timestamp: u32,
        body: &Bytes,
    ) -> Result<Option<MediaMessage>, FlvError> {
        let &[first, packet_type, ..] = body.as_ref() else {
            return Err(FlvError::Truncated("audio"));
        };
        let format = first >> 4;
        if format != FLV_SOUND_AAC {
            return Err(FlvError::AudioCodec(format));
        }
        let payload = body.slice(2..);
        if packet_type == 0 {
            let config = parse_asc(payload)?;
            if self.audio.as_ref() == Some(&config) {
                return Ok(None);
            }
            self.audio = Some(config.clone());
            return Ok(Some(MediaMessage::AudioConfig(AudioConfig::Aac(config))));
        }
        if self.audio.is_none() {
            return Err(FlvError::NoConfig("audio"));
        }
        if payload.is_empty() {
            return Ok(None);
        }
        let ts = self.timeline.map_ns(TrackKind::Audio, u64::from(timestamp));
        Ok(Some(MediaMessage::Frame(Frame {
            track: TrackKind::Audio,
            dts: ts,
            pts: ts,
            keyframe: true,
            data: payload,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::media::codec::tests::AVCC_720P;

    fn video_tag(frame_type: u8, packet_type: u8, cts: i32, payload: &[u8]) -> Bytes {
        let mut v = vec![(frame_type << 4) | FLV_CODEC_AVC, packet_type];
        v.extend_from_slice(&cts.to_be_bytes()[1..]);
        v.extend_from_slice(payload);
        Bytes::from(v)
    }

    #[test]
    fn avc_sequence_header_then_frames() {
        let mut a = FlvToMedia::new();
        assert_eq!(
            a.video(0, &video_tag(1, 1, 0, &[0, 0, 0, 1, 0x65])),
            Err(FlvError::NoConfig("video"))
        );
        let Some(MediaMessage::VideoConfig(c)) =
            a.video(0, &video_tag(1, 0, 0, AVCC_720P)).unwrap()
        else {
            panic!("config expected")
        };
        assert_eq!((c.width, c.height), (1280, 720));
        // Same header again: nothing new to forward.
        assert_eq!(a.video(0, &video_tag(1, 0, 0, AVCC_720P)).unwrap(), None);
        let Some(MediaMessage::Frame(f)) = a
            .video(1000, &video_tag(1, 1, 66, &[0, 0, 0, 1, 0x65]))
            .unwrap()
        else {
            panic!("frame expected")
        };
        assert!(f.keyframe);
        assert_eq!((f.dts, f.pts), (0, 66_000_000));
        let Some(MediaMessage::Frame(f)) = a
            .video(1033, &video_tag(2, 1, -33, &[0, 0, 0, 1, 0x41]))
            .unwrap()
        else {
            panic!("frame expected")
        };
        assert!(!f.keyframe);
        assert_eq!((f.dts, f.pts), (33_000_000, 0));
    }

    #[test]
    fn refuses_other_codecs_and_garbage() {
        let mut a = FlvToMedia::new();
        assert_eq!(
            a.video(0, &Bytes::from_static(&[0x12, 0, 0, 0, 0])),
            Err(FlvError::VideoCodec(2))
        );
        assert_eq!(
            a.video(0, &Bytes::from_static(&[0x17])),
            Err(FlvError::Truncated("video"))
        );
        assert!(matches!(
            a.video(0, &video_tag(1, 0, 0, &[1, 2, 3])),
            Err(FlvError::Codec(CodecError::AvcConfig(_)))
        ));
        assert_eq!(
            a.audio(0, &Bytes::from_static(&[0x2f, 1, 2])),
            Err(FlvError::AudioCodec(2))
        );
        assert_eq!(
            a.audio(0, &Bytes::from_static(&[0xaf])),
            Err(FlvError::Truncated("audio"))
        );
    }

    #[test]
    fn aac_config_and_frames() {
        let mut a = FlvToMedia::new();
        // AAC-LC, 44.1 kHz, stereo.
        let Some(MediaMessage::AudioConfig(AudioConfig::Aac(c))) = a
            .audio(0, &Bytes::from_static(&[0xaf, 0, 0x12, 0x10]))
            .unwrap()
        else {
            panic!("config expected")
        };
        assert_eq!((c.sample_rate, c.channels), (44100, 2));
        let Some(MediaMessage::Frame(f)) = a
            .audio(23, &Bytes::from_static(&[0xaf, 1, 0xde, 0xad]))
            .unwrap()
        else {
            panic!("frame expected")
        };
        assert_eq!(
            (f.track, f.dts, &f.data[..]),
            (TrackKind::Audio, 0, &[0xde, 0xad][..])
        );
    }
}
