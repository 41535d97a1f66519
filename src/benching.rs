//! Rigs that benches and tests share: each drives a real subsystem the way a benchmark
//! measures it and returns what it saw, so a bench and the test that asserts the behaviour run
//! the same code.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use time::OffsetDateTime;

use crate::db::{SqliteStore, Store, WebhookSpec};
use crate::events::{Event, Events};

/// What a burst of live facts came to.
#[derive(Debug)]
pub struct Burst {
    /// From the first emit to the last fact written to the webhook outbox.
    pub written: Duration,
    /// From the first emit to the last delivery received.
    pub delivered: Duration,
    /// The facts the receiver got, by their number (sorted): `0..n` once each when nothing
    /// was lost or doubled.
    pub received: Vec<i64>,
}

/// `n` live facts emitted at once on a bus holding `bus_capacity` per lossy subscriber, with a
/// webhook to a local HTTP receiver, on a SQLite store in `dir`; waits at most `within` for
/// them all to arrive, then one second more for any that arrive twice.
pub async fn webhook_burst(
    dir: &std::path::Path,
    n: i64,
    bus_capacity: usize,
    within: Duration,
) -> Burst {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_in(dir).expect("store"));
    let received = Arc::new(Mutex::new(Vec::<i64>::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a local port");
    let url = format!("http://{}/hook", listener.local_addr().expect("bound"));
    let mut server = tokio::task::JoinSet::new();
    server.spawn(receive(listener, received.clone()));
    let spec = WebhookSpec {
        url,
        events: Some(vec!["recording_started".into()]),
        active: true,
    };
    let hook = store
        .create_webhook(&spec, "secret-0123456789", OffsetDateTime::now_utc())
        .expect("webhook");
    let events = Events::with_capacity("node-a", bus_capacity);
    let webhooks = crate::webhooks::spawn(store.clone(), &events, "node-a".into());
    let t0 = Instant::now();
    for video_id in 0..n {
        events.emit(Event::RecordingStarted {
            stream_id: video_id % 64,
            video_id,
        });
    }
    let deadline = t0 + within;
    let mut written = None;
    let count = || received.lock().unwrap_or_else(|p| p.into_inner()).len() as i64;
    while count() < n && Instant::now() < deadline {
        if written.is_none() {
            let outbox = store
                .list_deliveries(hook.id, None, 0, 1)
                .map_or(0, |(_, total)| total);
            if outbox as i64 >= n {
                written = Some(t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered = t0.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    webhooks.shutdown(Duration::from_secs(5)).await;
    let mut received = received.lock().unwrap_or_else(|p| p.into_inner()).clone();
    received.sort_unstable();
    Burst {
        written: written.unwrap_or(delivered),
        delivered,
        received,
    }
}

/// A webhook receiver: notes each delivery's `video_id`, answers 200.
async fn receive(listener: tokio::net::TcpListener, received: Arc<Mutex<Vec<i64>>>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((socket, _)) = listener.accept().await {
        let received = received.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let received = received.clone();
                async move {
                    use http_body_util::BodyExt;
                    let body = req.into_body().collect().await?.to_bytes();
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    if let Some(video) = v["data"]["video_id"].as_i64() {
                        received
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(video);
                    }
                    Ok::<_, hyper::Error>(hyper::Response::new(
                        http_body_util::Empty::<Bytes>::new(),
                    ))
                }
            });
        connections.spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(socket), service),
        );
    }
}
