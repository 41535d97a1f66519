//! Media test helpers shared by the end-to-end binaries: fixtures, ffmpeg pushers, record and
//! playlist polling (bounded), independent parsers (m3u8-rs, ffprobe).
#![allow(dead_code)] // each binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

pub use crate::common::hls;
use crate::common::proc::run_within;
pub use crate::common::proc::Proc;
use crate::common::{root, wait_listening, Daemon, KEY};

/// Decodes a few seconds of the first video stream behind `url` with ffprobe: (codec, width,
/// height, frames decoded).
pub fn decoded_video(url: &str) -> (String, u64, u64, u64) {
    let v = ffprobe_with(
        &[
            "-select_streams",
            "v:0",
            "-count_frames",
            "-read_intervals",
            "%+3",
            "-show_entries",
            "stream=codec_name,width,height,nb_read_frames",
        ],
        url,
    );
    let s = &v["streams"][0];
    let n = |k: &str| s[k].as_u64().or_else(|| s[k].as_str()?.parse().ok());
    (
        s["codec_name"].as_str().unwrap_or_default().to_owned(),
        n("width").unwrap_or(0),
        n("height").unwrap_or(0),
        n("nb_read_frames").unwrap_or(0),
    )
}

/// The live record has video at the source size, the master lists H.264 rungs with audio, and
/// ffprobe decodes the top rung's video. Returns the record.
pub async fn assert_video_out(d: &Daemon, id: i64, source: (u64, u64)) -> Value {
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
    let master = hls::master(&text(&master_url).await.1);
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

/// Transcoding tests share two cores: one at a time keeps each in real time. An async lock, so
/// a waiting test does not block its runtime (and its HTTP client's connection pool).
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    HEAVY.lock().await
}

pub fn fixture(name: &str) -> PathBuf {
    let path = root().join("fixtures").join(name);
    if !path.exists() {
        let ok = Command::new(root().join("scripts/make-fixtures"))
            .status()
            .unwrap();
        assert!(ok.success(), "scripts/make-fixtures failed");
    }
    path
}

/// The container a push URL carries: MPEG-TS over SRT, FLV over RTMP(S).
pub fn format_for(url: &str) -> &'static str {
    if url.starts_with("srt://") {
        "mpegts"
    } else {
        "flv"
    }
}

/// ffmpeg publishing a fixture in real time, `loops` extra times.
pub fn push(url: &str, fixture_name: &str, loops: u32) -> Proc {
    Proc::spawn(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re", "-stream_loop"])
            .arg(loops.to_string())
            .arg("-i")
            .arg(fixture(fixture_name))
            .args(["-c", "copy", "-f", format_for(url)])
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
        "ffmpeg",
    )
}

/// Waits (bounded) for an ffmpeg to exit; returns its success and stderr.
pub async fn finish(mut p: Proc, within: Duration) -> (bool, String) {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = p.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = p.child().stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return (status.success(), err);
        }
        if Instant::now() > deadline {
            p.kill();
            return (false, "timed out".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn record(d: &Daemon, id: i64) -> Value {
    d.get(&format!("/streaming/streams/{id}")).await.body
}

/// Polls the record until `pred` holds (bounded).
pub async fn wait_record(
    d: &Daemon,
    id: i64,
    within: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let r = record(d, id).await;
        if pred(&r) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "record never reached the state: {r}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An MP4 of a video answers a byte range: 206 and the 100 bytes asked for.
pub async fn assert_first_100_bytes(mp4: &str) {
    let part = reqwest::Client::new()
        .get(mp4)
        .header("range", "bytes=0-99")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.bytes().await.unwrap().len(), 100);
}

/// Restream `id` as `d` shows it once `pred` holds (within 20 s; `what` names the state).
pub async fn wait_restream(
    d: &Daemon,
    id: i64,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/streaming/restreams/{id}");
    for _ in 0..200 {
        let r = d.get(&path).await.body;
        if pred(&r) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("restream {id}: {what}: {}", d.get(&path).await.body);
}

pub async fn create(d: &Daemon, body: Value) -> Value {
    let r = d.post("/streaming/streams", body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body
}

pub async fn text(url: &str) -> (StatusCode, String) {
    let r = reqwest::get(url).await.unwrap();
    (r.status(), r.text().await.unwrap())
}

pub fn ffprobe(url: &str) -> Value {
    ffprobe_with(&["-show_streams", "-show_format"], url)
}

/// ffprobe's JSON for `url` with `args` (failure fails the test). Bounded as a whole, not only
/// per read (`-rw_timeout`): its DASH demuxer keeps refreshing a live MPD that has gone 404.
pub fn ffprobe_with(args: &[&str], url: &str) -> Value {
    let out = run_within(
        Command::new("ffprobe")
            .args(["-v", "error", "-rw_timeout", "15000000"])
            .args(args)
            .args(["-of", "json"])
            .arg(url),
        "ffprobe",
        Duration::from_secs(90),
    );
    assert!(
        out.status.success(),
        "ffprobe {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until every media playlist behind `master_url` lists `n` complete segments: a classic
/// (non-LL) client like ffprobe ignores parts and needs whole segments.
pub async fn wait_segments(master_url: &str, n: usize) {
    let base = master_url.trim_end_matches("master.m3u8").to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, master) = text(master_url).await;
        // Not served yet is not a failure: the loop is bounded.
        let m = hls::try_master(&master).unwrap_or_default();
        let uris: Vec<&str> = m
            .variants
            .iter()
            .map(|v| v.uri.as_str())
            .chain(m.alternatives.iter().filter_map(|a| a.uri.as_deref()))
            .collect();
        let mut all = !uris.is_empty();
        for uri in &uris {
            let (_, t) = text(&format!("{base}{uri}")).await;
            all &= hls::try_media(&t).is_some_and(|p| p.segments.len() >= n);
        }
        if all {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "playlists never held {n} segments:\n{master}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A daemon whose grace period after a publisher leaves is 2 s, so endings show quickly.
pub fn short_grace_daemon(dir: &std::path::Path) -> Daemon {
    Daemon::start_with(
        dir,
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "2"),
        ],
    )
}

/// Polls a playlist until it ends with EXT-X-ENDLIST (bounded); returns its text.
pub async fn wait_endlist(url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, t) = text(url).await;
        if t.ends_with("#EXT-X-ENDLIST\n") {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "no ENDLIST after the grace period:\n{t}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Segment numbers of the files in a rendition's directory on disk.
pub fn files_on_disk(dir: &std::path::Path, ext: &str) -> Vec<u64> {
    let mut msns: Vec<u64> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_prefix("seg_")?
                    .strip_suffix(&format!(".{ext}"))?
                    .parse()
                    .ok()
            })
            .collect()
        })
        .unwrap_or_default();
    msns.sort();
    msns
}

/// `PUT …/stop_recording` that stopped a recording: the video (asserts the 200).
pub async fn stop_recording(d: &Daemon, id: i64) -> Value {
    let r = d
        .call(
            reqwest::Method::PUT,
            &format!("/streaming/streams/{id}/stop_recording"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body
}

/// ffmpeg in real time, its input looped forever (sources for PULL streams).
pub fn ffmpeg(args: &[&str]) -> Proc {
    Proc::spawn(
        Command::new("ffmpeg")
            .args([
                "-hide_banner",
                "-loglevel",
                "error",
                "-re",
                "-stream_loop",
                "-1",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "ffmpeg",
    )
}

/// ffmpeg copying the FLV fixture, in real time and looped, into a live presentation
/// `dir/name` written by the muxer and options `muxer`.
pub fn live_writer(dir: &Path, name: &str, muxer: &[&str]) -> Proc {
    std::fs::create_dir_all(dir).unwrap();
    let fixture = fixture("av-720p.flv");
    let out = dir.join(name);
    let mut args = vec!["-i", fixture.to_str().unwrap(), "-c", "copy"];
    args.extend_from_slice(muxer);
    args.push(out.to_str().unwrap());
    ffmpeg(&args)
}

/// ffmpeg writing a live HLS playlist (1 s segments, the last 6 kept) into `dir`.
pub fn hls_writer(dir: &Path) -> Proc {
    let hls = ["-f", "hls", "-hls_time", "1", "-hls_list_size", "6"];
    live_writer(
        dir,
        "index.m3u8",
        &[&hls[..], &["-hls_flags", "delete_segments"]].concat(),
    )
}

/// A static HTTP server for `dir` on 127.0.0.1.
pub fn http_server(dir: &Path, port: u16) -> Proc {
    let p = Proc::spawn(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "python3",
    );
    wait_listening(port, "http.server");
    p
}
