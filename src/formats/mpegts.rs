//! MPEG-TS (ISO/IEC 13818-1) as bytes: 188-byte transport packets and their adaptation field,
//! PSI sections (PAT, PMT) with their CRC, PES headers with 33-bit PTS/DTS. Views over the input;
//! the only state is a section being reassembled. The ingest demuxer and the TS-HLS segmenter
//! both read TS through this module; the 33-bit timestamps they get are unwrapped by
//! [`crate::media::timeline`], the one place for that.

/// §2.4.3.2: transport packets are 188 bytes and start with 0x47.
pub const TS_PACKET: usize = 188;
pub const SYNC: u8 = 0x47;
/// §2.4.4.3: the PAT is carried on PID 0.
pub const PID_PAT: u16 = 0;
/// §2.4.4.4: a PSI section_length is at most 1021, so a section is at most 1024 bytes.
pub const MAX_SECTION: usize = 1024;
/// §2.4.3.5: adaptation_field_length is at most 183, the rest of the packet after its 4-byte
/// header and the length byte.
const MAX_ADAPTATION: usize = TS_PACKET - 5;

/// stream_type values (table 2-34 and its amendments).
pub mod stream_type {
    pub const AAC_ADTS: u8 = 0x0f;
    pub const AAC_LATM: u8 = 0x11;
    pub const H264: u8 = 0x1b;
    pub const HEVC: u8 = 0x24;
}

/// table_id values (table 2-31).
pub mod table_id {
    pub const PAT: u8 = 0x00;
    pub const PMT: u8 = 0x02;
}

/// One transport packet's header fields and payload (§2.4.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// transport_error_indicator: the packet is known to be damaged.
    pub transport_error: bool,
    /// payload_unit_start_indicator: a PES packet or a PSI section starts in this payload.
    pub unit_start: bool,
    pub pid: u16,
    pub continuity_counter: u8,
    pub adaptation: Option<AdaptationField>,
    /// `None` when adaptation_field_control says there is none: `10`, or the reserved `00`,
    /// whose packets §2.4.3.3 tells decoders to discard.
    pub payload: Option<&'a [u8]>,
}

/// The adaptation field's flags that the readers act on (§2.4.3.5).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AdaptationField {
    /// discontinuity_indicator: the continuity counter (or the time base) restarts here.
    pub discontinuity: bool,
    /// random_access_indicator: the next PES of this PID starts at a random access point (a
    /// keyframe, for video).
    pub random_access: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("no 0x47 sync byte")]
    Sync,
    #[error("adaptation field longer than the packet")]
    AdaptationLength,
}

impl<'a> Packet<'a> {
    pub fn parse(p: &'a [u8; TS_PACKET]) -> Result<Packet<'a>, PacketError> {
        if p[0] != SYNC {
            return Err(PacketError::Sync);
        }
        let control = (p[3] >> 4) & 3;
        let mut adaptation = None;
        let mut payload_at = 4;
        if control & 2 != 0 {
            let len = usize::from(p[4]);
            if len > MAX_ADAPTATION {
                return Err(PacketError::AdaptationLength);
            }
            // A zero length is a single stuffing byte: no flags.
            adaptation = Some(match len {
                0 => AdaptationField::default(),
                _ => AdaptationField {
                    discontinuity: p[5] & 0x80 != 0,
                    random_access: p[5] & 0x40 != 0,
                },
            });
            payload_at = 5 + len;
        }
        Ok(Packet {
            transport_error: p[1] & 0x80 != 0,
            unit_start: p[1] & 0x40 != 0,
            pid: pid(p[1], p[2]),
            continuity_counter: p[3] & 0x0f,
            adaptation,
            payload: (control & 1 != 0).then(|| &p[payload_at..]),
        })
    }

    pub fn random_access(&self) -> bool {
        self.adaptation.is_some_and(|a| a.random_access)
    }

    pub fn discontinuity(&self) -> bool {
        self.adaptation.is_some_and(|a| a.discontinuity)
    }
}

/// A 13-bit PID from the two bytes that carry it (3 reserved bits first).
fn pid(hi: u8, lo: u8) -> u16 {
    (u16::from(hi & 0x1f) << 8) | u16::from(lo)
}

/// A 12-bit length field (section_length, program_info_length, ES_info_length).
fn len12(hi: u8, lo: u8) -> usize {
    usize::from(u16::from_be_bytes([hi, lo]) & 0x0fff)
}

/// CRC-32/MPEG-2 (Annex A): over a whole section including its CRC_32 field, a section that
/// arrived intact gives 0.
pub fn crc32_mpeg2(data: &[u8]) -> u32 {
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

/// Reassembles PSI sections spread over packets (§2.4.4): the section that starts after a
/// unit-start payload's pointer_field, continued by the same PID's next payloads. Further
/// sections in the same packet are not read (a PAT or PMT is one section in practice).
#[derive(Debug, Default)]
pub struct SectionReader {
    partial: Option<(u16, Vec<u8>)>,
}

impl SectionReader {
    /// Feeds one PSI packet's payload; returns a whole section (CRC not checked) once complete.
    pub fn push(&mut self, pid: u16, unit_start: bool, payload: &[u8]) -> Option<Vec<u8>> {
        if unit_start {
            let (&pointer, rest) = payload.split_first()?;
            let section = rest.get(usize::from(pointer)..)?;
            self.partial = Some((pid, section.to_vec()));
        } else if let Some((from, buf)) = &mut self.partial {
            // One packet of slack past the largest section: the pointer_field and stuffing.
            if *from != pid || buf.len() + payload.len() > MAX_SECTION + TS_PACKET {
                self.partial = None;
                return None;
            }
            buf.extend_from_slice(payload);
        }
        let (_, buf) = self.partial.as_ref()?;
        let len = 3 + len12(*buf.get(1)?, *buf.get(2)?);
        if len > MAX_SECTION {
            self.partial = None;
            return None;
        }
        if buf.len() < len {
            return None;
        }
        let (_, mut section) = self.partial.take()?;
        section.truncate(len);
        Some(section)
    }
}

/// The first program's program_map_PID from a whole PAT section (§2.4.4.3); program_number 0
/// is the network PID, not a program.
pub fn pat_first_pmt_pid(section: &[u8]) -> Option<u16> {
    let entries = section.get(8..section.len().checked_sub(4)?)?;
    entries
        .chunks_exact(4)
        .find(|e| u16::from_be_bytes([e[0], e[1]]) != 0)
        .map(|e| pid(e[2], e[3]))
}

/// A whole PMT section (§2.4.4.8).
#[derive(Debug, Clone, Copy)]
pub struct Pmt<'a> {
    pub version: u8,
    entries: &'a [u8],
}

impl<'a> Pmt<'a> {
    pub fn parse(section: &'a [u8]) -> Option<Pmt<'a>> {
        if section.len() < 12 {
            return None;
        }
        let start = 12 + len12(section[10], section[11]);
        Some(Pmt {
            version: (section[5] >> 1) & 0x1f,
            entries: section.get(start..section.len() - 4).unwrap_or_default(),
        })
    }

    /// Each elementary stream's (stream_type, elementary_PID), in the order listed.
    pub fn streams(&self) -> impl Iterator<Item = (u8, u16)> + 'a {
        let mut rest = self.entries;
        std::iter::from_fn(move || {
            let e = rest.get(..5)?;
            let entry = (e[0], pid(e[1], e[2]));
            rest = rest.get(5 + len12(e[3], e[4])..).unwrap_or_default();
            Some(entry)
        })
    }
}

/// A PES packet's header (§2.4.3.6), read from the payload of a unit-start packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PesHeader {
    /// 33-bit 90 kHz timestamps as carried.
    pub pts: Option<u64>,
    pub dts: Option<u64>,
    /// Payload bytes PES_packet_length announces; `None` for 0, unbounded (video only).
    pub payload_len: Option<usize>,
    /// Where the payload starts: the fixed 9 bytes plus PES_header_data_length.
    pub header_len: usize,
}

impl PesHeader {
    /// `None` unless the packet_start_code_prefix and the whole header are there.
    pub fn parse(b: &[u8]) -> Option<PesHeader> {
        if b.len() < 9 || b[..3] != [0, 0, 1] {
            return None;
        }
        let packet_len = usize::from(u16::from_be_bytes([b[4], b[5]]));
        let flags = b[7];
        let data_len = usize::from(b[8]);
        let optional = b.get(9..9 + data_len)?;
        Some(PesHeader {
            pts: (flags & 0x80 != 0 && optional.len() >= 5).then(|| timestamp(&optional[..5])),
            dts: (flags & 0xc0 == 0xc0 && optional.len() >= 10)
                .then(|| timestamp(&optional[5..10])),
            // PES_packet_length counts from after itself: the 3 flag/length bytes, then the rest.
            payload_len: (packet_len != 0).then(|| packet_len.saturating_sub(3 + data_len)),
            header_len: 9 + data_len,
        })
    }
}

/// A 5-byte PTS/DTS field (§2.4.3.7): 33 bits around marker bits.
fn timestamp(b: &[u8]) -> u64 {
    (u64::from(b[0] >> 1) & 7) << 30
        | u64::from(b[1]) << 22
        | u64::from(b[2] >> 1) << 15
        | u64::from(b[3]) << 7
        | u64::from(b[4] >> 1)
}

/// Writes TS for tests: PAT, PMT and PES packets with correct CRCs and counters.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub const PMT_PID: u16 = 0x1000;
    pub const VIDEO_PID: u16 = 0x100;
    pub const AUDIO_PID: u16 = 0x101;

    /// A 5-byte PTS/DTS field with its 4-bit prefix (§2.4.3.7).
    pub fn timestamp_bytes(prefix: u8, t: u64) -> [u8; 5] {
        [
            prefix << 4 | ((t >> 29) as u8 & 0x0e) | 1,
            (t >> 22) as u8,
            ((t >> 14) as u8 & 0xfe) | 1,
            (t >> 7) as u8,
            ((t << 1) as u8) | 1,
        ]
    }

    #[derive(Default)]
    pub struct Muxer {
        cc: std::collections::HashMap<u16, u8>,
    }

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
            let header: Vec<u8> = match dts {
                Some(d) => [
                    &[0x80, 0xc0, 10][..],
                    &timestamp_bytes(3, pts),
                    &timestamp_bytes(1, d),
                ]
                .concat(),
                None => [&[0x80, 0x80, 5][..], &timestamp_bytes(2, pts)].concat(),
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
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    fn packet(bytes: &[u8]) -> [u8; TS_PACKET] {
        bytes[..TS_PACKET].try_into().unwrap()
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
    fn packet_header_and_adaptation_field() {
        let mut p = [0xffu8; TS_PACKET];
        p[..6].copy_from_slice(&[SYNC, 0x40 | 0x1f, 0xff, 0x37, 1, 0xc0]);
        let got = Packet::parse(&p).unwrap();
        assert_eq!(
            (got.unit_start, got.pid, got.continuity_counter),
            (true, 0x1fff, 7)
        );
        assert!(got.random_access() && got.discontinuity() && !got.transport_error);
        assert_eq!(got.payload.map(<[u8]>::len), Some(TS_PACKET - 6));
        // Adaptation field only, and the reserved control value: no payload.
        for control in [0x20, 0x00] {
            p[3] = control;
            assert_eq!(Packet::parse(&p).unwrap().payload, None);
        }
        // A zero-length field is one stuffing byte, without flags.
        p[3] = 0x30;
        p[4] = 0;
        let got = Packet::parse(&p).unwrap();
        assert!(!got.random_access());
        assert_eq!(got.payload.map(<[u8]>::len), Some(TS_PACKET - 5));
        p[4] = 184;
        assert_eq!(Packet::parse(&p), Err(PacketError::AdaptationLength));
        p[1] = 0x80;
        p[4] = 0;
        assert!(Packet::parse(&p).unwrap().transport_error);
        p[0] = 0x46;
        assert_eq!(Packet::parse(&p), Err(PacketError::Sync));
    }

    #[test]
    fn pat_and_pmt_sections() {
        let mut m = Muxer::default();
        let mut r = SectionReader::default();
        let pat = packet(&m.pat());
        let p = Packet::parse(&pat).unwrap();
        let section = r.push(p.pid, p.unit_start, p.payload.unwrap()).unwrap();
        assert_eq!((section[0], crc32_mpeg2(&section)), (table_id::PAT, 0));
        assert_eq!(pat_first_pmt_pid(&section), Some(PMT_PID));

        let pmt = packet(&m.pmt(&[(stream_type::H264, VIDEO_PID), (0x86, 0x102)]));
        let p = Packet::parse(&pmt).unwrap();
        let section = r.push(p.pid, p.unit_start, p.payload.unwrap()).unwrap();
        let pmt = Pmt::parse(&section).unwrap();
        assert_eq!(pmt.version, 0);
        assert_eq!(
            pmt.streams().collect::<Vec<_>>(),
            [(stream_type::H264, VIDEO_PID), (0x86, 0x102)]
        );
    }

    #[test]
    fn a_section_across_packets_and_the_length_clamp() {
        // A 300-byte section: pointer_field + 183 bytes, then the rest on the same PID.
        let mut section = vec![0x02, 0xb0 | 1, (300 - 3 - 256) as u8];
        section.resize(300, 0xab);
        let mut r = SectionReader::default();
        let first = [&[0][..], &section[..183]].concat();
        assert_eq!(r.push(PMT_PID, true, &first), None);
        // Another PID's payload does not continue it.
        assert_eq!(r.push(0x1234, false, &section[183..]), None);
        assert_eq!(r.push(PMT_PID, false, &section[183..]), None);
        r.push(PMT_PID, true, &first);
        let tail = [&section[183..], &[0xff; 60][..]].concat();
        assert_eq!(r.push(PMT_PID, false, &tail), Some(section));
        // section_length 0x3ff: over the §2.4.4.4 limit, dropped at once.
        assert_eq!(r.push(PMT_PID, true, &[0, 0x02, 0xb3, 0xff, 0, 0]), None);
        assert_eq!(r.push(PMT_PID, false, &[0; 184]), None);
    }

    #[test]
    fn pes_header_with_33_bit_timestamps() {
        let mut m = Muxer::default();
        let top = (1u64 << 33) - 1;
        let ts = m.pes(VIDEO_PID, top, Some(top - 3003), b"frame", true);
        let p = packet(&ts);
        let payload = Packet::parse(&p).unwrap().payload.unwrap();
        let h = PesHeader::parse(payload).unwrap();
        assert_eq!((h.pts, h.dts), (Some(top), Some(top - 3003)));
        assert_eq!((h.payload_len, h.header_len), (Some(5), 19));
        assert_eq!(&payload[h.header_len..][..5], b"frame");

        let ts = m.pes(AUDIO_PID, 90_000, None, b"a", false);
        let p = packet(&ts);
        let h = PesHeader::parse(Packet::parse(&p).unwrap().payload.unwrap()).unwrap();
        assert_eq!((h.pts, h.dts, h.payload_len), (Some(90_000), None, None));
        // No start code, or a header longer than what arrived.
        assert_eq!(
            PesHeader::parse(&[0, 0, 2, 0xe0, 0, 0, 0x80, 0x80, 5]),
            None
        );
        assert_eq!(
            PesHeader::parse(&[0, 0, 1, 0xe0, 0, 0, 0x80, 0x80, 5, 1]),
            None
        );
    }
}
