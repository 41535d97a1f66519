//! What requests nobody has to authenticate cost a PostgreSQL node: a flood of requests for
//! unknown stream ids (media and player status, from 127.0.0.2) neither silences the node's
//! heartbeat (it would fence itself and drop its streams) nor reaches the store once per
//! request (`cluster::lookup`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::metrics::scrape;
use crate::common::pg::PgServer;
use crate::common::tempdir;
use crate::{node, DEAD_SECS};

/// How long the flood lasts, and over how many concurrent client connections.
const FLOOD: Duration = Duration::from_secs(12);
const CLIENTS: usize = 64;

/// How long ago `node`'s last heartbeat landed, by the store's clock, polled every 100 ms
/// until `stop`; the longest silence seen.
fn watch_heartbeat(
    db: String,
    node: &'static str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&db, postgres::NoTls).unwrap();
        let mut longest = 0i64;
        while !stop.load(Ordering::Relaxed) {
            let silent: i64 = c
                .query_one(
                    "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT - heartbeat_ms \
                     FROM nodes WHERE id = $1",
                    &[&node],
                )
                .unwrap()
                .get(0);
            longest = longest.max(silent);
            std::thread::sleep(Duration::from_millis(100));
        }
        Duration::from_millis(longest as u64)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_unknown_ids_neither_silences_the_heartbeat_nor_reaches_the_store() {
    let server = PgServer::start();
    let db = server.create_database();
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let a = node(dir_a.path(), &db, "node-a");
    // A peer: with company, a node whose heartbeats stop landing fences itself.
    let _b = node(dir_b.path(), &db, "node-b");
    let before = scrape(&a).await;

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_heartbeat(db.clone(), "node-a", stop.clone());
    let client = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .pool_max_idle_per_host(CLIENTS)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (served, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (client, base) = (client.clone(), a.base.clone());
        let (served, failed) = (served.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            let mut n: u64 = 0;
            while started.elapsed() < FLOOD {
                // Every request a different id nobody has.
                let id = 1_000_000 + (c as u64) * 1_000_000 + n;
                n += 1;
                let path = match n % 2 {
                    0 => format!("/cmaf/{id}/master.m3u8"),
                    _ => format!("/player/{id}/status.json"),
                };
                match client.get(format!("{base}{path}")).send().await {
                    Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                        let _ = r.bytes().await;
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let silent_max = watcher.join().unwrap();
    let after = scrape(&a).await;

    let (served, failed) = (
        served.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    let grew = |key: &str| (after.value(key) - before.value(key)) as u64;
    let asked = grew("livepack_lookups_total");
    let owners = grew("livepack_lookup_store_queries_total{kind=\"live_leases\"}");
    let rows = grew("livepack_lookup_store_queries_total{kind=\"stream\"}");
    println!(
        "flood: {served} unknown-id requests answered 404 in {took:?} ({:.0}/s, {failed} failed) \
         from {CLIENTS} connections; {asked} lookups cost {owners} owner (live leases) and {rows} \
         stream-row store queries; node-a's \
         heartbeat silent at most {silent_max:?} (it fences itself at {} ms)",
        served as f64 / took.as_secs_f64(),
        DEAD_SECS * 1000 * 3 / 5,
    );
    assert!(served > 1000, "{served} requests answered");
    assert_eq!(failed, 0);
    // Every request asked who serves its id (the player status also whether it exists); the
    // owner cost about one store query a second, however many ids. A stream row is per id:
    // each new id's is one query (at most two at once), the player-status half of the flood.
    assert!(asked >= served, "{asked} lookups for {served} requests");
    let bound = 2 * took.as_secs() + 5;
    assert!(
        owners <= bound,
        "{owners} owner queries in {took:?} for {served} requests"
    );
    assert!(rows <= served / 2 + CLIENTS as u64, "{rows} stream queries");
    // The heartbeat kept landing: well inside the silence after which the node stops its
    // streams (dead_after less two beats).
    let fence_after = Duration::from_millis(DEAD_SECS * 1000 * 3 / 5);
    assert!(
        silent_max < fence_after,
        "heartbeat silent for {silent_max:?}"
    );
}
