//! Responses never reflect the request's `Host` or `X-Forwarded-*`: with
//! hostile values, every text output of a live stream — master and media playlists (CMAF and
//! TS), the MPD, the player and broadcast pages — carries none of them, the MPD stays well-formed
//! XML (read by roxmltree) and its clock URL is on `public_url`.

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::common::*;

const HOSTILE: &str = "evil.example\"/><x a=\"";
const MARK: &str = "evil.example";

/// `path` fetched with hostile `Host` and forwarding headers; returns status line and body.
async fn fetch(d: &Daemon, path: &str) -> (String, String) {
    let addr = d.base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {HOSTILE}\r\nX-Forwarded-Host: {HOSTILE}\r\nX-Forwarded-Proto: javascript\r\nForwarded: host={MARK};proto=https\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(20), s.read_to_end(&mut got))
        .await
        .expect("answered")
        .unwrap();
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// Run while stream `id` is live on `d`.
pub async fn hostile_hosts_are_never_reflected(d: &Daemon, id: i64) {
    let b = d
        .post(
            "/streaming/broadcasts",
            json!({"broadcast": {"name": "event", "stream_ids": [id]}}),
        )
        .await;
    assert_eq!(b.status.as_u16(), 201, "{}", b.body);
    let bid = b.body["id"].as_i64().unwrap();
    let paths = [
        format!("/cmaf/{id}/master.m3u8"),
        format!("/cmaf/{id}/720p/index.m3u8"),
        format!("/cmaf/{id}/index.mpd"),
        format!("/mpegts/{id}/master_mpegts.m3u8"),
        format!("/player/{id}"),
        format!("/player/{id}/status.json"),
        format!("/player/broadcasts/{bid}"),
        format!("/player/broadcasts/{bid}/state"),
    ];
    for path in &paths {
        let (status, body) = fetch(d, path).await;
        assert!(status.contains(" 200 "), "{path}: {status}");
        assert!(
            !body.contains(MARK),
            "{path} reflects the Host header:\n{body}"
        );
        assert!(
            !body.contains("javascript"),
            "{path} reflects X-Forwarded-Proto"
        );
    }
    let (_, mpd) = fetch(d, &format!("/cmaf/{id}/index.mpd")).await;
    let doc = roxmltree::Document::parse(&mpd).unwrap_or_else(|e| panic!("{e}:\n{mpd}"));
    let clocks: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("UTCTiming"))
        .filter_map(|n| n.attribute("value"))
        .collect();
    assert!(!clocks.is_empty(), "{mpd}");
    for clock in clocks {
        assert_eq!(
            clock,
            format!("{}/time", d.base),
            "the clock is on public_url"
        );
    }
}
