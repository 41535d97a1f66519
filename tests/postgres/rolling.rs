//! A rolling restart: one node of two, behind nginx with the repo's configurations (HTTP for
//! viewers, its stream module for encoders), told to stop (SIGTERM) while it serves a recorded
//! stream with a webhook. The encoder, reconnecting in a loop through nginx, lands on the other
//! node; an hls.js viewer through nginx keeps playing (its longest stall is printed); every
//! webhook event arrives once; the video the stopped node made is ready and whole up to the
//! stop; the node started again rejoins.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{at, media, via_host};
use crate::common::pg::PgServer;
use crate::common::proc::{AsyncProc, Proc};
use crate::common::webhooks::{assert_each_once, of_stream, Receiver};
use crate::common::{lasting_port, metrics, root, tempdir, Daemon, KEY};

/// A longest stall above this fails the test; what it was is printed either way.
const STALL_BOUND: Duration = Duration::from_secs(15);
/// How long the viewer watches: through the stop, the move and well past them.
const VIEWER_SECS: u64 = 50;
/// The stream runs this long on the first node before the stop, the viewer this long of it.
const BEFORE_STOP: Duration = Duration::from_secs(45);
const WATCHED_BEFORE_STOP: Duration = Duration::from_secs(20);

/// A node's fixed ports: nginx names them, so a restarted node must come back on them (below
/// the ephemeral range: no other test's daemon takes them while it is down).
#[derive(Clone, Copy)]
struct Ports {
    http: u16,
    rtmp: u16,
}

impl Ports {
    fn free() -> Ports {
        Ports {
            http: lasting_port(),
            rtmp: lasting_port(),
        }
    }
}

/// A node on `ports`; its grace period is short, so the stream ends soon after the encoder.
fn node(dir: &Path, url: &str, id: &str, ports: Ports) -> Daemon {
    let http = format!("127.0.0.1:{}", ports.http);
    let rtmp = format!("127.0.0.1:{}", ports.rtmp);
    Daemon::start_with(
        dir,
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_DATABASE_URL", url),
            ("LIVEPACK_NODE_ID", id),
            ("LIVEPACK_HTTP_ADDR", &http),
            ("LIVEPACK_RTMP_ADDR", &rtmp),
            ("LIVEPACK_GRACE_PERIOD_SECS", "3"),
        ],
    )
}

/// An encoder that publishes again whenever its connection ends, as encoders do (each attempt
/// an ffmpeg run, half a second apart); its runs' errors go to `log`.
fn encoder_loop(url: &str, log: &Path) -> Proc {
    let fixture = media::fixture("av-720p.flv");
    let script = format!(
        "while true; do echo \"attempt $(date +%s.%N)\" >> '{log}'; \
         ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i '{fixture}' -c copy -f flv \
         '{url}' 2>> '{log}'; sleep 0.5; done",
        log = log.display(),
        fixture = fixture.display(),
    );
    Proc::spawn(
        Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "bash",
    )
}

/// Whether `d` serves stream `id` now (it has the stream's session).
async fn serves(d: &Daemon, id: i64) -> bool {
    metrics::scrape(d)
        .await
        .0
        .get(&format!("livepack_stream_live{{stream=\"{id}\"}}"))
        .is_some_and(|v| *v > 0.0)
}

/// hls.js following `url` for `secs` (tests/browser/follow.mjs); its report once it is done.
async fn viewer(url: String, secs: u64) -> Value {
    use tokio::io::AsyncReadExt;
    let mut p = AsyncProc::spawn(
        tokio::process::Command::new("node")
            .current_dir(root())
            .arg("tests/browser/follow.mjs")
            .arg(url)
            .arg(secs.to_string())
            .stdout(Stdio::piped()),
        "node (installed by scripts/test)",
    );
    let mut out = String::new();
    let mut stdout = p.child().stdout.take().unwrap();
    let read = tokio::time::timeout(
        Duration::from_secs(secs + 120),
        stdout.read_to_string(&mut out),
    )
    .await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "the viewer did not report: {out}"
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The stream's videos as `d` lists them, oldest first.
async fn videos(d: &Daemon, id: i64) -> Vec<Value> {
    let r = d
        .get(&format!("/streaming/videos?stream_id={id}&per_page=100"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mut v = r.body.as_array().unwrap().clone();
    v.sort_by_key(|v| v["id"].as_i64());
    v
}

/// `format.duration` of a file or URL, by ffprobe.
fn duration(url: &str) -> f64 {
    let probed = media::ffprobe_with(&["-show_entries", "format=duration"], url);
    probed["format"]["duration"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no duration: {probed}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_restart_moves_the_stream_and_loses_nothing() {
    let _heavy = media::heavy().await;
    let server = PgServer::start();
    let url = server.create_database();
    let (dir_a, dir_b, edge_dir, hooks) = (tempdir(), tempdir(), tempdir(), tempdir());
    let (ports_a, ports_b) = (Ports::free(), Ports::free());
    let a = node(dir_a.path(), &url, "node-a", ports_a);
    let b = node(dir_b.path(), &url, "node-b", ports_b);
    let (_edge, edge) =
        crate::common::nginx::in_front(edge_dir.path(), &[&a.base, &b.base], "unused-key");
    let rtmp_nodes = [
        format!("127.0.0.1:{}", ports_a.rtmp),
        format!("127.0.0.1:{}", ports_b.rtmp),
    ];
    let (_ingest, ingest) =
        crate::common::nginx::ingest_in_front(edge_dir.path(), &[&rtmp_nodes[0], &rtmp_nodes[1]]);

    let receiver = Receiver::start(hooks.path(), 0, &[]);
    let created = a
        .post("/streaming/webhooks", json!({"url": receiver.url()}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    receiver.set_secret(created.body["secret"].as_str().unwrap());
    let webhook = created.body["id"].as_i64().unwrap();
    let rec = media::create(&a, json!({"name": "rolling", "auto_record": true})).await;
    let id = rec["id"].as_i64().unwrap();

    // The encoder publishes through nginx; whichever node it lands on is the one restarted.
    let log = hooks.path().join("encoder.log");
    let encoder = encoder_loop(&at(rec["push_url"].as_str().unwrap(), &ingest), &log);
    media::wait_record(&a, id, Duration::from_secs(30), |r| {
        r["live"] == true && r["recording"] == true
    })
    .await;
    let live_since = Instant::now();
    let (first, second, first_dir, first_ports, first_id) = if serves(&a, id).await {
        (a, b, dir_a.path(), ports_a, "node-a")
    } else {
        assert!(serves(&b, id).await, "neither node serves the stream");
        (b, a, dir_b.path(), ports_b, "node-b")
    };
    let master = via_host(&rec, "hls_cmaf_url", &edge);
    media::wait_segments(&master, 2).await;
    // The stream's numbering starts at a clock-derived number (the window has not slid yet).
    let top = via_host(&rec, "hls_cmaf_url", &first.base).replace("master.m3u8", "720p/index.m3u8");
    let first_msn = media::hls::first_msn(&media::hls::media(&media::text(&top).await.1));
    tokio::time::sleep((BEFORE_STOP - WATCHED_BEFORE_STOP).saturating_sub(live_since.elapsed()))
        .await;
    let watching = tokio::spawn(viewer(master.clone(), VIEWER_SECS));
    // Chromium's start, then a stretch of steady playback before the stop.
    tokio::time::sleep(BEFORE_STOP.saturating_sub(live_since.elapsed())).await;

    // The media the node has packaged by the stop (its complete segments, counted from the
    // stream's first: a machine too loaded to transcode in real time packages less than the
    // time that passed, and records less too).
    let listed = media::hls::media(&media::text(&top).await.1);
    let packaged = {
        let each: f64 = listed
            .segments
            .iter()
            .map(|s| f64::from(s.duration))
            .sum::<f64>()
            / listed.segments.len() as f64;
        (media::hls::next_msn(&listed) - first_msn) as f64 * each
    };
    let mut first = first;
    let stopped_at = Instant::now();
    let recorded = live_since.elapsed();
    first.sigterm();
    let exited = tokio::task::spawn_blocking(move || {
        let status = first.wait_exit(Duration::from_secs(30));
        (status, stopped_at.elapsed())
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !serves(&second, id).await {
        assert!(
            Instant::now() < deadline,
            "the encoder never landed on the other node:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let moved = stopped_at.elapsed();
    // The other node goes on numbering past the stopped node's segments and discontinuities,
    // so players follow one playlist and a cache never mixes the two nodes' objects.
    let there = via_host(&rec, "hls_cmaf_url", &second.base);
    media::wait_segments(&there, 1).await;
    let there = there.replace("master.m3u8", "720p/index.m3u8");
    let continued = media::hls::media(&media::text(&there).await.1);
    assert!(
        media::hls::first_msn(&continued) >= media::hls::next_msn(&listed),
        "numbering went back: {continued:?} after {listed:?}"
    );
    // It bridges from where the stopped node left its viewers: the numbers that node left
    // unused are gap segments in its last discontinuity, then this node's discontinuity.
    let gap = |s: &m3u8_rs::MediaSegment| s.unknown_tags.iter().any(|t| t.tag == "X-GAP");
    let bridge = continued.segments.iter().take_while(|s| gap(s)).count();
    let last_cc = listed.discontinuity_sequence
        + listed.segments.iter().filter(|s| s.discontinuity).count() as u64;
    assert!(
        (1..=8).contains(&bridge)
            && continued.discontinuity_sequence == last_cc
            && continued.segments[bridge].discontinuity
            && !continued.segments[bridge..].iter().any(gap),
        "no bridge from the stopped node's cc {last_cc}: {continued:?}"
    );
    let (status, took) = exited.await.unwrap();
    let status = status.expect("the stopped node did not exit within 30 s");
    assert!(status.success(), "{status:?}");
    println!(
        "rolling restart: {first_id} exited 0 {took:?} after SIGTERM; the stream was live on \
         the other node {moved:?} after it"
    );

    let report = watching.await.unwrap();
    let longest = report["longestStall"].as_f64().unwrap();
    println!(
        "rolling restart: hls.js through nginx, longest stall {longest:.2} s; stalls {}, fatal \
         errors {}, recoveries {} (of them after a 10 s stall: {})",
        report["stalls"], report["errors"], report["recoveries"], report["watchdogs"]
    );
    assert!(report["width"].as_u64().unwrap() > 0, "{report}");
    // Through the move every playlist is answered: the stopping node sends its viewers on, the
    // other holds their requests until the stream is there (no 404 that ends a player's show,
    // no 502 that makes nginx mark a healthy node failed and answer "no live upstreams").
    let refused: Vec<&Value> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            let what = e["what"].as_str().unwrap_or_default();
            ["levelLoadError", "audioTrackLoadError", "manifestLoadError"]
                .iter()
                .any(|kind| what.ends_with(kind))
        })
        .collect();
    assert!(
        refused.is_empty(),
        "playlists refused: {refused:?}\n{report}"
    );
    assert!(
        longest <= STALL_BOUND.as_secs_f64(),
        "a stall of {longest:.2} s: {report}"
    );
    // Stock hls.js follows the bridge by itself: the player page's 10 s stall watchdog, which
    // gives a stuck player a new start, was not needed.
    assert_eq!(
        report["watchdogs"], 0,
        "hls.js stalled until the watchdog: {report}"
    );
    let played_until = report["playedUntil"].as_f64().unwrap();
    assert!(
        played_until >= VIEWER_SECS as f64 - 3.0,
        "the picture stopped at {played_until:.1} s of {VIEWER_SECS}: {report}"
    );

    // The encoder stops; the stream ends on the other node and its video is finalised there.
    drop(encoder);
    let wait = Duration::from_secs(60);
    media::wait_record(&second, id, wait, |r| r["live"] == false).await;
    let deadline = Instant::now() + wait;
    let made = loop {
        let v = videos(&second, id).await;
        if v.len() == 2 && v.iter().all(|v| v["status"] == "ready") {
            break v;
        }
        assert!(Instant::now() < deadline, "videos: {v:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // The stopped node's video: ready, on its disk, whole up to the stop: at least what was
    // packaged (less up to the segment in progress when the recording began), at most the
    // time that passed (and the stop's last part).
    let stopped_video = &made[0];
    let vid = stopped_video["id"].as_i64().unwrap();
    let file = first_dir.join(format!("data/videos/{vid}/source-video.mp4"));
    assert!(file.is_file(), "{} missing", file.display());
    let secs = duration(file.to_str().unwrap());
    let listed = stopped_video["duration"].as_u64().unwrap() as f64 / 1000.0;
    println!(
        "rolling restart: the stopped node's video: {secs:.2} s (listed {listed:.2} s); \
         {packaged:.1} s packaged there in {recorded:?}"
    );
    assert!((secs - listed).abs() < 1.0, "{secs} s vs listed {listed} s");
    assert!(
        secs >= packaged - 2.5 && secs <= recorded.as_secs_f64() + 2.0,
        "{secs} s recorded; {packaged:.1} s packaged in {recorded:?}"
    );

    // Every event once; none lost: what the outbox holds is exactly what arrived.
    let got = receiver
        .until(wait, |e| {
            e["type"] == "video_ready" && e["data"]["video_id"] == made[1]["id"]
        })
        .await;
    assert_each_once(&got);
    let ours = of_stream(&got, id);
    let kinds: Vec<&str> = ours.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for (kind, times) in [
        ("live_started", 2),
        ("recording_started", 2),
        ("video_ready", 2),
    ] {
        assert_eq!(
            kinds.iter().filter(|k| **k == kind).count(),
            times,
            "{kind}: {kinds:?}"
        );
    }
    let deliveries = |status: &'static str| {
        let second = &second;
        async move {
            let r = second
                .get(&format!(
                    "/streaming/webhooks/{webhook}/deliveries?status={status}&per_page=100"
                ))
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            r.body.as_array().unwrap().clone()
        }
    };
    let deadline = Instant::now() + wait;
    loop {
        let pending = deliveries("pending").await;
        if pending.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still pending: {pending:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(deliveries("failed").await, Vec::<Value>::new());
    let mut stored: Vec<i64> = deliveries("delivered")
        .await
        .iter()
        .map(|d| d["event_id"].as_i64().unwrap())
        .collect();
    let mut arrived: Vec<i64> = receiver
        .accepted()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    stored.sort_unstable();
    arrived.sort_unstable();
    assert_eq!(stored, arrived, "the outbox and the receiver disagree");
    println!(
        "rolling restart: {} webhook events, each delivered once ({} of the stream: {kinds:?})",
        arrived.len(),
        ours.len()
    );

    // The stopped node started again on its ports rejoins: it answers for the stream, and the
    // video on its disk plays through nginx.
    let again = node(first_dir, &url, first_id, first_ports);
    let shown = media::record(&again, id).await;
    assert_eq!(shown["id"], id, "{shown}");
    let video_master = via_host(stopped_video, "hls_url", &edge);
    let (status, text) = media::text(&video_master).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let through_edge = duration(&video_master);
    assert!(
        (through_edge - secs).abs() < 1.5,
        "{through_edge} s through nginx, {secs} s on disk"
    );
    drop((again, second));
}
