//! Sans-IO MPEG-TS demuxer (ISO 13818-1): bytes in (any split, e.g. 1316-byte SRT payloads),
//! whole PES payloads of the first H.264 or HEVC and the first AAC (ADTS) stream of the first
//! program out, with their 33-bit PTS/DTS, and the tracks the PMT declares. Counts continuity errors and drops the PES they damage.

use bytes::Bytes;

/// §2.4.3.2: transport packets are 188 bytes and start with 0x47.
pub const TS_PACKET: usize = 188;
const SYNC: u8 = 0x47;
/// Bytes without a sync pattern before a fresh input is judged not to be MPEG-TS at all: 7
/// packets, one SRT live payload (SRT TS payloads are 7 × 188 = 1316 bytes).
pub const MAX_SYNC_SEARCH: usize = 7 * TS_PACKET;
/// Garbage tolerated after sync was once found, before the input is given up on.
pub const MAX_GARBAGE: usize = 64 * 1024;
/// Largest PES payload assembled; the same bound as an RTMP media message. A 1080p IDR frame at
/// broadcast bitrates is well below 2 MiB.
pub const MAX_PES: usize = 8 * 1024 * 1024;
/// §2.4.4.4: a PSI section_length is at most 1021, so a section is at most 1024 bytes.
const MAX_SECTION: usize = 1024;
/// Elementary streams followed; a PMT listing more is read for its first video and audio only.
const PID_PAT: u16 = 0;

/// stream_type values (ISO 13818-1 table 2-34 and its amendments).
const STREAM_H264: u8 = 0x1b;
const STREAM_HEVC: u8 = 0x24;
const STREAM_AAC_ADTS: u8 = 0x0f;

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
    section: Option<(u16, Vec<u8>)>,
    streams: Vec<Es>,
    pub stats: DemuxStats,
}

/// CRC-32/MPEG-2 over a PSI section (Annex A): a section whose CRC does not check is ignored.
fn crc32_mpeg2(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= u32::from(b) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04c1_1db7
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A 5-byte PTS/DTS field (§2.4.3.7).
fn timestamp(b: &[u8]) -> u64 {
    (u64::from(b[0] >> 1) & 7) << 30
        | u64::from(b[1]) << 22
        | u64::from(b[2] >> 1) << 15
        | u64::from(b[3]) << 7
        | u64::from(b[4] >> 1)
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
                self.packet(&data[i..i + TS_PACKET], out)?;
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

    fn packet(&mut self, p: &[u8], out: &mut Vec<Pes>) -> Result<(), DemuxError> {
        self.garbage = 0;
        self.synced_once = true;
        self.stats.packets += 1;
        if p[1] & 0x80 != 0 {
            // transport_error_indicator: the packet is known to be damaged.
            self.stats.continuity_errors += 1;
            return Ok(());
        }
        let unit_start = p[1] & 0x40 != 0;
        let pid = (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2]);
        let control = (p[3] >> 4) & 3;
        let cc = p[3] & 0x0f;
        let mut offset = 4;
        let mut discontinuity = false;
        if control & 2 != 0 {
            let len = usize::from(p[4]);
            if len > TS_PACKET - 5 {
                self.stats.continuity_errors += 1;
                return Ok(());
            }
            if len > 0 {
                discontinuity = p[5] & 0x80 != 0;
            }
            offset = 5 + len;
        }
        if control & 1 == 0 {
            return Ok(()); // adaptation field only
        }
        let payload = &p[offset..];
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
            if cc != (last + 1) & 0x0f && !discontinuity {
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
        // §2.4.3.6: packet_start_code_prefix, stream_id, PES_packet_length, flags, header length.
        if payload.len() < 9 || payload[..3] != [0, 0, 1] {
            self.stats.dropped_pes += 1;
            return;
        }
        let packet_len = usize::from(u16::from_be_bytes([payload[4], payload[5]]));
        let flags = payload[7];
        let header_len = usize::from(payload[8]);
        let body = 9 + header_len;
        if payload.len() < body {
            self.stats.dropped_pes += 1;
            return;
        }
        let h = &payload[9..body];
        es.pts = (flags & 0x80 != 0 && h.len() >= 5).then(|| timestamp(&h[..5]));
        es.dts = (flags & 0xc0 == 0xc0 && h.len() >= 10).then(|| timestamp(&h[5..10]));
        es.expected = (packet_len != 0).then(|| packet_len.saturating_sub(3 + header_len));
        es.started = true;
        self.append(i, &payload[body..]);
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
        if unit_start {
            let Some((&pointer, rest)) = payload.split_first() else {
                return Ok(());
            };
            let Some(section) = rest.get(usize::from(pointer)..) else {
                return Ok(());
            };
            self.section = Some((pid, section.to_vec()));
        } else if let Some((spid, buf)) = &mut self.section {
            if *spid != pid || buf.len() + payload.len() > MAX_SECTION + TS_PACKET {
                self.section = None;
                return Ok(());
            }
            buf.extend_from_slice(payload);
        }
        let Some((_, buf)) = &self.section else {
            return Ok(());
        };
        if buf.len() < 3 {
            return Ok(());
        }
        let len = 3 + usize::from(u16::from_be_bytes([buf[1], buf[2]]) & 0x0fff);
        if len > MAX_SECTION {
            self.section = None;
            return Ok(());
        }
        if buf.len() < len {
            return Ok(());
        }
        let (_, buf) = self.section.take().expect("checked above");
        let section = &buf[..len];
        if len < 12 || crc32_mpeg2(section) != 0 {
            return Ok(()); // damaged or not a long-form section
        }
        match (pid, section[0]) {
            (PID_PAT, 0x00) => {
                self.pat(section);
                Ok(())
            }
            (_, 0x02) if Some(pid) == self.pmt_pid => self.pmt(section),
            _ => Ok(()),
        }
    }

    fn pat(&mut self, s: &[u8]) {
        // Entries of (program_number, PID) between the 8-byte header and the CRC.
        let first = s[8..s.len() - 4]
            .chunks_exact(4)
            .find(|e| u16::from_be_bytes([e[0], e[1]]) != 0)
            .map(|e| (u16::from(e[2] & 0x1f) << 8) | u16::from(e[3]));
        if first.is_some() && first != self.pmt_pid {
            self.pmt_pid = first;
            self.pmt_version = None;
        }
    }

    fn pmt(&mut self, s: &[u8]) -> Result<(), DemuxError> {
        let version = (s[5] >> 1) & 0x1f;
        if self.pmt_version == Some(version) {
            return Ok(());
        }
        self.pmt_version = Some(version);
        let info_len = usize::from(u16::from_be_bytes([s[10], s[11]]) & 0x0fff);
        let end = s.len() - 4;
        let mut at = 12 + info_len;
        let (mut video, mut audio, mut unsupported) = (None, None, None);
        while at + 5 <= end {
            let stream_type = s[at];
            let pid = (u16::from(s[at + 1] & 0x1f) << 8) | u16::from(s[at + 2]);
            let es_len = usize::from(u16::from_be_bytes([s[at + 3], s[at + 4]]) & 0x0fff);
            match stream_type {
                STREAM_H264 => video = video.or(Some((pid, EsCodec::H264))),
                STREAM_HEVC => video = video.or(Some((pid, EsCodec::H265))),
                STREAM_AAC_ADTS => audio = audio.or(Some(pid)),
                t => unsupported = unsupported.or(describe(t)),
            }
            at += 5 + es_len;
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
pub(crate) mod tests {
    use super::*;

    /// Builds TS packets for tests: PAT, PMT and PES packets with correct CRCs and counters.
    #[derive(Default)]
    pub struct Muxer {
        cc: std::collections::HashMap<u16, u8>,
    }

    pub const PMT_PID: u16 = 0x1000;
    pub const VIDEO_PID: u16 = 0x100;
    pub const AUDIO_PID: u16 = 0x101;

    impl Muxer {
        fn next_cc(&mut self, pid: u16) -> u8 {
            let c = self.cc.entry(pid).or_insert(15);
            *c = (*c + 1) & 0x0f;
            *c
        }

        fn section_packet(&mut self, pid: u16, mut section: Vec<u8>) -> Vec<u8> {
            let crc = crc32_mpeg2(&section);
            section.extend_from_slice(&crc.to_be_bytes());
            let mut p = vec![
                SYNC,
                0x40 | (pid >> 8) as u8,
                pid as u8,
                0x10 | self.next_cc(pid),
                0,
            ];
            p.extend_from_slice(&section);
            p.resize(TS_PACKET, 0xff);
            p
        }

        pub fn pat(&mut self) -> Vec<u8> {
            let mut s = vec![0x00, 0xb0, 13, 0, 1, 0xc1, 0, 0, 0, 1];
            s.extend_from_slice(&[0xe0 | (PMT_PID >> 8) as u8, PMT_PID as u8]);
            self.section_packet(PID_PAT, s)
        }

        /// A PMT listing `streams` as (stream_type, pid).
        pub fn pmt(&mut self, streams: &[(u8, u16)]) -> Vec<u8> {
            let len = 9 + 5 * streams.len() + 4;
            let mut s = vec![0x02, 0xb0 | (len >> 8) as u8, len as u8, 0, 1, 0xc1, 0, 0];
            s.extend_from_slice(&[0xe1, 0x00, 0xf0, 0x00]);
            for &(t, pid) in streams {
                s.extend_from_slice(&[t, 0xe0 | (pid >> 8) as u8, pid as u8, 0xf0, 0]);
            }
            self.section_packet(PMT_PID, s)
        }

        /// One PES over as many packets as it needs (stuffing in the last one's adaptation field).
        pub fn pes(
            &mut self,
            pid: u16,
            pts: u64,
            dts: Option<u64>,
            data: &[u8],
            bounded: bool,
        ) -> Vec<u8> {
            let ts = |marker: u8, t: u64| {
                [
                    marker << 4 | ((t >> 29) as u8 & 0x0e) | 1,
                    (t >> 22) as u8,
                    ((t >> 14) as u8 & 0xfe) | 1,
                    (t >> 7) as u8,
                    ((t << 1) as u8) | 1,
                ]
            };
            let header: Vec<u8> = match dts {
                Some(d) => [&[0x80, 0xc0, 10][..], &ts(3, pts), &ts(1, d)].concat(),
                None => [&[0x80, 0x80, 5][..], &ts(2, pts)].concat(),
            };
            let stream_id = if pid == VIDEO_PID { 0xe0 } else { 0xc0 };
            let len = if bounded {
                header.len() + data.len()
            } else {
                0
            };
            let mut pes = vec![0, 0, 1, stream_id, (len >> 8) as u8, len as u8];
            pes.extend_from_slice(&header);
            pes.extend_from_slice(data);
            let mut out = Vec::new();
            for (n, chunk) in pes.chunks(TS_PACKET - 4).enumerate() {
                let start = if n == 0 { 0x40 } else { 0 };
                let cc = self.next_cc(pid);
                let mut p = vec![SYNC, start | (pid >> 8) as u8, pid as u8];
                if chunk.len() == TS_PACKET - 4 {
                    p.push(0x10 | cc);
                } else {
                    let stuffing = TS_PACKET - 4 - chunk.len();
                    p.push(0x30 | cc);
                    p.push((stuffing - 1) as u8);
                    if stuffing > 1 {
                        p.push(0);
                        p.resize(4 + stuffing, 0xff);
                    }
                }
                p.extend_from_slice(chunk);
                assert_eq!(p.len(), TS_PACKET);
                out.extend_from_slice(&p);
            }
            out
        }
    }

    fn start(m: &mut Muxer) -> Vec<u8> {
        [
            m.pat(),
            m.pmt(&[(STREAM_H264, VIDEO_PID), (STREAM_AAC_ADTS, AUDIO_PID)]),
        ]
        .concat()
    }

    #[test]
    fn crc_of_a_known_pat() {
        // ffmpeg's PAT section for program 1 → PMT 0x1000, CRC included: the residue is 0.
        let pat = [
            0x00, 0xb0, 0x0d, 0x00, 0x01, 0xc1, 0x00, 0x00, 0x00, 0x01, 0xf0, 0x00, 0x2a, 0xb1,
            0x04, 0xb2,
        ];
        assert_eq!(crc32_mpeg2(&pat), 0);
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
    fn the_33_bit_timestamps_are_read_whole() {
        let mut m = Muxer::default();
        let mut ts = start(&mut m);
        let t = (1u64 << 33) - 1;
        ts.extend(m.pes(AUDIO_PID, t, None, b"a", true));
        let mut out = Vec::new();
        Demuxer::new().push(&ts, &mut out).unwrap();
        assert_eq!(out[0].pts, Some(t));
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
