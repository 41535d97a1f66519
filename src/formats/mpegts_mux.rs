//! MPEG-TS writer (ISO/IEC 13818-1) for live readers: one program with an H.264 or HEVC video
//! stream and an AAC audio stream, from `media` messages. PAT and PMT (with their CRC) before
//! every video keyframe, PES with 33-bit PTS/DTS, PCR on the PCR PID, video as Annex B with an
//! access unit delimiter and the parameter sets before each random access point, AAC as ADTS.
//! Sans-IO: configs and frames in, 188-byte packets out; [`take_payloads`] cuts them into SRT
//! payloads. The layout helpers it shares with the readers are in [`super::mpegts`].

use bytes::{Bytes, BytesMut};

use super::mpegts::{crc32_mpeg2, stream_type, table_id, PID_PAT, SYNC, TS_PACKET};
use crate::media::codec::AAC_RATES;
use crate::media::{AudioConfig, Frame, TrackKind, VideoCodec, VideoConfig};

pub const PMT_PID: u16 = 0x1000;
pub const VIDEO_PID: u16 = 0x100;
pub const AUDIO_PID: u16 = 0x101;
/// The one program's program_number (§2.4.4.3: 0 would be the network PID).
const PROGRAM: u16 = 1;
/// Transport packets per SRT payload: 7 × 188 = 1316 bytes, libsrt's live-mode default payload
/// (`SRT_LIVE_DEF_PLSIZE`), the most that fits a 1500-byte MTU after the IP, UDP and SRT headers.
pub const PACKETS_PER_PAYLOAD: usize = 7;
pub const PAYLOAD_BYTES: usize = PACKETS_PER_PAYLOAD * TS_PACKET;
/// Table 2-22 stream_id values: the first video and the first audio stream.
const STREAM_ID_VIDEO: u8 = 0xe0;
const STREAM_ID_AUDIO: u8 = 0xc0;
/// ADTS frame_length is 13 bits and counts the 7-byte header (ISO 14496-3 §1.A.2.2.2).
const MAX_ADTS_FRAME: usize = (1 << 13) - 1;
const ADTS_HEADER: usize = 7;
/// The PCR runs this far behind the decode times (§2.4.2: a decoder may buffer until a
/// picture's DTS; a PCR ahead of an audio PTS that arrived late would make it "late").
const PCR_DELAY_90K: u64 = 9_000;
/// Without video (no keyframes to put it before), PAT and PMT repeat this often (90 kHz; half
/// a second, as broadcast practice's 100–500 ms asks).
const PSI_INTERVAL_90K: u64 = 45_000;
const TS_MASK: u64 = (1 << 33) - 1;
/// Access unit delimiters (H.264 §7.3.2.4, HEVC §7.3.2.5): `primary_pic_type`/`pic_type` "any".
const AUD_H264: &[u8] = &[0, 0, 0, 1, 0x09, 0xf0];
const AUD_HEVC: &[u8] = &[0, 0, 0, 1, 0x46, 0x01, 0x50];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxError {
    #[error("{0} video cannot be carried in MPEG-TS here (H.264 and HEVC only)")]
    UnsupportedVideo(&'static str),
    #[error("Opus audio cannot be carried in MPEG-TS here (AAC only)")]
    UnsupportedAudio,
    #[error("unusable codec configuration: {0}")]
    Config(&'static str),
    #[error("a {0:?} frame before its codec configuration")]
    Unconfigured(TrackKind),
    #[error("frame not made of 4-byte length-prefixed NAL units")]
    BadFrame,
    #[error("AAC frame of {0} bytes does not fit ADTS")]
    AudioTooLarge(usize),
}

#[derive(Debug)]
struct Video {
    hevc: bool,
    /// The config's parameter sets in Annex B, put before each random access point.
    parameter_sets: Vec<u8>,
    cc: u8,
}

#[derive(Debug)]
struct Audio {
    /// profile, sampling_frequency_index, channel_configuration (ADTS fields).
    profile: u8,
    rate_index: u8,
    channels: u8,
    cc: u8,
}

/// One reader's muxer: its continuity counters, PSI version and the streams it carries.
#[derive(Debug, Default)]
pub struct TsMuxer {
    video: Option<Video>,
    audio: Option<Audio>,
    pat_cc: u8,
    pmt_cc: u8,
    /// PMT version_number: bumped when the streams change.
    version: u8,
    psi_due: bool,
    last_psi: Option<u64>,
}

impl TsMuxer {
    /// The video stream's (new) configuration: its parameter sets go before the next keyframe.
    /// Refused for what TS cannot carry here (AV1: no stream_type before the 2024 amendment).
    pub fn set_video(&mut self, config: &VideoConfig) -> Result<(), MuxError> {
        let hevc = match config.codec {
            VideoCodec::H264 => false,
            VideoCodec::H265 => true,
            VideoCodec::Av1 => return Err(MuxError::UnsupportedVideo(config.codec.name())),
        };
        let parameter_sets = parameter_sets(hevc, &config.record)?;
        let cc = match self.video.take() {
            Some(v) if v.hevc == hevc => v.cc,
            _ => {
                self.streams_changed();
                0
            }
        };
        self.video = Some(Video {
            hevc,
            parameter_sets,
            cc,
        });
        Ok(())
    }

    /// The audio stream's (new) configuration; refused for Opus (in TS a private stream with an
    /// `Opus` registration descriptor, which few TS readers play).
    pub fn set_audio(&mut self, config: &AudioConfig) -> Result<(), MuxError> {
        let (profile, rate_index, channels) = audio_fields(config)?;
        let cc = match self.audio.take() {
            Some(a) => a.cc,
            None => {
                self.streams_changed();
                0
            }
        };
        self.audio = Some(Audio {
            profile,
            rate_index,
            channels,
            cc,
        });
        Ok(())
    }

    fn streams_changed(&mut self) {
        self.version = (self.version + 1) & 0x1f;
        self.psi_due = true;
    }

    /// Appends `frame` as transport packets to `out` (PAT and PMT first when due).
    pub fn write(&mut self, frame: &Frame, out: &mut Vec<u8>) -> Result<(), MuxError> {
        let dts = to_90k(frame.dts);
        let pts = to_90k(frame.pts);
        let pcr = dts.saturating_sub(PCR_DELAY_90K);
        let video_pcr = self.video.is_some();
        match frame.track {
            TrackKind::Video => {
                let video = self
                    .video
                    .as_ref()
                    .ok_or(MuxError::Unconfigured(TrackKind::Video))?;
                let au = annex_b(video, frame)?;
                if frame.keyframe || self.psi_due {
                    self.write_psi(dts, out);
                }
                let video = self.video.as_mut().expect("checked above");
                let pes = Pes {
                    pid: VIDEO_PID,
                    stream_id: STREAM_ID_VIDEO,
                    pts,
                    dts: (dts != pts).then_some(dts),
                    pcr: Some(pcr),
                    random_access: frame.keyframe,
                };
                pes.write(&au, &mut video.cc, out);
            }
            TrackKind::Audio => {
                let audio = self
                    .audio
                    .as_ref()
                    .ok_or(MuxError::Unconfigured(TrackKind::Audio))?;
                let adts = adts(audio, &frame.data)?;
                let psi_stale = self
                    .last_psi
                    .is_none_or(|t| dts.wrapping_sub(t) & TS_MASK >= PSI_INTERVAL_90K);
                // Before the first keyframe too: a player that joins on audio has its tables.
                if self.psi_due || (!video_pcr && psi_stale) {
                    self.write_psi(dts, out);
                }
                let audio = self.audio.as_mut().expect("checked above");
                let pes = Pes {
                    pid: AUDIO_PID,
                    stream_id: STREAM_ID_AUDIO,
                    pts,
                    dts: None,
                    pcr: (!video_pcr).then_some(pcr),
                    random_access: !video_pcr,
                };
                pes.write(&adts, &mut audio.cc, out);
            }
        }
        Ok(())
    }

    fn write_psi(&mut self, now: u64, out: &mut Vec<u8>) {
        self.psi_due = false;
        self.last_psi = Some(now);
        let mut pat = vec![table_id::PAT, 0xb0, 13, 0, 1, 0xc1, 0, 0];
        pat.extend_from_slice(&PROGRAM.to_be_bytes());
        pat.extend_from_slice(&(0xe000 | PMT_PID).to_be_bytes());
        section_packet(PID_PAT, &mut self.pat_cc, pat, out);

        let pcr_pid = if self.video.is_some() {
            VIDEO_PID
        } else {
            AUDIO_PID
        };
        let mut streams = Vec::new();
        if let Some(v) = &self.video {
            let t = if v.hevc {
                stream_type::HEVC
            } else {
                stream_type::H264
            };
            streams.extend_from_slice(&[
                t,
                0xe0 | (VIDEO_PID >> 8) as u8,
                VIDEO_PID as u8,
                0xf0,
                0,
            ]);
        }
        if self.audio.is_some() {
            let (hi, lo) = (0xe0 | (AUDIO_PID >> 8) as u8, AUDIO_PID as u8);
            streams.extend_from_slice(&[stream_type::AAC_ADTS, hi, lo, 0xf0, 0]);
        }
        // section_length counts from after itself: 9 header bytes, the streams, the CRC.
        let len = 9 + streams.len() + 4;
        let mut pmt = vec![table_id::PMT, 0xb0 | (len >> 8) as u8, len as u8];
        pmt.extend_from_slice(&PROGRAM.to_be_bytes());
        pmt.extend_from_slice(&[0xc1 | (self.version << 1), 0, 0]);
        pmt.extend_from_slice(&(0xe000 | pcr_pid).to_be_bytes());
        pmt.extend_from_slice(&[0xf0, 0]);
        pmt.extend_from_slice(&streams);
        section_packet(PMT_PID, &mut self.pmt_cc, pmt, out);
    }
}

/// Cuts whole SRT payloads ([`PAYLOAD_BYTES`]) off the front of `buf`; a shorter rest waits for
/// the next frame's packets.
pub fn take_payloads(buf: &mut BytesMut) -> impl Iterator<Item = Bytes> + '_ {
    std::iter::from_fn(move || {
        (buf.len() >= PAYLOAD_BYTES).then(|| buf.split_to(PAYLOAD_BYTES).freeze())
    })
}

/// Nanoseconds → the 33-bit 90 kHz clock (§2.4.3.7), wrapping as it does.
fn to_90k(ns: u64) -> u64 {
    ((u128::from(ns) * 90_000 / 1_000_000_000) as u64) & TS_MASK
}

/// ADTS fields from an AudioSpecificConfig (ISO 14496-3 §1.6.2.1 → §1.A.2.2.1). HE-AAC (object
/// types 5 and 29) is signalled implicitly: ADTS says AAC-LC at the core rate.
fn audio_fields(config: &AudioConfig) -> Result<(u8, u8, u8), MuxError> {
    let AudioConfig::Aac(aac) = config else {
        return Err(MuxError::UnsupportedAudio);
    };
    let (&b0, &b1) = aac
        .asc
        .first()
        .zip(aac.asc.get(1))
        .ok_or(MuxError::Config("AudioSpecificConfig too short"))?;
    let profile = match b0 >> 3 {
        t @ 1..=4 => t - 1,
        5 | 29 => 1,
        _ => return Err(MuxError::Config("AAC object type ADTS cannot signal")),
    };
    let mut rate_index = ((b0 & 7) << 1) | (b1 >> 7);
    if rate_index == 15 {
        // An explicit frequency: ADTS has only the table's.
        rate_index = AAC_RATES
            .iter()
            .position(|&r| r == aac.sample_rate)
            .ok_or(MuxError::Config("AAC sample rate ADTS cannot signal"))?
            as u8;
    }
    let channels = aac.channels.min(7);
    Ok((profile, rate_index, channels))
}

/// One raw AAC frame with its ADTS header (§1.A.2.2.1; no CRC).
fn adts(audio: &Audio, raw: &[u8]) -> Result<Vec<u8>, MuxError> {
    let len = raw.len() + ADTS_HEADER;
    if len > MAX_ADTS_FRAME {
        return Err(MuxError::AudioTooLarge(raw.len()));
    }
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&[
        0xff,
        0xf1,
        (audio.profile << 6) | (audio.rate_index << 2) | (audio.channels >> 2),
        ((audio.channels & 3) << 6) | (len >> 11) as u8,
        (len >> 3) as u8,
        ((len as u8 & 7) << 5) | 0x1f,
        0xfc,
    ]);
    out.extend_from_slice(raw);
    Ok(out)
}

/// The parameter sets of an avcC or an hvcC, as Annex B.
fn parameter_sets(hevc: bool, record: &Bytes) -> Result<Vec<u8>, MuxError> {
    use crate::media::codec::{avcc_parameter_sets, hvcc_parameter_sets};
    let sets = match hevc {
        true => hvcc_parameter_sets(record),
        false => avcc_parameter_sets(record),
    }
    .map_err(|_| MuxError::Config("truncated decoder configuration record"))?;
    let mut out = Vec::new();
    for set in sets {
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(&set);
    }
    Ok(out)
}

/// A video frame as one Annex B access unit: a delimiter, the parameter sets before a random
/// access point (unless the frame carries its own), then its NAL units (their own delimiters
/// left out: there must be one, first).
fn annex_b(video: &Video, frame: &Frame) -> Result<Vec<u8>, MuxError> {
    let nal_type = |nal: &[u8]| match video.hevc {
        true => (nal[0] >> 1) & 0x3f,
        false => nal[0] & 0x1f,
    };
    let (aud_type, sps_type) = if video.hevc { (35, 33) } else { (9, 7) };
    let ranges = crate::media::codec::nal_unit_ranges(&frame.data).ok_or(MuxError::BadFrame)?;
    if ranges.iter().any(|r| r.is_empty()) {
        return Err(MuxError::BadFrame);
    }
    let nals: Vec<&[u8]> = ranges.into_iter().map(|r| &frame.data[r]).collect();
    let in_band = nals.iter().any(|n| nal_type(n) == sps_type);
    let mut out = Vec::with_capacity(frame.data.len() + video.parameter_sets.len() + 16);
    out.extend_from_slice(if video.hevc { AUD_HEVC } else { AUD_H264 });
    if frame.keyframe && !in_band {
        out.extend_from_slice(&video.parameter_sets);
    }
    for nal in nals.into_iter().filter(|n| nal_type(n) != aud_type) {
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(nal);
    }
    Ok(out)
}

/// A PSI section (CRC appended) in one packet: ours are far below 183 bytes.
fn section_packet(pid: u16, cc: &mut u8, mut section: Vec<u8>, out: &mut Vec<u8>) {
    let crc = crc32_mpeg2(&section);
    section.extend_from_slice(&crc.to_be_bytes());
    let start = out.len();
    out.extend_from_slice(&[SYNC, 0x40 | (pid >> 8) as u8, pid as u8, 0x10 | next(cc), 0]);
    out.extend_from_slice(&section);
    out.resize(start + TS_PACKET, 0xff);
}

fn next(cc: &mut u8) -> u8 {
    let now = *cc;
    *cc = (*cc + 1) & 0x0f;
    now
}

/// One PES packet's header fields (§2.4.3.6) and its first transport packet's adaptation field.
struct Pes {
    pid: u16,
    stream_id: u8,
    pts: u64,
    dts: Option<u64>,
    pcr: Option<u64>,
    random_access: bool,
}

impl Pes {
    fn write(&self, data: &[u8], cc: &mut u8, out: &mut Vec<u8>) {
        let header_data = if self.dts.is_some() { 10 } else { 5 };
        let mut pes = Vec::with_capacity(9 + header_data + data.len());
        pes.extend_from_slice(&[0, 0, 1, self.stream_id]);
        // PES_packet_length counts from after itself; 0 (unbounded) is allowed for video in TS
        // (§2.4.3.7), and what is too long for 16 bits must use it.
        let len = 3 + header_data + data.len();
        let len = if self.stream_id == STREAM_ID_VIDEO || len > usize::from(u16::MAX) {
            0
        } else {
            len as u16
        };
        pes.extend_from_slice(&len.to_be_bytes());
        // '10', not scrambled, data_alignment_indicator: each PES starts an access unit.
        pes.push(0x84);
        match self.dts {
            Some(dts) => {
                pes.extend_from_slice(&[0xc0, 10]);
                pes.extend_from_slice(&timestamp(3, self.pts));
                pes.extend_from_slice(&timestamp(1, dts));
            }
            None => {
                pes.extend_from_slice(&[0x80, 5]);
                pes.extend_from_slice(&timestamp(2, self.pts));
            }
        }
        pes.extend_from_slice(data);
        let mut rest = &pes[..];
        let mut first = true;
        while !rest.is_empty() {
            let field = first.then_some((self.pcr, self.random_access));
            rest = packet(self.pid, first, next(cc), field, rest, out);
            first = false;
        }
    }
}

/// A 5-byte PTS/DTS field with its 4-bit prefix (§2.4.3.7).
fn timestamp(prefix: u8, t: u64) -> [u8; 5] {
    [
        prefix << 4 | ((t >> 29) as u8 & 0x0e) | 1,
        (t >> 22) as u8,
        ((t >> 14) as u8 & 0xfe) | 1,
        (t >> 7) as u8,
        ((t << 1) as u8) | 1,
    ]
}

/// One transport packet of `payload`'s head (§2.4.3.2), with an adaptation field when `field`
/// asks for a PCR or the random access flag, or for stuffing when the rest is short. Returns
/// what did not fit.
fn packet<'a>(
    pid: u16,
    unit_start: bool,
    cc: u8,
    field: Option<(Option<u64>, bool)>,
    payload: &'a [u8],
    out: &mut Vec<u8>,
) -> &'a [u8] {
    let (pcr, random_access) = field.unwrap_or((None, false));
    let flagged = pcr.is_some() || random_access;
    // adaptation_field_length + flags, and the 6-byte PCR (§2.4.3.4).
    let base = if flagged { 2 + pcr.map_or(0, |_| 6) } else { 0 };
    let room = TS_PACKET - 4 - base;
    let take = payload.len().min(room);
    let field_len = base + (room - take);
    let start = out.len();
    let control = if field_len > 0 { 0x30 } else { 0x10 };
    out.extend_from_slice(&[
        SYNC,
        (u8::from(unit_start) << 6) | (pid >> 8) as u8,
        pid as u8,
    ]);
    out.push(control | cc);
    if field_len > 0 {
        out.push((field_len - 1) as u8);
        if field_len > 1 {
            out.push(u8::from(random_access) << 6 | u8::from(pcr.is_some()) << 4);
            if let Some(pcr) = pcr {
                // program_clock_reference_base (90 kHz), 6 reserved bits, extension 0.
                out.extend_from_slice(&[
                    (pcr >> 25) as u8,
                    (pcr >> 17) as u8,
                    (pcr >> 9) as u8,
                    (pcr >> 1) as u8,
                    ((pcr as u8 & 1) << 7) | 0x7e,
                    0,
                ]);
            }
            out.resize(start + 4 + field_len, 0xff);
        }
    }
    out.extend_from_slice(&payload[..take]);
    debug_assert_eq!(out.len() - start, TS_PACKET);
    &payload[take..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::mpegts::{Packet, PesHeader};
    use crate::ingest::mpegts::to_media::TsToMedia;
    use crate::media::codec::tests::AVCC_720P;
    use crate::media::{AacConfig, MediaMessage, Tracks};

    fn aac() -> AudioConfig {
        // AAC-LC, 48 kHz, stereo.
        AudioConfig::Aac(crate::media::codec::parse_asc(Bytes::from_static(&[0x11, 0x90])).unwrap())
    }

    fn h264() -> VideoConfig {
        crate::media::codec::parse_avcc(Bytes::from_static(AVCC_720P)).unwrap()
    }

    fn frame(track: TrackKind, ms: u64, keyframe: bool, data: Vec<u8>) -> Frame {
        Frame {
            track,
            dts: ms * 1_000_000,
            pts: ms * 1_000_000,
            keyframe,
            duration: None,
            data: Bytes::from(data),
        }
    }

    /// Length-prefixed NAL units.
    fn nals(units: &[&[u8]]) -> Vec<u8> {
        units
            .iter()
            .flat_map(|u| [&(u.len() as u32).to_be_bytes()[..], u].concat())
            .collect()
    }

    /// Our own demuxer reads back what the writer wrote: the tracks, the config rebuilt from
    /// the in-band parameter sets, every frame with its time, keyframe flag and bytes.
    #[test]
    fn the_ingest_demuxer_reads_back_video_and_audio() {
        let mut mux = TsMuxer::default();
        mux.set_video(&h264()).unwrap();
        mux.set_audio(&aac()).unwrap();
        let idr = nals(&[&[0x65, 0x88, 0x84, 0x21, 0xa0]]);
        let p = nals(&[&[0x09, 0xf0], &[0x41, 0x9a, 0x02, 0x11]]);
        let input = [
            frame(TrackKind::Video, 0, true, idr.clone()),
            frame(TrackKind::Audio, 0, false, vec![0x21; 300]),
            frame(TrackKind::Video, 40, false, p.clone()),
            frame(TrackKind::Audio, 21, false, vec![0x42; 5000]),
            frame(TrackKind::Video, 80, true, idr.clone()),
            frame(TrackKind::Video, 120, false, p),
        ];
        let mut ts = Vec::new();
        for f in &input {
            mux.write(f, &mut ts).unwrap();
        }
        assert_eq!(ts.len() % TS_PACKET, 0);
        let mut demux = TsToMedia::new();
        let mut out = Vec::new();
        demux.push(&ts, &mut out).unwrap();
        demux.finish(&mut out).unwrap();
        assert_eq!(demux.stats().continuity_errors, 0);
        assert_eq!(
            out[0],
            MediaMessage::Tracks(Tracks {
                video: true,
                audio: true
            })
        );
        let config = out.iter().find_map(|m| match m {
            MediaMessage::VideoConfig(c) => Some(c.clone()),
            _ => None,
        });
        assert_eq!(config.map(|c| (c.width, c.height)), Some((1280, 720)));
        let frames: Vec<&Frame> = out
            .iter()
            .filter_map(|m| match m {
                MediaMessage::Frame(f) => Some(f),
                _ => None,
            })
            .collect();
        let video: Vec<_> = frames
            .iter()
            .filter(|f| f.track == TrackKind::Video)
            .collect();
        assert_eq!(video.len(), 4);
        assert_eq!(
            video[0].data,
            Bytes::from(idr),
            "parameter sets and AUD not in the frame"
        );
        assert!(video[0].keyframe && !video[1].keyframe && video[2].keyframe);
        // The delimiter the frame carried is the writer's one, not a second.
        assert_eq!(video[1].data[..], nals(&[&[0x41, 0x9a, 0x02, 0x11]])[..]);
        let audio: Vec<_> = frames
            .iter()
            .filter(|f| f.track == TrackKind::Audio)
            .collect();
        assert_eq!(audio.len(), 2);
        assert_eq!(audio[1].data.len(), 5000);
        // The times went through the 90 kHz clock and back (the demuxer rebases its first).
        let t0 = video[0].pts;
        assert_eq!(video[1].pts - t0, 40_000_000);
        assert!(out.iter().any(|m| matches!(
            m,
            MediaMessage::AudioConfig(AudioConfig::Aac(AacConfig {
                sample_rate: 48_000,
                channels: 2,
                ..
            }))
        )));
    }

    #[test]
    fn psi_before_keyframes_pcr_on_video_and_payloads_of_seven_packets() {
        let mut mux = TsMuxer::default();
        mux.set_video(&h264()).unwrap();
        let mut ts = Vec::new();
        let idr = nals(&[&[0x65; 900]]);
        mux.write(&frame(TrackKind::Video, 1000, true, idr.clone()), &mut ts)
            .unwrap();
        mux.write(
            &frame(TrackKind::Video, 1040, false, nals(&[&[0x41; 10]])),
            &mut ts,
        )
        .unwrap();
        let packets: Vec<[u8; TS_PACKET]> = ts
            .chunks(TS_PACKET)
            .map(|c| c.try_into().unwrap())
            .collect();
        let parsed: Vec<Packet> = packets.iter().map(|p| Packet::parse(p).unwrap()).collect();
        assert_eq!((parsed[0].pid, parsed[1].pid), (PID_PAT, PMT_PID));
        assert!(parsed[2].unit_start && parsed[2].random_access());
        let pes = PesHeader::parse(parsed[2].payload.unwrap()).unwrap();
        assert_eq!((pes.pts, pes.dts), (Some(90_000), None));
        // The PCR: 100 ms behind, in the first packet of each video PES.
        let pcr_base = |p: &[u8]| {
            u64::from(p[6]) << 25
                | u64::from(p[7]) << 17
                | u64::from(p[8]) << 9
                | u64::from(p[9]) << 1
                | u64::from(p[10] >> 7)
        };
        assert_eq!(packets[2][5] & 0x10, 0x10);
        assert_eq!(pcr_base(&packets[2]), 81_000);
        // Counters run per PID without gaps; the non-keyframe gets no PSI.
        let video_cc: Vec<u8> = parsed
            .iter()
            .filter(|p| p.pid == VIDEO_PID)
            .map(|p| p.continuity_counter)
            .collect();
        assert!(
            video_cc.windows(2).all(|w| w[1] == (w[0] + 1) & 15),
            "{video_cc:?}"
        );
        assert_eq!(parsed.iter().filter(|p| p.pid == PID_PAT).count(), 1);

        let mut buf = BytesMut::from(&ts[..]);
        let payloads: Vec<Bytes> = take_payloads(&mut buf).collect();
        assert_eq!(payloads.len(), ts.len() / PAYLOAD_BYTES);
        assert!(payloads.iter().all(|p| p.len() == 1316));
        assert_eq!(buf.len(), ts.len() % PAYLOAD_BYTES);
    }

    #[test]
    fn audio_only_repeats_psi_and_carries_the_pcr() {
        let mut mux = TsMuxer::default();
        mux.set_audio(&aac()).unwrap();
        let mut ts = Vec::new();
        for n in 0..48 {
            mux.write(
                &frame(TrackKind::Audio, n * 21, false, vec![1; 200]),
                &mut ts,
            )
            .unwrap();
        }
        let pats = ts
            .chunks(TS_PACKET)
            .filter(|p| p[1] & 0x1f == 0 && p[2] == 0)
            .count();
        // Just under a second of audio: PSI at 0 and at half a second.
        assert_eq!(pats, 2);
        let first_audio = ts
            .chunks(TS_PACKET)
            .find(|p| p[2] == AUDIO_PID as u8)
            .unwrap();
        assert_eq!(first_audio[5] & 0x50, 0x50, "random access + PCR");
    }

    #[test]
    fn refusals_and_config_changes() {
        let mut mux = TsMuxer::default();
        let av1 = VideoConfig {
            codec: VideoCodec::Av1,
            ..h264()
        };
        assert_eq!(mux.set_video(&av1), Err(MuxError::UnsupportedVideo("AV1")));
        let opus = AudioConfig::Opus(crate::media::OpusConfig { channels: 2 });
        assert_eq!(mux.set_audio(&opus), Err(MuxError::UnsupportedAudio));
        let mut ts = Vec::new();
        let f = frame(TrackKind::Video, 0, true, nals(&[&[0x65, 1]]));
        assert_eq!(
            mux.write(&f, &mut ts),
            Err(MuxError::Unconfigured(TrackKind::Video))
        );
        mux.set_video(&h264()).unwrap();
        let truncated = frame(TrackKind::Video, 0, true, vec![0, 0, 0, 9, 0x65]);
        assert_eq!(mux.write(&truncated, &mut ts), Err(MuxError::BadFrame));
        mux.set_audio(&aac()).unwrap();
        let huge = frame(TrackKind::Audio, 0, false, vec![0; 8185]);
        assert_eq!(
            mux.write(&huge, &mut ts),
            Err(MuxError::AudioTooLarge(8185))
        );
        assert!(ts.is_empty());
        // Audio joining later bumps the PMT's version.
        assert_eq!(mux.version, 2);
        let short = VideoConfig {
            record: Bytes::from_static(&[1, 100, 0, 31, 0xff, 0xe1, 0, 40, 0x67]),
            ..h264()
        };
        assert!(matches!(mux.set_video(&short), Err(MuxError::Config(_))));
    }

    /// ffprobe, an independent demuxer and decoder, reads what the writer made of the fixtures
    /// (H.264 + AAC, HEVC + AAC) after our ingest demuxer turned them into media messages.
    #[test]
    fn ffprobe_decodes_remuxed_fixtures() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        for (name, codec) in [("av-720p.ts", "h264"), ("hevc-720p.ts", "hevc")] {
            let Ok(input) = std::fs::read(root.join(name)) else {
                eprintln!("fixtures/{name} missing (scripts/make-fixtures): skipped");
                continue;
            };
            let mut messages = Vec::new();
            let mut demux = TsToMedia::new();
            demux.push(&input, &mut messages).unwrap();
            demux.finish(&mut messages).unwrap();
            let mut mux = TsMuxer::default();
            let mut ts = Vec::new();
            for m in &messages {
                match m {
                    MediaMessage::VideoConfig(c) => mux.set_video(c).unwrap(),
                    MediaMessage::AudioConfig(c) => mux.set_audio(c).unwrap(),
                    MediaMessage::Frame(f) => mux.write(f, &mut ts).unwrap(),
                    _ => {}
                }
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.ts");
            std::fs::write(&path, &ts).unwrap();
            let out = std::process::Command::new("ffprobe")
                .args(["-v", "error", "-count_frames", "-show_entries"])
                .arg("stream=codec_name,width,height,nb_read_frames,sample_rate")
                .args(["-of", "json"])
                .arg(&path)
                .output()
                .expect("ffprobe");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stderr.is_empty(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let streams = v["streams"].as_array().unwrap();
            let video = streams.iter().find(|s| s["codec_name"] == codec).unwrap();
            assert_eq!(
                (video["width"].as_u64(), video["height"].as_u64()),
                (Some(1280), Some(720))
            );
            // 6 s at 30 fps, every picture decoded.
            assert_eq!(video["nb_read_frames"], "180", "{name}");
            let audio = streams.iter().find(|s| s["codec_name"] == "aac").unwrap();
            assert_eq!(audio["sample_rate"], "48000");
            let frames: u64 = audio["nb_read_frames"].as_str().unwrap().parse().unwrap();
            assert!(frames > 270, "{name}: {frames} AAC frames");
        }
    }
}
