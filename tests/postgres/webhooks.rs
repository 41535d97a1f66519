//! Webhooks of two nodes on one store: each event reaches the receiver once, whichever node
//! wrote it and whichever delivered it; one node killed with events pending, the other
//! delivers them.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::common::pg::PgServer;
use crate::common::tempdir;
use crate::common::webhooks::{assert_each_once, Receiver};

#[tokio::test(flavor = "multi_thread")]
async fn two_nodes_deliver_each_event_once() {
    let server = PgServer::start();
    let url = server.create_database();
    let (dir_a, dir_b, hooks) = (tempdir(), tempdir(), tempdir());
    let receiver = Receiver::start(hooks.path(), 0, &["--fail-every", "4"]);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| super::node(dir_a.path(), &url, "a"));
        let b = s.spawn(|| super::node(dir_b.path(), &url, "b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let created = a
        .post(
            "/streaming/webhooks",
            json!({"url": receiver.url(), "events": ["stream_created", "stream_deleted"]}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    receiver.set_secret(created.body["secret"].as_str().unwrap());
    let webhook = created.body["id"].as_i64().unwrap();

    // 30 streams created through both nodes at once.
    let mut ids = Vec::new();
    let made = futures::future::join_all((0..30).map(|i| {
        let node = if i % 2 == 0 { &a } else { &b };
        node.post("/streaming/streams", json!({"name": format!("s{i}")}))
    }))
    .await;
    for r in made {
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        ids.push(r.body["id"].as_i64().unwrap());
    }
    let wait = Duration::from_secs(30);
    receiver.until_each(wait, "stream_created", &ids).await;

    // The receiver goes away; deletions through both nodes wait in the outbox; node A dies;
    // the receiver comes back and B delivers them all.
    let port = receiver.port;
    drop(receiver);
    for (i, id) in ids.iter().enumerate() {
        let node = if i % 2 == 0 { &a } else { &b };
        let r = node.delete(&format!("/streaming/streams/{id}")).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    }
    let pending = format!("/streaming/webhooks/{webhook}/deliveries?status=pending&per_page=100");
    let mut waiting = false;
    for _ in 0..100 {
        let r = b.get(&pending).await;
        let tried = r
            .body
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["attempts"] != 0);
        waiting = r.headers["x-total-count"] == "30" && tried;
        if waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(waiting, "the 30 deletions were not pending and tried");
    a.kill9();
    let receiver = Receiver::start(hooks.path(), port, &[]);
    let got = receiver.until_each(wait, "stream_deleted", &ids).await;
    assert_each_once(&got);
    assert_eq!(got.len(), 60, "{got:#?}");
    assert_eq!(receiver.bad_signatures(), 0);
    let listed = b
        .get(&format!(
            "/streaming/webhooks/{webhook}/deliveries?status=delivered&per_page=100"
        ))
        .await;
    assert_eq!(listed.headers["x-total-count"], "60");
}
