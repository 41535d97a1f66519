//! `/streaming/streams/{id}/overlays`: create (all or none), list, get, move, bulk update,
//! delete, the box and URL rules, the per-stream maximum, and the record's `html_overlays`.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::{tempdir, Daemon};

async fn stream(d: &Daemon) -> i64 {
    d.post("/streaming/streams", json!({"name": "ov"}))
        .await
        .body["id"]
        .as_i64()
        .unwrap()
}

fn boxed(url: &str, x: u32, y: u32, w: u32, h: u32) -> Value {
    json!({"url": url, "x": x, "y": y, "width": w, "height": h})
}

#[tokio::test]
async fn overlays_are_created_moved_listed_and_deleted() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let id = stream(&d).await;
    let base = format!("/streaming/streams/{id}/overlays");
    assert_eq!(d.get(&base).await.body, json!([]));
    let r = d
        .post(
            &base,
            json!([
                boxed("https://example.com/score", 1500, 40, 400, 200),
                {"url": "http://example.com/frame", "stretch": true}
            ]),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let created = r.body.as_array().unwrap().clone();
    assert_eq!(created.len(), 2);
    let (a, b) = (&created[0], &created[1]);
    assert_eq!(
        (
            a["stream_id"].as_i64(),
            a["x"].as_u64(),
            a["width"].as_u64(),
            &a["stretch"]
        ),
        (Some(id), Some(1500), Some(400), &json!(false))
    );
    assert_eq!(
        (&b["stretch"], b["width"].as_u64()),
        (&json!(true), Some(0))
    );
    assert!(a["created_at"].as_str().unwrap().ends_with('Z'));
    // The record lists them.
    let rec = d.get(&format!("/streaming/streams/{id}")).await.body;
    assert_eq!(rec["html_overlays"], json!(created));
    // Move one: the other fields stay.
    let one = format!("{base}/{}", a["id"]);
    let r = d.patch(&one, json!({"x": 10, "y": 20})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (
            r.body["x"].as_u64(),
            r.body["y"].as_u64(),
            r.body["width"].as_u64()
        ),
        (Some(10), Some(20), Some(400))
    );
    assert_eq!(d.get(&one).await.body["x"], 10);
    // Bulk: both at once, or neither when one id is unknown.
    let r = d
        .call(
            Method::PATCH,
            &base,
            Some(json!([{"id": a["id"], "width": 300}, {"id": b["id"], "url": "https://example.com/other"}])),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body[0]["width"], 300);
    assert_eq!(r.body[1]["url"], "https://example.com/other");
    let r = d
        .call(
            Method::PATCH,
            &base,
            Some(json!([{"id": a["id"], "width": 100}, {"id": 999, "width": 100}])),
        )
        .await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_overlay",
            Some("id")
        ),
        "{}",
        r.body
    );
    assert_eq!(d.get(&one).await.body["width"], 300, "nothing applied");
    // Delete.
    assert_eq!(d.delete(&one).await.status, StatusCode::NO_CONTENT);
    assert_eq!(d.get(&one).await.status, StatusCode::NOT_FOUND);
    assert_eq!(d.delete(&one).await.status, StatusCode::NOT_FOUND);
    assert_eq!(d.get(&base).await.body.as_array().unwrap().len(), 1);
    // Another stream's overlay is not reachable through this one.
    let other = stream(&d).await;
    assert_eq!(
        d.get(&format!("/streaming/streams/{other}/overlays/{}", b["id"]))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Deleting the stream deletes its overlays.
    assert_eq!(
        d.delete(&format!("/streaming/streams/{id}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(d.get(&base).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_overlays_are_refused_naming_the_field_and_nothing_is_created() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let id = stream(&d).await;
    let base = format!("/streaming/streams/{id}/overlays");
    let ok = boxed("https://example.com/", 0, 0, 100, 100);
    let cases = [
        (boxed("ftp://example.com/", 0, 0, 10, 10), "url"),
        (boxed("http://169.254.169.254/latest", 0, 0, 10, 10), "url"),
        (boxed("http://[fe80::1]/", 0, 0, 10, 10), "url"),
        (boxed("not a url", 0, 0, 10, 10), "url"),
        (json!({"x": 0, "y": 0, "width": 10, "height": 10}), "url"),
        (boxed("https://example.com/", 0, 0, 0, 10), "width"),
        (boxed("https://example.com/", 0, 0, 1921, 10), "width"),
        (boxed("https://example.com/", 0, 0, 10, 1081), "height"),
        (boxed("https://example.com/", 1920, 0, 10, 10), "x"),
        (boxed("https://example.com/", 0, 1080, 10, 10), "y"),
        (boxed("https://example.com/", 1800, 0, 200, 10), "width"),
        (boxed("https://example.com/", 0, 1000, 10, 100), "height"),
        (
            json!({"url": "https://example.com/", "x": 0, "y": 0, "width": 10}),
            "height",
        ),
        (
            json!({"url": "https://example.com/", "stretch": true, "x": 5}),
            "x",
        ),
        (
            json!({"url": "https://example.com/", "x": -1, "y": 0, "width": 10, "height": 10}),
            "x",
        ),
    ];
    for (bad, field) in cases {
        // In a batch with a good one: all or none.
        let r = d.post(&base, json!([ok.clone(), bad.clone()])).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{bad}: {}",
            r.body
        );
        assert_eq!(r.field(), Some(field), "{bad}: {}", r.body);
    }
    let r = d
        .post(
            &base,
            json!([{"url": "https://example.com/", "colour": "red"}]),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "unknown_field")
    );
    let r = d.post(&base, ok.clone()).await;
    assert_eq!(
        r.status,
        StatusCode::BAD_REQUEST,
        "an object, not an array: {}",
        r.body
    );
    let r = d.post(&base, json!([])).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(d.get(&base).await.body, json!([]), "nothing was created");
    // At most 10 per stream.
    let ten: Vec<Value> = (0..10)
        .map(|i| boxed("https://example.com/", i * 100, 0, 50, 50))
        .collect();
    assert_eq!(d.post(&base, json!(ten)).await.status, StatusCode::CREATED);
    let r = d.post(&base, json!([ok])).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(r.body["error"]["message"].as_str().unwrap().contains("10"));
    // A PATCH that breaks a rule changes nothing.
    let first = d.get(&base).await.body[0].clone();
    let one = format!("{base}/{}", first["id"]);
    let r = d.patch(&one, json!({"x": 1900})).await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("width"))
    );
    assert_eq!(d.get(&one).await.body, first);
    // Unknown stream.
    assert_eq!(
        d.get("/streaming/streams/999/overlays").await.status,
        StatusCode::NOT_FOUND
    );
}

/// Without GStreamer's WPE plugin (every system plugin but it, linked into a private plugin
/// directory) the daemon still serves the API and refuses `html_overlay: true`, naming the
/// field.
#[tokio::test]
async fn without_the_wpe_plugin_html_overlay_is_refused() {
    let dir = tempdir();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let out = std::process::Command::new("pkg-config")
        .args(["--variable=pluginsdir", "gstreamer-1.0"])
        .output()
        .unwrap();
    let system = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    for entry in std::fs::read_dir(&system).unwrap().flatten() {
        if entry.file_name() != "libgstwpe.so" {
            std::os::unix::fs::symlink(entry.path(), plugins.join(entry.file_name())).unwrap();
        }
    }
    let registry = dir.path().join("registry.bin");
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("GST_PLUGIN_SYSTEM_PATH_1_0", plugins.to_str().unwrap()),
            ("GST_REGISTRY_1_0", registry.to_str().unwrap()),
        ],
    );
    let r = d
        .post(
            "/streaming/streams",
            json!({"name": "x", "html_overlay": true}),
        )
        .await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "overlays_unavailable",
            Some("html_overlay")
        ),
        "{}",
        r.body
    );
}
