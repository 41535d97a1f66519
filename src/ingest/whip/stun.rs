//! The one piece of STUN both ICE muxes read themselves (sans-IO): which local session a
//! Binding Request is for, so the UDP mux can route a datagram and the TCP mux a connection.

/// STUN USERNAME is at most 513 bytes (RFC 8489 §14.3).
const MAX_STUN_USERNAME: usize = 513;

/// The ufrag of the receiving agent if `p` is a STUN Binding Request: its USERNAME is
/// `ours:theirs` (RFC 8445 §7.2.2). Sans-IO, and bounded by the datagram.
pub fn stun_request_ufrag(p: &[u8]) -> Option<&str> {
    // RFC 8489 §5: 20-byte header, type 0x0001 (Binding Request), the magic cookie.
    if p.len() < 20 || p[0..2] != [0x00, 0x01] || p[4..8] != [0x21, 0x12, 0xA4, 0x42] {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([p[2], p[3]]));
    let body = p.get(20..20 + len)?;
    let mut i = 0;
    while i + 4 <= body.len() {
        let typ = u16::from_be_bytes([body[i], body[i + 1]]);
        let l = usize::from(u16::from_be_bytes([body[i + 2], body[i + 3]]));
        let v = body.get(i + 4..i + 4 + l)?;
        if typ == 0x0006 {
            if l > MAX_STUN_USERNAME {
                return None;
            }
            let ufrag = std::str::from_utf8(v).ok()?.split(':').next()?;
            return (!ufrag.is_empty()).then_some(ufrag);
        }
        // Attributes are padded to 4 bytes (RFC 8489 §14).
        i += 4 + ((l + 3) & !3);
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A Binding Request with USERNAME `user` and one attribute before it.
    pub(crate) fn binding_request(user: &[u8]) -> Vec<u8> {
        let mut attrs = vec![0x80, 0x22, 0x00, 0x03, b'a', b'b', b'c', 0]; // SOFTWARE, padded
        attrs.extend_from_slice(&[0x00, 0x06]);
        attrs.extend_from_slice(&(user.len() as u16).to_be_bytes());
        attrs.extend_from_slice(user);
        attrs.resize(attrs.len().next_multiple_of(4), 0);
        let mut p = vec![0x00, 0x01];
        p.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        p.extend_from_slice(&[0x21, 0x12, 0xA4, 0x42]);
        p.extend_from_slice(&[7; 12]);
        p.extend_from_slice(&attrs);
        p
    }

    #[test]
    fn a_binding_request_names_the_receivers_ufrag() {
        assert_eq!(
            stun_request_ufrag(&binding_request(b"ours:theirs")),
            Some("ours")
        );
        // Not a request (a success response), truncated, lying lengths, no USERNAME.
        let mut response = binding_request(b"ours:theirs");
        response[0..2].copy_from_slice(&[0x01, 0x01]);
        assert_eq!(stun_request_ufrag(&response), None);
        let whole = binding_request(b"ours:theirs");
        for cut in 0..whole.len() {
            assert_eq!(stun_request_ufrag(&whole[..cut]), None, "cut at {cut}");
        }
        let mut lying = whole.clone();
        lying[2..4].copy_from_slice(&[0xff, 0xff]);
        assert_eq!(stun_request_ufrag(&lying), None);
        assert_eq!(stun_request_ufrag(&binding_request(b"")), None);
        assert_eq!(stun_request_ufrag(&binding_request(b":x")), None);
        assert_eq!(stun_request_ufrag(&[0x16, 0xfe, 0xfd, 0, 0, 0, 0, 0]), None);
    }
}
