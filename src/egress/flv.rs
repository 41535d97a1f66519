//! Media messages as the FLV tag bodies an RTMP publisher sends (FLV spec v10.1 annex E;
//! Enhanced RTMP v1 for HEVC): the video's sequence header and coded frames with their
//! composition offset, the AAC's sequence header and raw frames, on millisecond timestamps
//! that start at 0 and never go back — across a main/backup switch or a rebuilt pipeline, where
//! the feed's own times may restart. Sans-IO: messages in, tag bodies out.

use bytes::{BufMut, Bytes, BytesMut};

use crate::media::{AudioConfig, MediaMessage, TrackKind, VideoCodec};

/// E.4.3.1: CodecID 7 (AVC); FrameType 1 (key) / 2 (inter), in the high nibble.
const AVC: u8 = 7;
const KEY: u8 = 1;
const INTER: u8 = 2;
/// E.4.3.1 AVCPacketType.
const AVC_SEQUENCE_HEADER: u8 = 0;
const AVC_NALU: u8 = 1;
/// Enhanced RTMP: the IsExHeader bit, PacketType SequenceStart (0) and CodedFrames (1).
const EX_HEADER: u8 = 0x80;
const EX_SEQUENCE_START: u8 = 0;
const EX_CODED_FRAMES: u8 = 1;
/// E.4.2.1: SoundFormat 10 (AAC), 44 kHz, 16-bit, stereo (fixed for AAC: the ASC says the
/// truth); AACPacketType 0 (sequence header) / 1 (raw).
const AAC_AUDIO: u8 = 0xaf;
const AAC_SEQUENCE_HEADER: u8 = 0;
const AAC_RAW: u8 = 1;
/// A forward jump larger than this, or any step back of more than [`MAX_BACK_MS`], is a new
/// timeline (a switch, a rebuilt pipeline): the output continues one frame after where it was.
const MAX_JUMP_MS: i64 = 10_000;
/// A track's times more than this back are a restart.
const MAX_BACK_MS: i64 = 1_000;

/// What a target cannot be sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlvError {
    #[error("{0} cannot be sent over RTMP (H.264, HEVC and AAC can)")]
    Unsupported(&'static str),
}

/// One tag body for the RTMP session to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    Video {
        timestamp: u32,
        body: Bytes,
        keyframe: bool,
    },
    Audio {
        timestamp: u32,
        body: Bytes,
    },
}

/// Maps a feed's nanosecond decode times to the output's milliseconds: from 0, continuous, one
/// timeline for both tracks, each track's times never going back. The tracks are monotonic
/// each on its own, not together: a rung's video and the audio come through separate queues,
/// one a little ahead of the other, and a target plays each track by its own timestamps.
#[derive(Debug, Default)]
struct Clock {
    /// Output ms = input ms + offset.
    offset: Option<i64>,
    /// The last output time of each track (video, audio).
    last: [i64; 2],
    /// The feed said its times restart (a discontinuity): the next frame starts a new base.
    rebase: bool,
}

impl Clock {
    /// The latest output time of either track (where a new timeline and a config go).
    fn latest(&self) -> i64 {
        self.last[0].max(self.last[1])
    }

    fn ms(&mut self, dts_ns: u64, track: TrackKind) -> u32 {
        let i = usize::from(track != TrackKind::Video);
        let input = (dts_ns / 1_000_000) as i64;
        let offset = *self.offset.get_or_insert(-input);
        let mut out = input + offset;
        let step = out - self.last[i];
        if std::mem::take(&mut self.rebase) || !(-MAX_BACK_MS..=MAX_JUMP_MS).contains(&step) {
            // A new timeline: carry on one frame's worth after the last output.
            let next = self.latest() + 33;
            self.offset = Some(next - input);
            out = next;
        }
        let out = out.max(self.last[i]);
        self.last[i] = out;
        out.clamp(0, i64::from(u32::MAX)) as u32
    }
}

/// Turns one feed's messages (a rung's video and audio, or the source) into tag bodies.
#[derive(Debug, Default)]
pub struct FlvWriter {
    video: Option<VideoCodec>,
    clock: Clock,
}

impl FlvWriter {
    /// The tags for `msg` (none for what RTMP does not carry: track declarations,
    /// discontinuities, whose timestamps the clock absorbs).
    pub fn push(&mut self, msg: &MediaMessage, out: &mut Vec<Tag>) -> Result<(), FlvError> {
        match msg {
            MediaMessage::VideoConfig(c) => {
                let body = match c.codec {
                    VideoCodec::H264 => avc(KEY, AVC_SEQUENCE_HEADER, 0, &c.record),
                    VideoCodec::H265 => ex(KEY, EX_SEQUENCE_START, None, &c.record),
                    VideoCodec::Av1 => return Err(FlvError::Unsupported("AV1")),
                };
                self.video = Some(c.codec);
                let timestamp = self.clock.latest() as u32;
                out.push(Tag::Video {
                    timestamp,
                    body,
                    keyframe: true,
                });
            }
            MediaMessage::AudioConfig(AudioConfig::Aac(a)) => {
                let timestamp = self.clock.latest() as u32;
                out.push(Tag::Audio {
                    timestamp,
                    body: aac(AAC_SEQUENCE_HEADER, &a.asc),
                });
            }
            MediaMessage::AudioConfig(AudioConfig::Opus(_)) => {
                return Err(FlvError::Unsupported("Opus audio"))
            }
            MediaMessage::Frame(f) if f.track == TrackKind::Video => {
                let Some(codec) = self.video else {
                    return Ok(());
                };
                let timestamp = self.clock.ms(f.dts, TrackKind::Video);
                let cts = ((f.pts as i64 - f.dts as i64) / 1_000_000) as i32;
                let kind = if f.keyframe { KEY } else { INTER };
                let body = match codec {
                    VideoCodec::H264 => avc(kind, AVC_NALU, cts, &f.data),
                    _ => ex(kind, EX_CODED_FRAMES, Some(cts), &f.data),
                };
                out.push(Tag::Video {
                    timestamp,
                    body,
                    keyframe: f.keyframe,
                });
            }
            MediaMessage::Frame(f) => {
                let timestamp = self.clock.ms(f.dts, TrackKind::Audio);
                out.push(Tag::Audio {
                    timestamp,
                    body: aac(AAC_RAW, &f.data),
                });
            }
            MediaMessage::Discontinuity { .. } => self.clock.rebase = true,
            MediaMessage::Tracks(_) => {}
        }
        Ok(())
    }
}

fn avc(kind: u8, packet_type: u8, cts: i32, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + data.len());
    b.put_u8((kind << 4) | AVC);
    b.put_u8(packet_type);
    b.put_slice(&cts.to_be_bytes()[1..]);
    b.put_slice(data);
    b.freeze()
}

/// Enhanced RTMP video: `[IsExHeader|FrameType|PacketType] "hvc1" [SI24 cts] data`.
fn ex(kind: u8, packet_type: u8, cts: Option<i32>, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + data.len());
    b.put_u8(EX_HEADER | (kind << 4) | packet_type);
    b.put_slice(b"hvc1");
    if let Some(cts) = cts {
        b.put_slice(&cts.to_be_bytes()[1..]);
    }
    b.put_slice(data);
    b.freeze()
}

fn aac(packet_type: u8, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(2 + data.len());
    b.put_u8(AAC_AUDIO);
    b.put_u8(packet_type);
    b.put_slice(data);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::rtmp::to_media::FlvToMedia;
    use crate::media::codec::tests::AVCC_720P;
    use crate::media::codec::{parse_asc, parse_avcc};
    use crate::media::{Frame, VideoConfig};

    fn frame(track: TrackKind, dts_ms: u64, cts_ms: u64, keyframe: bool) -> MediaMessage {
        MediaMessage::Frame(Frame {
            track,
            dts: dts_ms * 1_000_000,
            pts: (dts_ms + cts_ms) * 1_000_000,
            keyframe,
            duration: None,
            data: Bytes::from_static(&[0, 0, 0, 2, 0x65, 0x88]),
        })
    }

    /// What our RTMP ingest (the adapter every publisher's tags go through) reads back.
    fn read_back(tags: &[Tag]) -> Vec<MediaMessage> {
        let mut a = FlvToMedia::new();
        tags.iter()
            .filter_map(|t| match t {
                Tag::Video {
                    timestamp, body, ..
                } => a.video(*timestamp, body).unwrap(),
                Tag::Audio { timestamp, body } => a.audio(*timestamp, body).unwrap(),
            })
            .collect()
    }

    #[test]
    fn h264_and_aac_go_as_rtmp_publishers_send_them_from_0_ms_and_across_a_new_timeline() {
        let config: VideoConfig = parse_avcc(Bytes::from_static(AVCC_720P)).unwrap();
        let asc = parse_asc(Bytes::from_static(&[0x11, 0x90])).unwrap();
        let mut w = FlvWriter::default();
        let mut tags = Vec::new();
        for m in [
            MediaMessage::VideoConfig(config.clone()),
            MediaMessage::AudioConfig(AudioConfig::Aac(asc)),
            frame(TrackKind::Video, 5000, 80, true),
            frame(TrackKind::Audio, 5010, 0, true),
            frame(TrackKind::Video, 5040, 40, false),
            // A switched source restarting its times near 0: the output goes on.
            frame(TrackKind::Video, 100, 0, true),
        ] {
            w.push(&m, &mut tags).unwrap();
        }
        let times: Vec<u32> = tags
            .iter()
            .map(|t| match t {
                Tag::Video { timestamp, .. } | Tag::Audio { timestamp, .. } => *timestamp,
            })
            .collect();
        assert_eq!(times, [0, 0, 0, 10, 40, 73]);
        let back = read_back(&tags);
        assert!(matches!(&back[0], MediaMessage::VideoConfig(c) if c.record == config.record));
        let MediaMessage::Frame(f) = &back[2] else {
            panic!("{back:?}")
        };
        assert_eq!((f.dts, f.pts, f.keyframe), (0, 80_000_000, true));
        assert_eq!(f.data.as_ref(), &[0, 0, 0, 2, 0x65, 0x88]);
    }

    /// A rung's video comes out of its encoder later than the audio: each track keeps its own
    /// times, neither pulled up to the other's.
    #[test]
    fn each_track_keeps_its_times_when_the_other_runs_ahead() {
        let config: VideoConfig = parse_avcc(Bytes::from_static(AVCC_720P)).unwrap();
        let mut w = FlvWriter::default();
        let mut tags = Vec::new();
        for m in [
            MediaMessage::VideoConfig(config),
            frame(TrackKind::Video, 1000, 0, true),
            frame(TrackKind::Audio, 1000, 0, true),
            frame(TrackKind::Audio, 1021, 0, true),
            frame(TrackKind::Audio, 1043, 0, true),
            frame(TrackKind::Audio, 1064, 0, true),
            frame(TrackKind::Video, 1033, 0, false),
            frame(TrackKind::Video, 1067, 0, false),
        ] {
            w.push(&m, &mut tags).unwrap();
        }
        let times: Vec<u32> = tags
            .iter()
            .map(|t| match t {
                Tag::Video { timestamp, .. } | Tag::Audio { timestamp, .. } => *timestamp,
            })
            .collect();
        assert_eq!(times, [0, 0, 0, 21, 43, 64, 33, 67]);
    }

    #[test]
    fn what_rtmp_cannot_carry_is_refused() {
        let mut w = FlvWriter::default();
        let opus =
            MediaMessage::AudioConfig(AudioConfig::Opus(crate::media::OpusConfig { channels: 2 }));
        assert_eq!(
            w.push(&opus, &mut Vec::new()),
            Err(FlvError::Unsupported("Opus audio"))
        );
    }
}
