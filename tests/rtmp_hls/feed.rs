//! The console's live feed (`GET /streaming/events`, server-sent events) read as raw bytes by
//! a plain HTTP client: authenticated like the API, a stream's domain events as they happen and
//! health samples with its record's numbers, narrowed by `stream_id`, ended by a `bye` when the
//! node stops; and the nodes list and the feed and node families of `/metrics`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::metrics::scrape;
use crate::common::{tempdir, Daemon};
use crate::media::*;

/// One open feed, parsed as the SSE format says (blank-line separated blocks).
struct Feed {
    resp: reqwest::Response,
    buffer: String,
}

impl Feed {
    async fn open(d: &Daemon, query: &str) -> Feed {
        let resp = reqwest::Client::new()
            .get(d.url(&format!("/streaming/events{query}")))
            .header("authorization", format!("apikey {}", d.key))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let kind = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Feed {
            resp,
            buffer: String::new(),
        }
    }

    /// The next event (type, data); `None` when the feed ended.
    async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut kind = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(k) = line.strip_prefix("event: ") {
                        kind = Some(k.to_owned());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push_str(d);
                    }
                }
                match kind {
                    Some(k) => return Some((k, serde_json::from_str(&data).unwrap())),
                    None => continue, // `retry:` or a keep-alive comment
                }
            }
            let chunk = self.resp.chunk().await.unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Events until one satisfies `pred`, within `bound`; returns it and the types seen.
    async fn until(
        &mut self,
        bound: Duration,
        pred: impl Fn(&str, &Value) -> bool,
    ) -> ((String, Value), Vec<String>) {
        let deadline = Instant::now() + bound;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, self.next()).await;
            let (kind, data) = next
                .unwrap_or_else(|_| panic!("not seen within {bound:?}; saw {seen:?}"))
                .unwrap_or_else(|| panic!("the feed ended; saw {seen:?}"));
            if pred(&kind, &data) {
                return ((kind, data), seen);
            }
            seen.push(kind);
        }
    }
}

fn health_of(data: &Value, id: i64) -> Option<&Value> {
    data["streams"].as_array()?.iter().find(|s| s["id"] == id)
}

#[tokio::test]
async fn the_events_feed_follows_a_stream_and_ends_when_the_node_stops() {
    let _g = heavy().await;
    let dir = tempdir();
    let mut d = Daemon::start(dir.path());
    // Without the key: refused like the API.
    let r = reqwest::get(d.url("/streaming/events")).await.unwrap();
    assert_eq!(r.status(), 401);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["code"], "unauthorized");

    let rec = create(&d, json!({"name": "feed"})).await;
    let other = create(&d, json!({"name": "other"})).await;
    let id = rec["id"].as_i64().unwrap();
    let mut all = Feed::open(&d, "").await;
    let mut narrowed = Feed::open(&d, &format!("?stream_id={}", other["id"])).await;
    let ((_, hello), _) = all.until(Duration::from_secs(5), |k, _| k == "hello").await;
    assert_eq!(hello["health_every_ms"], 2000);
    let node = hello["node"].as_str().unwrap().to_owned();

    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 30);
    let ((_, started), _) = all
        .until(Duration::from_secs(30), |k, _| k == "publish_started")
        .await;
    assert_eq!(started["stream_id"], id);
    assert_eq!(started["slot"], "main");
    assert_eq!(started["protocol"], "rtmp");
    assert_eq!(started["node"], node.as_str());
    assert!(started["seq"].is_u64() && started["at"].is_string());
    // A health sample with the record's numbers: the same as the API's a moment later.
    let ((_, sample), _) = all
        .until(Duration::from_secs(30), |k, data| {
            k == "health" && health_of(data, id).is_some_and(|s| s["video_bitrate"].is_u64())
        })
        .await;
    let s = health_of(&sample, id).unwrap();
    assert_eq!(s["live"], true);
    assert_eq!(s["input_protocol"], "rtmp");
    assert_eq!(s["video_codec"], "H.264");
    assert!(s["viewers"]["total"].is_u64(), "{s}");
    let record = d.get(&format!("/streaming/streams/{id}")).await.body;
    for field in ["live", "input_protocol", "video_codec", "video_width"] {
        assert_eq!(s[field], record[field], "{field}");
    }

    // The nodes: this one, alive, serving the stream.
    let nodes = d.get("/streaming/nodes").await.body;
    assert_eq!(nodes.as_array().unwrap().len(), 1, "{nodes}");
    assert_eq!(nodes[0]["id"], node.as_str());
    assert_eq!(nodes[0]["state"], "alive");
    assert_eq!(nodes[0]["this_node"], true);
    assert_eq!(nodes[0]["streams"], 1);
    assert!(nodes[0]["heartbeat_age"].as_f64().unwrap() < 10.0);
    let m = scrape(&d).await;
    assert_eq!(m.value("livepack_event_feeds"), 2.0);
    assert_eq!(m.value("livepack_cluster_nodes{state=\"alive\"}"), 1.0);
    assert_eq!(m.value("livepack_cluster_nodes{state=\"missing\"}"), 0.0);

    // At most 64 feeds: the 65th is refused; those that leave give their place back.
    let mut more = Vec::new();
    for _ in 0..62 {
        more.push(Feed::open(&d, "").await);
    }
    let r = reqwest::Client::new()
        .get(d.url("/streaming/events"))
        .header("authorization", format!("apikey {}", d.key))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["code"], "too_many_feeds");
    drop(more);
    let deadline = Instant::now() + Duration::from_secs(10);
    while scrape(&d).await.value("livepack_event_feeds") != 2.0 {
        assert!(Instant::now() < deadline, "the feeds that left still count");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The narrowed feed carries the other stream only: its health samples hold nothing of
    // this one, and none of this one's events came.
    let ((_, narrow), seen) = narrowed
        .until(Duration::from_secs(10), |k, data| {
            k == "health" && data["streams"].as_array().is_some()
        })
        .await;
    assert!(health_of(&narrow, id).is_none(), "{narrow}");
    assert!(!seen.iter().any(|k| k.starts_with("publish")), "{seen:?}");

    // Kicked: the publish stops and the samples say off air.
    let r = d.kick(id).await;
    assert!(r.status.is_success(), "{}", r.body);
    all.until(Duration::from_secs(10), |k, data| {
        k == "publish_stopped" && data["stream_id"] == id
    })
    .await;
    all.until(Duration::from_secs(10), |k, data| {
        k == "health" && health_of(data, id).is_none_or(|s| s["live"] == false)
    })
    .await;
    drop(ffmpeg);

    // The node stops: each feed is told, then ends.
    d.sigterm();
    all.until(Duration::from_secs(10), |k, data| {
        k == "bye" && data["reason"] == "shutting_down"
    })
    .await;
    let end = tokio::time::timeout(Duration::from_secs(10), all.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "the feed goes on after bye: {end:?}"
    );
    assert!(d.wait_exit(Duration::from_secs(30)).is_some());
}
