//! The OpenAPI document and the server agree: every documented operation is answered (not 404
//! for the route, not 405), and every other method on a documented path is 405.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::{tempdir, Daemon};

const METHODS: &[&str] = &["get", "put", "post", "delete", "patch"];

#[tokio::test]
async fn documented_routes_are_served_and_undocumented_methods_refused() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let doc = d.raw(Method::GET, "/openapi.json", &[], None).await.body;
    // Also the copy in the repository is what is served.
    let repo: Value =
        serde_json::from_str(include_str!("../../src/http/api/openapi.json")).unwrap();
    assert_eq!(doc, repo);

    let stream = d
        .post("/streaming/streams", json!({"name": "x"}))
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let app = d
        .post("/fastedge/v1/apps", json!({"name": "x", "binary": 1}))
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let overlay = d
        .post(
            &format!("/streaming/streams/{stream}/overlays"),
            json!([{"url": "https://example.com/", "stretch": true}]),
        )
        .await
        .body[0]["id"]
        .as_i64()
        .unwrap();
    let broadcast = d
        .post("/streaming/broadcasts", json!({"broadcast": {"name": "x"}}))
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let webhook = d
        .post(
            "/streaming/webhooks",
            json!({"url": "https://hooks.example/in"}),
        )
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let restream = d
        .post(
            "/streaming/restreams",
            json!({"name": "x", "stream_id": stream, "uri": "rtmp://ingest.example/live/key"}),
        )
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 10, "suspiciously few paths");
    // DELETE last so the ids stay valid while the other operations are probed.
    let mut ops: Vec<(String, String)> = Vec::new();
    for (path, item) in paths {
        for m in METHODS {
            if item.get(*m).is_some() {
                ops.push((m.to_string(), path.clone()));
            }
        }
    }
    // …and a sub-resource's DELETE before its parent's (deleting a stream deletes its overlays).
    ops.sort_by_key(|(m, p)| ((m == "delete") as u8, std::cmp::Reverse(p.len())));
    for (m, path) in &ops {
        let id = if path.starts_with("/fastedge") {
            app
        } else if path.starts_with("/streaming/broadcasts") {
            broadcast
        } else if path.starts_with("/streaming/webhooks") {
            webhook
        } else if path.starts_with("/streaming/restreams") {
            restream
        } else {
            stream
        };
        let concrete = path
            .replace("{id}", &id.to_string())
            .replace("{overlay_id}", &overlay.to_string());
        let method = Method::from_bytes(m.to_uppercase().as_bytes()).unwrap();
        if path == "/streaming/events" {
            // The feed never ends: its head is the answer.
            let head = reqwest::Client::new()
                .get(d.url(path))
                .header("authorization", format!("apikey {}", d.key))
                .send()
                .await
                .unwrap();
            assert_eq!(head.status(), StatusCode::OK, "{path}");
            continue;
        }
        let body = matches!(method, Method::POST | Method::PATCH | Method::PUT).then(|| json!({}));
        let r = d.call(method.clone(), &concrete, body).await;
        assert_ne!(
            r.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{m} {path} documented but refused"
        );
        // Videos come only from recordings: a video route answers its own 404 for an id
        // that names none ("video not found"), never the router's ("resource not found").
        if path.starts_with("/streaming/videos/") {
            assert!(
                r.status != StatusCode::NOT_FOUND
                    || r.body["error"]["message"] == "video not found",
                "{m} {path} documented but not routed: {}",
                r.body
            );
        } else {
            assert_ne!(
                r.status,
                StatusCode::NOT_FOUND,
                "{m} {path} documented but not found: {}",
                r.body
            );
        }
        // Each documented response status includes what was answered.
        let documented = &paths[path][m.as_str()]["responses"];
        assert!(
            documented.get(r.status.as_str()).is_some(),
            "{m} {path} answered {} which the document does not list",
            r.status
        );
    }
    for (path, item) in paths {
        let concrete = path
            .replace("{id}", &stream.to_string())
            .replace("{overlay_id}", &overlay.to_string());
        for m in METHODS.iter().filter(|m| item.get(**m).is_none()) {
            let method = Method::from_bytes(m.to_uppercase().as_bytes()).unwrap();
            let r = d.call(method, &concrete, None).await;
            assert_eq!(
                r.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{m} {path} is answered but not documented"
            );
        }
    }
}
