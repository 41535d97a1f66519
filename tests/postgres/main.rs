//! Several daemons on one PostgreSQL database (the first step of issue 23): the real binary
//! twice, a real PostgreSQL server (`tests/common/pg.rs`), real HTTP. What one daemon writes the
//! other reads, and concurrent PATCHes through both all land.

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use common::pg::PgServer;
use common::proc::run_within;
use common::{free_port, tempdir, Daemon, KEY};

/// CDN resources the PATCHes name in `cdn_id`.
const CDN: &str = "1=https://cdn-one.example";

fn daemon_on(dir: &std::path::Path, url: &str) -> Daemon {
    Daemon::start_with(
        dir,
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_CDN_RESOURCES", CDN),
            ("LIVEPACK_DATABASE_URL", url),
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_share_their_records() {
    let server = PgServer::start();
    let url = server.create_database();
    let (dir_a, dir_b) = (tempdir(), tempdir());
    // Started together: one migrates and seeds, the other waits for it (advisory lock).
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| daemon_on(dir_a.path(), &url));
        let b = s.spawn(|| daemon_on(dir_b.path(), &url));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(
        !dir_a.path().join("data/livepack.db").exists(),
        "no SQLite file beside a PostgreSQL store"
    );

    // Created through A, read through B.
    let created = a
        .post("/streaming/streams", json!({"name": "shared"}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_i64().unwrap();
    let path = format!("/streaming/streams/{id}");
    let on_b = b.get(&path).await;
    assert_eq!(on_b.status, StatusCode::OK, "{}", on_b.body);
    assert_eq!(
        (&on_b.body["name"], &on_b.body["token"]),
        (&created.body["name"], &created.body["token"])
    );
    assert_eq!(
        b.get("/streaming/streams").await.headers["x-total-count"],
        "1"
    );

    // Patched through B, read through A.
    let patched = b
        .patch(
            &path,
            json!({"stream": {"name": "renamed", "dvr_duration": 60}}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    let on_a = a.get(&path).await.body;
    assert_eq!(
        (&on_a["name"], &on_a["dvr_duration"]),
        (&json!("renamed"), &json!(60))
    );

    // Concurrent PATCHes of different fields through both: each re-reads and re-applies when
    // another got in first, so all land.
    let (r1, r2, r3, r4, r5) = tokio::join!(
        a.patch(&path, json!({"stream": {"cdn_id": 1}})),
        b.patch(&path, json!({"stream": {"auto_record": true}})),
        a.patch(&path, json!({"stream": {"projection": "vr180"}})),
        b.patch(&path, json!({"stream": {"client_entity_data": "from b"}})),
        a.patch(&path, json!({"stream": {"dvr_enabled": true}})),
    );
    for r in [r1, r2, r3, r4, r5] {
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    for d in [&a, &b] {
        let rec = d.get(&path).await.body;
        assert_eq!(
            json!([
                rec["name"],
                rec["cdn_id"],
                rec["auto_record"],
                rec["projection"],
                rec["client_entity_data"],
                rec["dvr_enabled"]
            ]),
            json!(["renamed", 1, true, "vr180", "from b", true]),
            "{rec}"
        );
    }

    // The other kinds of record too: a broadcast linking the stream, an app; deletes.
    let broadcast = b
        .post(
            "/streaming/broadcasts",
            json!({"broadcast": {"name": "show", "stream_ids": [id]}}),
        )
        .await;
    assert_eq!(broadcast.status, StatusCode::CREATED, "{}", broadcast.body);
    let bid = broadcast.body["id"].as_i64().unwrap();
    assert_eq!(a.get(&path).await.body["broadcast_ids"], json!([bid]));
    let app = a
        .post("/fastedge/v1/apps", json!({"name": "kept", "binary": 1}))
        .await;
    assert_eq!(app.status, StatusCode::CREATED, "{}", app.body);
    let taken = b
        .post("/fastedge/v1/apps", json!({"name": "kept", "binary": 1}))
        .await;
    assert_eq!(taken.status, StatusCode::CONFLICT, "{}", taken.body);
    assert_eq!(b.delete(&path).await.status, StatusCode::NO_CONTENT);
    assert_eq!(a.get(&path).await.status, StatusCode::NOT_FOUND);
    let left = a.get(&format!("/streaming/broadcasts/{bid}")).await.body;
    assert_eq!(left["stream_ids"], json!([]), "{left}");

    // A restarted daemon finds everything where it was.
    a.terminate();
    let a = daemon_on(dir_a.path(), &url);
    assert_eq!(
        a.get(&format!("/streaming/broadcasts/{bid}")).await.body["name"],
        "show"
    );
    drop((a, b));
}

/// The daemon run with a database it cannot use: refused at start, the setting named, the
/// password not shown. Bounded, since a daemon that started would serve forever.
fn refused_start(url: &str) -> String {
    let dir = tempdir();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_livepack"));
    for (k, _) in std::env::vars() {
        if k.starts_with("LIVEPACK_") {
            cmd.env_remove(k);
        }
    }
    let out = run_within(
        cmd.current_dir(dir.path())
            .env("LIVEPACK_DATA_DIR", dir.path().join("data"))
            .env("LIVEPACK_HTTP_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_DATABASE_URL", url),
        "livepack",
        Duration::from_secs(60),
    );
    assert!(!out.status.success(), "started with {url}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unusable_database_stops_the_start_naming_the_setting() {
    let port = free_port(false);
    let err = refused_start(&format!(
        "postgres://livepack:hunter2@127.0.0.1:{port}/live"
    ));
    assert!(
        err.contains("LIVEPACK_DATABASE_URL") && err.contains("error connecting"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    let err = refused_start("mysql://livepack:hunter2@127.0.0.1/live");
    assert!(err.contains("database_url"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}
