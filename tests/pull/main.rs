//! PULL streams end to end: the daemon fetches a stream from the record's `uri` — here an SRT
//! source (ffmpeg in listener mode), a live HLS source (ffmpeg writing segments into a
//! directory served over HTTP) and an RTMP server (nginx-rtmp fed by ffmpeg) — cycling round-robin: first source dead → live from the second;
//! the second stops → back to a restarted first, with a discontinuity. Deactivation stops the
//! fetch at once, a `uri` edit takes effect without a restart, and a stream that receives
//! nothing for the inactivity limit is deactivated.

#[path = "../common/mod.rs"]
mod common;
mod flapping;
#[path = "../common/media.rs"]
mod media;
mod restream;

use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use common::proc::Proc;
use common::webhooks::Receiver;
use common::{free_port, hls, tempdir, Daemon, KEY};
use media::{create, ffmpeg, hls_writer, http_server, live_writer, record, wait_record};

/// ffmpeg as an SRT server (listener) sending the TS fixture to the first caller.
fn srt_source(port: u16) -> Proc {
    let fixture = media::fixture("av-720p.ts");
    let url = format!("srt://127.0.0.1:{port}?mode=listener");
    ffmpeg(&[
        "-i",
        fixture.to_str().unwrap(),
        "-c",
        "copy",
        "-f",
        "mpegts",
        &url,
    ])
}

fn pull_daemon(dir: &Path, extra: &[(&str, &str)]) -> Daemon {
    let mut env = vec![
        ("LIVEPACK_API_KEYS", KEY),
        ("LIVEPACK_GRACE_PERIOD_SECS", "30"),
    ];
    env.extend_from_slice(extra);
    Daemon::start_with(dir, &env)
}

/// Waits until the media playlist holds a discontinuity followed by a complete segment.
async fn wait_discontinuity(url: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (_, t) = media::text(url).await;
        if hls::try_media(&t).is_some_and(|p| p.segments.iter().any(|s| s.discontinuity)) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "no discontinuity with media after it:\n{t}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_failover_deactivation_and_uri_edit() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = pull_daemon(dir.path(), &[]);
    let (srt_port, http_port) = (free_port(true), free_port(false));
    let hls_dir = dir.path().join("www/live");
    let mut hls = Some(hls_writer(&hls_dir));
    let _http = http_server(&dir.path().join("www"), http_port);
    let hls_url = format!("http://127.0.0.1:{http_port}/live/index.m3u8");
    let srt_url = format!("srt://127.0.0.1:{srt_port}");

    let hooks = tempdir();
    let receiver = Receiver::start(hooks.path(), 0, &[]);
    let hook = d
        .post(
            "/streaming/webhooks",
            json!({"url": receiver.url(), "events": ["pull_source_switched"]}),
        )
        .await;
    assert_eq!(hook.status, StatusCode::CREATED, "{}", hook.body);
    receiver.set_secret(hook.body["secret"].as_str().unwrap());

    // First source dead (nothing listens), second alive.
    let started = Instant::now();
    let rec = create(
        &d,
        json!({"name": "pull", "pull": true, "uri": format!("{srt_url} {hls_url}")}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    assert!(
        rec["push_url"].is_null() && rec["push_url_whip"].is_null(),
        "{rec}"
    );
    let live = wait_record(&d, id, Duration::from_secs(45), |r| {
        r["live"] == true && !r["transcoding_speed"].is_null()
    })
    .await;
    println!(
        "PULL live from the second source {:?} after the record was created",
        started.elapsed()
    );
    assert_eq!(live["video_height"], 720, "{live}");
    assert!(
        live["frame_rate"].as_f64().is_some_and(|f| f > 20.0),
        "{live}"
    );
    let master = live["hls_cmaf_url"].as_str().unwrap().to_owned();
    media::wait_segments(&master, 2).await;
    let probe = media::ffprobe(&master);
    let codecs: Vec<&str> = probe["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["codec_name"].as_str())
        .collect();
    assert!(
        codecs.contains(&"h264") && codecs.contains(&"aac"),
        "{probe}"
    );

    // The first source comes back; the second stops: the fetcher cycles to the first.
    let mut srt = srt_source(srt_port);
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(hls.take());
    let stopped = Instant::now();
    let top = master.replace("master.m3u8", "720p/index.m3u8");
    let playlist = wait_discontinuity(&top, Duration::from_secs(30)).await;
    println!(
        "PULL switched to the restarted first source: media again {:?} after the second stopped",
        stopped.elapsed()
    );
    let parsed = hls::media(&playlist);
    assert!(
        parsed.segments.iter().any(|s| s.discontinuity),
        "{playlist}"
    );
    wait_record(&d, id, Duration::from_secs(10), |r| r["live"] == true).await;
    // A webhook saw each source left, the dead first's and the stopped second's, with why.
    let got = receiver
        .until(Duration::from_secs(10), |e| e["data"]["from"] == 1)
        .await;
    let first = &got[0];
    assert_eq!(
        (
            &first["data"]["from"],
            &first["data"]["to"],
            &first["stream_id"]
        ),
        (&json!(0), &json!(1), &json!(id)),
        "{got:#?}"
    );
    assert!(
        got.iter()
            .all(|e| e["data"]["reason"].as_str().is_some_and(|r| !r.is_empty())),
        "{got:#?}"
    );

    // Deactivation stops the pull at once: the SRT server loses its only caller and exits.
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"active": false}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    wait_record(&d, id, Duration::from_secs(5), |r| r["live"] == false).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while srt.try_wait().is_none() {
        assert!(
            Instant::now() < deadline,
            "the SRT source still has its caller"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A new `uri` (the HLS source alone, restarted) and `active=true`: pulled again, no restart.
    let _hls = hls_writer(&hls_dir);
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"active": true, "uri": hls_url}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let again = Instant::now();
    wait_record(&d, id, Duration::from_secs(30), |r| r["live"] == true).await;
    println!(
        "PULL live again {:?} after active=true with a new uri",
        again.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_that_receives_nothing_is_deactivated_after_the_inactivity_limit() {
    let dir = tempdir();
    let d = pull_daemon(dir.path(), &[("LIVEPACK_PULL_INACTIVITY_SECS", "4")]);
    let dead = format!(
        "srt://127.0.0.1:{} http://127.0.0.1:{}/x.m3u8",
        free_port(true),
        free_port(false)
    );
    // A webhook follows the fetcher: the record change, then the deactivation.
    let hooks = tempdir();
    let receiver = Receiver::start(hooks.path(), 0, &[]);
    let hook = d
        .post(
            "/streaming/webhooks",
            json!({"url": receiver.url(), "events": ["pull_source_switched", "pull_deactivated", "stream_updated"]}),
        )
        .await;
    assert_eq!(hook.status, StatusCode::CREATED, "{}", hook.body);
    receiver.set_secret(hook.body["secret"].as_str().unwrap());
    let started = Instant::now();
    let rec = create(&d, json!({"name": "idle", "pull": true, "uri": dead})).await;
    let id = rec["id"].as_i64().unwrap();
    let off = wait_record(&d, id, Duration::from_secs(30), |r| r["active"] == false).await;
    let got = receiver
        .until(Duration::from_secs(10), |e| e["type"] == "pull_deactivated")
        .await;
    let kinds: Vec<&str> = got.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(got.iter().all(|e| e["stream_id"] == id), "{got:#?}");
    // The limit ends the pull, not a source: no switch is reported for it.
    assert!(
        got.iter()
            .filter(|e| e["type"] == "pull_source_switched")
            .all(|e| e["data"]["reason"] != "inactivity limit reached"),
        "{got:#?}"
    );
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["stream_updated", "pull_deactivated"],
        "{kinds:?}"
    );
    common::webhooks::assert_each_once(&got);
    println!(
        "PULL deactivated {:?} after start (limit 4 s)",
        started.elapsed()
    );
    assert_eq!(off["live"], false);
    assert_eq!(off["pull"], true, "only `active` changes: {off}");
    // It stays off: the record is persisted, nothing restarts it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(record(&d, id).await["active"], false);
}

/// nginx with its RTMP module (Debian `libnginx-mod-rtmp`) as an RTMP server on `port`:
/// encoders publish to `rtmp://127.0.0.1:{port}/live/{name}`, players play the same URL.
fn rtmp_server(dir: &Path, port: u16) -> Proc {
    common::nginx::rtmp(dir, port, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rtmp_source_is_pulled_from_an_rtmp_server() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = pull_daemon(dir.path(), &[]);
    let port = free_port(false);
    let _server = rtmp_server(&dir.path().join("nginx"), port);
    let url = format!("rtmp://127.0.0.1:{port}/live/source");
    let _encoder = media::push(&url, "av-720p.flv", 5);
    let started = Instant::now();
    let rec = create(&d, json!({"name": "rtmp-pull", "pull": true, "uri": url})).await;
    let id = rec["id"].as_i64().unwrap();
    let live = wait_record(&d, id, Duration::from_secs(30), |r| {
        r["live"] == true && !r["transcoding_speed"].is_null()
    })
    .await;
    println!("RTMP PULL live after {:?}", started.elapsed());
    assert_eq!(live["video_height"], 720, "{live}");
    let master = live["hls_cmaf_url"].as_str().unwrap().to_owned();
    media::wait_segments(&master, 2).await;
    let (_, text) = media::text(&master).await;
    assert_eq!(hls::master(&text).variants.len(), 3, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_joining_an_rtmp_server_mid_gop_keeps_its_video() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = pull_daemon(dir.path(), &[]);
    let port = free_port(false);
    let _server = rtmp_server(&dir.path().join("nginx"), port);
    let url = format!("rtmp://127.0.0.1:{port}/live/longgop");
    // An encoder with a 4 s GOP, running for a while before the PULL joins: nginx-rtmp relays
    // from wherever its encoder is, so the PULL's first frames fall inside a GOP.
    let _encoder = media::push(&url, "longgop-720p25.ts", 3);
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let started = Instant::now();
    let rec = create(&d, json!({"name": "mid-gop", "pull": true, "uri": url})).await;
    let id = rec["id"].as_i64().unwrap();
    // The outputs start with the video `onMetaData` declares, not audio-only first.
    let first = wait_record(&d, id, Duration::from_secs(30), |r| {
        r["transcoding_speed"].is_number()
    })
    .await;
    assert_eq!(
        first["video_height"], 720,
        "started without its video: {first}"
    );
    println!(
        "RTMP PULL joined mid-GOP: transcoding video and audio after {:?}",
        started.elapsed()
    );
    let live = media::assert_video_out(&d, id, (1280, 720)).await;
    assert_eq!(
        live["transcoded_qualities"],
        json!(["720p", "480p", "360p"])
    );
}

/// ffmpeg writing a live DASH presentation (1 s segments, `$Number$` templates) into `dir`.
/// Without a SegmentTimeline: GStreamer 1.22's dashdemux2 never starts on ffmpeg's live
/// timeline MPDs (whose first `S@t` is not 0), fetched directly or not.
fn dash_writer(dir: &Path) -> Proc {
    let dash = ["-f", "dash", "-seg_duration", "1", "-window_size", "6"];
    live_writer(
        dir,
        "live.mpd",
        &[&dash[..], &["-use_template", "1", "-use_timeline", "0"]].concat(),
    )
}

/// What the hostile HTTP server saw: requests per path and bytes it managed to write.
#[derive(Default)]
struct Seen {
    requests: std::collections::HashMap<String, u64>,
    written: std::collections::HashMap<String, u64>,
}

/// A hostile HTTP source on 127.0.0.1 (threads, raw sockets): a playlist of 100 MB, a live
/// playlist whose segment never ends, a playlist and a redirect pointing at `0.0.0.0` (a
/// metadata-class address the guard refuses, which on Linux reaches this machine's loopback —
/// the canary), and a redirect to the real DASH source on another origin.
fn hostile_server(canary: u16, good: String) -> (u16, std::sync::Arc<std::sync::Mutex<Seen>>) {
    use std::io::Write;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let state = seen.clone();
    let port = common::raw_http::serve(move |path, mut s| {
        let (seen, good) = (state.clone(), good.clone());
        let path = path.split('?').next().unwrap_or(&path).to_owned();
        *seen
            .lock()
            .unwrap()
            .requests
            .entry(path.clone())
            .or_default() += 1;
        let ok = |body: &str| {
            format!(
                        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/vnd.apple.mpegurl\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
        };
        let redirect = |to: &str| {
            format!("HTTP/1.1 302 Found\r\nConnection: close\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n")
        };
        let live = |segment: &str| {
            ok(&format!(
                        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:1\n#EXTINF:2.0,\n{segment}\n#EXTINF:2.0,\n{segment}\n"
                    ))
        };
        // A null TS packet: valid MPEG-TS that carries nothing, so only a cap ends it.
        let mut null = vec![0x47, 0x1f, 0xff, 0x10];
        null.resize(188, 0xff);
        let (reply, body, limit): (String, Vec<u8>, u64) = match path.as_str() {
                    "/big.m3u8" => (
                        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/vnd.apple.mpegurl\r\n\r\n#EXTM3U\n".into(),
                        b"#EXT-X-PADDING:0123456789abcdef0123456789abcdef0123456789abcdef\n".repeat(1024),
                        100 << 20,
                    ),
                    "/endless.m3u8" => (live("endless.ts"), vec![], 0),
                    "/endless.ts" => (
                        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: video/mp2t\r\n\r\n".into(),
                        null.repeat(512),
                        u64::MAX,
                    ),
                    "/ssrf.m3u8" => (
                        live(&format!("http://0.0.0.0:{canary}/latest/meta-data/seg.ts")),
                        vec![],
                        0,
                    ),
                    "/to-canary.m3u8" => (
                        redirect(&format!("http://0.0.0.0:{canary}/index.m3u8")),
                        vec![],
                        0,
                    ),
                    "/good.mpd" => (redirect(&good), vec![], 0),
                    _ => (
                        "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
                            .into(),
                        vec![],
                        0,
                    ),
                };
        if s.write_all(reply.as_bytes()).is_err() {
            return;
        }
        let mut sent = 0u64;
        while !body.is_empty() && sent < limit {
            if s.write_all(&body).is_err() {
                break;
            }
            sent += body.len() as u64;
            *seen
                .lock()
                .unwrap()
                .written
                .entry(path.clone())
                .or_default() += body.len() as u64;
        }
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_http_sources_are_bounded_and_a_redirected_dash_source_goes_live() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    const SEGMENT_CAP: u64 = 2 << 20;
    let d = pull_daemon(
        dir.path(),
        &[("LIVEPACK_PULL_MAX_SEGMENT_BYTES", "2097152")],
    );
    // The canary: anything the daemon fetches from 0.0.0.0 lands here.
    let canary = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let canary_port = canary.local_addr().unwrap().port();
    canary.set_nonblocking(true).unwrap();
    let canary_hits = || std::iter::from_fn(|| canary.accept().ok()).count();
    // The control: 0.0.0.0 does reach it, so a refused fetch is the guard's doing.
    drop(std::net::TcpStream::connect(("0.0.0.0", canary_port)).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(canary_hits(), 1, "0.0.0.0 does not reach the loopback here");

    let http_port = free_port(false);
    let _dash = dash_writer(&dir.path().join("www/dash"));
    let _http = http_server(&dir.path().join("www"), http_port);
    let good = format!("http://127.0.0.1:{http_port}/dash/live.mpd");
    let (port, seen) = hostile_server(canary_port, good);
    let uri = [
        "big.m3u8",
        "endless.m3u8",
        "ssrf.m3u8",
        "to-canary.m3u8",
        "good.mpd",
    ]
    .map(|p| format!("http://127.0.0.1:{port}/{p}"))
    .join(" ");
    let started = Instant::now();
    let rec = create(
        &d,
        json!({"name": "hostile-pull", "pull": true, "uri": uri}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let live = wait_record(&d, id, Duration::from_secs(90), |r| {
        r["live"] == true && !r["transcoding_speed"].is_null()
    })
    .await;
    println!(
        "PULL live from the redirected DASH source {:?} after four hostile ones",
        started.elapsed()
    );
    assert_eq!(live["video_height"], 720, "{live}");
    let master = live["hls_cmaf_url"].as_str().unwrap().to_owned();
    media::wait_segments(&master, 2).await;

    let seen = seen.lock().unwrap();
    println!(
        "hostile server: requests {:?}, bytes written {:?}",
        seen.requests, seen.written
    );
    for path in [
        "/big.m3u8",
        "/endless.m3u8",
        "/endless.ts",
        "/ssrf.m3u8",
        "/to-canary.m3u8",
        "/good.mpd",
    ] {
        assert!(
            seen.requests.get(path).is_some_and(|n| *n >= 1),
            "{path} never fetched: {:?}",
            seen.requests
        );
    }
    // Each read stops at its cap; what the server got out beyond it is the sockets' buffers.
    let slack = 16u64 << 20;
    let big = seen.written["/big.m3u8"] / seen.requests["/big.m3u8"];
    assert!(
        big < (4 << 20) + slack,
        "{big} bytes of playlist per request"
    );
    let endless = seen.written["/endless.ts"] / seen.requests["/endless.ts"];
    assert!(
        endless < SEGMENT_CAP + slack,
        "{endless} bytes of segment per request"
    );
    assert_eq!(canary_hits(), 0, "the daemon fetched from 0.0.0.0");
}

/// A PULL of an HLS source from its first segment on, and of the same source restarted by its
/// encoder (new playlist, media sequence from 0): GStreamer 1.22's hlsdemux2 loses sync after a
/// one-segment live playlist and never resumes (the gateway holds such a playlist until it lists
/// two), and disposing a demuxer left that way aborted the whole daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hls_source_pulled_from_its_first_segment_and_restarted_stays_live() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = pull_daemon(dir.path(), &[]);
    let http_port = free_port(false);
    let hls_dir = dir.path().join("www/live");
    std::fs::create_dir_all(&hls_dir).unwrap();
    let _http = http_server(&dir.path().join("www"), http_port);
    let hls_url = format!("http://127.0.0.1:{http_port}/live/index.m3u8");
    // The record first: the fetcher finds no playlist, then one listing a single segment.
    let rec = create(&d, json!({"name": "pull", "pull": true, "uri": hls_url})).await;
    let id = rec["id"].as_i64().unwrap();
    let writer = hls_writer(&hls_dir);
    let started = Instant::now();
    let live = wait_record(&d, id, Duration::from_secs(40), |r| {
        r["live"] == true && r["video_height"] == 720
    })
    .await;
    println!(
        "PULL of a starting HLS source live after {:?}",
        started.elapsed()
    );
    let master = live["hls_cmaf_url"].as_str().unwrap().to_owned();
    media::wait_segments(&master, 3).await;

    // The encoder restarts: its playlist starts over.
    drop(writer);
    std::fs::remove_dir_all(&hls_dir).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _writer = hls_writer(&hls_dir);
    let restarted = Instant::now();
    let top = master.replace("master.m3u8", "720p/index.m3u8");
    wait_discontinuity(&top, Duration::from_secs(60)).await;
    println!(
        "PULL media again {:?} after the source restarted",
        restarted.elapsed()
    );
    wait_record(&d, id, Duration::from_secs(5), |r| r["live"] == true).await;
}
