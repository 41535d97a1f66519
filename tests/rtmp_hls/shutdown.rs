//! SIGTERM with a publisher connected, a newcomer waiting to publish and a blocking playlist
//! request in flight: the publisher is told and closed, the newcomers (RTMP, SRT, HTTP) are
//! refused with their protocol's "unavailable", the request completes, and the daemon exits 0
//! within its shutdown timeout.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{rtmp, srt, tempdir, Daemon, KEY};
use crate::media::*;

/// Short enough that a stop which does not end is caught here, long enough for a loaded machine.
const SHUTDOWN_TIMEOUT_SECS: u64 = 20;
/// The refusing window, at least: this daemon is done with its stream in about 0.1 s, and
/// without the grace its ports would close before the newcomers below arrive.
const ACCEPT_GRACE_SECS: u64 = 5;

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_tells_publishers_refuses_newcomers_and_lets_requests_finish() {
    let _g = heavy().await;
    let dir = tempdir();
    let timeout = SHUTDOWN_TIMEOUT_SECS.to_string();
    let grace = ACCEPT_GRACE_SECS.to_string();
    let mut d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_SHUTDOWN_TIMEOUT_SECS", &timeout),
            ("LIVEPACK_SHUTDOWN_ACCEPT_GRACE_SECS", &grace),
        ],
    );
    let rec = create(&d, json!({"name": "stopping"})).await;
    let id = rec["id"].as_i64().unwrap();
    let push_url = rec["push_url"].as_str().unwrap().to_owned();
    let pusher = push(&push_url, "av-720p.flv", 20);
    wait_record(&d, id, Duration::from_secs(30), |r| {
        r["live"] == true && r["transcoding_speed"].is_number()
    })
    .await;
    let master = rec["hls_cmaf_url"].as_str().unwrap().to_owned();
    wait_segments(&master, 2).await;
    let top = master.replace("master.m3u8", "720p/index.m3u8");
    let ready = reqwest::get(d.url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);

    // A newcomer connected before the stop, to publish after it; a blocking reload for the
    // third part of the next segment, held at the origin for a second or more.
    let (app, key) = rtmp::app_and_key(&push_url);
    // As ffmpeg sends it: everything after `streamid=`.
    let srt_url = rec["push_url_srt"].as_str().unwrap();
    let srt_stream_id = srt_url.split_once("streamid=").unwrap().1.to_owned();
    let newcomer = rtmp::connect(&d.rtmp, &app).await;
    let (_, playlist) = text(&top).await;
    let next = hls::next_msn(&hls::media(&playlist)) + 1;
    let blocking = tokio::spawn({
        let url = format!("{top}?_HLS_msn={next}&_HLS_part=2");
        async move {
            let r = reqwest::get(url).await.unwrap();
            (r.status(), r.text().await.unwrap())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !blocking.is_finished(),
        "the reload was answered before the stop"
    );

    let stopped_at = Instant::now();
    d.sigterm();
    // Not ready from now on, alive until the exit.
    let deadline = Instant::now() + Duration::from_secs(5);
    let readyz = loop {
        let r = reqwest::get(d.url("/readyz")).await.unwrap();
        if r.status() == StatusCode::SERVICE_UNAVAILABLE {
            break r;
        }
        assert!(Instant::now() < deadline, "/readyz still {}", r.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(readyz.headers()["retry-after"], "1");
    let (newcomer_said, playback, healthz, srt_answer) = tokio::join!(
        newcomer.publish(&key),
        reqwest::get(&top),
        reqwest::get(d.url("/healthz")),
        srt::conclude(&d.srt, srt_stream_id.as_bytes()),
    );
    let said = String::from_utf8_lossy(&newcomer_said);
    assert!(
        said.contains("NetStream.Publish.Rejected") && said.contains("shutting down"),
        "the new publish was not refused with a reason: {said:?}"
    );
    let playback = playback.unwrap();
    assert_eq!(playback.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(playback.headers()["retry-after"], "1");
    assert_eq!(healthz.unwrap().status(), StatusCode::OK);
    assert_eq!(
        srt_answer,
        Some(srt::rejection(1503)),
        "SRT publish while stopping: SRT_REJX_DOWN"
    );

    // The publisher was told why before its connection closed (ffmpeg prints the status).
    let (ok, err) = finish(pusher, Duration::from_secs(10)).await;
    assert!(!ok, "ffmpeg went on publishing: {err}");
    assert!(
        err.contains("shutting down"),
        "ffmpeg was not told why: {err}"
    );
    // The request in flight completed: a playlist, which does not say the stream ended (it
    // moves to another node, or to this one restarted).
    let (status, body) = blocking.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.starts_with("#EXTM3U"), "{body}");
    assert!(!body.contains("#EXT-X-ENDLIST"), "{body}");

    let limit = Duration::from_secs(SHUTDOWN_TIMEOUT_SECS);
    let status = tokio::task::spawn_blocking(move || d.wait_exit(limit))
        .await
        .unwrap()
        .expect("no exit within shutdown_timeout_secs");
    let took = stopped_at.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took >= Duration::from_secs(ACCEPT_GRACE_SECS),
        "the ports closed {took:?} after the signal, inside the accept grace"
    );
    println!("SIGTERM with a publisher, a newcomer and a request in flight: exit 0 after {took:?}");
}
