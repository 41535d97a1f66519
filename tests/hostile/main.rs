//! Hostile peers on every listener (RTMP, SRT, HTTP with WHIP) at once, against the running
//! daemon while a real stream is live: every peer is refused or closed within a bound derived
//! from the configured timeouts, the process stays up, memory does not grow by what the peers
//! declared, and the real stream keeps real time without losing a part.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/media.rs"]
mod media;

mod bodies;
mod exhaustion;
mod host_header;
mod http;
mod publish_auth;
mod rtmp;
mod secrets;
mod srt;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use common::metrics::{try_scrape, Metrics};
use common::*;
use media::*;

/// The handshake and header timeouts the daemon runs with here (short, so the suite is short).
pub const TIMEOUT_SECS: u64 = 4;
/// Slack on top of a timeout for a close to be seen (timer granularity, a loaded CI machine).
pub const SLACK: Duration = Duration::from_secs(3);
/// A peer refused on sight is closed within this.
pub const AT_ONCE: Duration = Duration::from_secs(2);

pub fn timeout_bound() -> Duration {
    Duration::from_secs(TIMEOUT_SECS) + SLACK
}

/// Reads until the server closes the connection; panics if it stays open past `within`.
/// Returns what the server sent before closing.
pub async fn closed_within(mut s: TcpStream, within: Duration, what: &str) -> Vec<u8> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("{what}: connection still open after {within:?}"),
        }
    }
}

/// What /metrics says about the process and the victim stream.
struct Sample {
    rss: f64,
    speed: f64,
    dropped: f64,
    parts: f64,
}

impl Sample {
    fn of(m: &Metrics, id: i64) -> Sample {
        Sample {
            rss: m.value("process_resident_memory_bytes") / 1048576.0,
            speed: m.stream("livepack_stream_transcoding_speed", id),
            dropped: m.stream("livepack_stream_frames_dropped_total", id),
            parts: m.stream("livepack_stream_parts_published_total", id),
        }
    }
}

/// `None` when /metrics could not be fetched (the watcher keeps sampling through the connection
/// flood, when the HTTP listener is at its cap).
async fn try_sample(client: &reqwest::Client, base: &str, key: &str, id: i64) -> Option<Sample> {
    Some(Sample::of(&try_scrape(client, base, key).await?, id))
}

async fn sample(d: &Daemon, id: i64) -> Sample {
    try_sample(&reqwest::Client::new(), &d.base, &d.key, id)
        .await
        .expect("/metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_listener_refuses_hostile_peers_while_a_real_stream_keeps_real_time() {
    let _g = heavy().await;
    let dir = tempdir();
    let t = TIMEOUT_SECS.to_string();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_INGEST_HANDSHAKE_TIMEOUT_SECS", t.as_str()),
            ("LIVEPACK_HTTP_HEADER_TIMEOUT_SECS", t.as_str()),
            ("LIVEPACK_HTTP_MAX_CONNECTIONS", "400"),
        ],
    );
    let rec = create(&d, json!({"name": "victim"})).await;
    let id = rec["id"].as_i64().unwrap();
    let mut ffmpeg = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    wait_segments(rec["hls_cmaf_url"].as_str().unwrap(), 2).await;
    // Past the start-up transient: the victim keeps real time before the attacks start.
    let steady = Instant::now();
    while sample(&d, id).await.speed < 0.97 {
        assert!(
            steady.elapsed() < Duration::from_secs(30),
            "the victim never kept real time"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let playlist = format!("{}/cmaf/{id}/720p/index.m3u8", d.base);
    let before = sample(&d, id).await;
    let started = Instant::now();

    // The victim is watched throughout: speed and memory every 500 ms.
    let watch = {
        let (base, key) = (d.base.clone(), d.key.clone());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = tokio::spawn(async move {
            let client = reqwest::Client::new();
            let (mut min_speed, mut max_rss) = (f64::INFINITY, 0f64);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(s) = try_sample(&client, &base, &key, id).await {
                    min_speed = min_speed.min(s.speed);
                    max_rss = max_rss.max(s.rss);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            (min_speed, max_rss)
        });
        (stop, handle)
    };

    let d_ref = &d;
    tokio::join!(
        rtmp::attack_all(&d.rtmp, &d.rtmps, &rec),
        srt::attack_all(&d.srt, &rec),
        http::attack_all(d_ref, &rec),
    );

    watch.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let (min_speed, max_rss) = watch.1.await.unwrap();
    let after = sample(&d, id).await;
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "attacks took {elapsed:.1} s; victim speed min {min_speed:.3}; RSS {:.0} → max {max_rss:.0} → {:.0} MiB; parts {} → {}",
        before.rss, after.rss, before.parts, after.parts
    );

    // The process is up and serving; the real publisher was never cut off.
    assert_eq!(d.get("/healthz").await.status, StatusCode::OK);
    assert!(
        ffmpeg.try_wait().is_none(),
        "the real publisher was cut off"
    );
    let r = record(&d, id).await;
    assert_eq!(r["live"], true, "{r}");
    // Real time, nothing dropped, every part published: one per 500 ms of the attacks.
    assert!(min_speed >= 0.9, "victim speed fell to {min_speed}");
    assert_eq!(after.dropped, before.dropped, "frames dropped");
    let expected = elapsed / 0.5;
    assert!(
        after.parts - before.parts >= expected - 3.0,
        "{} parts in {elapsed:.1} s",
        after.parts - before.parts
    );
    let text = text(&playlist).await.1;
    assert!(
        !text.contains("#EXT-X-DISCONTINUITY"),
        "the victim's playlist has a discontinuity:\n{text}"
    );
    // Hundreds of MiB were declared by the peers (16 MiB messages, 8 MiB messages held open,
    // 2^32-element arrays, 10 GB bodies): none of it was allocated.
    assert!(
        max_rss - before.rss < 96.0,
        "RSS grew from {:.0} to {max_rss:.0} MiB",
        before.rss
    );
}
