//! WHEP playback end to end: headless Chromium plays `whep_url` (the default rung and a chosen
//! one at once), hears audio, counts in the record and `/metrics`, DELETE ends a session; the
//! stream's end ends the others; a viewer without UDP plays over ICE-TCP.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::common::proc::Proc;
use super::common::{metrics, tempdir, Daemon};
use super::media::{self, create, wait_record};
use super::{mux_addr, whip_daemon, Browser};

/// A stream pushed over RTMP (720p source: rungs up to 720p), live with its rungs encoding.
async fn live_stream(d: &Daemon, name: &str, loops: u32) -> (i64, Value, Proc) {
    let rec = create(d, json!({"name": name})).await;
    let id = rec["id"].as_i64().unwrap();
    let pusher = media::push(rec["push_url"].as_str().unwrap(), "av-720p.flv", loops);
    let live = wait_record(d, id, Duration::from_secs(20), |r| {
        r["live"] == true && !r["transcoding_speed"].is_null()
    })
    .await;
    media::wait_segments(live["hls_cmaf_url"].as_str().unwrap(), 1).await;
    (id, live, pusher)
}

fn viewer(url: &str, transport: &str) -> Browser {
    Browser::driver(&["tests/whip/whep.mjs", url, transport, "av"])
}

/// The viewer's stats once its picture has advanced past `after` seconds.
async fn advancing(v: &mut Browser, after: f64) -> Value {
    for _ in 0..15 {
        let s = v.event("stats", Duration::from_secs(5)).await;
        if s["time"].as_f64().unwrap_or(0.0) > after
            && s["framesDecoded"].as_u64().unwrap_or(0) > 25
        {
            return s;
        }
    }
    panic!("the viewer's picture did not advance past {after} s");
}

async fn whep_viewers(d: &Daemon, id: i64, n: usize) {
    wait_record(d, id, Duration::from_secs(10), |r| r["whep_viewers"] == n).await;
    let m = metrics::scrape(d).await;
    assert_eq!(m.stream("livepack_stream_whep_viewers", id), n as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_plays_whep_the_default_rung_and_a_chosen_one_and_delete_ends_a_session() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = whip_daemon(dir.path());
    let (id, live, pusher) = live_stream(&d, "whep", 6).await;
    let url = live["whep_url"].as_str().unwrap().to_owned();
    assert_eq!(url, format!("{}/whep/{id}", d.base));
    let rungs = live["transcoded_qualities"].clone();
    println!("rungs {rungs}");
    // What WHEP sends is the rungs' H.264 as encoded: without B-frames (x264 zerolatency), so
    // presentation order is decode order and browsers' real-time decoders take it as is.
    let probe = media::ffprobe(live["hls_cmaf_url"].as_str().unwrap());
    let videos: Vec<&Value> = probe["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["codec_type"] == "video")
        .collect();
    assert_eq!(videos.len(), 3, "{probe}");
    assert!(videos.iter().all(|v| v["has_b_frames"] == 0), "{probe}");

    let mut first = viewer(&url, "udp");
    let created = first.event("created", Duration::from_secs(30)).await;
    assert_eq!(created["status"], 201, "{created}");
    assert!(created["location"]
        .as_str()
        .unwrap()
        .starts_with(&format!("/whep/{id}/")));
    assert_eq!(created["contentType"], "application/sdp");
    first.event("connected", Duration::from_secs(20)).await;
    let playing = first.event("playing", Duration::from_secs(20)).await;
    println!("WHEP first picture {} ms after the POST", playing["ms"]);
    let s = advancing(&mut first, 2.0).await;
    assert_eq!(
        (s["width"].as_u64(), s["height"].as_u64()),
        (Some(1280), Some(720)),
        "{s}"
    );
    assert_eq!(s["audioTracks"], 1, "{s}");
    // The format the picture came in is one whose profile covers the rung's x264 High stream:
    // High itself, or (Debian's Chromium offers no High) High 4:4:4, whose decoders take it.
    let fmtp = s["codec"].as_str().unwrap_or_default();
    assert!(fmtp.contains("packetization-mode=1"), "{s}");
    assert!(
        ["profile-level-id=64", "profile-level-id=f4"]
            .iter()
            .any(|p| fmtp.contains(p)),
        "offered {}, sent as {fmtp}",
        created["offered"]
    );
    assert!(
        s["audioPackets"].as_u64().unwrap_or(0) > 20,
        "audio flows: {s}"
    );

    let mut second = viewer(&format!("{url}?quality=360p"), "udp");
    assert_eq!(
        second.event("created", Duration::from_secs(30)).await["status"],
        201
    );
    second.event("playing", Duration::from_secs(20)).await;
    let s2 = advancing(&mut second, 2.0).await;
    assert_eq!(
        (s2["width"].as_u64(), s2["height"].as_u64()),
        (Some(640), Some(360)),
        "{s2}"
    );
    whep_viewers(&d, id, 2).await;
    // The first viewer kept playing meanwhile.
    let later = advancing(&mut first, s["time"].as_f64().unwrap() + 1.0).await;
    println!("viewer stats {later}");

    first.command("delete").await;
    assert_eq!(
        first.event("deleted", Duration::from_secs(10)).await["status"],
        200
    );
    whep_viewers(&d, id, 1).await;

    // The stream ends (pusher gone, grace over): the other session is ended by the server.
    drop(pusher);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == false).await;
    whep_viewers(&d, id, 0).await;
    for _ in 0..20 {
        let s = second.event("stats", Duration::from_secs(5)).await;
        if s["state"] != "connected" {
            return;
        }
    }
    panic!("the viewer's connection outlived the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whep_viewer_without_udp_plays_over_ice_tcp() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = whip_daemon(dir.path());
    let tcp = mux_addr(&d, "tcp");
    let (_id, live, _pusher) = live_stream(&d, "whep-tcp", 3).await;
    let mut v = viewer(live["whep_url"].as_str().unwrap(), "tcp");
    let created = v.event("created", Duration::from_secs(30)).await;
    assert_eq!(created["status"], 201, "{created}");
    let connected = v.event("connected", Duration::from_secs(20)).await;
    assert_eq!(connected["remote"]["protocol"], "tcp", "{connected}");
    assert_eq!(connected["remote"]["port"], tcp.port(), "{connected}");
    v.event("playing", Duration::from_secs(20)).await;
    let s = advancing(&mut v, 2.0).await;
    assert_eq!(s["height"], 720, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whep_refusals_are_clear() {
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", super::common::KEY),
            ("LIVEPACK_PLAYBACK_SIGNING_KEY", "whep-playback-key-0123"),
        ],
    );
    let rec = create(&d, json!({"name": "offline"})).await;
    let url = rec["whep_url"].as_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let post = |url: String, ct: &'static str, body: String| {
        let client = client.clone();
        async move {
            let r = client
                .post(url)
                .header("content-type", ct)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let offer = super::common::whip_offer_without_client();
    let (status, body) = post(url.clone(), "application/sdp", offer.clone()).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_live")),
        "{body}"
    );
    let (status, _) = post(url.clone(), "text/plain", offer.clone()).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, body) = post(url.clone(), "application/sdp", "v=0\r\nbogus".into()).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_sdp")),
        "{body}"
    );
    let audio_only: String = offer.split("m=video").next().unwrap().to_owned();
    let (status, body) = post(url.clone(), "application/sdp", audio_only).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_ACCEPTABLE, Some("unsupported_codecs")),
        "{body}"
    );
    let (status, _) = post(
        format!("{}/whep/abc", d.base),
        "application/sdp",
        offer.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let r = client.delete(format!("{url}/0123")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // Signed playback: a secure stream's `whep_url` carries the grant (the gate's 403 for a
    // live stream without one is tested with the signed players, tests/browser).
    let secure = create(&d, json!({"name": "signed", "secure_playback": true})).await;
    let sid = secure["id"].as_i64().unwrap();
    let signed = secure["whep_url"].as_str().unwrap().to_owned();
    assert!(signed.contains(&format!("/whep/{sid}/t/")), "{signed}");
    let (status, body) = post(signed, "application/sdp", offer.clone()).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_live")),
        "{body}"
    );
    let r = client
        .request(reqwest::Method::OPTIONS, url.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
}

/// aiortc (Python, PyAV's decoder) as a WHEP client: a second WebRTC stack, not Chromium's.
/// Its picture loss indications reach the rung's encoder: each is a keyframe request (the log's
/// count), and keyframes arrive beyond the GOP's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_independent_webrtc_stack_plays_whep_too() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = Daemon::start_logged(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", super::common::KEY),
            ("LIVEPACK_WHIP_UDP_ADDRS", "127.0.0.1:0"),
            ("RUST_LOG", "livepack=info"),
        ],
    );
    let (id, live, _pusher) = live_stream(&d, "whep-aiortc", 3).await;
    let url = format!("{}?quality=480p", live["whep_url"].as_str().unwrap());
    let python = super::common::root().join("target/pytools/bin/python");
    let out = tokio::process::Command::new(&python)
        .arg(super::common::root().join("tests/whep_client.py"))
        .args([url.as_str(), "5", "3"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(40), out)
        .await
        .expect("the aiortc client ended")
        .unwrap_or_else(|e| panic!("{} (installed by scripts/test): {e}", python.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let r: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    println!("aiortc viewer: {r}");
    assert_eq!(r["status"], 201, "{r}");
    assert_eq!(
        (r["width"].as_u64(), r["height"].as_u64()),
        (Some(854), Some(480)),
        "{r}"
    );
    // 5 s of 25 fps: most pictures decoded (the first waits for the keyframe asked on join).
    assert!(r["video_frames"].as_u64().unwrap() >= 75, "{r}");
    assert!(r["audio_frames"].as_u64().unwrap() >= 100, "{r}");
    assert_eq!(r["delete_status"], 200, "{r}");
    whep_viewers(&d, id, 0).await;
    // 3 PLIs 700 ms apart (the hub forwards one per 500 ms): 3 requests besides the join's.
    let log = std::fs::read_to_string(Daemon::log_file(dir.path())).unwrap();
    // Without its colours, if the log has them.
    let mut log = log.chars();
    let log: String = std::iter::from_fn(|| loop {
        match log.next()? {
            '\u{1b}' => while log.next().is_some_and(|c| c != 'm') {},
            c => return Some(c),
        }
    })
    .collect();
    let left = log
        .lines()
        .find(|l| l.contains("WHEP viewer left"))
        .unwrap_or_else(|| panic!("no session end in the log:\n{log}"));
    let requests: u64 = left
        .split("keyframe_requests=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{left}"));
    assert!(requests >= 4, "the PLIs were not forwarded: {left}");
    // Over 5 s the 2 s GOP alone gives ~3 keyframes.
    assert!(r["keyframes"].as_u64().unwrap() >= 5, "{r}");
}

/// A stream's viewer cap: the next offer gets 503 with Retry-After until a session ends; an
/// unknown rung is named in the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_stream_viewer_cap_and_an_unknown_rung_are_refused_clearly() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", super::common::KEY),
            ("LIVEPACK_WHIP_UDP_ADDRS", "127.0.0.1:0"),
            ("LIVEPACK_WHEP_MAX_SESSIONS_PER_STREAM", "1"),
        ],
    );
    let (_id, live, _pusher) = live_stream(&d, "whep-cap", 2).await;
    let url = live["whep_url"].as_str().unwrap().to_owned();
    // A viewer's offer (recvonly) from no real client: its session waits for ICE.
    let offer = super::common::whip_offer_without_client().replace("a=sendonly", "a=recvonly");
    let client = reqwest::Client::new();
    let post = |url: String| {
        let (client, offer) = (client.clone(), offer.clone());
        async move {
            client
                .post(url)
                .header("content-type", "application/sdp")
                .body(offer)
                .send()
                .await
                .unwrap()
        }
    };
    let first = post(url.clone()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let location = first.headers()["location"].to_str().unwrap().to_owned();
    let answer = first.text().await.unwrap();
    assert!(answer.contains("a=sendonly"), "{answer}");
    let second = post(url.clone()).await;
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.headers()["retry-after"], "5");
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_sessions", "{body}");
    let r = client.delete(d.url(&location)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let third = post(url.clone()).await;
    assert_eq!(third.status(), StatusCode::CREATED);
    let r = client.delete(d.url(&location)).send().await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "a session is deleted once"
    );
    let location = third.headers()["location"].to_str().unwrap().to_owned();
    let r = client.delete(d.url(&location)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    let unknown = post(format!("{url}?quality=4k")).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(
        (
            body["error"]["code"].as_str(),
            body["error"]["field"].as_str()
        ),
        (Some("unknown_quality"), Some("quality")),
        "{body}"
    );
    assert!(
        body["error"]["message"].as_str().unwrap().contains("720p"),
        "{body}"
    );
}
