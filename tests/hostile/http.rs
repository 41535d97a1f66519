//! Raw HTTP peers at the daemon's one HTTP listener (API, media, player, WHIP): traversal in
//! every media path, directives at the integer limits, oversized heads and bodies, deep JSON,
//! WHIP offers with 1000 m-lines, and a slowloris flood past the connection cap.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::common::Daemon;
use super::{closed_within, timeout_bound, AT_ONCE};

/// Sends `head` (+ `body`) as is on a fresh connection and returns the status and body, read
/// until the server closes (`Connection: close` is added).
async fn raw(d: &Daemon, head: &str, body: &[u8]) -> (u16, String) {
    let addr = d.base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = head.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let _ = s.write_all(body).await;
    let got = closed_within(s, AT_ONCE, head.lines().next().unwrap()).await;
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line for {head:?}: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_default();
    (status, body.to_owned())
}

fn get(path: &str, key: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: apikey {key}\r\n\r\n")
}

pub async fn attack_all(d: &Daemon, victim: &Value) {
    let id = victim["id"].as_i64().unwrap();
    let key = d.key.clone();
    // Traversal, plain and encoded every way, in every media path's every name: never a file.
    let escapes = [
        "../../../../etc/passwd",
        "..%2f..%2f..%2f..%2fetc%2fpasswd",
        "%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "%252e%252e%252fetc%252fpasswd",
        "..%5c..%5c..%5cetc%5cpasswd",
        "..%c0%af..%c0%afetc%c0%afpasswd",
        "....//....//etc/passwd",
        "..;/..;/etc/passwd",
        "last.jpg%00.m3u8",
    ];
    let templates = [
        format!("/cmaf/{id}/X"),
        format!("/cmaf/{id}/X/index.m3u8"),
        format!("/cmaf/{id}/720p/X"),
        "/cmaf/X/master.m3u8".to_owned(),
        format!("/mpegts/{id}/X"),
        format!("/mpegts/{id}/X/index.m3u8"),
        format!("/mpegts/{id}/720p/X"),
        format!("/screenshots/{id}/X"),
        "/screenshots/X".to_owned(),
        "/player/X".to_owned(),
        "/player/assets/X".to_owned(),
        "/whip/X".to_owned(),
        "/streaming/streams/X".to_owned(),
    ];
    for t in &templates {
        for e in escapes {
            let path = t.replace('X', e);
            let (status, body) = raw(d, &get(&path, &key), b"").await;
            assert!(
                matches!(status, 400 | 404 | 405),
                "{path}: {status} {body:.200}"
            );
            assert!(!body.contains("root:"), "{path} served a file");
        }
    }
    // LL-HLS directives at and past the integer limits: 400 at once, not a held request (a
    // segment long complete answers at once whatever part is asked).
    let playlist = format!("/cmaf/{id}/720p/index.m3u8");
    for (q, expected) in [
        ("_HLS_msn=18446744073709551615", 400),
        ("_HLS_msn=18446744073709551615&_HLS_part=0", 400),
        (
            "_HLS_msn=18446744073709551615&_HLS_part=18446744073709551615",
            400,
        ),
        ("_HLS_msn=18446744073709551616&_HLS_part=0", 400),
        ("_HLS_msn=0&_HLS_part=18446744073709551616", 400),
        ("_HLS_msn=-1", 400),
        ("_HLS_msn=1e3", 400),
        ("_HLS_part=1", 400),
        ("_HLS_msn=0&_HLS_part=4294967296", 200),
    ] {
        let (status, _) = raw(d, &get(&format!("{playlist}?{q}"), &key), b"").await;
        assert_eq!(status, expected, "{q}");
    }
    // A request head over 16 KiB: 431.
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    assert_eq!(raw(d, &big, b"").await.0, 431);
    // Bodies over the limit: declared (10 GB, nothing sent) and sent (2 MiB), on the API and
    // on WHIP; both refused before being read.
    let token = victim["token"].as_str().unwrap();
    let post = |path: &str, ctype: &str, len: u64| {
        let auth = if path.starts_with("/whip/") {
            format!("Bearer {token}")
        } else {
            format!("apikey {key}")
        };
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\n\r\n"
        )
    };
    let whip = format!("/whip/{id}");
    let whep = format!("/whep/{id}");
    for (path, ctype) in [
        ("/streaming/streams", "application/json"),
        (whip.as_str(), "application/sdp"),
        (whep.as_str(), "application/sdp"),
    ] {
        let (status, body) = raw(d, &post(path, ctype, 10_000_000_000), b"").await;
        assert_eq!(status, 413, "{path} declared 10 GB: {body}");
        let two_mib = vec![b' '; 2 << 20];
        let (status, body) = raw(d, &post(path, ctype, two_mib.len() as u64), &two_mib).await;
        assert_eq!(status, 413, "{path} sent 2 MiB: {body}");
    }
    // JSON nested 100 000 deep: 400 malformed_json (no stack overflow).
    let deep = "[".repeat(100_000);
    let (status, body) = raw(
        d,
        &post("/streaming/streams", "application/json", deep.len() as u64),
        deep.as_bytes(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("malformed_json"), "{body}");
    // A WHIP or WHEP offer with 1000 m-lines, or a 20 KiB line: 400 before any WebRTC state
    // exists.
    let offer = format!(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n{}",
        "m=video 9 UDP/TLS/RTP/SAVPF 102\r\nc=IN IP4 0.0.0.0\r\n".repeat(1000)
    );
    let long_line = format!(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=x:{}\r\n",
        "a".repeat(20 * 1024)
    );
    for path in [&whip, &whep] {
        for bad in [&offer, &long_line] {
            let (status, body) = raw(
                d,
                &post(path, "application/sdp", bad.len() as u64),
                bad.as_bytes(),
            )
            .await;
            assert_eq!(status, 400, "{path}: {body}");
            assert!(body.contains("invalid_sdp"), "{path}: {body}");
        }
    }

    // Slowloris past the connection cap (400 here): 420 connections each send half a request
    // head, then a header line every second. Those over the cap get 503 at once; the rest are
    // cut at the header timeout however they drip; then real requests are served again.
    let addr = d.base.trim_start_matches("http://").to_owned();
    let flood = std::time::Instant::now();
    let mut held = Vec::new();
    for _ in 0..420 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
        held.push(s);
    }
    let checked = futures::future::join_all(held.into_iter().map(|mut s| async move {
        let mut buf = [0u8; 256];
        let read = tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await;
        let refused = matches!(read, Ok(Ok(n)) if n > 0 && buf.starts_with(b"HTTP/1.1 503"));
        (refused, s)
    }))
    .await;
    let refused = checked.iter().filter(|(r, _)| *r).count();
    assert!(refused >= 20, "{refused} connections over the cap refused");
    let slow: Vec<TcpStream> = checked
        .into_iter()
        .filter(|(r, _)| !r)
        .map(|x| x.1)
        .collect();
    let drip = tokio::spawn(async move {
        let deadline = flood + timeout_bound();
        let mut open = slow;
        while !open.is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut still = Vec::new();
            for mut s in open {
                let _ = s.write_all(b"X-A: b\r\n").await;
                let mut buf = [0u8; 64];
                match tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => {}
                    _ => still.push(s),
                }
            }
            open = still;
        }
        open.len()
    });
    let left_open = drip.await.unwrap();
    assert_eq!(
        left_open, 0,
        "slowloris connections outlived the header timeout"
    );
    let (status, _) = raw(d, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"").await;
    assert_eq!(status, 200);
}
