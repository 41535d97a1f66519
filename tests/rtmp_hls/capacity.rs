//! Admission by capacity: with `max_transcodes = 1` and one stream on air, a second stream's
//! publish is refused over RTMP, SRT and WHIP with each protocol's "overloaded", `/readyz` says
//! the node is full and `/metrics` counts the refusals, while the first stream's parts go on;
//! its backup (no new transcode) is still taken; once it ends the node is ready again. With
//! `overload_policy = "shed"` the second stream is taken with its lowest rung only, with
//! `"passthrough"` with its source's video as it came; the record and the master playlist say
//! so.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::metrics::scrape;
use crate::common::{rtmp, srt, tempdir, Daemon, KEY};
use crate::media::*;

fn daemon(dir: &std::path::Path, policy: &str) -> Daemon {
    Daemon::start_with(
        dir,
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "2"),
            ("LIVEPACK_MAX_TRANSCODES", "1"),
            ("LIVEPACK_OVERLOAD_POLICY", policy),
        ],
    )
}

async fn readyz(d: &Daemon) -> (StatusCode, Option<String>, Value) {
    let r = reqwest::get(d.url("/readyz")).await.unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status(), retry, r.json().await.unwrap())
}

/// The record once the stream is live and its pipeline has said what it transcodes.
async fn transcoding(d: &Daemon, id: i64) -> Value {
    wait_record(d, id, Duration::from_secs(30), |r| {
        r["live"] == true
            && r["transcoded_qualities"]
                .as_array()
                .is_some_and(|q| !q.is_empty())
    })
    .await
}

/// The newest media sequence number of the stream's top rendition.
async fn newest_msn(master: &str) -> u64 {
    let (_, text) = text(&master.replace("master.m3u8", "720p/index.m3u8")).await;
    hls::last_msn(&hls::media(&text))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_node_refuses_the_next_stream_over_each_protocol_and_keeps_the_running_one() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = daemon(dir.path(), "refuse");
    let first = create(&d, json!({"name": "on air"})).await;
    let second = create(&d, json!({"name": "one too many"})).await;
    let first_id = first["id"].as_i64().unwrap();
    assert_eq!(readyz(&d).await.0, StatusCode::OK);
    let pusher = push(first["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    wait_record(&d, first_id, Duration::from_secs(30), |r| {
        r["live"] == true && r["transcoding_speed"].is_number()
    })
    .await;
    let master = first["hls_cmaf_url"].as_str().unwrap().to_owned();
    wait_segments(&master, 2).await;
    let before = newest_msn(&master).await;

    let (status, retry, body) = readyz(&d).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "at_capacity", "{body}");
    assert_eq!(body["reason"], "count", "{body}");
    assert_eq!(retry.as_deref(), Some("5"));

    // RTMP: `_error` NetStream.Publish.Rejected with the reason.
    let push_url = second["push_url"].as_str().unwrap();
    let (app, key) = rtmp::app_and_key(push_url);
    let said = rtmp::connect(&d.rtmp, &app).await.publish(&key).await;
    let said = String::from_utf8_lossy(&said);
    assert!(
        said.contains("NetStream.Publish.Rejected") && said.contains("at capacity"),
        "RTMP: {said:?}"
    );
    // SRT: SRT_REJX_OVERLOAD.
    let srt_url = second["push_url_srt"].as_str().unwrap();
    let stream_id = srt_url.split_once("streamid=").unwrap().1;
    assert_eq!(
        srt::conclude(&d.srt, stream_id.as_bytes()).await,
        Some(srt::rejection(1402)),
        "SRT: SRT_REJX_OVERLOAD"
    );
    // WHIP: 503 with Retry-After and a code.
    let whip = reqwest::Client::new()
        .post(second["push_url_whip"].as_str().unwrap())
        .header("content-type", "application/sdp")
        .body(crate::common::whip_offer_without_client())
        .send()
        .await
        .unwrap();
    assert_eq!(whip.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(whip.headers()["retry-after"], "5");
    let refusal: Value = whip.json().await.unwrap();
    assert_eq!(refusal["error"]["code"], "at_capacity", "{refusal}");

    // A backup joins the running transcode: no new one, so it is taken.
    let backup = push(
        first["backup_push_url"].as_str().unwrap(),
        "av-720p.flv",
        20,
    );
    wait_record(&d, first_id, Duration::from_secs(20), |r| {
        r["backup_live"] == true
    })
    .await;
    let m = scrape(&d).await;
    assert_eq!(
        m.value("livepack_publishes_over_capacity_total{outcome=\"refused\"}"),
        3.0
    );
    assert_eq!(m.value("livepack_transcodes"), 1.0);
    assert_eq!(m.value("livepack_at_capacity"), 1.0);
    // The running stream went on meanwhile, in real time.
    let second_id = second["id"].as_i64().unwrap();
    assert_eq!(record(&d, second_id).await["live"], false);
    let r = record(&d, first_id).await;
    assert!(
        r["transcoding_speed"].as_f64().unwrap() >= 0.9,
        "the running stream slowed: {r}"
    );
    // Two more segments (4 s of media) within 8 s.
    let deadline = Instant::now() + Duration::from_secs(8);
    while newest_msn(&master).await < before + 2 {
        assert!(
            Instant::now() < deadline,
            "the running stream stopped making segments"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Both publishers leave: once the session is over the node takes a stream again.
    drop(backup);
    drop(pusher);
    let deadline = Instant::now() + Duration::from_secs(20);
    while readyz(&d).await.0 != StatusCode::OK {
        assert!(
            Instant::now() < deadline,
            "/readyz still 503 after the stream ended"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let later = push(push_url, "av-720p.flv", 20);
    wait_record(&d, second_id, Duration::from_secs(30), |r| {
        r["live"] == true
    })
    .await;
    drop(later);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_shed_the_next_stream_gets_its_lowest_rung_only() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = daemon(dir.path(), "shed");
    let first = create(&d, json!({"name": "on air"})).await;
    let second = create(&d, json!({"name": "shed"})).await;
    let first_pusher = push(first["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    let first_id = first["id"].as_i64().unwrap();
    let full = transcoding(&d, first_id).await;
    assert_eq!(
        full["transcoded_qualities"],
        json!(["720p", "480p", "360p"])
    );
    assert_eq!(full["shed_qualities"], json!([]));
    assert_eq!(full["transcoding_preset"], "veryfast");

    let second_pusher = push(second["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    let second_id = second["id"].as_i64().unwrap();
    let shed = transcoding(&d, second_id).await;
    assert_eq!(shed["transcoded_qualities"], json!(["360p"]), "{shed}");
    assert_eq!(shed["shed_qualities"], json!(["720p", "480p"]), "{shed}");
    // An outside parser sees one video variant, and it plays.
    let master_url = second["hls_cmaf_url"].as_str().unwrap();
    wait_segments(master_url, 2).await;
    let (_, text) = text(master_url).await;
    let master = hls::master(&text);
    let heights: Vec<u64> = master
        .variants
        .iter()
        .filter_map(|v| v.resolution.map(|r| r.height))
        .collect();
    assert_eq!(heights, vec![360], "{text}");
    let probe = ffprobe(master_url);
    let video = probe["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["codec_type"] == "video")
        .cloned()
        .unwrap_or_else(|| panic!("no video stream in {probe}"));
    assert_eq!(video["height"], 360, "{video}");
    let m = scrape(&d).await;
    assert_eq!(
        m.value("livepack_publishes_over_capacity_total{outcome=\"shed\"}"),
        1.0
    );
    drop(second_pusher);
    drop(first_pusher);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transcode_behind_its_input_skips_whole_gops_and_plays_on() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = daemon(dir.path(), "refuse");
    let rec = create(&d, json!({"name": "behind"})).await;
    let id = rec["id"].as_i64().unwrap();
    // 60 s of media at 4× real time: no 2-core machine transcodes a 3-rung ladder that fast, so
    // the backlog ahead of the decoders grows from the first seconds.
    let pusher = Proc::spawn(
        std::process::Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-readrate", "4"])
            .args(["-stream_loop", "9", "-i"])
            .arg(fixture("av-720p.flv"))
            .args(["-c", "copy", "-f", "flv"])
            .arg(rec["push_url"].as_str().unwrap())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped()),
        "ffmpeg",
    );
    let (ok, err) = finish(pusher, Duration::from_secs(60)).await;
    assert!(ok, "{err}");
    let top = rec["hls_cmaf_url"]
        .as_str()
        .unwrap()
        .replace("master.m3u8", "720p/index.m3u8");
    let ended = wait_endlist(&top).await;
    let m = scrape(&d).await;
    let skipped = m.stream("livepack_stream_gops_skipped_total", id);
    // 30 GOPs of 2 s came in; a transcode at even twice real time keeps half of them.
    assert!(skipped >= 5.0, "{skipped} GOPs skipped");
    assert_eq!(
        m.stream("livepack_stream_frames_dropped_total", id),
        0.0,
        "frames dropped at random instead of whole GOPs"
    );
    // What was kept plays: every segment decodes.
    let media = hls::media(&ended);
    assert!(media.segments.len() >= 5, "{ended}");
    let (codec, _, height, frames) = decoded_video(&top);
    assert_eq!((codec.as_str(), height), ("h264", 720));
    assert!(frames > 0);
}

/// With `overload_policy = "passthrough"` the next stream's H.264 is packaged as it came: the
/// record says so, the master playlist has the one source variant (its size and codecs), an
/// outside reader decodes the source's own profile and size, and the running stream's parts go
/// on. It takes no transcode's place.
#[tokio::test(flavor = "multi_thread")]
async fn with_passthrough_the_next_stream_plays_its_source_untranscoded() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = daemon(dir.path(), "passthrough");
    let first = create(&d, json!({"name": "on air"})).await;
    let second = create(&d, json!({"name": "passed through"})).await;
    let first_pusher = push(first["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    let first_id = first["id"].as_i64().unwrap();
    transcoding(&d, first_id).await;
    let first_master = first["hls_cmaf_url"].as_str().unwrap().to_owned();
    wait_segments(&first_master, 2).await;
    let before = newest_msn(&first_master).await;

    let second_pusher = push(second["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    let second_id = second["id"].as_i64().unwrap();
    let rec = wait_record(&d, second_id, Duration::from_secs(30), |r| {
        r["live"] == true && r["transcoding_preset"] == "passthrough"
    })
    .await;
    assert_eq!(rec["transcoded_qualities"], json!([]), "{rec}");
    assert_eq!(
        rec["shed_qualities"],
        json!(["720p", "480p", "360p"]),
        "{rec}"
    );
    let master_url = second["hls_cmaf_url"].as_str().unwrap();
    wait_segments(master_url, 2).await;
    let (_, text) = text(master_url).await;
    let master = hls::master(&text);
    assert_eq!(master.variants.len(), 1, "{text}");
    let variant = &master.variants[0];
    assert_eq!(
        variant.resolution.map(|r| (r.width, r.height)),
        Some((1280, 720)),
        "{text}"
    );
    let fixture = ffprobe(
        &crate::common::root()
            .join("fixtures/av-720p.flv")
            .to_string_lossy(),
    );
    let video_of = |probe: &Value| {
        probe["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["codec_type"] == "video")
            .cloned()
            .unwrap_or_else(|| panic!("no video stream in {probe}"))
    };
    let (source, out) = (video_of(&fixture), video_of(&ffprobe(master_url)));
    for key in ["codec_name", "profile", "level", "width", "height"] {
        assert_eq!(
            out[key], source[key],
            "{key}: {out} against the source {source}"
        );
    }
    // The codecs the master states are the source's (profile and level from its avcC).
    let level = source["level"].as_u64().unwrap();
    assert!(
        variant
            .codecs
            .as_deref()
            .is_some_and(|c| c.starts_with("avc1.64") && c.contains(&format!("{level:02x}"))),
        "{text}"
    );

    // The running stream went on, and is still the node's one transcode.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(newest_msn(&first_master).await > before);
    let m = scrape(&d).await;
    assert_eq!(
        m.value("livepack_publishes_over_capacity_total{outcome=\"passthrough\"}"),
        1.0
    );
    assert_eq!(m.value("livepack_transcodes"), 1.0);
    drop(second_pusher);
    drop(first_pusher);
}
