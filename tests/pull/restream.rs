//! Restreams end to end: the daemon sends a live stream on to nginx-rtmp, which
//! records what it gets; ffprobe reads the recordings. The origin as received and a rung as
//! encoded, the target's key never shown, a delete closing the target's connection.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::common::{free_port, tempdir, Daemon, KEY};
use super::media::{self, create, wait_restream};

/// `v` (ffprobe's reading) has H.264 at `width`x`height` and AAC.
fn assert_picture_and_sound(v: &Value, width: u64, height: u64) {
    let streams = v["streams"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert!(
        streams
            .iter()
            .any(|s| s["codec_name"] == "h264" && s["width"] == width && s["height"] == height),
        "{v}"
    );
    assert!(streams.iter().any(|s| s["codec_name"] == "aac"), "{v}");
}

/// A test CA's certificate, and a certificate it signs for `localhost` with its key, as PEM
/// files in `dir`: (CA, certificate, key).
fn tls_files(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca = super::common::certs::TestCa::new("restream test CA");
    let (cert, key) = ca.server(&["localhost"]);
    let file = |name: &str, pem: &str| {
        let p = dir.join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    (
        file("ca.pem", &ca.pem),
        file("cert.pem", &cert),
        file("key.pem", &key),
    )
}

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
    let d = Daemon::start_logged(
        dir.path(),
        &[("LIVEPACK_API_KEYS", KEY), ("RUST_LOG", "livepack=debug")],
    );
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
    // A rung the stream's quality set has not is refused; one its ladder lacks now (the
    // source is 720p) says so.
    let bad = d
        .post(
            "/streaming/restreams",
            json!({"name": "x", "stream_id": sid, "uri": target("x"), "source": "999p"}),
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("source")),
        "{}",
        bad.body
    );
    let r = d
        .post(
            "/streaming/restreams",
            json!({"name": "big", "stream_id": sid, "uri": target("big"), "source": "1080p"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let big = r.body["id"].as_i64().unwrap();
    let missing = wait_restream(&d, big, "its rung missing", |r| !r["last_error"].is_null()).await;
    assert_eq!(
        (missing["live"].as_bool(), missing["last_error"].as_str()),
        (
            Some(false),
            Some("the stream has no 1080p rung now (its rungs: 720p, 480p, 360p)")
        ),
        "{missing}"
    );
    assert_eq!(
        d.delete(&format!("/streaming/restreams/{big}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
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
    assert_picture_and_sound(&v, 1280, 720);
    let seconds: f64 = v["format"]["duration"].as_str().unwrap().parse().unwrap();
    assert!(seconds >= 4.0, "{v}");
    drop(pusher);
    wait_restream(&d, rung, "stopped with the stream", |r| r["live"] == false).await;
    let v = probe(&rec_dir.join("rung-secret.flv"));
    assert_picture_and_sound(&v, 640, 360);
    // The restreams were logged (debug included), their keys never.
    let log = std::fs::read_to_string(Daemon::log_file(dir.path())).unwrap();
    assert!(log.contains("restream connected"), "{log}");
    for key in ["origin-secret", "rung-secret"] {
        assert!(!log.contains(key), "{key} in the log");
    }
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

/// An RTMPS target whose certificate the operator's CA signs (`restream_ca_file`) gets the
/// origin; the main input lost, the backup carries on and the target's connection stays, its
/// timestamps never going back and pausing once at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rtmps_target_keeps_its_connection_across_a_main_to_backup_switch() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let (ca_file, cert_file, key_file) = tls_files(dir.path());
    let rec_dir = dir.path().join("recorded");
    std::fs::create_dir_all(&rec_dir).unwrap();
    let (_nginx, tls_port) = super::common::nginx::rtmps(
        &dir.path().join("nginx"),
        free_port(false),
        &format!(
            "record all; record_path {}; record_unique off;",
            rec_dir.display()
        ),
        &cert_file,
        &key_file,
    );
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_RESTREAM_CA_FILE", ca_file.to_str().unwrap()),
        ],
    );
    let stream = create(&d, json!({"name": "switching"})).await;
    let sid = stream["id"].as_i64().unwrap();
    let main = media::push(stream["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    let backup = media::push(
        stream["backup_push_url"].as_str().unwrap(),
        "av-720p.flv",
        20,
    );
    let r = d
        .post(
            "/streaming/restreams",
            json!({"name": "tls", "stream_id": sid,
                   "uri": format!("rtmps://localhost:{tls_port}/live/tls-key")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["id"].as_i64().unwrap();
    let before = wait_restream(&d, id, "sending over TLS", |r| r["live"] == true).await;
    let sending_since = std::time::Instant::now();
    media::wait_record(&d, sid, Duration::from_secs(10), |r| {
        r["backup_live"] == true
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    drop(main);
    media::wait_record(&d, sid, Duration::from_secs(10), |r| r["live"] == false).await;
    let switched = std::time::Instant::now();
    let sent = wait_restream(&d, id, "", |_| true).await["bytes_sent"]
        .as_u64()
        .unwrap();
    let after = wait_restream(&d, id, "sending from the backup", |r| {
        r["bytes_sent"].as_u64() > Some(sent + 300_000)
    })
    .await;
    println!("from the backup after {:?}: {after}", switched.elapsed());
    assert_eq!(
        (&after["reconnects"], &after["started_at"], &after["live"]),
        (&json!(0), &before["started_at"], &json!(true)),
        "the same connection: {after}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        d.delete(&format!("/streaming/restreams/{id}")).await.status,
        StatusCode::NO_CONTENT
    );
    let sent_for = sending_since.elapsed().as_secs_f64();
    drop(backup);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // What nginx recorded: the picture, all the time it was sent (±1 s), and video timestamps
    // that never go back and pause (more than half a second) once at most.
    let flv = rec_dir.join("tls-key.flv");
    let v = probe(&flv);
    let streams = v["streams"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert!(
        streams
            .iter()
            .any(|s| s["codec_name"] == "h264" && s["width"] == 1280 && s["height"] == 720),
        "{v}"
    );
    let out = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "packet=dts_time",
        ])
        .args(["-of", "csv=p=0"])
        .arg(&flv)
        .output()
        .unwrap();
    let dts: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(dts.len() > 150, "{} video packets", dts.len());
    let steps: Vec<f64> = dts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(steps.iter().all(|&s| s >= 0.0), "a step back: {steps:?}");
    let pauses = steps.iter().filter(|&&s| s > 0.5).count();
    println!(
        "{} video packets over {:.1} s (sent for {sent_for:.1} s), {pauses} pause(s), longest step {:.3} s",
        dts.len(),
        dts[dts.len() - 1] - dts[0],
        steps.iter().cloned().fold(0.0, f64::max)
    );
    assert!(pauses <= 1, "{pauses} pauses: {steps:?}");
    let span = dts[dts.len() - 1] - dts[0];
    assert!(
        (span - sent_for).abs() <= 1.0,
        "{span:.1} s recorded of {sent_for:.1} s sent"
    );
}

/// An audio-only stream is restreamed from its first frame (there is no keyframe to wait for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audio_only_stream_is_restreamed() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let port = free_port(false);
    let rec_dir = dir.path().join("recorded");
    std::fs::create_dir_all(&rec_dir).unwrap();
    let _nginx = super::common::nginx::rtmp(
        &dir.path().join("nginx"),
        port,
        &format!(
            "record all; record_path {}; record_unique off;",
            rec_dir.display()
        ),
    );
    let d = Daemon::start_with(dir.path(), &[("LIVEPACK_API_KEYS", KEY)]);
    let stream = create(&d, json!({"name": "radio"})).await;
    let sid = stream["id"].as_i64().unwrap();
    let _pusher = media::push(stream["push_url"].as_str().unwrap(), "audio.flv", 5);
    let r = d
        .post(
            "/streaming/restreams",
            json!({"name": "radio", "stream_id": sid,
                   "uri": format!("rtmp://127.0.0.1:{port}/live/radio")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["id"].as_i64().unwrap();
    wait_restream(&d, id, "sending", |r| {
        r["bytes_sent"].as_u64() > Some(30_000)
    })
    .await;
    assert_eq!(
        d.delete(&format!("/streaming/restreams/{id}")).await.status,
        StatusCode::NO_CONTENT
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let v = probe(&rec_dir.join("radio.flv"));
    let codecs: Vec<_> = v["streams"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|s| s["codec_name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(codecs, ["aac"], "{v}");
}

/// Targets that stop reading with their connections open (the servers frozen with SIGSTOP):
/// RTMP and RTMPS (nginx-rtmp behind its TLS front) and SRT (srt-live-transmit). Each restream
/// turns `live: false` with a `last_error`, is called again with the backoff, and sends again
/// once its target reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_that_stop_reading_are_failed_and_called_again() {
    use nix::sys::signal::Signal;
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let (ca_file, cert_file, key_file) = tls_files(dir.path());
    let rtmp_port = free_port(false);
    let (mut nginx, tls_port) = super::common::nginx::rtmps(
        &dir.path().join("nginx"),
        rtmp_port,
        "",
        &cert_file,
        &key_file,
    );
    let srt_port = free_port(true);
    let mut slt = super::common::proc::Proc::spawn(
        std::process::Command::new("srt-live-transmit")
            .args(["-q"])
            .arg(format!("srt://127.0.0.1:{srt_port}?mode=listener"))
            .arg("file://con")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null()),
        "srt-live-transmit",
    );
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_RESTREAM_CA_FILE", ca_file.to_str().unwrap()),
        ],
    );
    let stream = create(&d, json!({"name": "frozen targets"})).await;
    let sid = stream["id"].as_i64().unwrap();
    let _pusher = media::push(stream["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    let mut ids = Vec::new();
    for (name, uri) in [
        ("rtmp", format!("rtmp://127.0.0.1:{rtmp_port}/live/a")),
        ("rtmps", format!("rtmps://localhost:{tls_port}/live/b")),
        ("srt", format!("srt://127.0.0.1:{srt_port}")),
    ] {
        let r = d
            .post(
                "/streaming/restreams",
                json!({"name": name, "stream_id": sid, "uri": uri}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        ids.push((name, r.body["id"].as_i64().unwrap()));
    }
    for &(name, id) in &ids {
        wait_restream(&d, id, name, |r| {
            r["live"] == true && r["bytes_sent"].as_u64() > Some(200_000)
        })
        .await;
    }
    nginx.signal(Signal::SIGSTOP);
    slt.signal(Signal::SIGSTOP);
    let frozen = std::time::Instant::now();
    for &(name, id) in &ids {
        // Bounded by the write deadline, the socket buffers filling at the stream's rate, and
        // SRT's peer timeout.
        let deadline = frozen + Duration::from_secs(40);
        let failed = loop {
            let r = d.get(&format!("/streaming/restreams/{id}")).await.body;
            if r["live"] == false
                && r["last_error"].is_string()
                && r["reconnects"].as_u64() >= Some(1)
            {
                break r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: still shown sending to a frozen target: {r}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        println!(
            "{name}: failed {:?} after the freeze: {failed}",
            frozen.elapsed()
        );
    }
    nginx.signal(Signal::SIGCONT);
    slt.signal(Signal::SIGCONT);
    for &(name, id) in &ids {
        let before = d.get(&format!("/streaming/restreams/{id}")).await.body["bytes_sent"]
            .as_u64()
            .unwrap();
        // The backoff has grown to at most 30 s while frozen.
        let deadline = std::time::Instant::now() + Duration::from_secs(45);
        loop {
            let r = d.get(&format!("/streaming/restreams/{id}")).await.body;
            if r["live"] == true && r["bytes_sent"].as_u64() > Some(before + 100_000) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: not back after the target thawed: {r}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
