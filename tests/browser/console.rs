//! The console (`/console`) driven as an operator would in headless Chromium
//! (`tests/browser/console.mjs`): signed in with the key (a wrong one refused), a stream created,
//! its push URL copied and pushed with ffmpeg, on air with its numbers, the preview playing,
//! hls.js viewers counted, kicked, the events shown; screenshots at 1280 and 375 px; nothing
//! fetched from another origin.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::{driver_within, ONE_AT_A_TIME};
use crate::common::{tempdir, Daemon};
use crate::media::fixture;

/// A PNG's width, from its header.
fn png_width(path: &str) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "{path} is not a PNG");
    u32::from_be_bytes(bytes[16..20].try_into().unwrap())
}

/// The first video stream's "W×H" and frame rate, by ffprobe.
fn probe_video(name: &str) -> (String, f64) {
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries"])
        .args(["stream=width,height,r_frame_rate", "-of", "csv=p=0"])
        .arg(fixture(name))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let f: Vec<&str> = text.trim().split(',').collect();
    let (num, den) = f[2].split_once('/').unwrap();
    let rate = num.parse::<f64>().unwrap() / den.parse::<f64>().unwrap();
    (format!("{}×{}", f[0], f[1]), rate)
}

/// The frame rate in the console's input text (`… · 30.3 fps · …`).
fn fps_in(text: &str) -> f64 {
    let before = text.split(" fps").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_runs_a_stream_from_creation_to_kick() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console");
    let r: Value = driver_within(
        "tests/browser/console.mjs",
        vec![
            d.base.clone(),
            d.key.clone(),
            out.to_string_lossy().into_owned(),
            fixture("av-720p.flv").to_string_lossy().into_owned(),
        ],
        Duration::from_secs(300),
    )
    .await;
    println!("console: {r}");
    assert_eq!(r["errors"], json!([]), "{r}");
    assert_eq!(
        r["origins"],
        json!([d.base.trim_end_matches('/')]),
        "the console fetched from another origin"
    );
    assert!(r["refused"].as_str().unwrap().contains("refused"), "{r}");
    // The URL copied is the record's.
    let id = r["id"].as_i64().unwrap();
    let rec = d.get(&format!("/streaming/streams/{id}")).await.body;
    assert_eq!(r["pushUrl"], rec["push_url"], "{r}");
    assert_eq!(rec["name"], "console test");
    // On air with the source's numbers, as ffprobe reads the pushed file.
    let (size, rate) = probe_video("av-720p.flv");
    let input = r["health"]["Input"].as_str().unwrap();
    assert!(input.contains("H.264") && input.contains(&size), "{input}");
    let shown = fps_in(input);
    assert!(
        (shown - rate).abs() / rate < 0.05,
        "{shown} fps, ffprobe {rate}"
    );
    let row = r["tableRow"].to_string();
    assert!(row.contains("main · rtmp") && row.contains(&size), "{row}");
    // The preview plays: its video advanced over 3 s.
    let t = r["previewT"].as_array().unwrap();
    assert!(
        t[1].as_f64().unwrap() > t[0].as_f64().unwrap() + 1.0,
        "the preview did not advance: {t:?}"
    );
    assert!(
        r["viewersAfter"].as_u64().unwrap() >= r["viewersBefore"].as_u64().unwrap() + 2,
        "{r}"
    );
    let events = r["eventsSeen"].to_string();
    assert!(events.contains("publish stopped (main, rtmp)"), "{events}");
    // Screenshots at both widths (a page wider than the viewport would be wider than it).
    let shots: Vec<&str> = r["shots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(shots.len(), 4, "{shots:?}");
    for shot in shots {
        let want = if shot.contains("-375") { 375 } else { 1280 };
        assert_eq!(png_width(shot), want, "{shot}");
    }
}
