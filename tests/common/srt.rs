//! A raw SRT caller (UDP, no library): induction and conclusion with a chosen stream id, to
//! read the listener's exact answer — a rejection reason or a conclusion — byte for byte.

use std::time::Duration;

use tokio::net::UdpSocket;

const HANDSHAKE: u32 = 0x8000_0000;
const INDUCTION: u32 = 1;
pub const CONCLUSION: u32 = 0xffff_ffff;

/// A handshake control packet (SRT RFC draft §3.2.1) to socket `dest`.
fn handshake(
    dest: u32,
    version: u32,
    ext_flags: u16,
    kind: u32,
    cookie: u32,
    exts: &[u8],
) -> Vec<u8> {
    let mut p = Vec::new();
    for w in [HANDSHAKE, 0, 0, dest, version] {
        p.extend_from_slice(&w.to_be_bytes());
    }
    p.extend_from_slice(&0u16.to_be_bytes()); // no encryption
    p.extend_from_slice(&ext_flags.to_be_bytes());
    for w in [0x1234_5678u32, 1500, 8192, kind, 0x0bad_cafe, cookie] {
        p.extend_from_slice(&w.to_be_bytes());
    }
    p.extend_from_slice(&[127, 0, 0, 1]);
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(exts);
    p
}

/// HSREQ (TSBPD both ways, 120 ms) and a stream id extension; the stream id's bytes are sent
/// in 4-byte words, each reversed (§3.2.1.3).
fn conclusion_extensions(stream_id: &[u8]) -> Vec<u8> {
    let mut e = Vec::new();
    e.extend_from_slice(&1u16.to_be_bytes());
    e.extend_from_slice(&3u16.to_be_bytes());
    for w in [0x0001_0401u32, 0x3f, (120 << 16) | 120] {
        e.extend_from_slice(&w.to_be_bytes());
    }
    let mut sid = stream_id.to_vec();
    sid.resize(sid.len().div_ceil(4) * 4, 0);
    e.extend_from_slice(&5u16.to_be_bytes());
    e.extend_from_slice(&((sid.len() / 4) as u16).to_be_bytes());
    for word in sid.chunks(4) {
        e.extend(word.iter().rev());
    }
    e
}

/// Handshake type of the next handshake from the listener, if one comes within 2 s.
async fn reply(sock: &UdpSocket) -> Option<(u32, u32)> {
    let mut buf = [0u8; 1500];
    loop {
        let n = match tokio::time::timeout(Duration::from_secs(2), sock.recv(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => return None,
        };
        if n >= 64 && u32::from_be_bytes(buf[0..4].try_into().unwrap()) == HANDSHAKE {
            let kind = u32::from_be_bytes(buf[36..40].try_into().unwrap());
            let cookie = u32::from_be_bytes(buf[44..48].try_into().unwrap());
            return Some((kind, cookie));
        }
    }
}

/// Induction then conclusion with `stream_id`; the listener's answer to the conclusion.
pub async fn conclude(srt: &str, stream_id: &[u8]) -> Option<u32> {
    conclude_from("127.0.0.1:0", srt, stream_id).await
}

/// As [`conclude`], from the local address `local` (e.g. `127.0.0.2:0`, a second host).
pub async fn conclude_from(local: &str, srt: &str, stream_id: &[u8]) -> Option<u32> {
    conclude_holding(local, srt, stream_id).await.0
}

/// As [`conclude_from`], returning the caller's socket with the answer. Hold it while the
/// listener keeps the connection open: the listener knows a caller by its address and port, so
/// a later caller bound to a port given back too early would be taken for that connection and
/// its induction never answered.
pub async fn conclude_holding(
    local: &str,
    srt: &str,
    stream_id: &[u8],
) -> (Option<u32>, UdpSocket) {
    let sock = UdpSocket::bind(local).await.unwrap();
    sock.connect(srt).await.unwrap();
    sock.send(&handshake(0, 4, 2, INDUCTION, 0, &[]))
        .await
        .unwrap();
    let (kind, cookie) = reply(&sock).await.expect("no induction response");
    assert_eq!(kind, INDUCTION);
    let exts = conclusion_extensions(stream_id);
    sock.send(&handshake(0, 5, 5, CONCLUSION, cookie, &exts))
        .await
        .unwrap();
    let answer = reply(&sock).await.map(|(kind, _)| kind);
    (answer, sock)
}

/// The handshake type a listener answers with when it rejects a caller for `reason`
/// (`SRT_REJX_*`, e.g. 1404 not found, 1409 conflict): 1000 + reason.
pub const fn rejection(reason: u32) -> u32 {
    1000 + reason
}
