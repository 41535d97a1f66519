//! Sans-IO MPEG-TS demuxer (ISO 13818-1) over [`crate::formats::mpegts`]: bytes in (any split,
//! e.g. 1316-byte SRT payloads), whole PES payloads of the first H.264 or HEVC and the first AAC
//! (ADTS) stream of the first program out, with their 33-bit PTS/DTS, and the tracks the PMT
//! declares. Finds and keeps sync, follows PMT changes, counts continuity errors and drops the
//! PES they damage.

use bytes::Bytes;

use crate::formats::mpegts::{
    pat_first_pmt_pid, stream_type, table_id, Packet, PesHeader, Pmt, SectionReader, PID_PAT, SYNC,
    TS_PACKET,
};

/// Bytes without a sync pattern before a fresh input is judged not to be MPEG-TS at all: 7
/// packets, one SRT live payload (SRT TS payloads are 7 × 188 = 1316 bytes).
pub const MAX_SYNC_SEARCH: usize = 7 * TS_PACKET;
/// Garbage tolerated after sync was once found, before the input is given up on.
pub const MAX_GARBAGE: usize = 64 * 1024;
/// Largest PES payload assembled; the same bound as an RTMP media message. A 1080p IDR frame at
/// broadcast bitrates is well below 2 MiB. §2.4.3.7 bounds a PES only by PES_packet_length, and
/// video may leave that at 0 (unbounded).
pub const MAX_PES: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EsCodec {
    H264,
    H265,
    Aac,
}

/// One elementary-stream access unit (video) or run of ADTS frames (audio).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pes {
    pub codec: EsCodec,
    /// 33-bit 90 kHz timestamps as carried.
    pub pts: Option<u64>,
    pub dts: Option<u64>,
    pub data: Bytes,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DemuxError {
    #[error("not MPEG-TS: no 0x47 sync pattern in the first {MAX_SYNC_SEARCH} bytes")]
    NotTs,
    #[error("lost MPEG-TS sync for more than {MAX_GARBAGE} bytes")]
    LostSync,
    #[error("unsupported {0}; the supported codecs are H.264 or HEVC video and AAC (ADTS) audio")]
    Unsupported(String),
}

#[derive(Debug)]
struct Es {
    pid: u16,
    codec: EsCodec,
    cc: Option<u8>,
    pts: Option<u64>,
    dts: Option<u64>,
    data: Vec<u8>,
    /// Payload length the PES header announced, if not 0 (= unbounded, usual for video).
    expected: Option<usize>,
    /// A packet of this PES was lost or it grew too large: it is dropped, not emitted.
    broken: bool,
    started: bool,
}

impl Es {
    fn new(pid: u16, codec: EsCodec) -> Es {
        Es {
            pid,
            codec,
            cc: None,
            pts: None,
            dts: None,
            data: Vec::new(),
            expected: None,
            broken: false,
            started: false,
        }
    }
}

/// Counters worth logging when a connection ends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DemuxStats {
    pub packets: u64,
    pub continuity_errors: u64,
    pub dropped_pes: u64,
    pub sync_losses: u64,
}

#[derive(Debug, Default)]
pub struct Demuxer {
    /// A packet's worth of bytes carried over between inputs.
    carry: Vec<u8>,
    synced_once: bool,
    garbage: usize,
    pmt_pid: Option<u16>,
    pmt_version: Option<u8>,
    sections: SectionReader,
    streams: Vec<Es>,
    pub stats: DemuxStats,
}

fn describe(stream_type: u8) -> Option<&'static str> {
    Some(match stream_type {
        0x01 | 0x02 => "MPEG-1/2 video (stream type 0x01/0x02)",
        0x10 => "MPEG-4 part 2 video (stream type 0x10)",
        0x33 => "VVC video (stream type 0x33)",
        0x03 | 0x04 => "MPEG-1/2 audio (stream type 0x03/0x04)",
        0x11 => "AAC in LATM (stream type 0x11)",
        0x81 => "AC-3 audio (stream type 0x81)",
        0x87 => "E-AC-3 audio (stream type 0x87)",
        _ => return None,
    })
}

impl Demuxer {
    pub fn new() -> Demuxer {
        Demuxer::default()
    }

    /// The tracks the current PMT declares (none before the first PMT).
    pub fn declared(&self) -> crate::media::Tracks {
        crate::media::Tracks {
            video: self.streams.iter().any(|s| s.codec != EsCodec::Aac),
            audio: self.streams.iter().any(|s| s.codec == EsCodec::Aac),
        }
    }

    /// The video codec the current PMT declares.
    #[cfg(test)]
    pub fn video_codec(&self) -> Option<EsCodec> {
        self.streams
            .iter()
            .map(|s| s.codec)
            .find(|&c| c != EsCodec::Aac)
    }

    /// Feeds bytes; complete PES go to `out`. An error means the input is not usable TS.
    pub fn push(&mut self, data: &[u8], out: &mut Vec<Pes>) -> Result<(), DemuxError> {
        if self.carry.is_empty() {
            return self.scan(data, out);
        }
        // A packet split across inputs (rare: SRT payloads are whole packets).
        let mut joined = std::mem::take(&mut self.carry);
        joined.extend_from_slice(data);
        self.scan(&joined, out)
    }

    fn scan(&mut self, data: &[u8], out: &mut Vec<Pes>) -> Result<(), DemuxError> {
        // A packet counts when its 0x47 is followed by another one a packet later (or by the
        // end of the input, to be confirmed by the next packet).
        let aligned =
            |d: &[u8], i: usize| d[i] == SYNC && d.get(i + TS_PACKET).is_none_or(|&b| b == SYNC);
        let mut i = 0;
        while i < data.len() {
            if aligned(data, i) {
                if data.len() - i < TS_PACKET {
                    self.carry = data[i..].to_vec();
                    break;
                }
                let packet = data[i..i + TS_PACKET].try_into().expect("a whole packet");
                self.packet(packet, out)?;
                i += TS_PACKET;
                continue;
            }
            let skip = (i + 1..data.len())
                .find(|&j| aligned(data, j))
                .unwrap_or(data.len())
                - i;
            self.lose(skip)?;
            i += skip;
        }
        Ok(())
    }

    fn lose(&mut self, bytes: usize) -> Result<(), DemuxError> {
        if self.garbage == 0 && self.synced_once {
            self.stats.sync_losses += 1;
        }
        self.garbage += bytes;
        match self.synced_once {
            false if self.garbage > MAX_SYNC_SEARCH => Err(DemuxError::NotTs),
            true if self.garbage > MAX_GARBAGE => Err(DemuxError::LostSync),
            _ => Ok(()),
        }
    }

    /// The end of input: a last unbounded PES (video) is complete now.
    pub fn flush(&mut self, out: &mut Vec<Pes>) {
        for i in 0..self.streams.len() {
            self.finish(i, out);
        }
    }

    fn packet(&mut self, p: &[u8; TS_PACKET], out: &mut Vec<Pes>) -> Result<(), DemuxError> {
        self.garbage = 0;
        self.synced_once = true;
        self.stats.packets += 1;
        let p = match Packet::parse(p) {
            Ok(p) if !p.transport_error => p,
            // Known to be damaged, or an adaptation field past the packet's end.
            _ => {
                self.stats.continuity_errors += 1;
                return Ok(());
            }
        };
        let Some(payload) = p.payload else {
            return Ok(());
        };
        let (pid, unit_start, cc) = (p.pid, p.unit_start, p.continuity_counter);
        if pid == PID_PAT || Some(pid) == self.pmt_pid {
            return self.psi(pid, unit_start, payload);
        }
        let Some(i) = self.streams.iter().position(|s| s.pid == pid) else {
            return Ok(());
        };
        let es = &mut self.streams[i];
        if let Some(last) = es.cc {
            if cc == last && !unit_start {
                return Ok(()); // §2.4.3.3: a duplicate packet, sent once more on purpose
            }
            if cc != (last + 1) & 0x0f && !p.discontinuity() {
                self.stats.continuity_errors += 1;
                es.broken = true;
            }
        }
        es.cc = Some(cc);
        if unit_start {
            self.finish(i, out);
            self.start_pes(i, payload);
        } else if self.streams[i].started {
            self.append(i, payload);
        }
        let es = &self.streams[i];
        if es.expected.is_some_and(|n| es.data.len() >= n) {
            self.finish(i, out);
        }
        Ok(())
    }

    fn start_pes(&mut self, i: usize, payload: &[u8]) {
        let es = &mut self.streams[i];
        es.data.clear();
        es.broken = false;
        es.started = false;
        es.expected = None;
        let Some(h) = PesHeader::parse(payload) else {
            self.stats.dropped_pes += 1;
            return;
        };
        es.pts = h.pts;
        es.dts = h.dts;
        es.expected = h.payload_len;
        es.started = true;
        self.append(i, &payload[h.header_len..]);
    }

    fn append(&mut self, i: usize, bytes: &[u8]) {
        let es = &mut self.streams[i];
        if es.broken {
            return;
        }
        if es.data.len() + bytes.len() > MAX_PES {
            es.broken = true;
            es.data = Vec::new();
            return;
        }
        es.data.extend_from_slice(bytes);
    }

    fn finish(&mut self, i: usize, out: &mut Vec<Pes>) {
        let es = &mut self.streams[i];
        if !es.started {
            return;
        }
        es.started = false;
        let data = std::mem::take(&mut es.data);
        if es.broken || data.is_empty() {
            self.stats.dropped_pes += 1;
            return;
        }
        out.push(Pes {
            codec: es.codec,
            pts: es.pts,
            dts: es.dts,
            data: Bytes::from(data),
        });
    }

    /// PAT and PMT sections, possibly spread over several packets.
    fn psi(&mut self, pid: u16, unit_start: bool, payload: &[u8]) -> Result<(), DemuxError> {
        let Some(section) = self.sections.push(pid, unit_start, payload) else {
            return Ok(());
        };
        if section.len() < 12 || crate::formats::mpegts::crc32_mpeg2(&section) != 0 {
            return Ok(()); // damaged or not a long-form section
        }
        match (pid, section[0]) {
            (PID_PAT, table_id::PAT) => {
                let first = pat_first_pmt_pid(&section);
                if first.is_some() && first != self.pmt_pid {
                    self.pmt_pid = first;
                    self.pmt_version = None;
                }
                Ok(())
            }
            (_, table_id::PMT) if Some(pid) == self.pmt_pid => self.pmt(&section),
            _ => Ok(()),
        }
    }

    fn pmt(&mut self, section: &[u8]) -> Result<(), DemuxError> {
        let Some(pmt) = Pmt::parse(section) else {
            return Ok(());
        };
        if self.pmt_version == Some(pmt.version) {
            return Ok(());
        }
        self.pmt_version = Some(pmt.version);
        let (mut video, mut audio, mut unsupported) = (None, None, None);
        for (kind, pid) in pmt.streams() {
            match kind {
                stream_type::H264 => video = video.or(Some((pid, EsCodec::H264))),
                stream_type::HEVC => video = video.or(Some((pid, EsCodec::H265))),
                stream_type::AAC_ADTS => audio = audio.or(Some(pid)),
                t => unsupported = unsupported.or(describe(t)),
            }
        }
        if video.is_none() && audio.is_none() {
            return Err(DemuxError::Unsupported(
                unsupported
                    .unwrap_or("program without audio or video")
                    .into(),
            ));
        }
        // A second codec we cannot carry would silently vanish from the outputs: refuse it.
        if let Some(what) = unsupported {
            return Err(DemuxError::Unsupported(what.into()));
        }
        let wanted: Vec<(u16, EsCodec)> = video
            .into_iter()
            .chain(audio.map(|pid| (pid, EsCodec::Aac)))
            .collect();
        self.streams.retain(|es| {
            wanted
                .iter()
                .any(|&(pid, codec)| pid == es.pid && codec == es.codec)
        });
        for (pid, codec) in wanted {
            if !self.streams.iter().any(|es| es.pid == pid) {
                self.streams.push(Es::new(pid, codec));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::mpegts::stream_type::{
        AAC_ADTS as STREAM_AAC_ADTS, H264 as STREAM_H264, HEVC as STREAM_HEVC,
    };
    use crate::formats::mpegts::testing::{Muxer, AUDIO_PID, VIDEO_PID};

    fn start(m: &mut Muxer) -> Vec<u8> {
        [
            m.pat(),
            m.pmt(&[(STREAM_H264, VIDEO_PID), (STREAM_AAC_ADTS, AUDIO_PID)]),
        ]
        .concat()
    }

    #[test]
    fn pes_across_packets_any_split() {
        let mut m = Muxer::default();
        let frame: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut ts = start(&mut m);
        ts.extend(m.pes(VIDEO_PID, 90_000 + 3003, Some(90_000), &frame, false));
        ts.extend(m.pes(AUDIO_PID, 90_000, None, &[0xff, 0xf1, 1, 2, 3], true));
        ts.extend(m.pes(VIDEO_PID, 93_003 + 3003, Some(93_003), b"next", false));
        for split in [1, 7, 188, 1316, ts.len()] {
            let mut d = Demuxer::new();
            let mut out = Vec::new();
            for piece in ts.chunks(split) {
                d.push(piece, &mut out).unwrap();
            }
            // The bounded audio PES is out at once; the first video PES ends at the next start.
            assert_eq!(out.len(), 2, "split {split}");
            // The bounded audio PES is out first; the video PES ends at the next unit start.
            assert_eq!(
                (out[0].codec, out[0].pts, out[0].dts),
                (EsCodec::Aac, Some(90_000), None)
            );
            assert_eq!(out[1].codec, EsCodec::H264);
            assert_eq!((out[1].pts, out[1].dts), (Some(93_003), Some(90_000)));
            assert_eq!(&out[1].data[..], &frame[..]);
            d.flush(&mut out);
            assert_eq!(&out[2].data[..], b"next");
            assert_eq!(d.stats.continuity_errors, 0);
        }
    }

    #[test]
    fn a_lost_packet_drops_only_its_pes() {
        let mut m = Muxer::default();
        let mut ts = start(&mut m);
        let big = m.pes(VIDEO_PID, 0, None, &[7u8; 600], false);
        // Packet 2 of 4 is lost in transit.
        ts.extend_from_slice(&big[..TS_PACKET]);
        ts.extend_from_slice(&big[2 * TS_PACKET..]);
        ts.extend(m.pes(VIDEO_PID, 3003, None, b"ok", false));
        let mut d = Demuxer::new();
        let mut out = Vec::new();
        d.push(&ts, &mut out).unwrap();
        d.flush(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0].data[..], b"ok");
        assert_eq!(d.stats.continuity_errors, 1);
        assert_eq!(d.stats.dropped_pes, 1);
    }

    #[test]
    fn garbage_resyncs_and_non_ts_is_refused() {
        let mut m = Muxer::default();
        let mut ts = start(&mut m);
        ts.extend_from_slice(b"\x47 garbage that is not a packet");
        ts.extend(m.pes(AUDIO_PID, 0, None, b"a", true));
        let mut out = Vec::new();
        let mut d = Demuxer::new();
        d.push(&ts, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(d.stats.sync_losses, 1);

        let mut d = Demuxer::new();
        let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(100);
        assert_eq!(d.push(&http, &mut out), Err(DemuxError::NotTs));
        // FLV sent to the SRT port by mistake.
        let mut d = Demuxer::new();
        let flv = [&b"FLV\x01\x05\0\0\0\x09"[..], &[0u8; 2000]].concat();
        assert_eq!(d.push(&flv, &mut out), Err(DemuxError::NotTs));
    }

    #[test]
    fn unsupported_codecs_are_named() {
        let mut m = Muxer::default();
        let ts = [
            m.pat(),
            m.pmt(&[(0x33, VIDEO_PID), (STREAM_AAC_ADTS, AUDIO_PID)]),
        ]
        .concat();
        let err = Demuxer::new().push(&ts, &mut Vec::new()).unwrap_err();
        assert_eq!(
            err,
            DemuxError::Unsupported("VVC video (stream type 0x33)".into())
        );
        // HEVC is taken, and declared with the audio.
        let mut m = Muxer::default();
        let ts = [
            m.pat(),
            m.pmt(&[(STREAM_HEVC, VIDEO_PID), (STREAM_AAC_ADTS, AUDIO_PID)]),
        ]
        .concat();
        let mut d = Demuxer::new();
        assert_eq!(d.declared(), crate::media::Tracks::default());
        d.push(&ts, &mut Vec::new()).unwrap();
        assert_eq!(d.video_codec(), Some(EsCodec::H265));
        assert_eq!(
            d.declared(),
            crate::media::Tracks {
                video: true,
                audio: true
            }
        );
        let mut m = Muxer::default();
        let ts = [
            m.pat(),
            m.pmt(&[(STREAM_H264, VIDEO_PID), (0x03, AUDIO_PID)]),
        ]
        .concat();
        assert!(
            matches!(Demuxer::new().push(&ts, &mut Vec::new()), Err(DemuxError::Unsupported(s)) if s.contains("MPEG-1/2 audio"))
        );
        // Data streams (SCTE-35, ID3) are ignored, not refused.
        let mut m = Muxer::default();
        let ts = [
            m.pat(),
            m.pmt(&[(STREAM_H264, VIDEO_PID), (0x86, 0x102), (0x15, 0x103)]),
        ]
        .concat();
        assert!(Demuxer::new().push(&ts, &mut Vec::new()).is_ok());
    }

    #[test]
    fn oversized_pes_is_dropped_not_buffered() {
        let mut m = Muxer::default();
        let mut d = Demuxer::new();
        let mut out = Vec::new();
        d.push(&start(&mut m), &mut out).unwrap();
        let first = m.pes(VIDEO_PID, 0, None, &[1; 100], false);
        d.push(&first, &mut out).unwrap();
        // Keep appending continuation packets past MAX_PES.
        let mut cont = vec![SYNC, (VIDEO_PID >> 8) as u8, VIDEO_PID as u8, 0];
        cont.resize(TS_PACKET, 9);
        let mut cc = 0u8;
        for _ in 0..(MAX_PES / 184 + 10) {
            cc = (cc + 1) & 0x0f;
            cont[3] = 0x10 | cc;
            d.push(&cont, &mut out).unwrap();
        }
        assert!(d.streams[0].data.is_empty());
        d.flush(&mut out);
        assert!(out.is_empty());
    }
}
