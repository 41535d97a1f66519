//! Requests between nodes: signed with the node secret (`cluster::node_auth`), never carrying
//! the user's key. A fake node (a listener this test runs, registered in the store with a
//! stream's lease) sees exactly what a relaying node sends; a real node is sent forged ones.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::common::pg::PgServer;
use crate::common::{tempdir, Daemon, KEY};

const SECRET: &str = "0123456789abcdef0123456789abcdef-test";
/// What the fake node answers every request with.
const PEER_ANSWER: &str = r#"{"answered_by":"peer"}"#;

/// The signature as README's Cluster section states it, computed here independently.
fn signature(method: &str, path: &str, node: &str, time: i64, nonce: &str, body: &[u8]) -> String {
    let body = hex(&Sha256::digest(body));
    let text = format!("livepack-relay-v1\n{method}\n{path}\n{node}\n{time}\n{nonce}\n{body}");
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(text.as_bytes());
    hex(&mac.finalize().into_bytes())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The headers node `node-z` sends for this request, signed at `time`.
fn node_headers(
    method: &str,
    path: &str,
    time: i64,
    nonce: &str,
    body: &[u8],
) -> Vec<(String, String)> {
    vec![
        ("x-livepack-relayed-by".into(), "node-z".into()),
        ("x-livepack-time".into(), time.to_string()),
        ("x-livepack-nonce".into(), nonce.into()),
        ("x-livepack-body-sha256".into(), hex(&Sha256::digest(body))),
        (
            "x-livepack-signature".into(),
            signature(method, path, "node-z", time, nonce, body),
        ),
    ]
}

/// A node that answers every request with [`PEER_ANSWER`] and reports each request head.
async fn fake_peer() -> (u16, mpsc::Receiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = tx.try_send(String::from_utf8_lossy(&head).into_owned());
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{PEER_ANSWER}",
                PEER_ANSWER.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        }
    });
    (port, rx)
}

/// Registers node `peer` at `url` as alive for the next hour, holding stream `id`'s lease.
fn register_peer(db: &str, url: &str, id: i64) {
    let (db, url) = (db.to_owned(), url.to_owned());
    // The sync client runs its own runtime: off this test's.
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&db, postgres::NoTls).unwrap();
        let now = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";
        c.execute(
            &format!(
                "INSERT INTO nodes (id, url, started_at_ms, heartbeat_ms) \
                 VALUES ('peer', $1, {now}, {now} + 3600000)"
            ),
            &[&url],
        )
        .unwrap();
        c.execute(
            &format!(
                "INSERT INTO leases (stream_id, node_id, publishing, status, taken_at_ms) \
                 VALUES ($1, 'peer', true, '{{}}', {now})"
            ),
            &[&id],
        )
        .unwrap();
    })
    .join()
    .unwrap();
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn relayed_requests_are_signed_and_never_carry_the_users_key() {
    let server = PgServer::start();
    let db = server.create_database();
    let dir = tempdir();
    let b = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_DATABASE_URL", &db),
            ("LIVEPACK_NODE_ID", "node-b"),
            ("LIVEPACK_NODE_SECRET", SECRET),
        ],
    );
    let created = b
        .post("/streaming/streams", json!({"name": "elsewhere"}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_i64().unwrap();
    let (port, mut seen) = fake_peer().await;
    register_peer(&db, &format!("http://127.0.0.1:{port}"), id);

    // Through B with the user's key: answered by the peer, which got B's signature and not the
    // key.
    let path = format!("/streaming/streams/{id}");
    let relayed = b.get(&path).await;
    assert_eq!(relayed.status, StatusCode::OK, "{}", relayed.body);
    assert_eq!(
        relayed.body,
        serde_json::from_str::<serde_json::Value>(PEER_ANSWER).unwrap()
    );
    let head = tokio::time::timeout(Duration::from_secs(5), seen.recv())
        .await
        .expect("the peer was asked")
        .unwrap();
    assert!(
        head.starts_with(&format!("GET {path} HTTP/1.1\r\n")),
        "{head}"
    );
    assert!(header(&head, "authorization").is_none(), "{head}");
    assert!(!head.contains(KEY), "{head}");
    let time: i64 = header(&head, "x-livepack-time").unwrap().parse().unwrap();
    assert!((now_secs() - time).abs() <= 5, "{head}");
    assert_eq!(header(&head, "x-livepack-relayed-by"), Some("node-b"));
    let nonce = header(&head, "x-livepack-nonce").unwrap();
    let expected = signature("GET", &path, "node-b", time, nonce, b"");
    assert_eq!(
        header(&head, "x-livepack-signature"),
        Some(expected.as_str()),
        "{head}"
    );

    // A wrong key at B: refused there; the peer is not asked.
    let wrong = b
        .raw(
            Method::GET,
            &path,
            &[("authorization", "apikey wrong")],
            None,
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), seen.recv())
            .await
            .is_err(),
        "a refused request reached the peer"
    );

    // Straight to a node, with node headers and no key. Signed right and fresh: accepted, so
    // the refusals below are about what they change.
    let list = "/streaming/streams";
    let send =
        |headers: Vec<(String, String)>, method: Method, path: String, body: Option<String>| {
            let b = &b;
            async move {
                let h: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                b.raw(method, &path, &h, body).await
            }
        };
    let good = node_headers("GET", list, now_secs(), "n1", b"");
    let ok = send(good.clone(), Method::GET, list.into(), None).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    // A forged signature.
    let mut forged = good.clone();
    forged[4].1 = signature("GET", list, "node-z", now_secs(), "n1", b"x");
    let r = send(forged, Method::GET, list.into(), None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    // Another path under the same signature.
    let r = send(good.clone(), Method::GET, format!("{list}?page=2"), None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    // Signed right, a minute ago.
    let old = node_headers("GET", list, now_secs() - 60, "n2", b"");
    let r = send(old, Method::GET, list.into(), None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("clock"),
        "{}",
        r.body
    );
    // Only the node id, as an old relay sent it: not proof of anything.
    let r = send(
        vec![("x-livepack-relayed-by".into(), "node-z".into())],
        Method::GET,
        list.into(),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    // A change: accepted once, its replay refused, another body under its signature refused.
    let body = json!({"stream": {"name": "renamed by a node"}}).to_string();
    let own = format!("/streaming/streams/{id}");
    let patch = node_headers("PATCH", &own, now_secs(), "n3", body.as_bytes());
    let r = send(
        patch.clone(),
        Method::PATCH,
        own.clone(),
        Some(body.clone()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["name"], "renamed by a node");
    let r = send(patch, Method::PATCH, own.clone(), Some(body.clone())).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "replayed: {}", r.body);
    let patch = node_headers("PATCH", &own, now_secs(), "n4", body.as_bytes());
    let other = json!({"stream": {"name": "swapped"}}).to_string();
    let r = send(patch, Method::PATCH, own.clone(), Some(other)).await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "swapped body: {}",
        r.body
    );
    // Read where it is (a relayed request is answered by the node it reaches).
    let read = node_headers("GET", &own, now_secs(), "n5", b"");
    let r = send(read, Method::GET, own, None).await;
    assert_eq!(r.body["name"], "renamed by a node", "{}", r.body);
}
