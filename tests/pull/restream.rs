//! Restreams end to end (issue 41): the daemon sends a live stream on to nginx-rtmp, which
//! records what it gets; ffprobe reads the recordings. The origin as received and a rung as
//! encoded, the target's key never shown, a delete closing the target's connection.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::common::{free_port, tempdir, Daemon, KEY};
use super::media::{self, create, wait_restream};

fn probe(path: &std::path::Path) -> Value {
    let out = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name,width,height:format=duration",
            "-of",
            "json",
        ])
        .arg(path)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_stream_is_restreamed_as_received_and_as_a_rung_to_an_rtmp_server() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let port = free_port(false);
    let nginx_dir = dir.path().join("nginx");
    let rec_dir = dir.path().join("recorded");
    std::fs::create_dir_all(&rec_dir).unwrap();
    let _nginx = super::common::nginx::rtmp(
        &nginx_dir,
        port,
        &format!(
            "record all; record_path {}; record_unique off;",
            rec_dir.display()
        ),
    );
    let d = Daemon::start_with(dir.path(), &[("LIVEPACK_API_KEYS", KEY)]);
    let stream = create(&d, json!({"name": "out"})).await;
    let sid = stream["id"].as_i64().unwrap();
    let target = |key: &str| format!("rtmp://127.0.0.1:{port}/live/{key}");

    // Created before the stream is live: waits, shows its target without the key.
    let r = d
        .post(
            "/streaming/restreams",
            json!({"name": "origin", "stream_id": sid, "uri": target("origin-secret")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let origin = r.body["id"].as_i64().unwrap();
    assert_eq!(r.body["uri"], format!("rtmp://127.0.0.1:{port}/live/****"));
    assert_eq!(
        (r.body["live"].as_bool(), r.body["source"].as_str()),
        (Some(false), Some("origin"))
    );
    assert!(!r.body.to_string().contains("origin-secret"));
    // A target the URL policy refuses, a scheme no restream speaks.
    for (uri, field) in [
        ("rtmp://169.254.169.254/live/x", "uri"),
        ("https://example.com/live/x", "uri"),
    ] {
        let bad = d
            .post(
                "/streaming/restreams",
                json!({"name": "x", "stream_id": sid, "uri": uri}),
            )
            .await;
        assert_eq!(
            (bad.status, bad.body["error"]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(field)),
            "{}",
            bad.body
        );
        assert!(
            !bad.body.to_string().contains("169.254.169.254/live/x"),
            "{}",
            bad.body
        );
    }

    let pusher = media::push(stream["push_url"].as_str().unwrap(), "av-720p.flv", 2);
    wait_restream(&d, origin, "live and sending", |r| {
        r["live"] == true && r["bytes_sent"].as_u64() > Some(100_000)
    })
    .await;
    let r = d
        .post("/streaming/restreams", json!({"name": "rung", "stream_id": sid, "uri": target("rung-secret"), "source": "360p"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let rung = r.body["id"].as_i64().unwrap();
    wait_restream(&d, rung, "live", |r| {
        r["live"] == true && r["bytes_sent"].as_u64() > Some(50_000)
    })
    .await;
    // A client sending back what it read keeps the real target.
    let back = d
        .patch(
            &format!("/streaming/restreams/{rung}"),
            json!({"uri": format!("rtmp://127.0.0.1:{port}/live/****"), "name": "rung 360p"}),
        )
        .await;
    assert_eq!(back.status, StatusCode::OK, "{}", back.body);
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Deleted: its connection closes, nginx closes its recording.
    assert_eq!(
        d.delete(&format!("/streaming/restreams/{origin}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        d.get(&format!("/streaming/restreams/{origin}"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let v = probe(&rec_dir.join("origin-secret.flv"));
    let streams = v["streams"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert!(
        streams
            .iter()
            .any(|s| s["codec_name"] == "h264" && s["width"] == 1280 && s["height"] == 720),
        "{v}"
    );
    assert!(streams.iter().any(|s| s["codec_name"] == "aac"), "{v}");
    let seconds: f64 = v["format"]["duration"].as_str().unwrap().parse().unwrap();
    assert!(seconds >= 4.0, "{v}");
    drop(pusher);
    wait_restream(&d, rung, "stopped with the stream", |r| r["live"] == false).await;
    let v = probe(&rec_dir.join("rung-secret.flv"));
    let streams = v["streams"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert!(
        streams
            .iter()
            .any(|s| s["codec_name"] == "h264" && s["width"] == 640 && s["height"] == 360),
        "{v}"
    );
    assert!(streams.iter().any(|s| s["codec_name"] == "aac"), "{v}");
}

/// An SRT target (ffmpeg listening, with a passphrase) gets the 480p rung; killed mid-stream
/// and listening again, the restream is back within 5 s, its failure in `last_error` and
/// `reconnects`. ffmpeg writes nothing before its input analysis ends, which on a live TS is its
/// `analyzeduration` (5 s): each listener runs 8 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_srt_target_gets_a_rung_and_the_restream_comes_back_after_it_restarts() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let port = free_port(true);
    let pass = "srt-restream-0123";
    let listen = |out: &std::path::Path| {
        super::common::proc::Proc::spawn(
            std::process::Command::new("ffmpeg")
                .args(["-hide_banner", "-loglevel", "error", "-y", "-i"])
                .arg(format!(
                    "srt://127.0.0.1:{port}?mode=listener&passphrase={pass}"
                ))
                .args(["-c", "copy", "-f", "mpegts"])
                .arg(out)
                .stdin(std::process::Stdio::null()),
            "ffmpeg",
        )
    };
    let first = dir.path().join("first.ts");
    let listener = listen(&first);
    let d = Daemon::start_with(dir.path(), &[("LIVEPACK_API_KEYS", KEY)]);
    let stream = create(&d, json!({"name": "srt out"})).await;
    let sid = stream["id"].as_i64().unwrap();
    let _pusher = media::push(stream["push_url"].as_str().unwrap(), "av-720p.flv", 3);
    let r = d
        .post(
            "/streaming/restreams",
            json!({"name": "srt", "stream_id": sid, "source": "480p",
                   "uri": format!("srt://127.0.0.1:{port}?passphrase={pass}&latency=200")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["uri"], format!("srt://127.0.0.1:{port}"));
    let id = r.body["id"].as_i64().unwrap();
    wait_restream(&d, id, "live", |r| {
        r["live"] == true && r["bytes_sent"].as_u64() > Some(100_000)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    drop(listener);
    let failed = wait_restream(&d, id, "the target's loss seen", |r| {
        r["reconnects"].as_u64() >= Some(1)
    })
    .await;
    println!("after the target died: {failed}");
    let second = dir.path().join("second.ts");
    let _listener = listen(&second);
    let back = std::time::Instant::now();
    wait_restream(&d, id, "back", |r| r["live"] == true).await;
    println!(
        "restream back {:?} after the target listened again",
        back.elapsed()
    );
    assert!(back.elapsed() < Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(8)).await;
    for out in [first, second] {
        let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        let v = probe(&out);
        println!("{}: {size} bytes", out.display());
        let streams = v["streams"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert!(
            streams
                .iter()
                .any(|s| s["codec_name"] == "h264" && s["width"] == 854 && s["height"] == 480),
            "{}: {v}",
            out.display()
        );
    }
}
