//! Raw UDP peers at the SRT listener: handshakes carrying stream ids over SRT's 512-byte cap,
//! datagrams that crashed srt-protocol 0.4.4's parser, and random bytes.

use std::time::Duration;

use serde_json::Value;
use tokio::net::UdpSocket;

const HANDSHAKE: u32 = 0x8000_0000;
const INDUCTION: u32 = 1;
const CONCLUSION: u32 = 0xffff_ffff;
const REJECT_NOT_FOUND: u32 = 2404;

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
async fn conclude(srt: &str, stream_id: &[u8]) -> Option<u32> {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
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
    reply(&sock).await.map(|(kind, _)| kind)
}

pub async fn attack_all(srt: &str, victim: &Value) {
    // The raw caller works: an unknown stream gets a rejection, SRT_REJX_NOTFOUND (1404, sent
    // as handshake type 1000 + 1404).
    let answer = conclude(srt, b"99999#0123456789abcdef").await;
    assert_eq!(answer, Some(REJECT_NOT_FOUND), "unknown stream: {answer:?}");
    // Stream ids over 512 bytes, well-formed or not, even naming the victim with its token:
    // never accepted (a rejection or no answer at all).
    let id = victim["id"].as_i64().unwrap();
    let token = victim["token"].as_str().unwrap();
    let mut long = format!("{id}#{token}").into_bytes();
    long.resize(600, b'a');
    let mut long_kv = format!("#!::r={id},t={token},x=").into_bytes();
    long_kv.resize(2000, b'y');
    for sid in [long, long_kv, vec![0xff; 1020], b"#!::".to_vec(), vec![]] {
        let answer = conclude(srt, &sid).await;
        assert_ne!(
            answer,
            Some(CONCLUSION),
            "accepted a stream id of {} bytes",
            sid.len()
        );
    }
    // A truncated control packet of each kind that panicked srt-protocol 0.4.4's parser (and
    // with it every connection), then 2000 random datagrams.
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for kind in [5u8, 6, 7, 8] {
        let mut p = vec![0xff, 0xff, 0x00, kind];
        p.extend_from_slice(&[0; 12]);
        udp.send_to(&p, srt).await.unwrap();
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..2000 {
        let len = 16 + (i % 120);
        let p: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        udp.send_to(&p, srt).await.unwrap();
        if i % 100 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // The listener still answers callers.
    let answer = conclude(srt, b"99999#0123456789abcdef").await;
    assert_eq!(
        answer,
        Some(REJECT_NOT_FOUND),
        "after the datagrams: {answer:?}"
    );
}
