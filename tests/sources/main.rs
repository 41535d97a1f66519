//! End to end: sources as they really arrive. An SRT feed whose first bytes fall inside a long
//! GOP (a hardware encoder reconnecting), HEVC over SRT (x265) and over Enhanced RTMP, and a PULL
//! from nginx-rtmp joined mid-GOP: each must come out with its video, checked by m3u8-rs and by
//! ffprobe decoding the top rung.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/media.rs"]
mod media;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{tempdir, Daemon};
use media::*;

/// A spawned process killed when the test ends, passed or failed.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `ts` to `url` through srt-live-transmit at `bytes_per_sec`, in 1316-byte payloads, as
/// an encoder would: the bytes exactly as given, even when they start mid-packet-stream.
fn paced_srt(url: &str, ts: Vec<u8>, bytes_per_sec: usize) -> Killed {
    let mut slt = Command::new("srt-live-transmit")
        .args(["-q", "file://con", url])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("srt-live-transmit");
    let mut stdin = slt.stdin.take().unwrap();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        for (i, chunk) in ts.chunks(1316 * 8).enumerate() {
            let due = Duration::from_secs_f64((i * 1316 * 8) as f64 / bytes_per_sec as f64);
            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
            if stdin.write_all(chunk).is_err() {
                return;
            }
        }
    });
    Killed(slt)
}

/// Decodes a few seconds of the first video stream behind `url` with ffprobe: (codec, width,
/// height, frames decoded).
fn decoded_video(url: &str) -> (String, u64, u64, u64) {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-rw_timeout",
            "15000000",
            "-select_streams",
            "v:0",
        ])
        .args(["-count_frames", "-read_intervals", "%+3"])
        .args([
            "-show_entries",
            "stream=codec_name,width,height,nb_read_frames",
        ])
        .args(["-of", "json"])
        .arg(url)
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "ffprobe {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["streams"][0];
    let n = |k: &str| s[k].as_u64().or_else(|| s[k].as_str()?.parse().ok());
    (
        s["codec_name"].as_str().unwrap_or_default().to_owned(),
        n("width").unwrap_or(0),
        n("height").unwrap_or(0),
        n("nb_read_frames").unwrap_or(0),
    )
}

/// The live record has video at the source size, the master lists H.264 rungs and audio, and
/// ffprobe decodes the top rung's video. Returns the record.
async fn assert_video_out(d: &Daemon, id: i64, source: (u64, u64)) -> Value {
    let live = wait_record(d, id, Duration::from_secs(30), |r| {
        r["live"] == true && r["video_height"].is_number()
    })
    .await;
    assert_eq!(
        (live["video_width"].as_u64(), live["video_height"].as_u64()),
        (Some(source.0), Some(source.1)),
        "{live}"
    );
    let master_url = live["hls_cmaf_url"].as_str().unwrap().to_owned();
    wait_segments(&master_url, 2).await;
    let master = master_playlist(&text(&master_url).await.1);
    let codecs: Vec<String> = master
        .variants
        .iter()
        .filter_map(|v| v.codecs.clone())
        .collect();
    assert!(
        !codecs.is_empty()
            && codecs
                .iter()
                .all(|c| c.contains("avc1") && c.contains("mp4a")),
        "master without video or audio: {codecs:?}"
    );
    let top = live["transcoded_qualities"][0].as_str().unwrap().to_owned();
    let base = master_url.trim_end_matches("master.m3u8");
    let (codec, w, h, frames) = decoded_video(&format!("{base}{top}/index.m3u8"));
    assert_eq!(codec, "h264");
    assert_eq!(h, source.1.min(top.trim_end_matches('p').parse().unwrap()));
    assert!(w > 0 && frames >= 25, "{frames} frames decoded from {top}");
    live
}

#[tokio::test]
async fn an_srt_feed_joining_mid_gop_keeps_its_video() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "mid-gop"})).await;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap();
    // The stream id percent-encoded, as URL-minded tools write it (`#` starts a fragment).
    let url = format!("srt://{}?streamid={id}%23{token}", d.srt);
    let ts = std::fs::read(fixture("longgop-720p25.ts")).unwrap();
    // Keyframes at 0, 4 and 8 s (bytes ~0, ~0.94 MB, ~1.8 MB): 400 kB in is 1.7 s into the
    // first GOP, so 2.3 s of audio and headless video arrive before the next keyframe, and the
    // first bytes are neither a PAT nor a PMT.
    let cut = ts[400_000 / 188 * 188..].to_vec();
    let rate = ts.len() / 10;
    let t0 = Instant::now();
    let _push = paced_srt(&url, cut, rate);
    wait_record(&d, id, Duration::from_secs(30), |r| {
        r["video_height"].is_number()
    })
    .await;
    let to_live = t0.elapsed();
    let live = assert_video_out(&d, id, (1280, 720)).await;
    let fps = live["frame_rate"].as_f64().unwrap();
    assert!((24.0..26.5).contains(&fps), "frame_rate {fps}");
    assert_eq!(
        live["transcoded_qualities"],
        json!(["720p", "480p", "360p"]),
        "{live}"
    );
    println!(
        "mid-GOP SRT join: transcoding video and audio {:.1} s after the first byte \
         (the first keyframe was 2.3 s in)",
        to_live.as_secs_f64()
    );
}

#[tokio::test]
async fn hevc_over_srt_is_transcoded_to_the_h264_ladder() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "hevc"})).await;
    let id = rec["id"].as_i64().unwrap();
    let _push = Killed(push(
        rec["push_url_srt"].as_str().unwrap(),
        "hevc-720p.ts",
        2,
    ));
    let live = assert_video_out(&d, id, (1280, 720)).await;
    assert_eq!(
        live["transcoded_qualities"],
        json!(["720p", "480p", "360p"])
    );
    let fps = live["frame_rate"].as_f64().unwrap();
    assert!((29.0..31.5).contains(&fps), "frame_rate {fps}");
}
