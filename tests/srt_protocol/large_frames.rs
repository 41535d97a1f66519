//! A large video frame (a detailed picture's IDR) is hundreds of SRT payloads handed to
//! srt-tokio at once, faster than its sender paces them out. All of them reach libsrt's
//! srt-live-transmit: the send buffer holds them until acknowledged, and a sender whose buffer
//! overflows still sends what follows (vendor/srt-protocol PATCHED.md, send buffer overflow).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::SinkExt;
use nix::sys::signal::Signal;

use super::proc::Proc;
use super::reused_port::listener;

/// 1316-byte payloads per frame: a 500 KB picture.
const PAYLOADS: usize = 400;
const FRAMES: u8 = 5;
const PAYLOAD: usize = 1316;

#[tokio::test]
async fn every_payload_of_large_frames_reaches_libsrt() {
    let (_listener, srt, mut ours) = listener().await;
    let mut reader = Proc::spawn(
        Command::new("srt-live-transmit")
            .args(["-q", &format!("srt://{srt}"), "file://con"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        "srt-live-transmit",
    );
    let mut out = reader.child().stdout.take().unwrap();
    let reading = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        buf
    });
    let mut socket = tokio::time::timeout(Duration::from_secs(5), ours.recv())
        .await
        .expect("srt-live-transmit connects")
        .unwrap();
    for frame in 0..FRAMES {
        for _ in 0..PAYLOADS {
            let payload = Bytes::from(vec![frame; PAYLOAD]);
            socket.feed((Instant::now(), payload)).await.unwrap();
        }
        socket.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Past the receiver's latency (120 ms) and a few retransmissions. SIGINT: srt-live-transmit
    // writes out its last payloads before it exits (not on SIGKILL).
    tokio::time::sleep(Duration::from_secs(1)).await;
    reader.signal(Signal::SIGINT);
    assert!(reader.wait_within(Duration::from_secs(5)).is_some());
    let got = reading.join().unwrap();
    let per_frame: Vec<usize> = (0..FRAMES)
        .map(|f| got.iter().filter(|&&b| b == f).count() / PAYLOAD)
        .collect();
    assert_eq!(per_frame, vec![PAYLOADS; FRAMES as usize]);
}
