//! Raw UDP peers at the SRT listener: handshakes carrying stream ids over SRT's 512-byte cap,
//! datagrams that crashed srt-protocol 0.4.4's parser, and random bytes.

use std::time::Duration;

use serde_json::Value;
use tokio::net::UdpSocket;

use crate::common::srt::{conclude, rejection, CONCLUSION};

/// SRT_REJX_NOTFOUND.
const REJECT_NOT_FOUND: u32 = rejection(1404);

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
