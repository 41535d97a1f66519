//! `/streaming/broadcasts`: create/read/list/patch/delete, every field rule, the stream ↔
//! broadcast links seen from both sides (unknown ids refused, deletes on either side), the
//! player page's state endpoint, and the spectators count from its polls.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::{tempdir, Daemon};

async fn stream(d: &Daemon, name: &str) -> i64 {
    let r = d.post("/streaming/streams", json!({ "name": name })).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["id"].as_i64().unwrap()
}

async fn broadcast(d: &Daemon, fields: Value) -> Value {
    let r = d
        .post("/streaming/broadcasts", json!({ "broadcast": fields }))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body
}

async fn broadcast_ids(d: &Daemon, stream: i64) -> Value {
    d.get(&format!("/streaming/streams/{stream}")).await.body["broadcast_ids"].clone()
}

#[tokio::test]
async fn broadcasts_are_created_read_listed_patched_and_deleted() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let b = broadcast(&d, json!({"name": "launch"})).await;
    let id = b["id"].as_i64().unwrap();
    assert_eq!(
        b,
        json!({
            "id": id, "name": "launch", "status": "pending", "stream_ids": [],
            "show_dvr_after_finish": false, "pending_message": null, "poster": null,
            "share_url": null, "custom_iframe_url": null,
            "created_at": b["created_at"], "updated_at": b["created_at"],
            "iframe_url": format!("{}/player/broadcasts/{id}", d.base),
        })
    );
    assert!(b["created_at"].as_str().unwrap().ends_with('Z'));
    let path = format!("/streaming/broadcasts/{id}");
    assert_eq!(d.get(&path).await.body, b);

    // PATCH changes only what is given; read-only fields sent back are ignored.
    let mut sent = b.clone();
    sent["status"] = json!("live");
    sent["pending_message"] = json!("Starts at 8");
    sent["poster"] = json!("https://cdn.example.com/poster.jpg");
    sent["custom_iframe_url"] = json!("https://player.example.com/e/1");
    sent["share_url"] = json!("http://example.com/watch?v=1");
    sent["show_dvr_after_finish"] = json!(true);
    let r = d.patch(&path, json!({ "broadcast": sent })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["status"], "live");
    assert_eq!(r.body["name"], "launch");
    assert_eq!(
        r.body["custom_iframe_url"],
        "https://player.example.com/e/1"
    );
    assert_eq!(r.body["show_dvr_after_finish"], true);
    assert_eq!(r.body["created_at"], b["created_at"]);
    let r = d
        .patch(
            &path,
            json!({"broadcast": {"poster": null, "name": "renamed"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (
            &r.body["poster"],
            &r.body["name"],
            &r.body["pending_message"]
        ),
        (&json!(null), &json!("renamed"), &json!("Starts at 8"))
    );

    // List: newest first, paged, total in X-Total-Count.
    for n in 0..3 {
        broadcast(&d, json!({ "name": format!("b{n}") })).await;
    }
    let list = d.get("/streaming/broadcasts?per_page=2").await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.headers["x-total-count"], "4");
    let names: Vec<&str> = list
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["b2", "b1"]);
    let page2 = d.get("/streaming/broadcasts?page=2&per_page=2").await.body;
    assert_eq!(page2[1]["id"], id);
    assert_eq!(d.get("/streaming/broadcasts?page=9").await.body, json!([]));
    for bad in ["page=0", "per_page=101", "page=x", "page=1&page=2"] {
        let r = d.get(&format!("/streaming/broadcasts?{bad}")).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, "invalid_query"),
            "{bad}"
        );
    }

    // Delete: 204, then 404 everywhere.
    assert_eq!(d.delete(&path).await.status, StatusCode::NO_CONTENT);
    for r in [
        d.get(&path).await,
        d.delete(&path).await,
        d.patch(&path, json!({"broadcast": {"name": "x"}})).await,
        d.get(&format!("{path}/spectators")).await,
    ] {
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{}",
            r.body
        );
    }
    assert_eq!(
        d.get("/streaming/broadcasts").await.headers["x-total-count"],
        "3"
    );
}

#[tokio::test]
async fn bad_broadcasts_are_refused_naming_the_field() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let long_url = format!("https://example.com/{}", "x".repeat(2048));
    let cases: Vec<(Value, StatusCode, &str, &str)> = vec![
        (
            json!({"name": "flat"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "broadcast",
        ),
        (
            json!({"broadcast": {}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "name",
        ),
        (
            json!({"broadcast": {"name": "  "}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "name",
        ),
        (
            json!({"broadcast": {"name": "x".repeat(256)}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "name",
        ),
        (
            json!({"broadcast": {"name": 5}}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "name",
        ),
        (
            json!({"broadcast": "x"}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "broadcast",
        ),
        (
            json!({"broadcast": {"name": "x", "status": "ended"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "status",
        ),
        (
            json!({"broadcast": {"name": "x", "status": null}}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "status",
        ),
        (
            json!({"broadcast": {"name": "x", "stream_ids": [-1]}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "stream_ids",
        ),
        (
            json!({"broadcast": {"name": "x", "stream_ids": (1..=101).collect::<Vec<i64>>()}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "stream_ids",
        ),
        (
            json!({"broadcast": {"name": "x", "stream_ids": [424242]}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_stream",
            "stream_ids",
        ),
        (
            json!({"broadcast": {"name": "x", "show_dvr_after_finish": "yes"}}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "show_dvr_after_finish",
        ),
        (
            json!({"broadcast": {"name": "x", "pending_message": "m".repeat(4097)}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "pending_message",
        ),
        (
            json!({"broadcast": {"name": "x", "poster": "file:///etc/passwd"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "poster",
        ),
        (
            json!({"broadcast": {"name": "x", "share_url": "not a url"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "share_url",
        ),
        (
            json!({"broadcast": {"name": "x", "custom_iframe_url": long_url}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "custom_iframe_url",
        ),
        (
            json!({"broadcast": {"name": "x", "colour": "red"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_field",
            "colour",
        ),
        (
            json!({"broadcast": {"name": "x"}, "stream": {}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_field",
            "stream",
        ),
    ];
    for (body, status, code, field) in &cases {
        let r = d.post("/streaming/broadcasts", body.clone()).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (*status, *code, Some(*field)),
            "{body}: {}",
            r.body
        );
    }
    assert_eq!(
        d.get("/streaming/broadcasts").await.headers["x-total-count"],
        "0",
        "nothing created"
    );
    // The same rules on PATCH, and a refused PATCH changes nothing.
    let b = broadcast(&d, json!({"name": "ok"})).await;
    let path = format!("/streaming/broadcasts/{}", b["id"]);
    for (body, status, code, field) in cases.iter().skip(2) {
        let r = d.patch(&path, body.clone()).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (*status, *code, Some(*field)),
            "PATCH {body}: {}",
            r.body
        );
    }
    assert_eq!(d.get(&path).await.body, b);
    let r = d.patch(&path, json!({"name": "flat"})).await;
    assert_eq!((r.code(), r.field()), ("required", Some("broadcast")));
    let r = d
        .raw(
            Method::POST,
            "/streaming/broadcasts",
            &[("authorization", "apikey nope")],
            Some("{}".into()),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn stream_ids_and_broadcast_ids_are_one_relation() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let (s1, s2, s3) = (
        stream(&d, "s1").await,
        stream(&d, "s2").await,
        stream(&d, "s3").await,
    );
    let b1 = broadcast(&d, json!({"name": "b1", "stream_ids": [s2, s1, s2]})).await;
    let b1id = b1["id"].as_i64().unwrap();
    assert_eq!(b1["stream_ids"], json!([s1, s2]), "a set, ascending");
    assert_eq!(broadcast_ids(&d, s1).await, json!([b1id]));
    assert_eq!(broadcast_ids(&d, s2).await, json!([b1id]));
    assert_eq!(broadcast_ids(&d, s3).await, json!([]));

    // From the stream's side: s3 joins b1 and a new b2; s1 leaves b1.
    let b2id = broadcast(&d, json!({"name": "b2"})).await["id"]
        .as_i64()
        .unwrap();
    let r = d
        .patch(
            &format!("/streaming/streams/{s3}"),
            json!({"stream": {"broadcast_ids": [b2id, b1id]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["broadcast_ids"], json!([b1id, b2id]));
    let r = d
        .patch(
            &format!("/streaming/streams/{s1}"),
            json!({"stream": {"broadcast_ids": []}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let b1_now = d.get(&format!("/streaming/broadcasts/{b1id}")).await.body;
    assert_eq!(b1_now["stream_ids"], json!([s2, s3]));
    assert_ne!(b1_now["updated_at"], json!(null));
    assert_eq!(
        d.get(&format!("/streaming/broadcasts/{b2id}")).await.body["stream_ids"],
        json!([s3])
    );
    // A stream created into a broadcast.
    let r = d
        .post(
            "/streaming/streams",
            json!({"name": "s4", "broadcast_ids": [b2id]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let s4 = r.body["id"].as_i64().unwrap();
    assert_eq!(
        d.get(&format!("/streaming/broadcasts/{b2id}")).await.body["stream_ids"],
        json!([s3, s4])
    );

    // Unknown ids: 422 naming the field, nothing changes on either side.
    let r = d
        .patch(
            &format!("/streaming/streams/{s2}"),
            json!({"stream": {"name": "x", "broadcast_ids": [b1id, 999]}}),
        )
        .await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_broadcast",
            Some("broadcast_ids")
        ),
        "{}",
        r.body
    );
    assert_eq!(
        d.get(&format!("/streaming/streams/{s2}")).await.body["name"],
        "s2"
    );
    let r = d
        .post(
            "/streaming/streams",
            json!({"name": "s5", "broadcast_ids": [999]}),
        )
        .await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_broadcast",
            Some("broadcast_ids")
        )
    );
    let r = d
        .patch(
            &format!("/streaming/broadcasts/{b1id}"),
            json!({"broadcast": {"stream_ids": [s1, 999]}}),
        )
        .await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_stream",
            Some("stream_ids")
        )
    );
    assert_eq!(
        d.get(&format!("/streaming/broadcasts/{b1id}")).await.body["stream_ids"],
        json!([s2, s3])
    );
    assert_eq!(broadcast_ids(&d, s1).await, json!([]));

    // From the broadcast's side: replace its streams.
    let r = d
        .patch(
            &format!("/streaming/broadcasts/{b1id}"),
            json!({"broadcast": {"stream_ids": [s1]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(broadcast_ids(&d, s1).await, json!([b1id]));
    assert_eq!(broadcast_ids(&d, s2).await, json!([]));
    assert_eq!(broadcast_ids(&d, s3).await, json!([b2id]));

    // Deleting a stream removes it from its broadcasts; deleting a broadcast from its streams.
    assert_eq!(
        d.delete(&format!("/streaming/streams/{s3}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        d.get(&format!("/streaming/broadcasts/{b2id}")).await.body["stream_ids"],
        json!([s4])
    );
    assert_eq!(
        d.delete(&format!("/streaming/broadcasts/{b1id}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(broadcast_ids(&d, s1).await, json!([]));
    let listed = d.get("/streaming/streams").await.body;
    for s in listed.as_array().unwrap() {
        assert!(
            !s["broadcast_ids"]
                .as_array()
                .unwrap()
                .contains(&json!(b1id)),
            "{s}"
        );
    }

    // Acknowledged links survive kill -9.
    let data = dir.path();
    d.kill9();
    let d = Daemon::start(data);
    assert_eq!(broadcast_ids(&d, s4).await, json!([b2id]));
    assert_eq!(
        d.get(&format!("/streaming/broadcasts/{b2id}")).await.body["stream_ids"],
        json!([s4])
    );
}

/// What the player page polls: status, message, poster and the streams, unauthenticated;
/// unknown broadcasts are 404.
#[tokio::test]
async fn the_player_state_follows_the_broadcast() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let s = stream(&d, "cam").await;
    let b = broadcast(
        &d,
        json!({"name": "show", "stream_ids": [s], "pending_message": "Soon", "poster": "https://example.com/p.jpg"}),
    )
    .await;
    let id = b["id"].as_i64().unwrap();
    let state = || async {
        let r = reqwest::get(d.url(&format!("/player/broadcasts/{id}/state")))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().get("set-cookie").is_none());
        r.json::<Value>().await.unwrap()
    };
    let st = state().await;
    assert_eq!(
        (
            st["status"].as_str(),
            st["message"].as_str(),
            st["poster"].as_str()
        ),
        (
            Some("pending"),
            Some("Soon"),
            Some("https://example.com/p.jpg")
        )
    );
    assert_eq!(
        st["streams"],
        json!([{"id": s, "name": "cam", "live": false, "hls": format!("/cmaf/{s}/master.m3u8"), "dash": format!("/cmaf/{s}/index.mpd"), "dvr": false}])
    );
    assert_eq!(st["replay"], json!(null));
    // Finished with nothing to replay (no DVR, no recording): no replay.
    d.patch(
        &format!("/streaming/broadcasts/{id}"),
        json!({"broadcast": {"status": "finished", "show_dvr_after_finish": true}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // past the state cache
    let st = state().await;
    assert_eq!(
        (st["status"].as_str(), &st["replay"]),
        (Some("finished"), &json!(null))
    );
    // The page itself: the player in broadcast mode.
    let page = reqwest::get(b["iframe_url"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(page
        .text()
        .await
        .unwrap()
        .contains(&format!("/player/broadcasts/{id}/state")));
    for path in [
        "/player/broadcasts/999",
        "/player/broadcasts/999/state",
        "/player/broadcasts/01",
        "/player/broadcasts/1/x",
    ] {
        assert_eq!(
            reqwest::get(d.url(path)).await.unwrap().status(),
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
}

#[tokio::test]
async fn spectators_are_the_pages_that_polled_within_the_window() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let id = broadcast(&d, json!({"name": "watched"})).await["id"]
        .as_i64()
        .unwrap();
    let count = || async {
        let r = d
            .get(&format!("/streaming/broadcasts/{id}/spectators"))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        r.body["spectators_count"].as_u64().unwrap()
    };
    assert_eq!(count().await, 0);
    let poll = |viewer: &'static str| {
        let url = d.url(&format!("/player/broadcasts/{id}/state?viewer={viewer}"));
        async move {
            let r = reqwest::get(url).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
        }
    };
    // Two pages polling (one of them twice), plus ids that are not counted.
    let a = "0123456789abcdef0123456789abcdef";
    let b = "fedcba9876543210fedcba9876543210";
    poll(a).await;
    poll(b).await;
    poll(a).await;
    poll("bad").await;
    reqwest::get(d.url(&format!("/player/broadcasts/{id}/state")))
        .await
        .unwrap();
    assert_eq!(count().await, 2);
    // Polls for another broadcast do not count here.
    let other = broadcast(&d, json!({"name": "other"})).await["id"]
        .as_i64()
        .unwrap();
    reqwest::get(d.url(&format!("/player/broadcasts/{other}/state?viewer={a}")))
        .await
        .unwrap();
    assert_eq!(count().await, 2);
    // The pages close: after the 15 s window nobody is counted.
    let closed = Instant::now();
    while count().await > 0 {
        assert!(
            closed.elapsed() < Duration::from_secs(17),
            "still counted after the window"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        closed.elapsed() >= Duration::from_secs(13),
        "dropped before the window: {:?}",
        closed.elapsed()
    );
}
