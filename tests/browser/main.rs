//! Real players in headless Chromium against a stream pushed over RTMP: hls.js (LL-HLS, low-
//! latency mode) and dash.js (LL-DASH with chunked transfer). The video advances, no fatal error,
//! and each reports its live latency (printed for the closing note).

#[path = "../common/mod.rs"]
mod common;
mod console;
#[path = "../common/media.rs"]
mod media;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::proc::{run_within, AsyncProc, Proc};
use common::{root, tempdir, Daemon};

/// Two transcodes plus two browsers at once would starve two cores: one player test at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Creates a stream, pushes the 720p fixture in real time (~36 s), waits until it transcodes.
async fn live_stream(d: &Daemon) -> (Value, Proc) {
    live_stream_of(d, json!({"name": "browser"})).await
}

/// As [`live_stream`], the stream created with `body`.
async fn live_stream_of(d: &Daemon, body: Value) -> (Value, Proc) {
    let rec = d.post("/streaming/streams", body).await.body;
    let ffmpeg = push(rec["push_url"].as_str().unwrap());
    let id = rec["id"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.get(&format!("/streaming/streams/{id}")).await.body["transcoding_speed"].is_null() {
        assert!(Instant::now() < deadline, "stream never went live");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (rec, ffmpeg)
}

/// Runs a player driver (`tests/browser/*.mjs URL SECONDS [ARGS]`) and parses its JSON line.
/// It plays 14 s.
async fn play(script: &'static str, url: String, extra: Vec<String>) -> Value {
    let mut args = vec![url, "14".to_owned()];
    args.extend(extra);
    driver(script, args).await
}

/// Runs a browser driver (`node tests/browser/*.mjs ARGS`) and parses its one JSON line; two
/// minutes covers Chromium's start on a loaded machine.
async fn driver(script: &'static str, args: Vec<String>) -> Value {
    driver_within(script, args, Duration::from_secs(120)).await
}

/// As [`driver`], for a driver that may take up to `bound`.
async fn driver_within(script: &'static str, args: Vec<String>, bound: Duration) -> Value {
    let out = tokio::task::spawn_blocking(move || {
        run_within(
            Command::new("node")
                .current_dir(root())
                .arg(script)
                .args(&args),
            "node (installed by scripts/test)",
            bound,
        )
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(out.stdout.trim_ascii()).expect("one JSON line")
}

/// Common checks: no error, decoded video that advances; returns the latencies of the second half.
fn check_playback(report: &Value) -> Vec<f64> {
    assert_eq!(report["errors"], json!([]), "{report}");
    assert!(
        report["width"].as_u64().unwrap() > 0,
        "no decoded video: {report}"
    );
    let samples = report["samples"].as_array().unwrap();
    let times: Vec<f64> = samples.iter().map(|s| s["t"].as_f64().unwrap()).collect();
    let advanced = times.last().unwrap() - times[times.len() / 3];
    assert!(advanced > 3.0, "video did not advance: {times:?}");
    let latencies: Vec<f64> = samples[samples.len() / 2..]
        .iter()
        .filter_map(|s| s["latency"].as_f64())
        .filter(|l| *l > 0.0)
        .collect();
    assert!(!latencies.is_empty(), "no latency reported: {report}");
    latencies
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[tokio::test]
async fn hlsjs_plays_the_live_stream_in_low_latency_mode() {
    let _g = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let (rec, ffmpeg) = live_stream(&d).await;
    let shot = dir.path().join("hlsjs.png").to_string_lossy().into_owned();
    let url = rec["hls_cmaf_url"].as_str().unwrap().to_owned();
    let report = play("tests/browser/hlsjs.mjs", url, vec![shot]).await;
    // Free the two cores before the checks and the next test (and the stream with them).
    drop(ffmpeg);
    assert_eq!(report["lowLatency"], true);
    assert_eq!(
        report["levels"],
        json!([360, 480, 720]),
        "hls.js sorts levels by bitrate"
    );
    let latencies = check_playback(&report);
    println!(
        "hls.js live latency (second half): mean {:.2} s, samples {latencies:?}",
        mean(&latencies)
    );
}

#[tokio::test]
async fn hlsjs_plays_over_https_with_every_request_on_http2() {
    let _g = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let https = format!("127.0.0.1:{}", common::free_port(false));
    // No certificate configured: the daemon's self-signed one (Chromium is told to take it).
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", common::KEY),
            ("LIVEPACK_HTTPS_ADDR", &https),
        ],
    );
    let (rec, ffmpeg) = live_stream(&d).await;
    let origin = format!("https://{https}");
    let url = rec["hls_cmaf_url"]
        .as_str()
        .unwrap()
        .replace(d.base.as_str(), &origin);
    let report = play("tests/browser/hlsjs.mjs", url, vec!["-".into(), origin]).await;
    drop(ffmpeg);
    assert_eq!(report["lowLatency"], true);
    let latencies = check_playback(&report);
    assert_eq!(
        report["protocols"],
        json!(["h2"]),
        "every request over HTTP/2: {report}"
    );
    println!(
        "hls.js over HTTPS/2 live latency (second half): mean {:.2} s, samples {latencies:?}",
        mean(&latencies)
    );
}

#[tokio::test]
async fn dashjs_plays_the_ll_dash_stream() {
    let _g = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let (rec, ffmpeg) = live_stream(&d).await;
    let url = rec["dash_url"].as_str().unwrap().to_owned();
    let report = play("tests/browser/dashjs.mjs", url, vec![]).await;
    drop(ffmpeg);
    assert!(
        report["samples"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["lowLatency"] == true),
        "{report}"
    );
    let latencies = check_playback(&report);
    println!(
        "dash.js live latency (second half): mean {:.2} s, samples {latencies:?}",
        mean(&latencies)
    );
}

/// Signed playback: hls.js and dash.js play a `secure_playback` stream from the signed URLs
/// its record returns, with no player configuration (the token is in the path, so every
/// relative URL of the playlists and the MPD carries it); the plain URL is refused.
#[tokio::test]
async fn hlsjs_and_dashjs_play_a_signed_stream() {
    let _g = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", common::KEY),
            ("LIVEPACK_PLAYBACK_SIGNING_KEY", "browser-playback-key-0123"),
        ],
    );
    let (rec, ffmpeg) =
        live_stream_of(&d, json!({"name": "signed", "secure_playback": true})).await;
    let id = rec["id"].as_i64().unwrap();
    let hls = rec["hls_cmaf_url"].as_str().unwrap().to_owned();
    let dash = rec["dash_url"].as_str().unwrap().to_owned();
    assert!(hls.contains("/t/") && dash.contains("/t/"), "{hls} {dash}");
    let plain = reqwest::get(d.url(&format!("/cmaf/{id}/master.m3u8")))
        .await
        .unwrap();
    assert_eq!(plain.status(), reqwest::StatusCode::FORBIDDEN);
    // WHEP: the plain endpoint is refused; the record's signed `whep_url` takes an offer.
    let offer = common::whip_offer_without_client().replace("a=sendonly", "a=recvonly");
    let client = reqwest::Client::new();
    let whep = |url: String| {
        client
            .post(url)
            .header("content-type", "application/sdp")
            .body(offer.clone())
            .send()
    };
    let r = whep(d.url(&format!("/whep/{id}"))).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::FORBIDDEN);
    let r = whep(rec["whep_url"].as_str().unwrap().to_owned())
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::CREATED);
    let session = d.url(r.headers()["location"].to_str().unwrap());
    let r = client.delete(session).send().await.unwrap();
    assert_eq!(
        r.status(),
        reqwest::StatusCode::OK,
        "a session needs no grant"
    );
    let hls_report = play("tests/browser/hlsjs.mjs", hls, vec![]).await;
    let dash_report = play("tests/browser/dashjs.mjs", dash, vec![]).await;
    drop(ffmpeg);
    let hls_latency = check_playback(&hls_report);
    let dash_latency = check_playback(&dash_report);
    println!(
        "signed playback: hls.js latency {:.2} s, dash.js {:.2} s",
        mean(&hls_latency),
        mean(&dash_latency)
    );
}

/// The player page's real-time mode: chosen in its menu, it plays the stream over WebRTC (WHEP)
/// instead of hls.js; with `?format=webrtc` on a server whose WebRTC is unreachable (its
/// candidates name a blackholed address: UDP and TCP blocked), it falls back to LL-HLS by itself
/// and says so.
#[tokio::test]
async fn player_page_plays_in_real_time_and_falls_back_to_ll_hls_by_itself() {
    let _g = ONE_AT_A_TIME.lock().await;
    let samples = |r: &Value| r["samples"].as_array().unwrap().clone();
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let (rec, ffmpeg) = live_stream(&d).await;
    let page = rec["iframe_url"].as_str().unwrap().to_owned();
    let report = driver(
        "tests/browser/realtime.mjs",
        vec![page, "16".into(), "switch".into()],
    )
    .await;
    drop(ffmpeg);
    assert_eq!(report["errors"], json!([]), "{report}");
    let s = samples(&report);
    assert!(s.iter().all(|x| x["modeShown"] == true), "{report}");
    assert!(
        s[..8].iter().any(|x| x["kind"] == "hls.js"),
        "the page starts in low latency (hls.js): {report}"
    );
    let rt: Vec<&Value> = s
        .iter()
        .filter(|x| x["kind"] == "webrtc" && x["pc"] == "connected")
        .collect();
    assert!(rt.len() >= 6, "real time after the switch: {report}");
    let advanced = rt.last().unwrap()["t"].as_f64().unwrap() - rt[0]["t"].as_f64().unwrap();
    assert!(advanced > 2.0, "the real-time picture advances: {report}");
    assert_eq!(rt.last().unwrap()["height"], 720, "{report}");

    let dir = tempdir();
    let d = Daemon::start_with(dir.path(), &[("LIVEPACK_WHIP_NAT_IPS", "192.0.2.1")]);
    let (rec, ffmpeg) = live_stream(&d).await;
    let page = format!("{}?format=webrtc", rec["iframe_url"].as_str().unwrap());
    let report = driver("tests/browser/realtime.mjs", vec![page, "20".into()]).await;
    drop(ffmpeg);
    assert_eq!(report["errors"], json!([]), "{report}");
    let s = samples(&report);
    assert!(
        s.iter().any(|x| x["kind"] == "webrtc"),
        "it tried: {report}"
    );
    let hls: Vec<&Value> = s.iter().filter(|x| x["kind"] == "hls.js").collect();
    assert!(hls.len() >= 6, "then played LL-HLS: {report}");
    assert!(
        hls.iter().any(|x| x["notice"]
            .as_str()
            .is_some_and(|n| n.contains("Real time unavailable"))),
        "and said why: {report}"
    );
    let advanced = hls.last().unwrap()["t"].as_f64().unwrap() - hls[0]["t"].as_f64().unwrap();
    assert!(advanced > 2.0, "{report}");
}

/// ffmpeg pushing the 720p fixture to `push_url` in real time, for two minutes: longer than
/// the players that follow take on a loaded machine (Chromium's start alone can take tens of
/// seconds); each test drops it once its players are done.
fn push(push_url: &str) -> Proc {
    media::push(push_url, "av-720p.flv", 20)
}

/// The player page driver (`tests/browser/player.mjs`) and its JSON event lines.
struct PlayerPage {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    _child: AsyncProc,
}

impl PlayerPage {
    fn open(url: &str, prefix: &str, events: u32) -> PlayerPage {
        use tokio::io::AsyncBufReadExt;
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("player");
        let mut child = AsyncProc::spawn(
            tokio::process::Command::new("node")
                .current_dir(root())
                .arg("tests/browser/player.mjs")
                .arg(url)
                .arg(&out)
                .arg(prefix)
                .arg(events.to_string())
                .stdout(Stdio::piped()),
            "node (installed by scripts/test)",
        );
        let lines = tokio::io::BufReader::new(child.child().stdout.take().unwrap()).lines();
        PlayerPage {
            lines,
            _child: child,
        }
    }

    async fn next(&mut self, within: Duration) -> Value {
        let line = tokio::time::timeout(within, self.lines.next_line())
            .await
            .expect("no state change on the player page in time")
            .unwrap()
            .expect("the player driver ended early");
        let v: Value = serde_json::from_str(&line).unwrap();
        let shot = std::fs::read(v["shot"].as_str().unwrap()).unwrap();
        assert!(shot.starts_with(b"\x89PNG"), "a PNG screenshot");
        v
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn player_page_shows_offline_goes_live_by_itself_and_plays_dash_and_360() {
    let _g = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = d
        .post("/streaming/streams", json!({"name": "player"}))
        .await
        .body;
    let id = rec["id"].as_i64().unwrap();
    let page = rec["iframe_url"].as_str().unwrap().to_owned();
    assert_eq!(page, format!("{}/player/{id}", d.base));

    // Not live: the page says so, and recovers by itself when the stream starts.
    let mut p = PlayerPage::open(&page, "hls", 3);
    let first = p.next(Duration::from_secs(30)).await;
    assert_eq!(
        (first["event"].as_str(), first["text"].as_str()),
        (Some("offline"), Some("Offline")),
        "{first}"
    );
    let ffmpeg = push(rec["push_url"].as_str().unwrap());
    let started = Instant::now();
    let live = p.next(Duration::from_secs(60)).await;
    println!(
        "player page live {:?} after the push started: {live}",
        started.elapsed()
    );
    assert_eq!(live["event"], "live", "{live}");
    assert!(
        live["t1"].as_f64().unwrap() >= live["t0"].as_f64().unwrap() + 2.0,
        "video advancing: {live}"
    );
    assert!(live["w"].as_u64().unwrap() > 0, "{live}");
    assert_eq!(live["sphere"], false, "regular projection is flat");
    // The publisher leaves: offline again, with the latest screenshot as the poster.
    let shot_url = rec["screenshot"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while reqwest::get(&shot_url).await.unwrap().status() != reqwest::StatusCode::OK {
        assert!(Instant::now() < deadline, "no screenshot while live");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(ffmpeg);
    let stopped = Instant::now();
    let off = p.next(Duration::from_secs(30)).await;
    println!(
        "player page offline {:?} after the push stopped",
        stopped.elapsed()
    );
    assert_eq!(off["event"], "offline", "{off}");
    assert!(
        off["poster"].as_str().unwrap().contains("last.jpg"),
        "poster: {off}"
    );

    // `?format=dash` plays through dash.js; a 360° projection renders on the WebGL sphere.
    // The same stream again, within its grace period: a new pipeline epoch, which the MPD
    // carries as a new Period (dash.js must follow it across the reconnect).
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"projection": "vr360"}}),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::OK, "{}", r.body);
    let ffmpeg = push(rec["push_url"].as_str().unwrap());
    let mut p = PlayerPage::open(&format!("{page}?format=dash"), "dash-vr360", 2);
    let mut live = p.next(Duration::from_secs(60)).await;
    if live["event"] == "offline" {
        live = p.next(Duration::from_secs(60)).await;
    }
    drop(ffmpeg);
    assert_eq!(live["event"], "live", "{live}");
    assert!(
        live["t1"].as_f64().unwrap() >= live["t0"].as_f64().unwrap() + 2.0,
        "{live}"
    );
    if live["webgl"] == true {
        assert_eq!(live["sphere"], true, "vr360 renders on the sphere: {live}");
    } else {
        println!("no WebGL in this Chromium: the 360° page fell back to flat video");
    }
    println!(
        "screenshots: {}",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("player")
            .display()
    );
}

/// One player's part of the controls report: a quality menu of Auto + the three rungs whose
/// choice shows in the video height, a latency that grows by the 20 s scrubbed back on the
/// timeline, and LIVE bringing it back under 3 s (the driver waits a bounded time for it).
fn check_controls(r: &Value, player: &str) {
    let rungs = &r["rungs"];
    let options: Vec<&str> = rungs["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert!(
        options[0].starts_with("Auto") && options[1..] == ["720p", "480p", "360p"],
        "{player}: the quality menu: {options:?}"
    );
    let chosen = rungs["chosen"].as_array().unwrap();
    for c in chosen {
        let label = c["label"].as_str().unwrap();
        assert_eq!(
            format!("{}p", c["height"]),
            label,
            "{player}: the video height after choosing {label}: {c}"
        );
    }
    // 360p chosen turns automatic off: the 720p choice after it is a change of height.
    assert_eq!(
        (chosen[1]["label"].as_str(), chosen[1]["from"].as_u64()),
        (Some("720p"), Some(360)),
        "{player}: {chosen:?}"
    );
    let edge = &r["edge"];
    assert_eq!(edge["edge"], true, "{player}: LIVE lit at the edge: {edge}");
    let at_edge = edge["latency"].as_f64().unwrap();
    let f = |v: &Value, k: &str| {
        (v[k].as_f64()).unwrap_or_else(|| panic!("{player}: no {k} in {v}; the report: {r}"))
    };
    // The click lands 20 s before where the edge was read (within a thumb's width on the
    // bar), and the picture may have played on from there before the driver looked.
    let scrubbed = &r["scrubbed"];
    let landed = f(scrubbed, "t") - (f(edge, "t") - 20.0);
    let looked = f(scrubbed, "wall") - f(edge, "wall");
    assert!(
        (-2.0..2.0 + looked).contains(&landed),
        "{player}: the timeline click 20 s back: {edge} → {scrubbed}"
    );
    // The latency grows by those 20 s, plus any time the picture then waited for its buffer
    // to fill (long on a loaded machine): never by more than the time that passed.
    let dvr = &r["dvr"];
    let behind = f(dvr, "latency");
    let waited = f(dvr, "wall") - f(edge, "wall");
    assert!(
        (at_edge + 15.0..at_edge + 25.0 + waited).contains(&behind),
        "{player}: 20 s back on the timeline, latency {at_edge} → {behind} in {waited:.1} s: {dvr}"
    );
    assert_eq!(
        (dvr["edge"].as_bool(), dvr["state"].as_str()),
        (Some(false), Some("live")),
        "{player}: LIVE unlit, the picture moving: {dvr}"
    );
    let back = &r["back"];
    let latency = back["latency"].as_f64().unwrap();
    assert!(
        back["edge"] == true && latency < 3.0,
        "{player}: LIVE pressed, back under 3 s: {back}"
    );
    assert!(
        back["after"]["t"].as_f64().unwrap() >= back["t"].as_f64().unwrap() + 1.0,
        "{player}: and plays on from there: {back}"
    );
    println!(
        "{player}: rungs {}; latency at the edge {at_edge} s, 20 s back {behind} s, after LIVE {latency} s ({} ms after the press; {} s a second later)",
        rungs["chosen"], back["ms"], back["after"]["latency"]
    );
}

/// The player page's controls on a live stream with DVR and three rungs, driven in
/// Chromium as a viewer would, with hls.js then dash.js: see [`check_controls`]; the keys (m,
/// space, arrow left, f) do what they say, taps show and hide the bar; a player library that
/// cannot load is an error in words. Screenshots of each state under `target/tmp/controls`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn player_page_controls_choose_a_rung_scrub_the_dvr_window_and_return_to_live() {
    let _g = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = d
        .post(
            "/streaming/streams",
            json!({"name": "controls", "dvr_enabled": true, "dvr_duration": 60}),
        )
        .await
        .body;
    // Six minutes of pushing outlasts the driver (its own bound: each of its waits is bounded,
    // and on a loaded machine they add up to several minutes).
    let ffmpeg = media::push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 60);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("controls");
    let page = rec["iframe_url"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let r = driver_within(
        "tests/browser/controls.mjs",
        vec![page, out.to_string_lossy().into_owned()],
        Duration::from_secs(330),
    )
    .await;
    drop(ffmpeg);
    println!(
        "controls driver: {:?}, phases (s from its start) {}",
        started.elapsed(),
        r["phases"]
    );
    assert_eq!(r["errors"], json!([]), "{r}");
    check_controls(&r["hls"], "hls.js");
    check_controls(&r["dash"], "dash.js");

    let keys = &r["keys"];
    assert_eq!(
        (&keys["unmuted"], &keys["muted"], &keys["playing"]),
        (&json!(true), &json!(true), &json!(true)),
        "m unmutes and mutes, space plays again: {keys}"
    );
    assert_eq!(
        (
            keys["paused"]["paused"].as_bool(),
            keys["paused"]["state"].as_str()
        ),
        (Some(true), Some("paused")),
        "space pauses, and the page says so rather than stalled: {keys}"
    );
    let (from, to) = (
        keys["left"]["from"].as_f64().unwrap(),
        keys["left"]["to"].as_f64().unwrap(),
    );
    assert!(
        (4.0..6.0).contains(&(from - to)),
        "arrow left: 5 s back: {keys}"
    );
    assert_eq!(
        (&keys["fullscreen"], &keys["window"]),
        (&json!(true), &json!(true)),
        "f: full screen and back: {keys}"
    );
    assert_eq!(
        r["touch"],
        json!({"idle": true, "shown": true, "hidden": true}),
        "a tap shows the idle bar, the next hides it"
    );
    let error = &r["error"];
    assert_eq!(
        (error["state"].as_str(), error["text"].as_str()),
        (Some("error"), Some("The player could not start")),
        "{error}"
    );
    assert!(
        error["hint"].as_str().unwrap().contains("hls.min.js"),
        "{error}"
    );
    for shot in r["shots"].as_array().unwrap() {
        let png = std::fs::read(shot.as_str().unwrap()).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{shot}");
    }
    println!("screenshots: {}", out.display());
}

/// A recorded video on its player page (`iframe_url`): hls.js (VOD master) and dash.js (static
/// MPD, SegmentBase) play it from the start, the picture advances, it plays on from a seek to
/// its middle, and a seek near the end reaches the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_video_plays_and_seeks_on_its_player_page() {
    let _g = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let video = record_ten_seconds(&d).await;
    let recorded = video["duration"].as_f64().unwrap() / 1000.0;
    let page = video["iframe_url"].as_str().unwrap().to_owned();
    for format in ["hls", "dash"] {
        assert_video_page_plays(&page, recorded, format).await;
    }
}

/// A `transcoded` recording of ten seconds of the pushed fixture: the video.
async fn record_ten_seconds(d: &Daemon) -> Value {
    let rec = d
        .post(
            "/streaming/streams",
            json!({"name": "vod", "auto_record": true, "record_type": "transcoded"}),
        )
        .await
        .body;
    let id = rec["id"].as_i64().unwrap();
    let ffmpeg = push(rec["push_url"].as_str().unwrap());
    media::wait_record(d, id, Duration::from_secs(30), |r| r["recording"] == true).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let video = media::stop_recording(d, id).await;
    drop(ffmpeg);
    video
}

/// A video's player page (`iframe_url`) in `format` (hls: hls.js; dash: dash.js) plays the
/// recorded length, advances, plays on from the middle and reaches the end.
async fn assert_video_page_plays(page: &str, recorded: f64, format: &str) {
    let v = driver(
        "tests/browser/vod.mjs",
        vec![format!("{page}?format={format}")],
    )
    .await;
    println!("{format} video page: {v}");
    assert!(v["errors"].as_array().unwrap().is_empty(), "{format}: {v}");
    let duration = v["duration"].as_f64().unwrap_or(0.0);
    assert!(
        (duration - recorded).abs() < 1.0,
        "{format}: the player's duration {duration} vs {recorded} recorded: {v}"
    );
    assert!(
        v["t1"].as_f64().unwrap() >= v["t0"].as_f64().unwrap() + 2.0,
        "{format}: the picture advances: {v}"
    );
    assert!(v["w"].as_u64().unwrap() > 0, "{format}: {v}");
    let (middle, t) = (
        v["middle"].as_f64().unwrap(),
        v["tMiddle"].as_f64().unwrap(),
    );
    assert!(
        t >= middle + 1.0 && t < middle + 5.0,
        "{format}: plays on from the middle: {v}"
    );
    assert_eq!(
        (v["ended"].as_bool(), v["state"].as_str()),
        (Some(true), Some("ended")),
        "{format}: a seek near the end reaches the end: {v}"
    );
}

/// A video in the object store (`storage_url`, moto's S3 server) plays on its page with
/// hls.js, served from the store once the local copy is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_video_in_the_object_store_plays_on_its_page_with_hlsjs() {
    let _g = ONE_AT_A_TIME.lock().await;
    let s3 = common::s3::S3::start().await;
    let dir = tempdir();
    let mut env = common::s3::S3::env(&s3.endpoint());
    env.push(("LIVEPACK_API_KEYS", common::KEY.to_owned()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let d = Daemon::start_with(dir.path(), &env);
    let video = record_ten_seconds(&d).await;
    let vid = video["id"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let local = dir.path().join(format!("data/videos/{vid}"));
    while d.get(&format!("/streaming/videos/{vid}")).await.body["status"] != "ready"
        || local.exists()
    {
        assert!(
            Instant::now() < deadline,
            "never uploaded and removed locally"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recorded = video["duration"].as_f64().unwrap() / 1000.0;
    assert_video_page_plays(video["iframe_url"].as_str().unwrap(), recorded, "hls").await;
}

/// The broadcast page driver (`tests/browser/broadcast.mjs`): one JSON line per state shown.
struct BroadcastPage {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    _child: AsyncProc,
}

impl BroadcastPage {
    fn open(url: &str) -> BroadcastPage {
        use tokio::io::AsyncBufReadExt;
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("broadcast");
        let mut child = AsyncProc::spawn(
            tokio::process::Command::new("node")
                .current_dir(root())
                .arg("tests/browser/broadcast.mjs")
                .arg(url)
                .arg(&out)
                .stdout(Stdio::piped()),
            "node (installed by scripts/test)",
        );
        let lines = tokio::io::BufReader::new(child.child().stdout.take().unwrap()).lines();
        BroadcastPage {
            lines,
            _child: child,
        }
    }

    /// The next line reporting `state`, skipping transitional ones (connecting, waiting, …).
    async fn until(&mut self, state: &str, within: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("the page did not show `{state}` in time"))
                .unwrap()
                .expect("the broadcast driver ended early");
            let v: Value = serde_json::from_str(&line).unwrap();
            println!("broadcast page: {v}");
            if v["event"] == state {
                return v;
            }
        }
    }
}

/// A broadcast's player page through its life: pending (its message), live (the pushed
/// stream plays), paused, finished with `show_dvr_after_finish` (the DVR window replays from
/// its start), finished without (a message), pending again with a poster; the open page
/// counts as one spectator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_page_goes_from_pending_to_live_to_a_dvr_replay() {
    let _g = ONE_AT_A_TIME.lock().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = d
        .post(
            "/streaming/streams",
            json!({"name": "stage cam", "dvr_enabled": true, "dvr_duration": 60}),
        )
        .await
        .body;
    let sid = rec["id"].as_i64().unwrap();
    let b = d
        .post(
            "/streaming/broadcasts",
            json!({"broadcast": {"name": "launch", "stream_ids": [sid],
                "pending_message": "Starts at eight"}}),
        )
        .await;
    assert_eq!(b.status, reqwest::StatusCode::CREATED, "{}", b.body);
    let id = b.body["id"].as_i64().unwrap();
    let path = format!("/streaming/broadcasts/{id}");
    let set = |fields: Value| {
        let (d, path) = (&d, &path);
        async move {
            let r = d.patch(path, json!({ "broadcast": fields })).await;
            assert_eq!(r.status, reqwest::StatusCode::OK, "{}", r.body);
        }
    };

    let mut p = BroadcastPage::open(b.body["iframe_url"].as_str().unwrap());
    let pending = p.until("pending", Duration::from_secs(60)).await;
    assert_eq!(pending["text"], "Starts at eight", "{pending}");
    let spectators = d.get(&format!("{path}/spectators")).await.body;
    assert_eq!(spectators, json!({"spectators_count": 1}));

    // Live: the pushed stream plays on the page.
    let ffmpeg = push(rec["push_url"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.get(&format!("/streaming/streams/{sid}")).await.body["transcoding_speed"].is_null() {
        assert!(Instant::now() < deadline, "stream never went live");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    set(json!({"status": "live"})).await;
    let live = p.until("live", Duration::from_secs(60)).await;
    assert!(
        live["t1"].as_f64().unwrap() >= live["t0"].as_f64().unwrap() + 2.0,
        "the live picture advances: {live}"
    );
    assert!(live["w"].as_u64().unwrap() > 0, "{live}");

    set(json!({"status": "paused"})).await;
    let paused = p.until("paused", Duration::from_secs(20)).await;
    assert_eq!(paused["text"], "The broadcast is paused");

    // Finished with the DVR shown: the window replays from its start.
    set(json!({"status": "finished", "show_dvr_after_finish": true})).await;
    let replay = p.until("playing", Duration::from_secs(60)).await;
    drop(ffmpeg);
    assert_eq!(
        (replay["broadcast"].as_str(), replay["replay"].as_str()),
        (Some("finished"), Some("dvr")),
        "{replay}"
    );
    assert!(
        replay["t1"].as_f64().unwrap() >= replay["t0"].as_f64().unwrap() + 2.0,
        "the replay advances: {replay}"
    );
    assert!(
        replay["t0"].as_f64().unwrap() < 10.0,
        "the replay starts at the window's start: {replay}"
    );

    // Without the DVR: a message.
    set(json!({"show_dvr_after_finish": false})).await;
    let finished = p.until("finished", Duration::from_secs(20)).await;
    assert_eq!(finished["text"], "The broadcast has finished");

    // Back to pending with a poster (any http(s) image; here the stream's last screenshot,
    // still served while its outputs linger): the page shows it behind the message.
    let poster = rec["screenshot"].as_str().unwrap().to_owned();
    set(json!({"status": "pending", "poster": poster})).await;
    let pending = p.until("pending", Duration::from_secs(20)).await;
    assert!(
        pending["poster"].as_str().unwrap().contains("last.jpg"),
        "{pending}"
    );
    println!(
        "screenshots: {}",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("broadcast")
            .display()
    );
}

/// The API reference a browser reads at `/docs/api`: every operation of `/openapi.json`
/// rendered by Swagger UI, with nothing fetched from another origin (it works offline).
#[tokio::test]
async fn the_api_reference_page_renders_every_operation_offline() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let doc: Value = serde_json::from_str(include_str!("../../src/http/api/openapi.json")).unwrap();
    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| {
            ["get", "put", "post", "delete", "patch"]
                .iter()
                .filter(|m| item.get(**m).is_some())
                .count()
        })
        .sum();
    let report = driver(
        "tests/browser/apidocs.mjs",
        vec![d.url("/docs/api"), operations.to_string()],
    )
    .await;
    assert_eq!(report["errors"], json!([]), "{report}");
    assert_eq!(report["operations"], json!(operations), "{report}");
    let summaries = report["summaries"].to_string();
    assert!(
        summaries.contains("This API's reference in a browser"),
        "{report}"
    );
    let origin = d.url("");
    assert_eq!(
        report["origins"],
        json!([origin.trim_end_matches('/')]),
        "the page fetched from another origin"
    );
}
