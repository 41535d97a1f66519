//! The encoders' balancer as shipped (`deploy/haproxy-livepack-ingest.cfg`) in front of two
//! nodes that each take one transcode: once one node is full its `/readyz` takes it out, and a
//! new publisher through HAProxy goes live on the other.

use std::time::Duration;

use serde_json::json;

use super::common::pg::PgServer;
use super::common::{metrics, nginx, tempdir, Daemon};
use super::{at, media, node_with};

#[tokio::test(flavor = "multi_thread")]
async fn haproxy_sends_publishers_past_a_full_node() {
    let _heavy = media::heavy().await;
    let server = PgServer::start();
    let url = server.create_database();
    let node = |dir: &std::path::Path, id: &str| {
        node_with(dir, &url, id, &[("LIVEPACK_MAX_TRANSCODES", "1")])
    };
    let (dir_a, dir_b, dir_lb) = (tempdir(), tempdir(), tempdir());
    let (a, b) = (node(dir_a.path(), "node-a"), node(dir_b.path(), "node-b"));
    let http_port = |d: &Daemon| d.base.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    // A first in the list: without the health check, the first publisher through goes there.
    let (_lb, lb) = nginx::haproxy_ingest_in_front(
        dir_lb.path(),
        &[
            (a.rtmp.as_str(), http_port(&a)),
            (b.rtmp.as_str(), http_port(&b)),
        ],
    );
    // A takes its one transcode directly.
    let first = media::create(&a, json!({"name": "fills a"})).await;
    let _first = media::push(
        &at(first["push_url"].as_str().unwrap(), &a.rtmp),
        "av-720p.flv",
        30,
    );
    let first_id = first["id"].as_i64().unwrap();
    media::wait_record(&a, first_id, Duration::from_secs(30), |r| r["live"] == true).await;
    assert_eq!(reqwest::get(a.url("/readyz")).await.unwrap().status(), 503);
    // Two failed checks, 2 s apart, take A out.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let second = media::create(&a, json!({"name": "through haproxy"})).await;
    let id = second["id"].as_i64().unwrap();
    let _second = media::push(
        &at(second["push_url"].as_str().unwrap(), &lb),
        "av-720p.flv",
        30,
    );
    media::wait_record(&b, id, Duration::from_secs(30), |r| r["live"] == true).await;
    let on = |m: &metrics::Metrics| {
        m.0.contains_key(&format!("livepack_stream_live{{stream=\"{id}\"}}"))
    };
    assert!(on(&metrics::scrape(&b).await), "not on B");
    assert!(!on(&metrics::scrape(&a).await), "on the full node");
}
