//! MPEG-TS bytes → [`MediaMessage`]s: the PMT's tracks as a declaration, H.264/HEVC Annex B
//! access units as length-prefixed frames (with the decoder configuration rebuilt from the
//! in-band parameter sets), ADTS runs as raw AAC frames. Sans-IO: bytes in, messages out; 33-bit
//! timestamps are unwrapped by the shared [`Timeline`].

use bytes::Bytes;

use super::demux::{DemuxError, DemuxStats, Demuxer, EsCodec, Pes};
use crate::media::codec::{asc_from_adts, AnnexBFramer, CodecError, NalCodec};
use crate::media::timeline::Clock;
use crate::media::{AacConfig, AudioConfig, Frame, MediaMessage, Timeline, TrackKind, Tracks};

/// AAC frames carry 1024 samples (ISO 14496-3, AAC-LC / HE-AAC core).
const AAC_FRAME_SAMPLES: u64 = 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TsError {
    #[error(transparent)]
    Demux(#[from] DemuxError),
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// Per-connection state of the adapter.
#[derive(Debug)]
pub struct TsToMedia {
    demux: Demuxer,
    timeline: Timeline,
    pes: Vec<Pes>,
    framer: AnnexBFramer,
    /// The PMT's tracks as last sent.
    declared: Tracks,
    audio: Option<AacConfig>,
    /// Next ADTS frame's timestamp (90 kHz) when a PES carries none.
    next_audio: Option<u64>,
    /// Frames dropped before the first keyframe with parameter sets, or without timestamps.
    pub skipped_frames: u64,
}

impl Default for TsToMedia {
    fn default() -> Self {
        TsToMedia {
            demux: Demuxer::new(),
            timeline: Timeline::new(Clock::MPEG_TS),
            pes: Vec::new(),
            framer: AnnexBFramer::default(),
            declared: Tracks::default(),
            audio: None,
            next_audio: None,
            skipped_frames: 0,
        }
    }
}

/// The NAL units of an Annex B byte stream (ITU-T H.264 and H.265 Annex B), start codes
/// removed.
pub fn annex_b_nals(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= data.len() {
        if data[i] == 0 && data[i + 1] == 0 && data[i + 2] == 1 {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let ends: Vec<usize> = starts
        .iter()
        .skip(1)
        .map(|&s| s - 3)
        .chain(std::iter::once(data.len()))
        .collect();
    starts.into_iter().zip(ends).filter_map(move |(s, e)| {
        // Trailing zeros belong to the next 4-byte start code (or are trailing_zero_8bits).
        let mut e = e;
        while e > s && data[e - 1] == 0 {
            e -= 1;
        }
        (e > s).then(|| &data[s..e])
    })
}

impl TsToMedia {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn stats(&self) -> DemuxStats {
        self.demux.stats
    }

    /// Feeds received bytes; messages for the pipeline go to `out`.
    pub fn push(&mut self, data: &[u8], out: &mut Vec<MediaMessage>) -> Result<(), TsError> {
        self.demux.push(data, &mut self.pes)?;
        self.drain(out)
    }

    /// The input ended: the last access unit is complete.
    pub fn finish(&mut self, out: &mut Vec<MediaMessage>) -> Result<(), TsError> {
        self.demux.flush(&mut self.pes);
        self.drain(out)
    }

    fn drain(&mut self, out: &mut Vec<MediaMessage>) -> Result<(), TsError> {
        // A PMT seen in this input declares (or re-declares) the tracks before their media.
        let declared = self.demux.declared();
        if declared != self.declared {
            self.declared = declared;
            out.push(MediaMessage::Tracks(declared));
        }
        for pes in std::mem::take(&mut self.pes) {
            match pes.codec {
                EsCodec::H264 => self.video_pes(NalCodec::H264, pes, out)?,
                EsCodec::H265 => self.video_pes(NalCodec::H265, pes, out)?,
                EsCodec::Aac => self.audio_pes(pes, out)?,
            }
        }
        Ok(())
    }

    fn video_pes(
        &mut self,
        codec: NalCodec,
        pes: Pes,
        out: &mut Vec<MediaMessage>,
    ) -> Result<(), TsError> {
        if self.framer.codec() != codec {
            // A new PMT changed the video codec: its parameter sets start over.
            self.framer = AnnexBFramer::new(codec);
        }
        let unit = self.framer.frame(annex_b_nals(&pes.data), out)?;
        let Some(raw_dts) = pes.dts.or(pes.pts) else {
            self.skipped_frames += 1;
            return Ok(());
        };
        let Some(unit) = unit.filter(|_| self.framer.config.is_some()) else {
            self.skipped_frames += 1;
            return Ok(());
        };
        let dts = self.timeline.map_ns(TrackKind::Video, raw_dts);
        let cts = pes
            .pts
            .map_or(0, |pts| self.timeline.delta(raw_dts, pts).max(0) as u64);
        out.push(MediaMessage::Frame(Frame {
            track: TrackKind::Video,
            dts,
            pts: dts + Clock::MPEG_TS.to_ns(cts),
            keyframe: unit.keyframe,
            duration: None,
            data: Bytes::from(unit.data),
        }));
        Ok(())
    }

    fn audio_pes(&mut self, pes: Pes, out: &mut Vec<MediaMessage>) -> Result<(), TsError> {
        let Some(mut ticks) = pes.pts.or(self.next_audio) else {
            self.skipped_frames += 1;
            return Ok(());
        };
        let mut rest = &pes.data[..];
        // ISO 14496-3 §1.A.2.2 adts_fixed_header + adts_variable_header.
        while rest.len() >= 7 {
            if rest[0] != 0xff || rest[1] & 0xf6 != 0xf0 {
                self.skipped_frames += 1;
                break; // lost ADTS sync: the rest of this PES is unusable
            }
            let header_len = if rest[1] & 1 == 1 { 7 } else { 9 };
            let profile = rest[2] >> 6;
            let rate_index = (rest[2] >> 2) & 0x0f;
            let channels = ((rest[2] & 1) << 2) | (rest[3] >> 6);
            let frame_len = (usize::from(rest[3] & 3) << 11)
                | (usize::from(rest[4]) << 3)
                | usize::from(rest[5] >> 5);
            let raw_blocks = rest[6] & 3;
            if frame_len < header_len || frame_len > rest.len() {
                self.skipped_frames += 1;
                break;
            }
            let (frame, tail) = rest.split_at(frame_len);
            rest = tail;
            let config = asc_from_adts(profile, rate_index, channels)?;
            if self.audio.as_ref() != Some(&config) {
                self.audio = Some(config.clone());
                out.push(MediaMessage::AudioConfig(AudioConfig::Aac(config)));
            }
            let rate = u64::from(self.audio.as_ref().map_or(48_000, |c| c.sample_rate));
            let step = (u64::from(raw_blocks) + 1) * AAC_FRAME_SAMPLES * 90_000 / rate;
            if raw_blocks != 0 {
                // Several raw blocks in one ADTS frame: rare, and not one AAC frame per buffer.
                self.skipped_frames += 1;
                ticks += step;
                continue;
            }
            let t = self.timeline.map_ns(TrackKind::Audio, ticks);
            out.push(MediaMessage::Frame(Frame {
                track: TrackKind::Audio,
                dts: t,
                pts: t,
                keyframe: true,
                duration: None,
                data: pes.data.slice_ref(&frame[header_len..]),
            }));
            ticks += step;
        }
        self.next_audio = Some(ticks & ((1 << 33) - 1));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::mpegts::testing::{Muxer, AUDIO_PID, VIDEO_PID};
    use crate::media::codec::tests::AVCC_720P;

    fn annex_b(nals: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for (i, n) in nals.iter().enumerate() {
            // Mixed 4- and 3-byte start codes, as encoders write them.
            v.extend_from_slice(if i == 0 {
                &[0, 0, 0, 1][..]
            } else {
                &[0, 0, 1][..]
            });
            v.extend_from_slice(n);
        }
        v
    }

    fn adts(payload: &[u8]) -> Vec<u8> {
        // AAC-LC, 48 kHz, stereo, no CRC.
        let len = 7 + payload.len();
        let mut v = vec![
            0xff,
            0xf1,
            (1 << 6) | (3 << 2),
            (2 << 6) | ((len >> 11) as u8 & 3),
            (len >> 3) as u8,
            ((len as u8 & 7) << 5) | 0x1f,
            0xfc,
        ];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn h264_and_aac_from_ts() {
        let sps = &AVCC_720P[8..8 + 0x1a];
        let pps = &AVCC_720P[8 + 0x1a + 3..8 + 0x1a + 3 + 6];
        let mut m = Muxer::default();
        let mut ts = [m.pat(), m.pmt(&[(0x1b, VIDEO_PID), (0x0f, AUDIO_PID)])].concat();
        // A P-frame before any parameter set is skipped; then an IDR with SPS/PPS.
        ts.extend(m.pes(
            VIDEO_PID,
            1000,
            None,
            &annex_b(&[&[0x09, 0xf0], &[0x41, 1]]),
            false,
        ));
        let idr = annex_b(&[
            &[0x09, 0xf0],
            sps,
            pps,
            &[0x06, 5, 1, 0x80],
            &[0x65, 0x88, 0x84],
        ]);
        // Near the 33-bit wrap, with B-frame reordering (PTS = DTS + 2 frames).
        let t0 = (1u64 << 33) - 3000;
        ts.extend(m.pes(VIDEO_PID, t0 + 6000, Some(t0), &idr, false));
        let two = [adts(&[1, 2, 3]), adts(&[4, 5])].concat();
        ts.extend(m.pes(AUDIO_PID, t0, None, &two, true));
        ts.extend(m.pes(
            VIDEO_PID,
            3000 + 3000,
            Some(0),
            &annex_b(&[&[0x41, 2]]),
            false,
        ));
        let mut a = TsToMedia::new();
        let mut out = Vec::new();
        a.push(&ts, &mut out).unwrap();
        a.finish(&mut out).unwrap();
        // The PMT's tracks first; then the bounded audio PES; video ends at the next unit
        // start.
        assert_eq!(
            out[0],
            MediaMessage::Tracks(Tracks {
                video: true,
                audio: true
            })
        );
        let MediaMessage::AudioConfig(AudioConfig::Aac(c)) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!((c.sample_rate, c.channels), (48000, 2));
        let MediaMessage::VideoConfig(v) = &out[4] else {
            panic!("{out:?}")
        };
        assert_eq!(&v.record[..], AVCC_720P);
        let MediaMessage::Frame(f) = &out[5] else {
            panic!()
        };
        assert!(f.keyframe);
        assert_eq!((f.dts, f.pts), (0, 66_666_666));
        // SEI and IDR slice kept, length-prefixed; AUD, SPS and PPS not.
        assert_eq!(
            &f.data[..],
            &[0, 0, 0, 4, 0x06, 5, 1, 0x80, 0, 0, 0, 3, 0x65, 0x88, 0x84]
        );
        let audio: Vec<&Frame> = out
            .iter()
            .filter_map(|m| match m {
                MediaMessage::Frame(f) if f.track == TrackKind::Audio => Some(f),
                _ => None,
            })
            .collect();
        assert_eq!(audio.len(), 2);
        assert_eq!(&audio[0].data[..], &[1, 2, 3]);
        // The second ADTS frame is 1024 samples at 48 kHz later.
        assert_eq!(audio[1].dts - audio[0].dts, 21_333_333);
        let MediaMessage::Frame(last) = out.last().unwrap() else {
            panic!()
        };
        // Across the wrap: 3000 ticks after the IDR.
        assert_eq!((last.dts, last.keyframe), (33_333_333, false));
        assert_eq!(a.skipped_frames, 1);
    }

    #[test]
    fn nal_splitting() {
        let data = [
            0, 0, 0, 1, 0x67, 1, 0, 0, 1, 0x68, 2, 0, 0, 0, 0, 1, 0x65, 3, 0,
        ];
        let nals: Vec<&[u8]> = annex_b_nals(&data).collect();
        assert_eq!(nals, [&[0x67, 1][..], &[0x68, 2], &[0x65, 3]]);
        assert_eq!(annex_b_nals(&[1, 2, 3]).count(), 0);
    }
}
