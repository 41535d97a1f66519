//! hls.js (low-latency mode) in headless Chromium plays a stream pushed over RTMP: the video
//! advances, no fatal error, and it reports its live latency (printed for the closing note).

#[path = "../common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{tempdir, Daemon};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test]
async fn hlsjs_plays_the_live_stream_in_low_latency_mode() {
    let fixture = root().join("fixtures/av-720p.flv");
    if !fixture.exists() {
        assert!(Command::new(root().join("scripts/make-fixtures"))
            .status()
            .unwrap()
            .success());
    }
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = d
        .post("/streaming/streams", json!({"name": "browser"}))
        .await
        .body;
    let mut ffmpeg = Command::new("ffmpeg")
        .args([
            "-hide_banner",
            "-loglevel",
            "error",
            "-re",
            "-stream_loop",
            "5",
            "-i",
        ])
        .arg(&fixture)
        .args(["-c", "copy", "-f", "flv"])
        .arg(rec["push_url"].as_str().unwrap())
        .stdin(Stdio::null())
        .spawn()
        .expect("ffmpeg");
    let id = rec["id"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.get(&format!("/streaming/streams/{id}")).await.body["transcoding_speed"].is_null() {
        assert!(Instant::now() < deadline, "stream never went live");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shot = dir.path().join("hlsjs.png");
    let url = rec["hls_cmaf_url"].as_str().unwrap().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .current_dir(root())
            .arg("tests/browser/hlsjs.mjs")
            .arg(&url)
            .arg("14")
            .arg(&shot)
            .output()
            .expect("node (installed by scripts/test)")
    })
    .await
    .unwrap();
    let _ = ffmpeg.kill();
    let _ = ffmpeg.wait();
    assert!(
        out.status.success(),
        "player failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(out.stdout.trim_ascii()).expect("one JSON line");
    assert_eq!(report["errors"], json!([]), "{report}");
    assert_eq!(report["lowLatency"], true);
    assert_eq!(
        report["levels"],
        json!([360, 480, 720]),
        "hls.js sorts levels by bitrate"
    );
    assert!(
        report["width"].as_u64().unwrap() > 0,
        "no decoded video: {report}"
    );
    let samples = report["samples"].as_array().unwrap();
    let times: Vec<f64> = samples.iter().map(|s| s["t"].as_f64().unwrap()).collect();
    // Playback advances through the run (not stuck on one frame).
    let advanced = times.last().unwrap() - times[times.len() / 3];
    assert!(advanced > 3.0, "video did not advance: {times:?}");
    let latencies: Vec<f64> = samples[samples.len() / 2..]
        .iter()
        .filter_map(|s| s["latency"].as_f64())
        .collect();
    assert!(
        !latencies.is_empty(),
        "hls.js reported no latency: {report}"
    );
    let mean = latencies.iter().sum::<f64>() / latencies.len() as f64;
    println!(
        "hls.js live latency (second half of the run): mean {mean:.2} s, samples {latencies:?}"
    );
}
