//! Raw TCP peers that break the RTMP rules (RTMP spec §5: handshake, chunk stream, AMF0).

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{closed_within, timeout_bound, AT_ONCE};

/// C0+C1, read S0+S1+S2, send C2 (the simple handshake: C2 echoes S1).
async fn handshake(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut c1 = vec![0u8; 1536];
    for (i, b) in c1.iter_mut().enumerate().skip(8) {
        *b = (i * 7) as u8;
    }
    s.write_all(&[3]).await.unwrap();
    s.write_all(&c1).await.unwrap();
    let mut s0s1s2 = vec![0u8; 1 + 1536 * 2];
    s.read_exact(&mut s0s1s2).await.unwrap();
    s.write_all(&s0s1s2[1..1537]).await.unwrap();
    s
}

/// A type 0 chunk header (timestamp 0, message stream 0) and the payload, in one chunk.
fn chunk0(csid: u8, kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut m = header0(csid, kind, payload.len() as u32);
    m.extend_from_slice(payload);
    m
}

fn header0(csid: u8, kind: u8, len: u32) -> Vec<u8> {
    let len = len.to_be_bytes();
    vec![csid, 0, 0, 0, len[1], len[2], len[3], kind, 0, 0, 0, 0]
}

fn set_chunk_size(size: u32) -> Vec<u8> {
    chunk0(2, 1, &size.to_be_bytes())
}

fn amf_str(s: &str) -> Vec<u8> {
    let mut v = vec![2];
    v.extend_from_slice(&(s.len() as u16).to_be_bytes());
    v.extend_from_slice(s.as_bytes());
    v
}

fn amf_num(n: f64) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&n.to_be_bytes());
    v
}

fn connect_command(app: &str) -> Vec<u8> {
    let mut v = amf_str("connect");
    v.extend(amf_num(1.0));
    v.push(3);
    for (k, val) in [("app", app), ("type", "nonprivate")] {
        v.extend_from_slice(&(k.len() as u16).to_be_bytes());
        v.extend_from_slice(k.as_bytes());
        v.extend(amf_str(val));
    }
    v.extend_from_slice(&[0, 0, 9]);
    v
}

/// Reads what the server sends until `needle` shows up; panics on close or after 5 s.
async fn expect(s: &mut TcpStream, needle: &[u8], what: &str) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !got.windows(needle.len()).any(|w| w == needle) {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => panic!(
                "{what}: no {:?} from the server",
                String::from_utf8_lossy(needle)
            ),
        }
    }
}

async fn closed_at_once(s: TcpStream, what: &str) {
    closed_within(s, AT_ONCE, what).await;
}

pub async fn attack_all(rtmp: &str, rtmps: &str, victim: &Value) {
    // RTMPS: plain RTMP instead of TLS is refused on sight; a peer that never starts TLS is
    // closed at the handshake timeout.
    let mut s = TcpStream::connect(rtmps).await.unwrap();
    s.write_all(&[3; 1537]).await.unwrap();
    closed_at_once(s, "RTMP on the RTMPS port").await;
    let silent_tls = async {
        let s = TcpStream::connect(rtmps).await.unwrap();
        closed_within(s, timeout_bound(), "no TLS handshake").await;
    };
    // Junk instead of a handshake (an HTTP request, a TLS ClientHello): refused on sight.
    for junk in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &[
            0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
        ][..],
    ] {
        let mut s = TcpStream::connect(rtmp).await.unwrap();
        s.write_all(junk).await.unwrap();
        closed_at_once(s, "junk handshake").await;
    }
    // Handshakes that never finish (C0 alone; C0+C1 and no C2): the handshake timeout.
    let stalled = async {
        let mut s = TcpStream::connect(rtmp).await.unwrap();
        s.write_all(&[3]).await.unwrap();
        closed_within(s, timeout_bound(), "C0 only").await;
    };
    let no_c2 = async {
        let mut s = TcpStream::connect(rtmp).await.unwrap();
        s.write_all(&[3]).await.unwrap();
        s.write_all(&[0u8; 1536]).await.unwrap();
        closed_within(s, timeout_bound(), "no C2").await;
    };
    // 20 peers each declaring an 8 MiB video message (the largest allowed) and sending no
    // body: nothing is allocated for the declared length; all closed at the handshake timeout
    // (they never published).
    let declared = async {
        let mut peers = Vec::new();
        for _ in 0..20 {
            let mut s = handshake(rtmp).await;
            s.write_all(&header0(4, 9, 8 * 1024 * 1024)).await.unwrap();
            peers.push(s);
        }
        for s in peers {
            closed_within(s, timeout_bound(), "8 MiB declared, no body").await;
        }
    };
    let refusals = async {
        // Chunk sizes: 0, 2^31-1, the top bit set, a payload too short to hold one.
        for msg in [
            set_chunk_size(0),
            set_chunk_size(0x7fff_ffff),
            set_chunk_size(0x8000_1000),
            chunk0(2, 1, &[0, 16]),
        ] {
            let mut s = handshake(rtmp).await;
            s.write_all(&msg).await.unwrap();
            closed_at_once(s, "bad chunk size").await;
        }
        // A chunk-size change in the middle of a message.
        let mut s = handshake(rtmp).await;
        let connect = connect_command("in");
        let mut long = connect.clone();
        long.resize(300, 5);
        let mut first = header0(3, 20, long.len() as u32);
        first.extend_from_slice(&long[..128]);
        s.write_all(&first).await.unwrap();
        s.write_all(&set_chunk_size(4096)).await.unwrap();
        closed_at_once(s, "chunk size changed mid-message").await;
        // The message length changing between chunks (a type 1 header mid-message).
        let mut s = handshake(rtmp).await;
        s.write_all(&first).await.unwrap();
        let mut type1 = vec![0x40 | 3, 0, 0, 0, 0, 2, 0x58, 20];
        type1.extend_from_slice(&[5; 128]);
        s.write_all(&type1).await.unwrap();
        closed_at_once(s, "length changed mid-message").await;
        // Type 1, 2 and 3 chunks with no type 0 before them on their chunk stream.
        for first_chunk in [
            vec![0x40 | 5, 0, 0, 0, 0, 0, 4, 20, 5, 5, 5, 5],
            vec![0x80 | 5, 0, 0, 0, 5, 5, 5],
            vec![0xc0 | 5, 5, 5, 5],
        ] {
            let mut s = handshake(rtmp).await;
            s.write_all(&first_chunk).await.unwrap();
            closed_at_once(s, "no type 0 first").await;
        }
        // 16 MiB declared (over the 8 MiB limit) on many chunk streams, no body.
        let mut s = handshake(rtmp).await;
        for csid in 4..60u8 {
            let _ = s.write_all(&header0(csid, 9, 0x00ff_ffff)).await;
        }
        closed_at_once(s, "16 MiB declared").await;
        // AMF0: nested 12 000 deep (would overflow rml_rtmp's recursive reader), and a strict
        // array claiming 2^32-1 elements. The chunk size is raised so each fits in one chunk.
        let mut deep = amf_str("connect");
        deep.extend(amf_num(1.0));
        deep.extend(std::iter::repeat_n([0x0a, 0, 0, 0, 1], 12_000).flatten());
        deep.push(5);
        let mut huge = amf_str("connect");
        huge.extend(amf_num(1.0));
        huge.extend_from_slice(&[0x0a, 0xff, 0xff, 0xff, 0xff, 5, 5]);
        for body in [deep, huge] {
            let mut s = handshake(rtmp).await;
            s.write_all(&set_chunk_size(65_536)).await.unwrap();
            s.write_all(&chunk0(3, 20, &body)).await.unwrap();
            closed_at_once(s, "hostile AMF0").await;
        }
    };
    // Chunk size 1 is legal: a connect sent one byte per chunk is answered; the peer, which
    // never publishes, is then closed at the handshake timeout.
    let tiny_chunks = async {
        let mut s = handshake(rtmp).await;
        s.write_all(&set_chunk_size(1)).await.unwrap();
        let connect = connect_command("in");
        let mut bytes = header0(3, 20, connect.len() as u32);
        bytes.push(connect[0]);
        for b in &connect[1..] {
            bytes.extend_from_slice(&[0xc0 | 3, *b]);
        }
        s.write_all(&bytes).await.unwrap();
        expect(&mut s, b"NetConnection.Connect.Success", "chunk size 1").await;
        closed_within(s, timeout_bound(), "chunk size 1, no publish").await;
    };
    // Publish names that are paths, carry NUL, or are 1000 bytes long: BadName, then closed.
    let id = victim["id"].as_i64().unwrap();
    let token = victim["token"].as_str().unwrap().to_owned();
    let names = [
        "../../../../etc/passwd".to_owned(),
        format!("{id}?{token}/../../x"),
        format!("{id}\0?{token}"),
        "a".repeat(1000),
    ];
    let bad_names = async {
        for name in &names {
            let mut s = handshake(rtmp).await;
            s.write_all(&set_chunk_size(4096)).await.unwrap();
            s.write_all(&chunk0(3, 20, &connect_command("in")))
                .await
                .unwrap();
            expect(&mut s, b"NetConnection.Connect.Success", "connect").await;
            let mut create = amf_str("createStream");
            create.extend(amf_num(2.0));
            create.push(5);
            s.write_all(&chunk0(3, 20, &create)).await.unwrap();
            expect(&mut s, b"_result", "createStream").await;
            let mut publish = amf_str("publish");
            publish.extend(amf_num(3.0));
            publish.push(5);
            publish.extend(amf_str(name));
            publish.extend(amf_str("live"));
            let mut msg = chunk0(8, 20, &publish);
            msg[8] = 1; // message stream 1, little-endian
            s.write_all(&msg).await.unwrap();
            expect(&mut s, b"NetStream.Publish.BadName", "bad publish name").await;
            closed_within(s, timeout_bound(), "after BadName").await;
        }
    };
    tokio::join!(
        stalled,
        no_c2,
        declared,
        refusals,
        tiny_chunks,
        bad_names,
        silent_tls
    );
}
