//! Request bodies at their limits, seen by real clients: a client that
//! writes its whole oversized body before it reads (Python's urllib) gets the `413` JSON error,
//! not a reset; curl, which asks `Expect: 100-continue` for large bodies, gets it without
//! sending the body; a body that stops coming is answered `408` at the body deadline; an idle
//! keep-alive connection is closed at the header deadline.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::common::proc::run_within;
use super::common::*;
use super::{closed_within, SLACK};

const DEADLINE_SECS: u64 = 3;

/// Python's urllib: sends the head and the whole body, then reads. Prints status and body.
const URLLIB: &str = r#"
import sys, urllib.request, urllib.error
url, key = sys.argv[1], sys.argv[2]
body = b'{"name": "' + b'x' * (2 * 1024 * 1024) + b'"}'
req = urllib.request.Request(url, data=body, method="POST",
    headers={"Authorization": "apikey " + key, "Content-Type": "application/json"})
try:
    r = urllib.request.urlopen(req, timeout=30)
    print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"#;

fn status_and_json(out: &std::process::Output) -> (u16, Value) {
    let text = String::from_utf8_lossy(&out.stdout);
    let (status, body) = text.split_once('\n').unwrap_or((&text, ""));
    (
        status.trim().parse().unwrap_or_else(|_| {
            panic!("no status: {text} {}", String::from_utf8_lossy(&out.stderr))
        }),
        serde_json::from_str(body.trim()).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn clients_see_the_answer_to_a_body_they_should_not_have_sent() {
    let dir = tempdir();
    let t = DEADLINE_SECS.to_string();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_HTTP_BODY_TIMEOUT_SECS", &t),
            ("LIVEPACK_HTTP_HEADER_TIMEOUT_SECS", &t),
        ],
    );
    let url = d.url("/streaming/streams");

    // The whole 2 MiB body first, then the read: a 413 with its JSON error, not a reset.
    let out = run_within(
        Command::new("python3").args(["-c", URLLIB, &url, KEY]),
        "python3 urllib",
        Duration::from_secs(60),
    );
    let (status, body) = status_and_json(&out);
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "body_too_large", "{body}");

    // curl asks `Expect: 100-continue` for a body this large: answered before it is sent.
    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; 2 * 1024 * 1024]).unwrap();
    let out = run_within(
        Command::new("curl")
            .args(["-sS", "-w", "\n%{http_code} %{size_upload}", "-H"])
            .arg(format!("Authorization: apikey {KEY}"))
            .args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(format!("@{}", big.display()))
            .arg(&url),
        "curl",
        Duration::from_secs(60),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (json, tail) = text.rsplit_once('\n').unwrap();
    let body: Value = serde_json::from_str(json).unwrap();
    assert_eq!(body["error"]["code"], "body_too_large", "{text}");
    let (code, uploaded) = tail.split_once(' ').unwrap();
    assert_eq!(code, "413");
    assert!(
        uploaded.parse::<f64>().unwrap() < 1024.0 * 1024.0,
        "curl sent {uploaded} bytes after asking 100-continue"
    );

    // A body that stops coming: 408 at the body deadline.
    let addr = d.base.trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /streaming/streams HTTP/1.1\r\nHost: x\r\nAuthorization: apikey {KEY}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\":"
    );
    let started = Instant::now();
    s.write_all(head.as_bytes()).await.unwrap();
    let got = closed_within(
        s,
        Duration::from_secs(DEADLINE_SECS) + SLACK,
        "a stalled body",
    )
    .await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body_timeout"), "{text}");
    assert!(started.elapsed() >= Duration::from_secs(DEADLINE_SECS) - Duration::from_millis(200));

    // A kept-alive connection that sends no further request is closed at the header deadline.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    closed_within(
        s,
        Duration::from_secs(DEADLINE_SECS) + SLACK,
        "an idle keep-alive connection",
    )
    .await;
}
