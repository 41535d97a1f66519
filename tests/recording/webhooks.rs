//! Webhooks end to end, against a receiver written apart from the daemon
//! (`tests/webhook_receiver.py`): a session's events arrive signed, in the order the daemon saw
//! them, each once, through answers failed on purpose, a receiver stopped and a `kill -9` of
//! the daemon with events pending; a rotated secret signs from then on.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::webhooks::{assert_each_once, of_stream, Receiver};
use crate::common::{tempdir, Daemon, KEY};
use crate::events::{events, session, until_event};
use crate::media::create;

fn start(dir: &std::path::Path) -> Daemon {
    Daemon::start_logged(
        dir,
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "1"),
            ("LIVEPACK_NODE_ID", "node-w"),
            ("RUST_LOG", "warn,livepack::events=debug"),
        ],
    )
}

/// The deliveries the API lists for `webhook` with `status`.
async fn deliveries(d: &Daemon, webhook: i64, status: &str) -> Vec<Value> {
    let r = d
        .get(&format!(
            "/streaming/webhooks/{webhook}/deliveries?status={status}&per_page=100"
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body.as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_s_events_arrive_signed_in_order_once_through_failures_and_kill_9() {
    let dir = tempdir();
    let hooks = tempdir();
    // The first 3 answers and the first attempt of every third event fail on purpose.
    let receiver = Receiver::start(hooks.path(), 0, &["--fail-first", "3", "--fail-every", "3"]);
    let d = start(dir.path());
    let created = d
        .post("/streaming/webhooks", json!({"url": receiver.url()}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let webhook = created.body["id"].as_i64().unwrap();
    let secret = created.body["secret"].as_str().unwrap().to_owned();
    assert!(
        secret.len() == 70 && secret.starts_with("whsec_"),
        "{secret}"
    );
    assert_eq!(created.body["events"], Value::Null, "all events by default");
    receiver.set_secret(&secret);
    let shown = d.get(&format!("/streaming/webhooks/{webhook}")).await;
    assert!(shown.body.get("secret").is_none(), "{}", shown.body);

    // The session of the events test: publish, record, stop, unpublish.
    let (id, video) = session(&d, "hooked").await;
    let video_id = video["id"].as_i64().unwrap();
    until_event(dir.path(), "live_ended").await;
    let wait = Duration::from_secs(30);
    receiver
        .until(wait, |e| e["type"] == "live_ended" && e["stream_id"] == id)
        .await;
    let got = receiver
        .until(wait, |e| e["type"] == "video_ready" && e["stream_id"] == id)
        .await;

    // What arrived for the stream is what the daemon's bus carried, in its order, each once.
    let bus: Vec<Value> = events(dir.path())
        .into_iter()
        .filter(|e| e["stream_id"] == id)
        .collect();
    let received = of_stream(&got, id);
    let kinds = |v: &[Value]| -> Vec<String> {
        v.iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(kinds(&received), kinds(&bus), "{received:#?}");
    assert_each_once(&got);
    assert_eq!(receiver.bad_signatures(), 0);
    let by = |kind: &str| received.iter().find(|e| e["type"] == kind).unwrap().clone();
    assert_eq!(by("publish_started")["data"]["protocol"], "rtmp");
    assert_eq!(by("publish_started")["data"]["node"], "node-w");
    assert_eq!(by("video_ready")["data"]["video_id"], video_id);
    assert_eq!(by("video_ready")["data"]["duration_ms"], video["duration"]);
    assert!(by("stream_created")["created_at"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    // Failed answers were retried: some events arrived on a later attempt, and the API says so.
    assert!(
        got.iter().any(|e| e["_attempt"].as_i64().unwrap() > 1),
        "{got:#?}"
    );
    let delivered = deliveries(&d, webhook, "delivered").await;
    assert_eq!(delivered.len(), got.len());
    assert!(delivered
        .iter()
        .any(|x| x["attempts"].as_i64().unwrap() > 1));
    assert!(delivered.iter().all(|x| x["last_status"] == 200));

    // The receiver goes away; three more changes wait in the outbox, retried meanwhile.
    let port = receiver.port;
    drop(receiver);
    let r = d.delete(&format!("/streaming/videos/{video_id}")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"name": "renamed"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = d.delete(&format!("/streaming/streams/{id}")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    let mut pending = Vec::new();
    for _ in 0..100 {
        pending = deliveries(&d, webhook, "pending").await;
        if pending.iter().any(|p| p["attempts"].as_i64().unwrap() >= 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tried = pending
        .iter()
        .find(|p| p["attempts"].as_i64().unwrap() >= 1);
    let tried = tried.unwrap_or_else(|| panic!("no attempt recorded: {pending:#?}"));
    assert_eq!(tried["last_status"], Value::Null, "{tried}");
    assert!(tried["last_error"].as_str().is_some(), "{tried}");
    assert_eq!(pending.len(), 3, "{pending:#?}");
    d.kill9();

    // Back up, receiver and daemon: the three arrive, in order, once.
    let receiver = Receiver::start(hooks.path(), port, &[]);
    let d = start(dir.path());
    let after = receiver
        .until(wait, |e| {
            e["type"] == "stream_deleted" && e["stream_id"] == id
        })
        .await;
    let tail: Vec<String> = of_stream(&after, id)
        .iter()
        .skip(received.len())
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tail, ["video_deleted", "stream_updated", "stream_deleted"]);
    assert_each_once(&after);
    assert!(deliveries(&d, webhook, "pending").await.is_empty());

    // A rotated secret signs what comes next: the receiver, still on the old one, refuses it
    // until it has the new one; the event is then delivered.
    let rotated = d
        .call(
            Method::PUT,
            &format!("/streaming/webhooks/{webhook}/rotate_secret"),
            None,
        )
        .await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.body);
    let new_secret = rotated.body["secret"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, secret);
    let s2 = create(&d, json!({"name": "after rotation"})).await;
    let s2 = s2["id"].as_i64().unwrap();
    for _ in 0..100 {
        if receiver.bad_signatures() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        receiver.bad_signatures() > 0,
        "the old secret still verified"
    );
    receiver.set_secret(&new_secret);
    receiver
        .until(wait, |e| {
            e["type"] == "stream_created" && e["stream_id"] == s2
        })
        .await;
}
