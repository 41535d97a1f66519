//! `/fastedge/v1/apps`: CRUD, filters, ordering, paging and query validation.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tempdir, Daemon};

async fn seed(d: &Daemon) -> Vec<Value> {
    let apps = [
        json!({"name": "alpha", "binary": 10, "status": 1, "plan_id": 1, "plan": "basic"}),
        json!({"name": "beta-proxy", "binary": 11, "api_type": "proxy-wasm", "status": 2, "plan_id": 2, "plan": "pro"}),
        json!({"name": "gamma", "template": 5, "template_name": "Markdown", "status": 1, "plan_id": 2, "plan": "pro"}),
        json!({"name": "alphabet", "binary": 12, "template": 5, "status": 0, "plan_id": 3, "plan": "enterprise",
               "comment": "second alpha", "networks": ["edge-a", "edge-b"], "debug_until": "2030-01-01T12:00:00+02:00",
               "upgradeable_to": 13}),
        json!({"name": "delta", "binary": 10, "status": 5, "plan_id": 1, "plan": "basic"}),
    ];
    let mut out = Vec::new();
    for a in apps {
        let r = d.post("/fastedge/v1/apps", a.clone()).await;
        assert_eq!(r.status, StatusCode::CREATED, "{a}: {}", r.body);
        out.push(r.body);
    }
    out
}

fn names(r: &Value) -> Vec<&str> {
    r["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn create_get_patch_delete() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let apps = seed(&d).await;
    let a = &apps[3];
    let keys = [
        "id",
        "name",
        "url",
        "status",
        "binary",
        "comment",
        "api_type",
        "debug_until",
        "template",
        "template_name",
        "networks",
        "upgradeable_to",
        "plan_id",
        "plan",
    ];
    assert_eq!(a.as_object().unwrap().len(), keys.len(), "{a}");
    for k in keys {
        assert!(a.get(k).is_some(), "missing {k}");
    }
    assert_eq!(a["url"], "https://alphabet.fastedge.localhost");
    assert_eq!(
        a["debug_until"], "2030-01-01T10:00:00Z",
        "normalised to UTC"
    );
    assert_eq!(a["networks"], json!(["edge-a", "edge-b"]));
    assert_eq!(apps[0]["api_type"], "wasi-http", "default api_type");
    assert_eq!(apps[0]["comment"], "");
    let id = a["id"].as_i64().unwrap();
    let path = format!("/fastedge/v1/apps/{id}");
    assert_eq!(d.get(&path).await.body, *a);

    let r = d
        .patch(
            &path,
            json!({"status": 2, "comment": "now disabled", "debug_until": null, "url": "ignored"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["status"], 2);
    assert_eq!(r.body["comment"], "now disabled");
    assert_eq!(r.body["debug_until"], Value::Null);
    assert_eq!(r.body["name"], "alphabet");

    let r = d.patch(&path, json!({"name": "alpha"})).await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (StatusCode::CONFLICT, "name_taken", Some("name"))
    );
    let r = d
        .post("/fastedge/v1/apps", json!({"name": "gamma", "binary": 1}))
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "name_taken"));

    assert_eq!(d.delete(&path).await.status, StatusCode::NO_CONTENT);
    assert_eq!(d.get(&path).await.status, StatusCode::NOT_FOUND);
    assert_eq!(d.delete(&path).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        d.patch(&path, json!({"status": 1})).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn validation() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    for (body, status, code, field) in [
        (
            json!({"binary": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "name",
        ),
        (
            json!({"name": "x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "binary",
        ),
        (
            json!({"name": "Bad_Name", "binary": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "name",
        ),
        (
            json!({"name": "-x", "binary": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "name",
        ),
        (
            json!({"name": "x", "binary": 1, "status": 6}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "status",
        ),
        (
            json!({"name": "x", "binary": 1, "status": "1"}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "status",
        ),
        (
            json!({"name": "x", "binary": 0}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "binary",
        ),
        (
            json!({"name": "x", "binary": 1, "api_type": "wasm"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "api_type",
        ),
        (
            json!({"name": "x", "binary": 1, "debug_until": "tomorrow"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "debug_until",
        ),
        (
            json!({"name": "x", "binary": 1, "networks": "edge"}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "networks",
        ),
        (
            json!({"name": "x", "binary": 1, "networks": [""]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "networks",
        ),
        (
            json!({"name": "x", "binary": 1, "plan": ""}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "plan",
        ),
        (
            json!({"name": "x", "binary": 1, "comment": "c".repeat(1025)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "comment",
        ),
        (
            json!({"name": "x", "binary": 1, "env": {}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_field",
            "env",
        ),
    ] {
        let r = d.post("/fastedge/v1/apps", body.clone()).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (status, code, Some(field)),
            "{body}: {}",
            r.body
        );
    }
    assert_eq!(d.get("/fastedge/v1/apps").await.body["count"], 0);
}

#[tokio::test]
async fn filters_ordering_and_paging() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    seed(&d).await;
    let list = |q: &'static str| {
        let d = &d;
        async move {
            let r = d.get(&format!("/fastedge/v1/apps?{q}")).await;
            assert_eq!(r.status, StatusCode::OK, "{q}: {}", r.body);
            r.body
        }
    };
    let all = list("").await;
    assert_eq!(all["count"], 5);
    assert_eq!(
        names(&all),
        ["alpha", "beta-proxy", "gamma", "alphabet", "delta"],
        "default order is id"
    );

    let r = list("name=ALPHA").await;
    assert_eq!(
        (names(&r), r["count"].clone()),
        (vec!["alpha", "alphabet"], json!(2))
    );
    assert_eq!(names(&list("api_type=proxy-wasm").await), ["beta-proxy"]);
    assert_eq!(names(&list("status=1").await), ["alpha", "gamma"]);
    assert_eq!(names(&list("template=5").await), ["gamma", "alphabet"]);
    assert_eq!(names(&list("binary=10").await), ["alpha", "delta"]);
    assert_eq!(names(&list("plan=2").await), ["beta-proxy", "gamma"]);
    assert_eq!(names(&list("plan=2&status=2").await), ["beta-proxy"]);
    assert_eq!(list("name=zzz").await, json!({"apps": [], "count": 0}));

    assert_eq!(
        names(&list("ordering=name").await),
        ["alpha", "alphabet", "beta-proxy", "delta", "gamma"]
    );
    assert_eq!(
        names(&list("ordering=-name").await),
        ["gamma", "delta", "beta-proxy", "alphabet", "alpha"]
    );
    assert_eq!(
        names(&list("ordering=-status").await),
        ["delta", "beta-proxy", "alpha", "gamma", "alphabet"]
    );
    assert_eq!(
        names(&list("ordering=-id").await),
        ["delta", "alphabet", "gamma", "beta-proxy", "alpha"]
    );
    assert_eq!(
        names(&list("ordering=binary").await)[1..],
        ["alpha", "delta", "beta-proxy", "alphabet"]
    );
    assert_eq!(
        names(&list("ordering=plan").await),
        ["alpha", "delta", "alphabet", "beta-proxy", "gamma"]
    );
    assert_eq!(
        names(&list("ordering=-template&status=1").await),
        ["gamma", "alpha"]
    );

    // Paging: count is the total before paging.
    let r = list("ordering=name&limit=2&offset=1").await;
    assert_eq!(
        (names(&r), r["count"].clone()),
        (vec!["alphabet", "beta-proxy"], json!(5))
    );
    let r = list("limit=2&offset=4").await;
    assert_eq!(names(&r), ["delta"]);
    let r = list("offset=10").await;
    assert_eq!(
        (r["apps"].clone(), r["count"].clone()),
        (json!([]), json!(5))
    );

    for (q, param) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("offset=-1", "offset"),
        ("status=9", "status"),
        ("status=x", "status"),
        ("api_type=other", "api_type"),
        ("ordering=created", "ordering"),
        ("template=abc", "template"),
        ("binary=-3", "binary"),
        ("plan=", "plan"),
        ("name=a&name=b", "name"),
    ] {
        let r = d.get(&format!("/fastedge/v1/apps?{q}")).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (StatusCode::BAD_REQUEST, "invalid_query", Some(param)),
            "{q}"
        );
    }
}

#[tokio::test]
async fn default_limit_is_25_and_max_is_1000() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    for i in 0..30 {
        let r = d
            .post(
                "/fastedge/v1/apps",
                json!({"name": format!("app-{i:02}"), "binary": 1}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = d.get("/fastedge/v1/apps").await;
    assert_eq!(
        (
            r.body["apps"].as_array().unwrap().len(),
            r.body["count"].clone()
        ),
        (25, json!(30))
    );
    let r = d.get("/fastedge/v1/apps?limit=1000").await;
    assert_eq!(r.body["apps"].as_array().unwrap().len(), 30);
}
