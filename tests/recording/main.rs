//! Recording end to end: ffmpeg pushes over RTMP, the API starts
//! and stops recordings, and ffprobe reads the recorded files.

#[path = "../common/mod.rs"]
mod common;
mod events;
#[path = "../common/media.rs"]
mod media;
mod storage;
mod vod;
mod webhooks;

use std::time::Duration;

use common::{data_dir, tempdir, Daemon};
use media::{create, heavy, push, record, stop_recording, wait_record};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A stream with `auto_record` (transcoded, one rung) being pushed and recorded: its id, push
/// URL and the pusher.
async fn recording(d: &Daemon, name: &str) -> (i64, String, media::Proc) {
    let rec = create(
        d,
        json!({"name": name, "auto_record": true, "record_type": "transcoded", "quality_set_id": 3}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let url = rec["push_url"].as_str().unwrap().to_owned();
    let pusher = push(&url, "av-720p.flv", 10);
    wait_record(d, id, Duration::from_secs(20), |r| r["recording"] == true).await;
    (id, url, pusher)
}

/// ffprobe's view of a URL or a file: its streams (codec, size) and `format` (duration, start).
fn probe(url: impl AsRef<std::ffi::OsStr>) -> Value {
    media::ffprobe_with(
        &[
            "-show_entries",
            "stream=codec_name,width,height:format=start_time,duration",
        ],
        url.as_ref().to_str().unwrap(),
    )
}

/// `format.duration` of a probe, in seconds.
fn secs(probed: &Value) -> f64 {
    probed["format"]["duration"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no duration: {probed}"))
}

/// Asserts that `url` plays for `ms` ± 1 s, and returns its probe.
fn assert_plays_for(url: impl AsRef<std::ffi::OsStr>, ms: u64) -> Value {
    let probed = probe(&url);
    let got = secs(&probed);
    assert!(
        (got * 1000.0 - ms as f64).abs() < 1000.0,
        "{:?}: {got} s vs {ms} ms",
        url.as_ref()
    );
    probed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_and_stop_recording_a_live_transcoded_stream() {
    let _g = heavy().await;
    let dir = tempdir();
    // The stream delivers through a "CDN" that is this daemon under another name: the videos'
    // URLs must be on it, and still work.
    let port = common::free_port(false);
    let cdn = format!("http://localhost:{port}");
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", common::KEY),
            ("LIVEPACK_HTTP_ADDR", &format!("127.0.0.1:{port}")),
            ("LIVEPACK_CDN_RESOURCES", &format!("3={cdn}")),
        ],
    );
    let rec = create(
        &d,
        json!({"name": "rec", "record_type": "transcoded", "quality_set_id": 3, "cdn_id": 3}),
    )
    .await;
    assert!(
        rec["hls_cmaf_url"].as_str().unwrap().starts_with(&cdn),
        "{rec}"
    );
    let id = rec["id"].as_i64().unwrap();
    let start = format!("/streaming/streams/{id}/start_recording");
    let stop = format!("/streaming/streams/{id}/stop_recording");
    // Not live: refused with a stable code; nothing to stop.
    let r = d.call(Method::PUT, &start, None).await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "not_live"));
    assert_eq!(
        d.call(Method::PUT, &stop, None).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        d.call(Method::PUT, "/streaming/streams/999/start_recording", None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    let _push = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 10);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        d.call(Method::PUT, &start, None).await.status,
        StatusCode::NO_CONTENT
    );
    let on = wait_record(&d, id, Duration::from_secs(10), |r| r["recording"] == true).await;
    assert!(on["recording_duration"].as_f64().unwrap() >= 0.0);
    tokio::time::sleep(Duration::from_secs(9)).await;
    let r = d.call(Method::PUT, &stop, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let video = r.body;
    assert_eq!(video["status"], "ready", "{video}");
    assert_eq!(video["stream_id"], id);
    assert_eq!(video["record_type"], "transcoded");
    for k in ["hls_url", "dash_url", "iframe_url", "screenshot"] {
        assert!(video[k].as_str().unwrap().starts_with(&cdn), "{k}: {video}");
    }
    for r in video["converted_videos"].as_array().unwrap() {
        assert!(r["mp4_url"].as_str().unwrap().starts_with(&cdn), "{r}");
    }
    let ms = video["duration"].as_u64().unwrap();
    // 9 s plus up to the segment in progress at the start; the audio track may reach up to one
    // AAC frame (21 ms) past the video's parts at either end (its parts end on whole frames).
    assert!((6000..=11_050).contains(&ms), "{ms} ms recorded of ~9 s");
    assert_eq!(record(&d, id).await["recording"], false);
    // The VOD HLS plays in ffmpeg with the recorded duration, from the daemon over HTTP.
    let hls = video["hls_url"].as_str().unwrap();
    assert_plays_for(hls, ms);
    let master = reqwest::get(hls).await.unwrap().text().await.unwrap();
    assert!(
        master.contains("#EXT-X-STREAM-INF") && master.contains("TYPE=AUDIO"),
        "{master}"
    );
    // The static MPD (on-demand profile, each file's sidx as its index) plays in ffmpeg's
    // DASH demuxer with every rung and the audio, the recorded duration.
    let dash = video["dash_url"].as_str().unwrap();
    let probed = assert_plays_for(dash, ms);
    let heights: Vec<u64> = probed["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["height"].as_u64())
        .collect();
    let rungs = video["converted_videos"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["height"].as_u64() > Some(0))
        .count();
    assert!(rungs >= 1 && heights.len() == rungs, "every rung: {probed}");
    assert!(
        probed["streams"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["codec_name"] == "aac"),
        "{probed}"
    );
    // The player page plays videos too; the screenshot is a JPEG of the stream.
    let page = reqwest::get(video["iframe_url"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("master.m3u8"));
    let shot = reqwest::get(video["screenshot"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(
        shot.headers()["content-type"],
        "image/jpeg",
        "{:?}",
        shot.headers()
    );
    assert!(shot.bytes().await.unwrap().starts_with(&[0xff, 0xd8]));
    assert!(video["origin_url"].is_null(), "transcoded: no origin MP4");
    // MP4 downloads honour byte ranges; a wrong slug is a plain 404.
    let mp4 = video["converted_videos"][0]["mp4_url"]
        .as_str()
        .unwrap()
        .to_owned();
    media::assert_first_100_bytes(&mp4).await;
    let slug = mp4
        .split('_')
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let wrong = mp4.replace(&slug, &"0".repeat(slug.len()));
    assert_eq!(
        reqwest::get(&wrong).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    // Every rung and the audio, each a file ffprobe reads with the recorded duration.
    let files = data_dir(dir.path())
        .join("videos")
        .join(video["id"].to_string());
    let renditions = video["converted_videos"].as_array().unwrap();
    assert!(renditions.len() >= 2, "{video}");
    for r in renditions {
        let path = files.join(format!("{}.mp4", r["name"].as_str().unwrap()));
        let probed = assert_plays_for(&path, ms);
        let start: f64 = probed["format"]["start_time"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(start.abs() < 0.1, "{path:?} starts at {start}");
    }
}

/// `kill -9` during a recording: after the restart the video is `ready`, plays, and holds the
/// pushed media up to at most one fragment (2 s) before the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_cut_by_kill_9_is_one_ready_video_after_the_restart() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = create(
        &d,
        json!({"name": "crash", "record_type": "transcoded", "auto_record": true, "quality_set_id": 3}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let push_handle = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 10);
    wait_record(&d, id, Duration::from_secs(20), |r| r["recording"] == true).await;
    let recorded_from = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(9)).await;
    let elapsed = recorded_from.elapsed();
    d.kill9();
    drop(push_handle);
    let d = Daemon::start(dir.path());
    let listed = d.get(&format!("/streaming/videos?stream_id={id}")).await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.headers["x-total-count"], "1");
    let video = listed.body[0].clone();
    assert_eq!(video["status"], "ready", "{video}");
    let vid = video["id"].as_i64().unwrap();
    let files = data_dir(dir.path()).join("videos").join(vid.to_string());
    let top = files.join("720p.mp4");
    let secs = secs(&probe(&top));
    // Up to one 2 s fragment lost, plus up to one segment not yet complete when recording began.
    assert!(
        secs >= elapsed.as_secs_f64() - 4.5 && secs <= elapsed.as_secs_f64() + 1.0,
        "{secs} s recorded of {elapsed:?}"
    );
    assert!((video["duration"].as_f64().unwrap() / 1000.0 - secs).abs() < 0.1);
    // The owner renames it; the recorder's fields stay.
    let path = format!("/streaming/videos/{vid}");
    let renamed = d
        .patch(
            &path,
            json!({"name": "after the crash", "description": "kept"}),
        )
        .await;
    assert_eq!(renamed.status, StatusCode::OK, "{}", renamed.body);
    assert_eq!(renamed.body["name"], "after the crash");
    assert_eq!(renamed.body["duration"], video["duration"]);
    let bad = d.patch(&path, json!({"name": ""})).await;
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_value")
    );
    let unknown = d.patch(&path, json!({"colour": "red"})).await;
    assert_eq!(unknown.code(), "unknown_field");
    // Deleting it removes its media.
    assert_eq!(d.delete(&path).await.status, StatusCode::NO_CONTENT);
    assert!(!files.exists());
    assert_eq!(d.get(&path).await.status, StatusCode::NOT_FOUND);
    assert_eq!(record(&d, id).await["recording"], false);
}

/// SIGTERM while recording: the daemon exits 0 with the video finalised — `ready` in the store
/// (read from the file, the daemon being gone) and holding everything up to the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finalises_the_open_recording() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let (id, _, pusher) = recording(&d, "sigterm").await;
    let recorded_from = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let elapsed = recorded_from.elapsed();
    let status = d.terminate();
    drop(pusher);
    assert!(status.success(), "{status:?}");
    let db = rusqlite::Connection::open(data_dir(dir.path()).join("livepack.db")).unwrap();
    let (vid, status): (i64, String) = db
        .query_row(
            "SELECT id, status FROM videos WHERE stream_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(status, "ready");
    let top = data_dir(dir.path())
        .join("videos")
        .join(vid.to_string())
        .join("720p.mp4");
    let secs = secs(&probe(&top));
    // Up to one segment not yet complete when recording began; the stop flushes the last one.
    assert!(
        secs >= elapsed.as_secs_f64() - 2.5 && secs <= elapsed.as_secs_f64() + 1.5,
        "{secs} s recorded of {elapsed:?}"
    );
}

/// `origin` (the default `record_type`) with `auto_record`: the source as received, remuxed
/// without re-encoding — the publisher's H.264 at its own size and its AAC, one file per track.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_record_origin_keeps_the_source_as_received() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = create(&d, json!({"name": "origin", "auto_record": true})).await;
    let id = rec["id"].as_i64().unwrap();
    let _push = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 10);
    wait_record(&d, id, Duration::from_secs(20), |r| r["recording"] == true).await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    let video = stop_recording(&d, id).await;
    assert_eq!(video["record_type"], "origin");
    assert_eq!(video["status"], "ready", "{video}");
    let ms = video["duration"].as_u64().unwrap();
    // 9 s plus up to the segment in progress at the start; the audio track may reach up to one
    // AAC frame (21 ms) past the video's parts at either end (its parts end on whole frames).
    assert!((6000..=11_050).contains(&ms), "{ms} ms recorded of ~9 s");
    assert!(video["origin_size"].as_u64().unwrap() > 100_000, "{video}");
    let file = data_dir(dir.path())
        .join("videos")
        .join(video["id"].to_string())
        .join("source-video.mp4");
    let probed = assert_plays_for(&file, ms);
    let streams = probed["streams"].as_array().unwrap();
    let codecs: Vec<&str> = streams
        .iter()
        .map(|s| s["codec_name"].as_str().unwrap())
        .collect();
    assert_eq!(codecs, ["h264"], "{probed}");
    // The source audio is its own track file, as received.
    let audio = file.with_file_name("source-audio.mp4");
    let probed_audio = probe(&audio);
    assert_eq!(
        probed_audio["streams"][0]["codec_name"], "aac",
        "{probed_audio}"
    );
    // The VOD HLS (one variant) and the MPD of the origin recording, as pushed.
    for url in [&video["hls_url"], &video["dash_url"]] {
        let probed = assert_plays_for(url.as_str().unwrap(), ms);
        assert_eq!(probed["streams"].as_array().unwrap().len(), 2, "{probed}");
    }
    // The download: one progressive MP4 with both source tracks, as pushed.
    let download = assert_plays_for(video["origin_url"].as_str().unwrap(), ms);
    let mut got: Vec<&str> = download["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["codec_name"].as_str().unwrap())
        .collect();
    got.sort_unstable();
    assert_eq!(got, ["aac", "h264"], "{download}");
    let video_stream = streams.iter().find(|s| s["codec_name"] == "h264").unwrap();
    assert_eq!(
        (
            video_stream["width"].as_u64(),
            video_stream["height"].as_u64()
        ),
        (Some(1280), Some(720))
    );
}

/// `recordings_max_bytes`: a running recording that reaches it is closed as a ready video
/// with what fits (the reason noted on it), live output goes on, and a new recording is
/// refused with 422 `no_space`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quota_closes_a_recording_as_a_ready_video_and_refuses_the_next() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start_with(dir.path(), &[("LIVEPACK_RECORDINGS_MAX_BYTES", "3000000")]);
    let rec = create(
        &d,
        json!({"name": "quota", "record_type": "transcoded", "quality_set_id": 3}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let start = format!("/streaming/streams/{id}/start_recording");
    let _push = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 10);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let r = d.call(Method::PUT, &start, None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    wait_record(&d, id, Duration::from_secs(10), |r| r["recording"] == true).await;
    // ~3 MB of a 720p ladder is a few seconds: the recording closes by itself.
    let off = wait_record(&d, id, Duration::from_secs(40), |r| r["recording"] == false).await;
    assert_eq!(off["live"], true, "live output goes on: {off}");
    let videos = d
        .get(&format!("/streaming/videos?stream_id={id}"))
        .await
        .body;
    let video = &videos[0];
    assert_eq!(video["status"], "ready", "{video}");
    assert!(
        video["error"]
            .as_str()
            .unwrap_or_default()
            .contains("recordings_max_bytes"),
        "the reason is noted: {video}"
    );
    assert!(video["duration"].as_u64().unwrap() > 0, "{video}");
    let size = video["origin_size"].as_u64().unwrap();
    assert!(size <= 3_000_000, "within the quota: {size}");
    // What was kept plays.
    assert!(secs(&probe(video["hls_url"].as_str().unwrap())) > 0.0);
    let r = d.call(Method::PUT, &start, None).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "no_space"),
        "{}",
        r.body
    );
    // The live stream is still advancing: its newest segment moves on.
    let master = rec["hls_cmaf_url"].as_str().unwrap();
    let (_, text) = media::text(master).await;
    let variant = text
        .lines()
        .find(|l| !l.starts_with('#') && !l.is_empty())
        .unwrap();
    let url = format!("{}{variant}", master.trim_end_matches("master.m3u8"));
    let newest = |t: String| {
        t.lines()
            .rev()
            .find(|l| l.starts_with("#EXT-X-PROGRAM-DATE-TIME"))
            .map(str::to_owned)
    };
    let before = newest(media::text(&url).await.1);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = newest(media::text(&url).await.1);
    assert!(
        before.is_some() && before != after,
        "{before:?} then {after:?}"
    );
}

/// The input leaves and comes back within `record_resume_secs`: one video holding both parts,
/// with a discontinuity between them, playable through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_return_continues_the_same_video() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let (id, url, first) = recording(&d, "resume").await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    drop(first);
    wait_record(&d, id, Duration::from_secs(10), |r| r["live"] == false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _second = push(&url, "av-720p.flv", 10);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let video = stop_recording(&d, id).await;
    let videos = d
        .get(&format!("/streaming/videos?stream_id={id}"))
        .await
        .body;
    assert_eq!(videos.as_array().unwrap().len(), 1, "one video: {videos}");
    let ms = video["duration"].as_u64().unwrap();
    assert!((9000..=16000).contains(&ms), "both parts: {ms} ms");
    // One media playlist per rendition, across the return, with a discontinuity.
    let master = video["hls_url"].as_str().unwrap();
    let (_, text) = media::text(master).await;
    let variant = text
        .lines()
        .find(|l| !l.starts_with('#') && !l.is_empty())
        .unwrap();
    let (_, media_playlist) = media::text(&format!(
        "{}{variant}",
        master.trim_end_matches("master.m3u8")
    ))
    .await;
    let parsed = m3u8_rs::parse_media_playlist_res(media_playlist.as_bytes()).unwrap();
    assert_eq!(
        parsed.segments.iter().filter(|s| s.discontinuity).count(),
        1,
        "{media_playlist}"
    );
    assert_plays_for(master, ms);
}

/// `record_max_secs` splits a long recording into videos that follow each other; a pause
/// longer than `record_resume_secs` ends the video and the return starts another
/// (`auto_record`). Together the videos hold what was pushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_recording_splits_and_a_long_pause_starts_another_video() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_RECORD_MAX_SECS", "10"),
            ("LIVEPACK_RECORD_RESUME_SECS", "1"),
        ],
    );
    let (id, url, first) = recording(&d, "split").await;
    // The publisher leaves 2 s into the second video: the inputs are gone (the pipeline
    // drains for up to 5 s) and the resume time (1 s) passes before its split is due at 20 s.
    tokio::time::sleep(Duration::from_secs(12)).await;
    drop(first);
    // Gone for longer than the resume time: that video ends.
    wait_record(&d, id, Duration::from_secs(15), |r| r["recording"] == false).await;
    let second = push(&url, "av-720p.flv", 10);
    wait_record(&d, id, Duration::from_secs(20), |r| r["recording"] == true).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop_recording(&d, id).await;
    drop(second);
    let videos = d
        .get(&format!("/streaming/videos?stream_id={id}"))
        .await
        .body;
    let mut videos = videos.as_array().unwrap().clone();
    videos.sort_by_key(|v| v["id"].as_i64());
    assert_eq!(videos.len(), 3, "split + after the pause: {videos:?}");
    let ms: Vec<u64> = videos
        .iter()
        .map(|v| {
            assert_eq!(v["status"], "ready", "{v}");
            v["duration"].as_u64().unwrap()
        })
        .collect();
    // The split comes record_max_secs after the video opened, the segment then in progress
    // going to the next video: the first holds 10 s less its start and that segment.
    assert!((7000..=12000).contains(&ms[0]), "{ms:?}");
    assert!(ms[1] >= 1000 && ms[2] >= 3000, "{ms:?}");
    for (v, ms) in videos.iter().zip(&ms) {
        assert_plays_for(v["hls_url"].as_str().unwrap(), *ms);
    }
}
