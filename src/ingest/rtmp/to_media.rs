//! FLV tag bodies (as RTMP carries them) → [`MediaMessage`]s: the tracks `onMetaData` declares,
//! AVC sequence headers and NAL units, Enhanced RTMP HEVC (`hvc1`) and AV1 (`av01`) sequence
//! starts and coded frames, AAC sequence headers and raw frames. Sans-IO: bytes and timestamps in, messages out.

use bytes::Bytes;

use crate::media::codec::{parse_asc, parse_av1c, parse_avcc, parse_hvcc, CodecError};
use crate::media::{
    AacConfig, AudioConfig, Frame, MediaMessage, Timeline, TrackKind, Tracks, VideoCodec,
    VideoConfig,
};

/// FLV video codec id for AVC (E.4.3.1 of the FLV spec v10.1).
const FLV_CODEC_AVC: u8 = 7;
/// FLV sound format for AAC (E.4.2.1).
const FLV_SOUND_AAC: u8 = 10;
/// Enhanced RTMP (v1, 2023, veovera/enhanced-rtmp): the top bit of the first video byte says
/// an extended header follows — `IsExHeader | FrameType(3) | PacketType(4)`, then a FourCC.
const EX_HEADER: u8 = 0x80;
/// FLV frame type 5: a video info/command frame, no picture.
const FRAME_COMMAND: u8 = 5;

/// Enhanced RTMP `VideoPacketType`s.
mod ex_packet {
    pub const SEQUENCE_START: u8 = 0;
    pub const CODED_FRAMES: u8 = 1;
    pub const SEQUENCE_END: u8 = 2;
    /// Coded frames with a composition time offset of 0 (no SI24 field).
    pub const CODED_FRAMES_X: u8 = 3;
    pub const METADATA: u8 = 4;
    /// AV1 only: an MPEG-2 TS AV1 descriptor instead of av1C; the av1C start is waited for.
    pub const MPEG2_TS_SEQUENCE_START: u8 = 5;
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlvError {
    #[error("truncated {0} tag")]
    Truncated(&'static str),
    #[error("unsupported video codec id {0} (only H.264/AVC, or HEVC/AV1 over Enhanced RTMP)")]
    VideoCodec(u8),
    #[error("unsupported Enhanced RTMP video codec {0:?} (only hvc1, av01 and avc1)")]
    VideoFourCc(String),
    #[error("unsupported Enhanced RTMP video packet type {0}")]
    VideoPacketType(u8),
    #[error("unsupported sound format {0} (only AAC)")]
    AudioCodec(u8),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("{0} frame before its sequence header")]
    NoConfig(&'static str),
    #[error("{0} frame of another codec than its sequence header")]
    CodecMismatch(&'static str),
    #[error("unreadable script data: {0}")]
    Script(String),
}

/// Per-connection state of the adapter.
#[derive(Debug, Default)]
pub struct FlvToMedia {
    timeline: Timeline,
    declared: Tracks,
    video: Option<VideoConfig>,
    audio: Option<AacConfig>,
}

impl FlvToMedia {
    pub fn new() -> Self {
        Self::default()
    }

    /// `onMetaData` (FLV spec E.5) said which codecs follow: `videocodecid` / `audiocodecid`
    /// (or the picture size / sample rate when an encoder leaves the ids out). Metadata that
    /// names no track declares nothing.
    pub fn metadata(&mut self, m: &rml_rtmp::sessions::StreamMetadata) -> Option<MediaMessage> {
        let tracks = Tracks {
            video: m.video_codec_id.is_some() || m.video_width.is_some(),
            audio: m.audio_codec_id.is_some() || m.audio_sample_rate.is_some(),
        };
        if tracks == Tracks::default() || tracks == self.declared {
            return None;
        }
        self.declared = tracks;
        Some(MediaMessage::Tracks(tracks))
    }

    /// An FLV SCRIPTDATA body (a PULL from an RTMP server, see [`super::flv`]): `onMetaData`
    /// (or `@setDataFrame`, `onMetaData`) declares the tracks; other script data is ignored.
    /// AMF0 from a server is walked with the same depth bound as an RTMP push's before it is
    /// decoded (rml_amf0 recurses without one).
    pub fn script(&mut self, body: &Bytes) -> Result<Option<MediaMessage>, FlvError> {
        use rml_amf0::Amf0Value;
        super::vet::check_amf0(body, 0, super::vet::DEFAULT_MAX_AMF_DEPTH)
            .map_err(|e| FlvError::Script(e.to_string()))?;
        let values = rml_amf0::deserialize(&mut std::io::Cursor::new(&body[..]))
            .map_err(|e| FlvError::Script(format!("{e:?}")))?;
        let mut values = values.into_iter();
        let is_metadata = |v: &Option<Amf0Value>| matches!(v, Some(Amf0Value::Utf8String(s)) if s == "onMetaData");
        let mut name = values.next();
        if matches!(&name, Some(Amf0Value::Utf8String(s)) if s == "@setDataFrame") {
            name = values.next();
        }
        if !is_metadata(&name) {
            return Ok(None);
        }
        let Some(Amf0Value::Object(properties)) = values.next() else {
            return Ok(None);
        };
        let mut metadata = rml_rtmp::sessions::StreamMetadata::new();
        metadata.apply_metadata_values(properties);
        Ok(self.metadata(&metadata))
    }

    /// A VIDEODATA body. `Ok(None)`: nothing to forward (end of sequence, repeated header,
    /// command frames).
    pub fn video(
        &mut self,
        timestamp: u32,
        body: &Bytes,
    ) -> Result<Option<MediaMessage>, FlvError> {
        let Some(&first) = body.first() else {
            return Err(FlvError::Truncated("video"));
        };
        if first & EX_HEADER != 0 {
            return self.enhanced_video(timestamp, body);
        }
        let &[first, packet_type, c0, c1, c2, ..] = body.as_ref() else {
            return match (first >> 4) & 7 {
                // A 1-byte "video info/command" frame carries nothing.
                FRAME_COMMAND => Ok(None),
                _ => Err(FlvError::Truncated("video")),
            };
        };
        let frame_type = first >> 4;
        let codec = first & 0x0f;
        if codec != FLV_CODEC_AVC {
            return Err(FlvError::VideoCodec(codec));
        }
        if frame_type == FRAME_COMMAND {
            return Ok(None);
        }
        let payload = body.slice(5..);
        match packet_type {
            0 => self.video_header(parse_avcc(payload)?),
            1 => {
                // Composition time offset: signed 24-bit milliseconds.
                let cts = i32::from_be_bytes([c0, c1, c2, 0]) >> 8;
                self.video_frame(VideoCodec::H264, timestamp, cts, frame_type == 1, payload)
            }
            _ => Ok(None), // 2 = end of sequence
        }
    }

    /// An Enhanced RTMP VIDEODATA body: `IsExHeader | FrameType | PacketType`, FourCC, body.
    fn enhanced_video(
        &mut self,
        timestamp: u32,
        body: &Bytes,
    ) -> Result<Option<MediaMessage>, FlvError> {
        let first = body[0];
        let frame_type = (first >> 4) & 7;
        let packet_type = first & 0x0f;
        if frame_type == FRAME_COMMAND {
            return Ok(None);
        }
        let fourcc = body.get(1..5).ok_or(FlvError::Truncated("video"))?;
        let codec = match fourcc {
            b"hvc1" => VideoCodec::H265,
            b"av01" => VideoCodec::Av1,
            b"avc1" => VideoCodec::H264,
            other => {
                return Err(FlvError::VideoFourCc(
                    String::from_utf8_lossy(other).into_owned(),
                ))
            }
        };
        let keyframe = frame_type == 1;
        match packet_type {
            ex_packet::SEQUENCE_START => {
                let record = body.slice(5..);
                self.video_header(match codec {
                    VideoCodec::H264 => parse_avcc(record)?,
                    VideoCodec::H265 => parse_hvcc(record)?,
                    VideoCodec::Av1 => parse_av1c(record)?,
                })
            }
            // AV1 carries no composition offset: its temporal units are in presentation order.
            ex_packet::CODED_FRAMES if codec == VideoCodec::Av1 => {
                self.video_frame(codec, timestamp, 0, keyframe, body.slice(5..))
            }
            ex_packet::CODED_FRAMES => {
                let c = body.get(5..8).ok_or(FlvError::Truncated("video"))?;
                let cts = i32::from_be_bytes([c[0], c[1], c[2], 0]) >> 8;
                self.video_frame(codec, timestamp, cts, keyframe, body.slice(8..))
            }
            ex_packet::CODED_FRAMES_X => {
                self.video_frame(codec, timestamp, 0, keyframe, body.slice(5..))
            }
            ex_packet::SEQUENCE_END | ex_packet::METADATA => Ok(None),
            ex_packet::MPEG2_TS_SEQUENCE_START if codec == VideoCodec::Av1 => Ok(None),
            // Multitrack (v2) and anything newer.
            other => Err(FlvError::VideoPacketType(other)),
        }
    }

    fn video_header(&mut self, config: VideoConfig) -> Result<Option<MediaMessage>, FlvError> {
        if self.video.as_ref() == Some(&config) {
            return Ok(None);
        }
        self.video = Some(config.clone());
        Ok(Some(MediaMessage::VideoConfig(config)))
    }

    /// A coded picture (4-byte length-prefixed NAL units, or an AV1 temporal unit), `cts` ms
    /// after its decode time.
    fn video_frame(
        &mut self,
        codec: VideoCodec,
        timestamp: u32,
        cts: i32,
        keyframe: bool,
        payload: Bytes,
    ) -> Result<Option<MediaMessage>, FlvError> {
        match &self.video {
            None => return Err(FlvError::NoConfig("video")),
            Some(c) if c.codec != codec => return Err(FlvError::CodecMismatch("video")),
            Some(_) => {}
        }
        let dts = self.timeline.map_ns(TrackKind::Video, u64::from(timestamp));
        let pts = (dts as i64 + i64::from(cts) * 1_000_000).max(0) as u64;
        if payload.is_empty() {
            return Ok(None);
        }
        Ok(Some(MediaMessage::Frame(Frame {
            track: TrackKind::Video,
            dts,
            pts,
            keyframe,
            duration: None,
            data: payload,
        })))
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
            duration: None,
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
            Err(FlvError::Codec(CodecError::Avc(_)))
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

    /// An Enhanced RTMP video tag: `IsExHeader | FrameType | PacketType`, FourCC, body.
    fn ex_tag(frame_type: u8, packet_type: u8, fourcc: &[u8; 4], body: &[u8]) -> Bytes {
        Bytes::from([&[0x80 | (frame_type << 4) | packet_type][..], fourcc, body].concat())
    }

    #[test]
    fn enhanced_rtmp_hevc_sequence_start_and_frames() {
        use crate::media::codec::tests::HVCC_1080P;
        let mut a = FlvToMedia::new();
        let mut meta = rml_rtmp::sessions::StreamMetadata::new();
        meta.video_codec_id = Some(u32::from_be_bytes(*b"hvc1"));
        meta.audio_sample_rate = Some(48000);
        assert_eq!(
            a.metadata(&meta),
            Some(MediaMessage::Tracks(Tracks {
                video: true,
                audio: true
            }))
        );
        assert_eq!(a.metadata(&meta), None, "declared once");
        assert_eq!(
            a.metadata(&rml_rtmp::sessions::StreamMetadata::new()),
            None,
            "metadata naming no track"
        );
        let frame = [0, 0, 0, 4, 0x28, 0x01, 0xaf, 0x1d];
        assert_eq!(
            a.video(
                0,
                &ex_tag(1, 1, b"hvc1", &[&[0, 0, 0][..], &frame].concat())
            ),
            Err(FlvError::NoConfig("video"))
        );
        let Some(MediaMessage::VideoConfig(c)) =
            a.video(0, &ex_tag(1, 0, b"hvc1", HVCC_1080P)).unwrap()
        else {
            panic!("config expected")
        };
        assert_eq!((c.codec, c.width, c.height), (VideoCodec::H265, 1920, 1080));
        // CodedFrames: a signed 24-bit composition offset before the NAL units.
        let Some(MediaMessage::Frame(f)) = a
            .video(
                40,
                &ex_tag(1, 1, b"hvc1", &[&[0, 0, 80][..], &frame].concat()),
            )
            .unwrap()
        else {
            panic!("frame expected")
        };
        assert_eq!((f.keyframe, f.dts, f.pts), (true, 0, 80_000_000));
        assert_eq!(&f.data[..], &frame);
        // CodedFramesX: no offset field.
        let Some(MediaMessage::Frame(f)) = a.video(80, &ex_tag(2, 3, b"hvc1", &frame)).unwrap()
        else {
            panic!("frame expected")
        };
        assert_eq!((f.keyframe, f.dts, f.pts), (false, 40_000_000, 40_000_000));
        // Sequence end, metadata and command frames carry nothing.
        assert_eq!(a.video(90, &ex_tag(1, 2, b"hvc1", &[])).unwrap(), None);
        assert_eq!(a.video(90, &ex_tag(1, 4, b"hvc1", &[2, 0])).unwrap(), None);
        assert_eq!(a.video(90, &ex_tag(5, 1, b"hvc1", &[])).unwrap(), None);
        // Refusals: other FourCCs, multitrack, truncation, a frame of another codec.
        assert_eq!(
            a.video(90, &ex_tag(1, 1, b"vp09", &frame)),
            Err(FlvError::VideoFourCc("vp09".into()))
        );
        assert_eq!(
            a.video(90, &ex_tag(1, 6, b"hvc1", &frame)),
            Err(FlvError::VideoPacketType(6))
        );
        assert_eq!(
            a.video(90, &Bytes::from_static(&[0x91, b'h', b'v'])),
            Err(FlvError::Truncated("video"))
        );
        assert_eq!(
            a.video(90, &ex_tag(1, 1, b"hvc1", &[0, 0])),
            Err(FlvError::Truncated("video"))
        );
        assert_eq!(
            a.video(90, &video_tag(1, 1, 0, &frame)),
            Err(FlvError::CodecMismatch("video"))
        );
        assert!(matches!(
            a.video(90, &ex_tag(1, 0, b"hvc1", &HVCC_1080P[..30])),
            Err(FlvError::Codec(CodecError::Hevc(_)))
        ));
    }

    #[test]
    fn enhanced_rtmp_av1_sequence_start_and_temporal_units() {
        use crate::media::codec::tests::AV1C_720P;
        let mut a = FlvToMedia::new();
        // The MPEG-2 TS descriptor start is skipped; the av1C start gives the config.
        assert_eq!(a.video(0, &ex_tag(1, 5, b"av01", &[0x80])).unwrap(), None);
        let Some(MediaMessage::VideoConfig(c)) =
            a.video(0, &ex_tag(1, 0, b"av01", AV1C_720P)).unwrap()
        else {
            panic!("config expected")
        };
        assert_eq!((c.codec, c.width, c.height), (VideoCodec::Av1, 1280, 720));
        // CodedFrames for AV1 carry no composition offset: the body is the temporal unit.
        let tu = [0x12, 0x00, 0x32, 0x03, 0x10, 0x00, 0x00];
        let Some(MediaMessage::Frame(f)) = a.video(33, &ex_tag(1, 1, b"av01", &tu)).unwrap() else {
            panic!("frame expected")
        };
        assert_eq!(
            (f.keyframe, f.dts, f.pts, &f.data[..]),
            (true, 0, 0, &tu[..])
        );
        assert_eq!(
            a.video(66, &ex_tag(2, 1, b"hvc1", &tu)),
            Err(FlvError::CodecMismatch("video"))
        );
    }

    /// AMF0 (spec §2): a string, then an ECMA array of `key: number` pairs.
    fn on_metadata(set_data_frame: bool, pairs: &[(&str, f64)]) -> Bytes {
        let string = |s: &str| {
            let mut v = vec![2];
            v.extend_from_slice(&(s.len() as u16).to_be_bytes());
            v.extend_from_slice(s.as_bytes());
            v
        };
        let mut v = Vec::new();
        if set_data_frame {
            v.extend(string("@setDataFrame"));
        }
        v.extend(string("onMetaData"));
        v.push(8);
        v.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
        for (k, n) in pairs {
            v.extend_from_slice(&(k.len() as u16).to_be_bytes());
            v.extend_from_slice(k.as_bytes());
            v.push(0);
            v.extend_from_slice(&n.to_be_bytes());
        }
        v.extend_from_slice(&[0, 0, 9]);
        Bytes::from(v)
    }

    #[test]
    fn script_tags_declare_tracks_from_on_metadata() {
        let mut a = FlvToMedia::new();
        let video_only = on_metadata(false, &[("videocodecid", 7.0), ("width", 1280.0)]);
        assert_eq!(
            a.script(&video_only).unwrap(),
            Some(MediaMessage::Tracks(Tracks {
                video: true,
                audio: false
            }))
        );
        let both = on_metadata(true, &[("videocodecid", 7.0), ("audiocodecid", 10.0)]);
        assert_eq!(
            a.script(&both).unwrap(),
            Some(MediaMessage::Tracks(Tracks {
                video: true,
                audio: true
            }))
        );
        // Other script data says nothing; hostile AMF0 is refused before it is decoded.
        let mut other = on_metadata(false, &[("x", 1.0)]);
        other = Bytes::from([&[2, 0, 6][..], b"onCue!", &other[13..]].concat());
        assert_eq!(a.script(&other).unwrap(), None);
        let deep = Bytes::from([[3u8, 0, 1, b'a'].repeat(5000), vec![5]].concat());
        assert!(matches!(a.script(&deep), Err(FlvError::Script(_))));
        assert!(matches!(
            a.script(&Bytes::from_static(&[2, 0, 9, b'o'])),
            Err(FlvError::Script(_))
        ));
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
