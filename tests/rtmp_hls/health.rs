//! Stream health in the record and `/metrics`: the source's codecs, video bitrate and keyframe
//! interval as received (checked against ffprobe's reading of the pushed file), and viewers by
//! output, HLS and DASH players counted by their manifest requests.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::metrics::scrape;
use crate::common::{tempdir, Daemon};
use crate::media::*;

/// The fixture's video bitrate (kbit/s over its length) and keyframe interval (s), by ffprobe.
fn probed(fixture: &str) -> (f64, f64) {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v"])
        .args([
            "-show_entries",
            "packet=pts_time,size,flags",
            "-of",
            "csv=p=0",
        ])
        .arg(crate::media::fixture(fixture))
        .output()
        .unwrap();
    let (mut bytes, mut keys, mut last) = (0u64, Vec::new(), 0f64);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split(',').collect();
        let pts: f64 = f[0].parse().unwrap();
        bytes += f[1].parse::<u64>().unwrap();
        if f[2].contains('K') {
            keys.push(pts);
        }
        last = pts;
    }
    assert!(keys.len() >= 2, "{fixture}: fewer than two keyframes");
    (bytes as f64 * 8.0 / 1000.0 / last, keys[1] - keys[0])
}

#[tokio::test]
async fn the_record_shows_the_source_as_received_and_viewers_by_output() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = create(&d, json!({"name": "health"})).await;
    let id = rec["id"].as_i64().unwrap();
    // Idle: nothing measured, nobody watching.
    assert_eq!(rec["video_codec"], Value::Null);
    assert_eq!(rec["viewers"]["total"], 0);
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 30);
    let live = wait_record(&d, id, Duration::from_secs(30), |r| {
        r["live"] == true && r["video_bitrate"].is_u64() && r["keyframe_interval"].is_number()
    })
    .await;
    let (kbps, gop) = probed("av-720p.flv");
    assert_eq!(live["video_codec"], "H.264");
    assert_eq!(live["audio_codec"], "AAC");
    assert_eq!(live["input_protocol"], "rtmp");
    assert_eq!(live["backup_input_protocol"], Value::Null);
    let got = live["video_bitrate"].as_u64().unwrap() as f64;
    assert!(
        (0.5..2.0).contains(&(got / kbps)),
        "video_bitrate {got} kbit/s, ffprobe {kbps:.0}"
    );
    let interval = live["keyframe_interval"].as_f64().unwrap();
    assert!(
        (interval - gop).abs() < 0.1,
        "{interval} s, ffprobe {gop} s"
    );
    assert_eq!(live["frames_dropped"], 0);

    // Three HLS players (one asking twice), one DASH, one TS-HLS.
    let base = format!("{}/cmaf/{id}", d.base);
    let client = reqwest::Client::new();
    let ask = |url: String, agent: &'static str| {
        let req = client.get(url).header("user-agent", agent);
        async move {
            let r = req.send().await.unwrap();
            assert!(r.status().is_success(), "{}", r.status());
        }
    };
    for agent in ["hls.js/1", "Safari/17", "AppleCoreMedia/1", "hls.js/1"] {
        ask(format!("{base}/master.m3u8"), agent).await;
    }
    ask(format!("{base}/index.mpd"), "dash.js/4").await;
    ask(
        format!("{}/mpegts/{id}/master_mpegts.m3u8", d.base),
        "VLC/3",
    )
    .await;
    let r = d.get(&format!("/streaming/streams/{id}")).await;
    assert_eq!(
        r.body["viewers"],
        json!({"hls": 3, "dash": 1, "hls_mpegts": 1, "whep": 0, "srt": 0, "total": 5})
    );
    let m = scrape(&d).await;
    for (output, n) in [
        ("hls", 3.0),
        ("dash", 1.0),
        ("hls_mpegts", 1.0),
        ("whep", 0.0),
    ] {
        let key = format!("livepack_stream_viewers{{output=\"{output}\",stream=\"{id}\"}}");
        assert_eq!(m.value(&key), n, "{output}");
    }
    // The listener's own figures: the manifests (and the test's API calls) are counted.
    let playlists = m.value("livepack_http_requests_total{code=\"2xx\",route=\"playlist\"}");
    assert_eq!(playlists, 4.0);
    assert_eq!(
        m.value("livepack_http_requests_total{code=\"2xx\",route=\"mpd\"}"),
        1.0
    );
    assert!(m.value("livepack_http_requests_total{code=\"2xx\",route=\"api\"}") >= 2.0);
    assert!(m.value("livepack_http_response_bytes_total{route=\"playlist\"}") > 0.0);
    let text = d.get("/metrics").await.body.as_str().unwrap().to_owned();
    let timed = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("livepack_http_request_duration_seconds_count{route=\"playlist\"} ")
        })
        .and_then(|v| v.parse::<f64>().ok());
    assert!(timed.is_some_and(|n| n >= playlists), "{text}");
    // The node's queues: nothing waits, nothing failed, nothing restreamed.
    for family in [
        "livepack_webhook_deliveries_pending",
        "livepack_uploads_failed",
        "livepack_restreams{state=\"reconnecting\"}",
    ] {
        assert_eq!(m.value(family), 0.0, "{family}");
    }
    assert!(m.value("livepack_recordings_disk_free_bytes") > 0.0);
    let bits = m.stream("livepack_stream_video_bits_per_second", id);
    assert!((0.5..2.0).contains(&(bits / 1000.0 / kbps)), "{bits}");
    // Off air: no figure rather than the last one.
    let mut ffmpeg = ffmpeg;
    ffmpeg.kill();
    let off = wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == false && r["video_bitrate"].is_null()
    })
    .await;
    assert_eq!(off["keyframe_interval"], Value::Null);
    assert_eq!(off["input_protocol"], Value::Null);
}
