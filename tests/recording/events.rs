//! The domain events of one session, as the daemon emits them: publish → record → stop →
//! end → delete, read from its log (one JSON line per event at debug level), in order.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::{tempdir, Daemon, KEY};
use crate::media::{create, push, stop_recording, wait_record};

/// The events the daemon logged so far, in order (`type` plus the fields that identify them).
pub(crate) fn events(dir: &std::path::Path) -> Vec<Value> {
    let log = std::fs::read_to_string(Daemon::log_file(dir)).unwrap_or_default();
    log.lines()
        .filter_map(|l| {
            // The JSON object is the line's last field (tracing's formatter may colour the
            // field name, never the value).
            l.contains("livepack::events").then_some(())?;
            let start = l.find("{\"seq\"")?;
            let end = l.rfind('}')? + 1;
            serde_json::from_str(&l[start..end]).ok()
        })
        .collect()
}

pub(crate) async fn until_event(dir: &std::path::Path, kind: &str) -> Vec<Value> {
    for _ in 0..150 {
        let seen = events(dir);
        if seen.iter().any(|e| e["type"] == kind) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(Daemon::log_file(dir)).unwrap_or_default();
    panic!("no {kind} event: {:#?}\n{log}", events(dir));
}

/// One session: a transcoded stream created, pushed, recorded for 3 s, the recording stopped,
/// the publisher gone. Returns the stream's id and the video.
pub(crate) async fn session(d: &Daemon, name: &str) -> (i64, Value) {
    let rec = create(
        d,
        json!({"name": name, "record_type": "transcoded", "quality_set_id": 3}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let mut pusher = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 10);
    wait_record(d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let start = format!("/streaming/streams/{id}/start_recording");
    assert_eq!(
        d.call(Method::PUT, &start, None).await.status,
        StatusCode::NO_CONTENT
    );
    wait_record(d, id, Duration::from_secs(10), |r| r["recording"] == true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let video = stop_recording(d, id).await;
    pusher.kill();
    (id, video)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_record_stop_session_emits_its_events_in_order() {
    let dir = tempdir();
    let d = Daemon::start_logged(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "1"),
            ("LIVEPACK_NODE_ID", "node-e"),
            ("RUST_LOG", "warn,livepack::events=debug"),
        ],
    );
    let (id, video) = session(&d, "ev").await;
    let video_id = video["id"].as_i64().unwrap();
    until_event(dir.path(), "live_ended").await;
    let r = d.delete(&format!("/streaming/videos/{video_id}")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    let r = d.delete(&format!("/streaming/streams/{id}")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    let seen = until_event(dir.path(), "stream_deleted").await;

    let kinds: Vec<&str> = seen.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "stream_created",
            "publish_started",
            "live_started",
            "recording_started",
            "recording_stopped",
            "video_ready",
            "publish_stopped",
            "inputs_gone",
            "live_ended",
            "video_deleted",
            "stream_deleted",
        ],
        "{seen:#?}"
    );
    let mut seq = None;
    for e in &seen {
        assert_eq!(e["stream_id"], id, "{e}");
        assert_eq!(e["node"], "node-e", "{e}");
        assert!(e["at"].as_str().unwrap().ends_with('Z'), "{e}");
        let n = e["seq"].as_u64().unwrap();
        assert!(seq.is_none_or(|s| n > s), "sequence not rising: {seen:#?}");
        seq = Some(n);
    }
    let by = |kind: &str| seen.iter().find(|e| e["type"] == kind).unwrap().clone();
    assert_eq!(by("publish_started")["slot"], "main");
    assert_eq!(by("publish_started")["protocol"], "rtmp");
    assert_eq!(by("publish_stopped")["protocol"], "rtmp");
    assert_eq!(by("live_started")["resumed"], false);
    for kind in [
        "recording_started",
        "recording_stopped",
        "video_ready",
        "video_deleted",
    ] {
        assert_eq!(by(kind)["video_id"], video_id, "{kind}");
    }
    assert_eq!(by("video_ready")["duration_ms"], video["duration"]);
}
