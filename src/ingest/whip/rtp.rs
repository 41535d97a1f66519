//! Sans-IO RTP receive helpers: a bounded reorder buffer (sequence numbers and arrival times in,
//! packets in order out, gaps reported) and the H.264 depacketizer of RFC 6184 (single NAL,
//! STAP-A, FU-A: packetization-mode 1) that turns packets into access units.

use std::collections::BTreeMap;
use std::time::Duration;

/// Packets held while waiting for a missing one; beyond this the gap is declared lost.
pub const REORDER_CAPACITY: usize = 512;
/// How long a gap may stay open: long enough for a NACK-triggered retransmission on a typical
/// path, short enough not to add visible latency.
pub const REORDER_WAIT: Duration = Duration::from_millis(150);
/// An access unit larger than this is refused (same cap as an RTMP media message).
pub const MAX_ACCESS_UNIT: usize = 8 * 1024 * 1024;
/// NAL units per access unit; a real encoder writes a handful (slices, SEI, parameter sets).
pub const MAX_NALS: usize = 1024;

/// Puts packets back in sequence-number order.
#[derive(Debug)]
pub struct Reorder<T> {
    /// Highest extended sequence number seen (RFC 3550 §A.1 extension to 64 bits).
    highest: Option<u64>,
    /// The next extended sequence number to release.
    next: Option<u64>,
    held: BTreeMap<u64, (Duration, T)>,
    /// Packets never received (gaps skipped), and packets that came after their turn.
    pub lost: u64,
    pub late: u64,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder {
            highest: None,
            next: None,
            held: BTreeMap::new(),
            lost: 0,
            late: 0,
        }
    }
}

/// A released packet, and whether packets are missing just before it.
#[derive(Debug, PartialEq, Eq)]
pub struct Released<T> {
    pub item: T,
    pub arrival: Duration,
    pub gap_before: bool,
}

impl<T> Reorder<T> {
    fn extend(&mut self, seq: u16) -> u64 {
        // Start high enough that a reordered first packet can still go below the first seen.
        let Some(h) = self.highest else {
            let e = (1u64 << 32) + u64::from(seq);
            self.highest = Some(e);
            return e;
        };
        let delta = i64::from(seq.wrapping_sub(h as u16) as i16);
        let e = (h as i64 + delta) as u64;
        self.highest = Some(h.max(e));
        e
    }

    pub fn push(&mut self, seq: u16, arrival: Duration, item: T) {
        let ext = self.extend(seq);
        let next = *self.next.get_or_insert(ext);
        if ext < next || self.held.contains_key(&ext) {
            self.late += 1; // already released past it, or a duplicate
            return;
        }
        self.held.insert(ext, (arrival, item));
    }

    /// Releases what is in order, and skips a gap that has waited [`REORDER_WAIT`] or that
    /// holds up more than [`REORDER_CAPACITY`] packets.
    pub fn pop(&mut self, now: Duration, out: &mut Vec<Released<T>>) {
        while let Some(entry) = {
            let full = self.held.len() > REORDER_CAPACITY;
            self.held.first_entry().map(|e| (e, full))
        } {
            let (entry, full) = entry;
            let next = self.next.expect("set by the first push");
            let key = *entry.key();
            let waited = now.saturating_sub(entry.get().0);
            let gap = key != next;
            if gap && waited < REORDER_WAIT && !full {
                break;
            }
            let (arrival, item) = entry.remove();
            self.lost += key - next;
            self.next = Some(key + 1);
            out.push(Released {
                item,
                arrival,
                gap_before: gap,
            });
        }
    }
}

/// What the depacketizer makes of the packets of one RTP timestamp.
#[derive(Debug, PartialEq, Eq)]
pub enum Unit {
    /// A complete access unit: its NAL units (header byte included, no start codes).
    Complete { ts: u32, nals: Vec<Vec<u8>> },
    /// Packets were lost or malformed: the unit is unusable (the decoder needs a keyframe).
    Damaged { ts: u32 },
}

#[derive(Debug, Default)]
pub struct H264Depacketizer {
    ts: Option<u32>,
    nals: Vec<Vec<u8>>,
    size: usize,
    /// The NAL unit being reassembled from FU-A fragments.
    fragment: Option<Vec<u8>>,
    damaged: bool,
}

impl H264Depacketizer {
    /// One packet in sequence order. A unit ends at the marker bit (RFC 6184 §5.1: the last
    /// packet of an access unit) or when the timestamp changes (a lost marker packet).
    pub fn push(
        &mut self,
        ts: u32,
        marker: bool,
        payload: &[u8],
        gap_before: bool,
        out: &mut Vec<Unit>,
    ) {
        if self.ts.is_some_and(|t| t != ts) {
            self.finish(out);
        }
        if gap_before {
            self.damaged = true;
            self.fragment = None;
        }
        self.ts = Some(ts);
        self.payload(payload);
        if self.size > MAX_ACCESS_UNIT || self.nals.len() > MAX_NALS {
            self.damaged = true;
            self.nals.clear();
            self.fragment = None;
        }
        if marker {
            self.finish(out);
        }
    }

    fn payload(&mut self, payload: &[u8]) {
        let Some(&header) = payload.first() else {
            self.damaged = true;
            return;
        };
        match header & 0x1f {
            1..=23 => self.nal(payload),
            24 => {
                // STAP-A (§5.7.1): 16-bit sizes, each NAL unit whole.
                let mut rest = &payload[1..];
                while !rest.is_empty() {
                    let Some((size, tail)) = rest.split_first_chunk::<2>() else {
                        self.damaged = true;
                        return;
                    };
                    let size = usize::from(u16::from_be_bytes(*size));
                    if size == 0 || size > tail.len() {
                        self.damaged = true;
                        return;
                    }
                    let (nal, tail) = tail.split_at(size);
                    self.nal(nal);
                    rest = tail;
                }
            }
            28 => {
                // FU-A (§5.8): the NAL header is rebuilt from the indicator's F/NRI bits and the
                // FU header's type.
                let Some(&fu) = payload.get(1) else {
                    self.damaged = true;
                    return;
                };
                let (start, end) = (fu & 0x80 != 0, fu & 0x40 != 0);
                let data = &payload[2..];
                if start {
                    if self.fragment.is_some() {
                        self.damaged = true; // the previous fragment never ended
                    }
                    let mut nal = Vec::with_capacity(data.len() * 4 + 1);
                    nal.push((header & 0xe0) | (fu & 0x1f));
                    nal.extend_from_slice(data);
                    self.size += nal.len();
                    self.fragment = Some(nal);
                } else if let Some(nal) = self.fragment.as_mut() {
                    nal.extend_from_slice(data);
                    self.size += data.len();
                } else {
                    self.damaged = true; // a middle or end fragment without its start
                    return;
                }
                if end {
                    if let Some(nal) = self.fragment.take() {
                        self.nals.push(nal);
                    }
                }
            }
            // STAP-B, MTAP, FU-B belong to the interleaved mode, which we do not negotiate.
            _ => self.damaged = true,
        }
    }

    fn nal(&mut self, nal: &[u8]) {
        self.size += nal.len();
        self.nals.push(nal.to_vec());
    }

    fn finish(&mut self, out: &mut Vec<Unit>) {
        let Some(ts) = self.ts.take() else { return };
        let nals = std::mem::take(&mut self.nals);
        let damaged = std::mem::take(&mut self.damaged) | self.fragment.take().is_some();
        self.size = 0;
        if damaged {
            out.push(Unit::Damaged { ts });
        } else if !nals.is_empty() {
            out.push(Unit::Complete { ts, nals });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn drain(r: &mut Reorder<u16>, now: Duration) -> Vec<(u16, bool)> {
        let mut out = Vec::new();
        r.pop(now, &mut out);
        out.into_iter().map(|p| (p.item, p.gap_before)).collect()
    }

    #[test]
    fn reorders_across_the_wrap_and_declares_gaps_lost() {
        let mut r = Reorder::default();
        r.push(65534, ms(0), 65534);
        r.push(0, ms(1), 0);
        assert_eq!(drain(&mut r, ms(1)), [(65534, false)]);
        r.push(65535, ms(2), 65535);
        assert_eq!(drain(&mut r, ms(2)), [(65535, false), (0, false)]);
        // 1 never comes: 2 waits, then goes with a gap flag.
        r.push(2, ms(10), 2);
        assert_eq!(drain(&mut r, ms(100)), []);
        assert_eq!(drain(&mut r, ms(10) + REORDER_WAIT), [(2, true)]);
        assert_eq!(r.lost, 1);
        // 1 arrives after all: too late, dropped; a duplicate likewise.
        r.push(1, ms(200), 1);
        r.push(2, ms(200), 2);
        assert_eq!(r.late, 2);
        assert_eq!(drain(&mut r, ms(500)), []);
    }

    #[test]
    fn a_full_buffer_skips_the_gap_at_once() {
        let mut r = Reorder::default();
        r.push(0, ms(0), 0);
        drain(&mut r, ms(0));
        for s in 2..(3 + REORDER_CAPACITY as u16) {
            r.push(s, ms(1), s);
        }
        let out = drain(&mut r, ms(1));
        assert_eq!(out.len(), REORDER_CAPACITY + 1);
        assert_eq!(out[0], (2, true));
    }

    fn fu(start: bool, end: bool, t: u8, data: &[u8]) -> Vec<u8> {
        let mut v = vec![0x60 | 28, (u8::from(start) << 7) | (u8::from(end) << 6) | t];
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn single_stap_a_and_fu_a_make_one_unit() {
        let mut d = H264Depacketizer::default();
        let mut out = Vec::new();
        let sps = [0x67, 0x42, 0, 0x1f];
        let pps = [0x68, 0xce, 0x3c];
        let mut stap = vec![0x78];
        for n in [&sps[..], &pps[..]] {
            stap.extend_from_slice(&(n.len() as u16).to_be_bytes());
            stap.extend_from_slice(n);
        }
        d.push(90, false, &stap, false, &mut out);
        d.push(90, false, &fu(true, false, 5, &[1, 2]), false, &mut out);
        d.push(90, false, &fu(false, false, 5, &[3]), false, &mut out);
        d.push(90, true, &fu(false, true, 5, &[4]), false, &mut out);
        d.push(180, true, &[0x41, 9, 9], false, &mut out);
        assert_eq!(
            out,
            [
                Unit::Complete {
                    ts: 90,
                    nals: vec![sps.to_vec(), pps.to_vec(), vec![0x65, 1, 2, 3, 4]]
                },
                Unit::Complete {
                    ts: 180,
                    nals: vec![vec![0x41, 9, 9]]
                }
            ]
        );
    }

    #[test]
    fn loss_and_malformed_packets_damage_the_unit() {
        let mut out = Vec::new();
        let mut d = H264Depacketizer::default();
        // Lost middle fragment.
        d.push(1, false, &fu(true, false, 5, &[1]), false, &mut out);
        d.push(1, true, &fu(false, true, 5, &[3]), true, &mut out);
        // End fragment without a start; a lost marker packet (the timestamp moves on).
        d.push(2, true, &fu(false, true, 1, &[3]), false, &mut out);
        d.push(3, false, &fu(true, false, 1, &[3]), false, &mut out);
        d.push(4, true, &[0x41, 1], false, &mut out);
        // Truncated STAP-A, interleaved-mode types, empty payload.
        d.push(5, true, &[0x78, 0, 9, 0x41], false, &mut out);
        d.push(6, true, &[0x7a, 0, 0], false, &mut out);
        d.push(7, true, &[], false, &mut out);
        let damaged: Vec<u32> = out
            .iter()
            .filter_map(|u| match u {
                Unit::Damaged { ts } => Some(*ts),
                Unit::Complete { .. } => None,
            })
            .collect();
        assert_eq!(damaged, [1, 2, 3, 5, 6, 7]);
        assert!(out.contains(&Unit::Complete {
            ts: 4,
            nals: vec![vec![0x41, 1]]
        }));
    }

    #[test]
    fn an_oversized_unit_is_dropped_not_kept() {
        let mut d = H264Depacketizer::default();
        let mut out = Vec::new();
        let chunk = vec![7u8; 60_000];
        d.push(1, false, &fu(true, false, 5, &chunk), false, &mut out);
        for _ in 0..(MAX_ACCESS_UNIT / chunk.len() + 1) {
            d.push(1, false, &fu(false, false, 5, &chunk), false, &mut out);
        }
        assert!(d.size <= MAX_ACCESS_UNIT + chunk.len() + 2);
        d.push(1, true, &fu(false, true, 5, &[1]), false, &mut out);
        assert_eq!(out, [Unit::Damaged { ts: 1 }]);
    }
}
