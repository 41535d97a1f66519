//! `/streaming/webhooks`: the record's rules as a client sees them — the secret shown once,
//! the URL policy, known event types only, deliveries listed per webhook.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::{tempdir, Daemon};

#[tokio::test]
async fn webhooks_keep_their_secret_to_themselves_and_refuse_what_they_cannot_deliver() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let created = d
        .post(
            "/streaming/webhooks",
            json!({"url": "https://hooks.example/in", "events": ["live_started", "live_ended", "live_started"]}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_i64().unwrap();
    assert_eq!(
        created.body["events"],
        json!(["live_started", "live_ended"])
    );
    assert_eq!(created.body["active"], true);
    let secret = created.body["secret"].as_str().unwrap();
    assert!(
        secret.starts_with("whsec_") && secret.len() == 70,
        "{secret}"
    );

    // The secret is never shown again: not by get, list or update.
    let path = format!("/streaming/webhooks/{id}");
    let got = d.get(&path).await;
    assert_eq!(got.status, StatusCode::OK);
    assert!(got.body.get("secret").is_none(), "{}", got.body);
    let list = d.get("/streaming/webhooks").await;
    assert_eq!(list.headers["x-total-count"], "1");
    assert!(!list.body.to_string().contains(secret));
    let updated = d
        .patch(&path, json!({"active": false, "events": null}))
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.body);
    assert_eq!(
        (
            &updated.body["active"],
            &updated.body["events"],
            &updated.body["url"]
        ),
        (
            &json!(false),
            &Value::Null,
            &json!("https://hooks.example/in")
        )
    );
    assert!(updated.body.get("secret").is_none());
    // Rotation shows the new one, once.
    let rotated = d
        .call(Method::PUT, &format!("{path}/rotate_secret"), None)
        .await;
    assert_eq!(rotated.status, StatusCode::OK);
    let new_secret = rotated.body["secret"].as_str().unwrap();
    assert_ne!(new_secret, secret);

    // Refusals, each naming its field.
    for (body, code, field) in [
        (json!({}), "required", "url"),
        (json!({"url": "file:///etc/passwd"}), "invalid_value", "url"),
        (
            json!({"url": "http://169.254.169.254/latest"}),
            "invalid_value",
            "url",
        ),
        (json!({"url": "not a url"}), "invalid_value", "url"),
        (
            json!({"url": "https://a.example", "events": []}),
            "invalid_value",
            "events",
        ),
        (
            json!({"url": "https://a.example", "events": ["nope"]}),
            "invalid_value",
            "events",
        ),
        (
            json!({"url": "https://a.example", "events": "live_started"}),
            "invalid_type",
            "events",
        ),
        (
            json!({"url": "https://a.example", "events": [1]}),
            "invalid_type",
            "events",
        ),
        (
            json!({"url": "https://a.example", "active": "yes"}),
            "invalid_type",
            "active",
        ),
        (
            json!({"url": "https://a.example", "colour": "red"}),
            "unknown_field",
            "colour",
        ),
    ] {
        let r = d.post("/streaming/webhooks", body.clone()).await;
        let status = match code {
            "invalid_type" => StatusCode::BAD_REQUEST,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert_eq!(
            (r.code(), r.field()),
            (code, Some(field)),
            "{body}: {}",
            r.body
        );
    }
    let r = d.patch(&path, json!({"url": "ftp://a.example/x"})).await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("url"))
    );

    // Deliveries: none yet; a bad filter is a query error.
    let r = d.get(&format!("{path}/deliveries")).await;
    assert_eq!((r.status, r.body.clone()), (StatusCode::OK, json!([])));
    assert_eq!(r.headers["x-total-count"], "0");
    let r = d.get(&format!("{path}/deliveries?status=lost")).await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::BAD_REQUEST, Some("status"))
    );
    let r = d
        .call(Method::POST, &format!("{path}/deliveries"), None)
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);

    // Gone: 404 everywhere.
    assert_eq!(d.delete(&path).await.status, StatusCode::NO_CONTENT);
    for p in [path.clone(), format!("{path}/deliveries")] {
        let r = d.get(&p).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{p}"
        );
    }
    let r = d
        .call(Method::PUT, &format!("{path}/rotate_secret"), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(d.delete(&path).await.status, StatusCode::NOT_FOUND);
}
