//! `log_format = "json"`: every line the daemon writes on stderr is one JSON object a log
//! collector can index, with the stream an event is about as a field of its own.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{tempdir, Daemon};
use crate::media::*;

#[tokio::test]
async fn a_json_log_has_one_object_per_line_with_the_stream_as_a_field() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start_logged(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", crate::common::KEY),
            ("LIVEPACK_LOG_FORMAT", "json"),
            ("RUST_LOG", "info"),
        ],
    );
    let rec = create(&d, json!({"name": "logged"})).await;
    let id = rec["id"].as_i64().unwrap();
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "audio.flv", 30);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let r = d.kick(id).await;
    assert_eq!(r.status, reqwest::StatusCode::NO_CONTENT, "{:?}", r.body);
    let _ = finish(ffmpeg, Duration::from_secs(20)).await;
    drop(d);

    let log = std::fs::read_to_string(Daemon::log_file(dir.path())).unwrap();
    let events: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(events.len() >= 3, "{log}");
    for e in &events {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(e[key].is_string(), "no {key}: {e}");
        }
        let t = e["timestamp"].as_str().unwrap();
        assert!(
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).is_ok(),
            "{t}"
        );
    }
    let about = |message: &str| {
        events
            .iter()
            .find(|e| e["message"] == message && e["stream"] == id)
            .unwrap_or_else(|| panic!("no {message:?} with \"stream\": {id} in {log}"))
    };
    assert_eq!(about("rtmp publish accepted")["level"], "INFO");
    assert_eq!(about("publisher kicked")["target"], "livepack::live");
}
