//! RFC 6184 packetization (packetization-mode 1) of a rung's H.264 access units as the hub
//! carries them (4-byte length-prefixed NAL units): single NAL unit packets, FU-A for the large
//! ones, and the parameter sets as one STAP-A before every keyframe, so a viewer that joins or
//! recovers at any IDR can decode it. Sans-IO: an access unit in, RTP payloads out.

use bytes::{BufMut, Bytes, BytesMut};

/// RTP payload bytes per packet: 1200 keeps a packet (with RTP, SRTP and UDP/IP headers, a
/// TURN or IPv6 hop) under the common 1280-byte path MTU floor, as browsers' own senders do.
pub const MAX_PAYLOAD: usize = 1200;

/// NAL unit types (ITU-T H.264 table 7-1) and RFC 6184 §5.4 payload types.
const NAL_IDR: u8 = 5;
const NAL_SPS: u8 = 7;
const NAL_PPS: u8 = 8;
const NAL_AUD: u8 = 9;
const NAL_FILLER: u8 = 12;
const STAP_A: u8 = 24;
const FU_A: u8 = 28;

/// An access unit that is not 4-byte length-prefixed NAL units (counted by the caller).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed access unit: a NAL unit length runs past its end")]
pub struct Malformed;

/// Packetizes one rung's access units; holds its parameter sets.
#[derive(Debug, Clone)]
pub struct Packetizer {
    /// One STAP-A of every SPS and PPS (RFC 6184 §5.7.1), sent before each IDR.
    parameter_sets: Option<Bytes>,
}

impl Packetizer {
    /// `parameter_sets`: the SPS and PPS NAL units of the rung's avcC.
    pub fn new(parameter_sets: &[Bytes]) -> Packetizer {
        Packetizer {
            parameter_sets: stap_a(parameter_sets),
        }
    }

    /// The payloads of one access unit, in sending order; the last one ends the access unit
    /// (its packet carries the marker bit, RFC 6184 §5.1). In-band parameter sets are dropped
    /// in favour of the avcC's, AUDs and filler are dropped (§5.1 lets a sender omit them).
    pub fn packetize(&self, au: &Bytes, out: &mut Vec<Bytes>) -> Result<(), Malformed> {
        let nals = nal_units(au)?;
        let keyframe = nals.iter().any(|n| n[0] & 0x1f == NAL_IDR);
        if keyframe {
            out.extend(self.parameter_sets.clone());
        }
        for nal in nals {
            match nal[0] & 0x1f {
                NAL_SPS | NAL_PPS | NAL_AUD | NAL_FILLER => {}
                _ if nal.len() <= MAX_PAYLOAD => out.push(nal),
                _ => fragment(&nal, out),
            }
        }
        Ok(())
    }
}

/// The NAL units of a 4-byte length-prefixed access unit (empty ones skipped).
fn nal_units(au: &Bytes) -> Result<Vec<Bytes>, Malformed> {
    let ranges = crate::media::codec::nal_unit_ranges(au).ok_or(Malformed)?;
    Ok(ranges
        .into_iter()
        .filter(|r| !r.is_empty())
        .map(|r| au.slice(r))
        .collect())
}

/// STAP-A of the parameter sets, or `None` if they don't fit one packet (then they go as single
/// NAL unit packets... which never happens with real encoders: x264's are < 100 bytes).
fn stap_a(sets: &[Bytes]) -> Option<Bytes> {
    if sets.is_empty() {
        return None;
    }
    let size = 1 + sets.iter().map(|s| 2 + s.len()).sum::<usize>();
    if size > MAX_PAYLOAD
        || sets
            .iter()
            .any(|s| s.is_empty() || s.len() > usize::from(u16::MAX))
    {
        return None;
    }
    // F = 0, NRI = the highest of the aggregated units (§5.7.1), type 24.
    let nri = sets.iter().map(|s| s[0] & 0x60).max().unwrap_or(0x60);
    let mut b = BytesMut::with_capacity(size);
    b.put_u8(nri | STAP_A);
    for s in sets {
        b.put_u16(s.len() as u16);
        b.put_slice(s);
    }
    Some(b.freeze())
}

/// FU-A fragments of one NAL unit (§5.8): its header byte is carried in the FU indicator (F,
/// NRI) and FU header (type), not repeated.
fn fragment(nal: &Bytes, out: &mut Vec<Bytes>) {
    let (header, body) = (nal[0], &nal[1..]);
    let chunk = MAX_PAYLOAD - 2;
    let count = body.len().div_ceil(chunk);
    for (i, piece) in body.chunks(chunk).enumerate() {
        let mut fu = BytesMut::with_capacity(2 + piece.len());
        fu.put_u8((header & 0xe0) | FU_A);
        let start = if i == 0 { 0x80 } else { 0 };
        let end = if i + 1 == count { 0x40 } else { 0 };
        fu.put_u8(start | end | (header & 0x1f));
        fu.put_slice(piece);
        out.push(fu.freeze());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtc::rtp::codec::h264::H264Packet;
    use rtc::rtp::packetizer::Depacketizer;

    fn au(nals: &[&[u8]]) -> Bytes {
        let mut b = BytesMut::new();
        for n in nals {
            b.put_u32(n.len() as u32);
            b.put_slice(n);
        }
        b.freeze()
    }

    /// What an independent depacketizer (webrtc-rs's receiver side) rebuilds: Annex B.
    fn depacketize(payloads: &[Bytes]) -> Vec<u8> {
        let mut d = H264Packet::default();
        let mut out = Vec::new();
        for p in payloads {
            out.extend_from_slice(&d.depacketize(p).unwrap());
        }
        out
    }

    fn annex_b(nals: &[&[u8]]) -> Vec<u8> {
        nals.iter()
            .flat_map(|n| [&[0, 0, 0, 1][..], n].concat())
            .collect()
    }

    #[test]
    fn a_keyframe_gets_the_parameter_sets_first_and_large_units_are_fragmented() {
        let sps: &[u8] = &[0x67, 0x64, 0x00, 0x1f, 0xac];
        let pps: &[u8] = &[0x68, 0xeb, 0xe3];
        let p = Packetizer::new(&[Bytes::from_static(sps), Bytes::from_static(pps)]);
        let sei: &[u8] = &[0x06, 5, 1, 0];
        let mut idr = vec![0x65];
        idr.extend((0..3000u32).map(|i| (i % 251) as u8 + 1));
        let aud: &[u8] = &[0x09, 0xf0];
        let mut out = Vec::new();
        p.packetize(&au(&[aud, sps, pps, sei, &idr]), &mut out)
            .unwrap();
        // STAP-A, SEI, then the IDR in 3 fragments.
        assert_eq!(out.len(), 5);
        assert_eq!(out[0][0] & 0x1f, STAP_A);
        assert!(out.iter().all(|p| p.len() <= MAX_PAYLOAD));
        assert_eq!(depacketize(&out), annex_b(&[sps, pps, sei, &idr]));

        // A delta frame carries no parameter sets.
        let slice: &[u8] = &[0x41, 0x9a, 0x01];
        out.clear();
        p.packetize(&au(&[slice]), &mut out).unwrap();
        assert_eq!(out, [Bytes::from_static(slice)]);
    }

    #[test]
    fn a_unit_running_past_the_end_is_refused() {
        let p = Packetizer::new(&[]);
        let mut bad = au(&[&[0x41, 1, 2]]).to_vec();
        bad[3] = 200;
        assert_eq!(
            p.packetize(&Bytes::from(bad), &mut Vec::new()),
            Err(Malformed)
        );
        assert_eq!(
            p.packetize(&Bytes::from_static(&[0, 0]), &mut Vec::new()),
            Err(Malformed)
        );
    }
}
