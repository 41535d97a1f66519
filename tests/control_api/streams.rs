//! `/streaming/streams`: create/read/list/patch/delete, every validation rule, URL shapes.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tempdir, Daemon, KEY};

/// CDN resources the tests name in `cdn_id`.
const CDN: &str = "1=https://cdn-one.example,5=https://cdn-five.example/live/,7=http://127.0.0.1:9";

/// A daemon with the CDN resources above, and `env` on top.
fn cdn_daemon(dir: &std::path::Path, env: &[(&str, &str)]) -> Daemon {
    let mut all = vec![("LIVEPACK_API_KEYS", KEY), ("LIVEPACK_CDN_RESOURCES", CDN)];
    all.extend_from_slice(env);
    Daemon::start_with(dir, &all)
}

fn assert_record_shape(rec: &Value) {
    let keys = [
        "id",
        "name",
        "active",
        "pull",
        "uri",
        "low_latency_enabled",
        "auto_record",
        "dvr_enabled",
        "record_type",
        "hls_mpegts_endlist_tag",
        "dvr_duration",
        "cdn_id",
        "client_user_id",
        "client_entity_data",
        "html_overlay",
        "quality_set_id",
        "broadcast_ids",
        "projection",
        "srt_passphrase",
        "secure_playback",
        "token",
        "live",
        "backup_live",
        "input_protocol",
        "backup_input_protocol",
        "push_url",
        "backup_push_url",
        "push_url_srt",
        "backup_push_url_srt",
        "push_url_whip",
        "srt_play_url",
        "created_at",
        "started_at_primary",
        "started_at_backup",
        "finished_at_primary",
        "iframe_url",
        "dash_url",
        "hls_cmaf_url",
        "hls_mpegts_url",
        "screenshot",
        "transcoded_qualities",
        "shed_qualities",
        "transcoding_preset",
        "recording",
        "recording_duration",
        "transcoding_speed",
        "frame_rate",
        "video_height",
        "video_width",
        "video_codec",
        "audio_codec",
        "video_bitrate",
        "keyframe_interval",
        "frames_dropped",
        "viewers",
        "html_overlays",
        "storage_error",
        "whep_url",
        "whep_viewers",
        "srt_readers",
    ];
    let obj = rec.as_object().expect("record is an object");
    for k in keys {
        assert!(obj.contains_key(k), "record lacks `{k}`: {rec}");
    }
    assert_eq!(
        (&rec["recording"], &rec["recording_duration"]),
        (&json!(false), &json!(0.0)),
        "nothing recording"
    );
    assert_eq!(obj.len(), keys.len(), "unexpected extra keys in {rec}");
}

#[tokio::test]
async fn create_returns_defaults_urls_and_computed_fields() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let r = d
        .post("/streaming/streams", json!({"name": "Main show"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let rec = &r.body;
    assert_record_shape(rec);
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap();
    assert_eq!(token.len(), 32);
    assert_eq!(rec["name"], "Main show");
    assert_eq!(rec["active"], true);
    assert_eq!(rec["pull"], false);
    assert_eq!(rec["low_latency_enabled"], true);
    assert_eq!(rec["auto_record"], false);
    assert_eq!(rec["dvr_enabled"], false);
    assert_eq!(rec["record_type"], "origin");
    assert_eq!(rec["hls_mpegts_endlist_tag"], true);
    assert_eq!(rec["dvr_duration"], 14400);
    assert_eq!(rec["projection"], "regular");
    assert_eq!(rec["broadcast_ids"], json!([]));
    assert_eq!(rec["live"], false);
    assert_eq!(rec["backup_live"], false);
    assert_eq!(rec["transcoding_speed"], Value::Null);
    assert_eq!(rec["started_at_primary"], Value::Null);
    let created = rec["created_at"].as_str().unwrap();
    assert!(
        time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339)
            .is_ok(),
        "created_at {created} is not ISO 8601"
    );

    // URL shapes, with the ingest host from the public URL and the configured ports.
    let base = &d.base;
    let host = base
        .trim_start_matches("http://")
        .split(':')
        .next()
        .unwrap();
    let push = url::Url::parse(rec["push_url"].as_str().unwrap()).unwrap();
    assert_eq!(push.scheme(), "rtmp");
    assert_eq!(push.host_str(), Some(host));
    assert_eq!(push.path(), format!("/in/{id}"));
    assert_eq!(push.query(), Some(token));
    assert_eq!(
        rec["backup_push_url"].as_str().unwrap(),
        rec["push_url"]
            .as_str()
            .unwrap()
            .replace(&format!("/in/{id}?"), &format!("/in/{id}b?"))
    );
    let srt = rec["push_url_srt"].as_str().unwrap();
    assert!(srt.starts_with(&format!("srt://{host}:")), "{srt}");
    assert!(srt.ends_with(&format!("?streamid={id}#{token}")), "{srt}");
    assert!(rec["backup_push_url_srt"]
        .as_str()
        .unwrap()
        .ends_with(&format!("?streamid={id}b#{token}")));
    assert_eq!(
        rec["push_url_whip"],
        format!("{base}/whip/{id}?token={token}")
    );
    // SRT read: the push URL's host and port, no token.
    let srt_base = srt.split('?').next().unwrap();
    assert_eq!(
        rec["srt_play_url"],
        format!("{srt_base}?streamid=play:{id}")
    );
    assert_eq!(rec["hls_cmaf_url"], format!("{base}/cmaf/{id}/master.m3u8"));
    assert_eq!(rec["dash_url"], format!("{base}/cmaf/{id}/index.mpd"));
    assert_eq!(
        rec["hls_mpegts_url"],
        format!("{base}/mpegts/{id}/master_mpegts.m3u8")
    );
    assert_eq!(
        rec["screenshot"],
        format!("{base}/screenshots/{id}/last.jpg")
    );
    assert_eq!(rec["iframe_url"], format!("{base}/player/{id}"));

    // GET returns the same record.
    let got = d.get(&format!("/streaming/streams/{id}")).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(&got.body, rec);
}

#[tokio::test]
async fn every_writable_field_round_trips() {
    let dir = tempdir();
    let d = cdn_daemon(dir.path(), &[]);
    // `broadcast_ids` must name broadcasts; it is a set, returned ascending.
    let mut broadcasts = Vec::new();
    for n in 0..3 {
        let r = d
            .post(
                "/streaming/broadcasts",
                json!({"broadcast": {"name": format!("b{n}")}}),
            )
            .await;
        broadcasts.push(r.body["id"].as_i64().unwrap());
    }
    let (b1, b2, b3) = (broadcasts[0], broadcasts[1], broadcasts[2]);
    let body = json!({
        "name": "all", "active": false, "pull": true,
        "uri": "rtmp://src.example/live/a srt://10.0.0.1:9000 https://cdn.example/x.m3u8",
        "auto_record": true, "dvr_enabled": true, "record_type": "transcoded",
        "hls_mpegts_endlist_tag": false, "dvr_duration": 30, "cdn_id": 7,
        "client_user_id": 18446744073709551615u64, "client_entity_data": "ü".repeat(4096),
        "html_overlay": true, "quality_set_id": 2, "broadcast_ids": [b3, b1, b2, b1], "projection": "vr360tb",
        "srt_passphrase": " !~ten chars~ with spaces ~ "
    });
    let r = d.post("/streaming/streams", body.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    for (k, v) in body.as_object().unwrap() {
        if k == "broadcast_ids" {
            assert_eq!(r.body[k], json!([b1, b2, b3]));
            continue;
        }
        assert_eq!(&r.body[k], v, "field {k}");
    }
    // client_user_id comes back as the exact integer text sent.
    let id = r.body["id"].as_i64().unwrap();
    let raw = reqwest::Client::new()
        .get(d.url(&format!("/streaming/streams/{id}")))
        .header("authorization", format!("apikey {}", d.key))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        raw.contains("\"client_user_id\":18446744073709551615"),
        "{raw}"
    );
    // PULL streams have no push URLs.
    for k in [
        "push_url",
        "backup_push_url",
        "push_url_srt",
        "backup_push_url_srt",
        "push_url_whip",
    ] {
        assert_eq!(r.body[k], Value::Null, "{k}");
    }
}

#[tokio::test]
async fn validation_rules_name_the_field() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let cases: Vec<(Value, StatusCode, &str, &str)> = vec![
        (
            json!({}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "name",
        ),
        (
            json!({"name": "  "}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "name",
        ),
        (
            json!({"name": 5}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "name",
        ),
        (
            json!({"name": null}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "name",
        ),
        (
            json!({"name": "x".repeat(256)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "name",
        ),
        (
            json!({"name": "a", "active": "yes"}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "active",
        ),
        (
            json!({"name": "a", "pull": true}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "uri",
        ),
        (
            json!({"name": "a", "pull": true, "uri": " "}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "uri",
        ),
        (
            json!({"name": "a", "pull": true, "uri": "file:///etc/passwd"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "uri",
        ),
        (
            json!({"name": "a", "pull": true, "uri": "rtmp://ok/x ftp://no/x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "uri",
        ),
        (
            json!({"name": "a", "uri": "javascript:alert(1)"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "uri",
        ),
        (
            json!({"name": "a", "dvr_duration": 29}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "dvr_duration",
        ),
        (
            json!({"name": "a", "dvr_duration": 14401}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "dvr_duration",
        ),
        (
            json!({"name": "a", "dvr_duration": 60.5}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "dvr_duration",
        ),
        (
            json!({"name": "a", "record_type": "both"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "record_type",
        ),
        (
            json!({"name": "a", "projection": "flat"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "projection",
        ),
        (
            json!({"name": "a", "srt_passphrase": "short"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "srt_passphrase",
        ),
        (
            json!({"name": "a", "srt_passphrase": "p".repeat(81)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "srt_passphrase",
        ),
        (
            json!({"name": "a", "srt_passphrase": "pässphrase-not-ascii"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "srt_passphrase",
        ),
        (
            json!({"name": "a", "srt_passphrase": 1234567890}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "srt_passphrase",
        ),
        (
            json!({"name": "a", "client_entity_data": "x".repeat(4097)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "client_entity_data",
        ),
        (
            json!({"name": "a", "client_user_id": "abc"}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "client_user_id",
        ),
        (
            json!({"name": "a", "client_user_id": 1.5}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "client_user_id",
        ),
        (
            json!({"name": "a", "quality_set_id": 999}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_quality_set",
            "quality_set_id",
        ),
        (
            json!({"name": "a", "broadcast_ids": [1, "2"]}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "broadcast_ids",
        ),
        (
            json!({"name": "a", "broadcast_ids": [0]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
            "broadcast_ids",
        ),
        (
            json!({"name": "a", "cdn_id": "x"}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "cdn_id",
        ),
        (
            json!({"name": "a", "html_overlay": 1}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "html_overlay",
        ),
        (
            json!({"name": "a", "colour": "red"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_field",
            "colour",
        ),
        (
            json!({"name": "a", "low_latency_enabled": true}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "deprecated_field",
            "low_latency_enabled",
        ),
        (
            json!(["name"]),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "body",
        ),
    ];
    for (body, status, code, field) in cases {
        let r = d.post("/streaming/streams", body.clone()).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (status, code, Some(field)),
            "body {body}: {}",
            r.body
        );
        assert!(r.body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // Nothing was created by any refused request.
    let list = d.get("/streaming/streams").await;
    assert_eq!(list.headers["x-total-count"], "0");
    assert_eq!(list.body, json!([]));
}

#[tokio::test]
async fn malformed_bodies_and_limits() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let auth = format!("apikey {}", d.key);
    let h = [("authorization", auth.as_str())];
    let post = |body: String| d.raw(reqwest::Method::POST, "/streaming/streams", &h, Some(body));

    let r = post("{\"name\": ".into()).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "malformed_json")
    );
    let r = post(String::new()).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "malformed_json")
    );
    // Nesting deeper than the parser allows is a 400, not a crash.
    let deep = format!(
        "{{\"name\":\"a\",\"x\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let r = post(deep).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "malformed_json")
    );
    // Over 1 MiB → 413.
    let big = json!({"name": "a", "client_entity_data": "x".repeat(1024 * 1024)}).to_string();
    let r = post(big).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );
    // Not JSON → 415.
    let r = d
        .client_raw_with_type("text/plain", "{\"name\":\"a\"}")
        .await;
    assert_eq!(r, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // The daemon is still healthy and nothing was stored.
    assert_eq!(
        d.get("/streaming/streams").await.headers["x-total-count"],
        "0"
    );
}

impl Daemon {
    async fn client_raw_with_type(&self, content_type: &str, body: &str) -> StatusCode {
        reqwest::Client::new()
            .post(self.url("/streaming/streams"))
            .header("authorization", format!("apikey {}", self.key))
            .header("content-type", content_type)
            .body(body.to_owned())
            .send()
            .await
            .unwrap()
            .status()
    }
}

#[tokio::test]
async fn patch_changes_only_given_fields() {
    let dir = tempdir();
    let d = cdn_daemon(dir.path(), &[]);
    let created = d
        .post(
            "/streaming/streams",
            json!({"name": "a", "cdn_id": 5, "dvr_enabled": true, "srt_passphrase": "0123456789"}),
        )
        .await
        .body;
    let id = created["id"].as_i64().unwrap();
    let path = format!("/streaming/streams/{id}");

    let r = d
        .patch(
            &path,
            json!({"stream": {"name": "b", "cdn_id": null, "low_latency_enabled": false,
            "token": "forged", "live": true, "id": 999, "srt_passphrase": null}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["name"], "b");
    assert_eq!(r.body["cdn_id"], Value::Null);
    assert_eq!(r.body["srt_passphrase"], Value::Null, "null clears it");
    assert_eq!(r.body["dvr_enabled"], true, "untouched field kept");
    assert_eq!(
        r.body["low_latency_enabled"], true,
        "deprecated field always true"
    );
    assert_eq!(r.body["token"], created["token"], "read-only token ignored");
    assert_eq!(r.body["id"], id);
    assert_eq!(r.body["live"], false);
    assert_eq!(r.body["created_at"], created["created_at"]);

    // A rule over the merged record: turning pull on needs a uri.
    let r = d.patch(&path, json!({"stream": {"pull": true}})).await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "required", Some("uri"))
    );
    let r = d
        .patch(
            &path,
            json!({"stream": {"pull": true, "uri": "srt://127.0.0.1:9000"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["push_url"], Value::Null);

    for (body, status, code) in [
        (
            json!({"name": "flat"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
        ),
        (
            json!({"stream": {}, "name": "x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_field",
        ),
        (
            json!({"stream": "x"}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
        ),
        (
            json!({"stream": {"dvr_duration": 5}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_value",
        ),
        (
            json!({"stream": {"bogus": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_field",
        ),
        (
            json!({"stream": {"low_latency_enabled": "no"}}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
        ),
    ] {
        let r = d.patch(&path, body.clone()).await;
        assert_eq!((r.status, r.code()), (status, code), "{body}");
    }
    let r = d
        .patch(
            "/streaming/streams/424242",
            json!({"stream": {"name": "x"}}),
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
    // The refused patches changed nothing.
    assert_eq!(d.get(&path).await.body["name"], "b");
}

#[tokio::test]
async fn concurrent_patches_to_different_fields_all_land() {
    let dir = tempdir();
    let d = cdn_daemon(dir.path(), &[]);
    let id = d
        .post("/streaming/streams", json!({"name": "a"}))
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let path = format!("/streaming/streams/{id}");
    let (a, b, c) = tokio::join!(
        d.patch(&path, json!({"stream": {"cdn_id": 1}})),
        d.patch(&path, json!({"stream": {"auto_record": true}})),
        d.patch(&path, json!({"stream": {"projection": "vr180"}})),
    );
    for r in [a, b, c] {
        assert_eq!(r.status, StatusCode::OK);
    }
    let rec = d.get(&path).await.body;
    assert_eq!(
        (
            rec["cdn_id"].clone(),
            rec["auto_record"].clone(),
            rec["projection"].clone()
        ),
        (json!(1), json!(true), json!("vr180"))
    );
}

#[tokio::test]
async fn list_pages_newest_first_with_total() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let mut ids = Vec::new();
    for i in 0..27 {
        ids.push(
            d.post("/streaming/streams", json!({"name": format!("s{i}")}))
                .await
                .body["id"]
                .as_i64()
                .unwrap(),
        );
    }
    let page1 = d.get("/streaming/streams").await;
    assert_eq!(page1.headers["x-total-count"], "27");
    let got: Vec<i64> = page1
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    let newest: Vec<i64> = ids.iter().rev().take(25).copied().collect();
    assert_eq!(got, newest);
    let page2 = d.get("/streaming/streams?page=2").await;
    let got2: Vec<i64> = page2
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(got2, vec![ids[1], ids[0]]);
    assert_eq!(d.get("/streaming/streams?page=3").await.body, json!([]));
    for bad in ["page=0", "page=-1", "page=x", "page=1&page=2"] {
        let r = d.get(&format!("/streaming/streams?{bad}")).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (StatusCode::BAD_REQUEST, "invalid_query", Some("page")),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn search_finds_names_containing_it_whatever_the_case_and_follows_renames() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let mut ids = Vec::new();
    for name in ["Main Stage", "backstage cam", "Lobby", "STAGE left Ünïcode"] {
        let r = d.post("/streaming/streams", json!({ "name": name })).await;
        ids.push(r.body["id"].as_i64().unwrap());
    }
    let found = |q: &'static str| {
        let d = &d;
        async move {
            let r = d.get(&format!("/streaming/streams?search={q}")).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            let names: Vec<String> = r
                .body
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(r.headers["x-total-count"], names.len().to_string().as_str());
            names
        }
    };
    assert_eq!(
        found("stage").await,
        ["STAGE left Ünïcode", "backstage cam", "Main Stage"]
    );
    assert_eq!(found("%C3%BCn%C3%AF").await, ["STAGE left Ünïcode"]);
    assert_eq!(
        found("%25").await,
        Vec::<String>::new(),
        "no LIKE wildcards"
    );
    assert_eq!(found("").await.len(), 4, "an empty search is no filter");
    // A rename is found by its new name, not its old one.
    let r = d
        .patch(
            &format!("/streaming/streams/{}", ids[2]),
            json!({"stream": {"name": "Green room"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(found("lobby").await, Vec::<String>::new());
    assert_eq!(found("GREEN").await, ["Green room"]);
    let long = "x".repeat(1025);
    let r = d.get(&format!("/streaming/streams?search={long}")).await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (StatusCode::BAD_REQUEST, "invalid_query", Some("search"))
    );
}

#[tokio::test]
async fn delete_and_legacy_playlist_redirect() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = d
        .post("/streaming/streams", json!({"name": "a"}))
        .await
        .body;
    let id = rec["id"].as_i64().unwrap();
    let r = d
        .get(&format!("/streaming/streams/{id}/playlist.m3u8"))
        .await;
    assert_eq!(r.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(
        r.headers["location"],
        rec["hls_mpegts_url"].as_str().unwrap()
    );

    let r = d.delete(&format!("/streaming/streams/{id}")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    for path in [
        format!("/streaming/streams/{id}"),
        format!("/streaming/streams/{id}/playlist.m3u8"),
    ] {
        let r = d.get(&path).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
    assert_eq!(
        d.delete(&format!("/streaming/streams/{id}")).await.status,
        StatusCode::NOT_FOUND
    );
    // Ids are never reused after a delete.
    let next = d
        .post("/streaming/streams", json!({"name": "b"}))
        .await
        .body;
    assert!(next["id"].as_i64().unwrap() > id);
}

#[tokio::test]
async fn cdn_resources_and_ingest_regions_shape_the_urls() {
    let dir = tempdir();
    let d = cdn_daemon(
        dir.path(),
        &[(
            "LIVEPACK_INGEST_REGIONS",
            "eu=ingest-eu.example.com,v6=2001:db8::7",
        )],
    );
    let r = d
        .post("/streaming/streams", json!({"name": "cdn", "cdn_id": 5}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let (rec, id) = (r.body.clone(), r.body["id"].as_i64().unwrap());
    let cdn = "https://cdn-five.example/live";
    for (k, path) in [
        ("hls_cmaf_url", format!("/cmaf/{id}/master.m3u8")),
        ("dash_url", format!("/cmaf/{id}/index.mpd")),
        ("hls_mpegts_url", format!("/mpegts/{id}/master_mpegts.m3u8")),
        ("iframe_url", format!("/player/{id}")),
        ("screenshot", format!("/screenshots/{id}/last.jpg")),
    ] {
        assert_eq!(rec[k], format!("{cdn}{path}"), "{k}");
    }
    // Pushing stays on this server; each region gets the same endpoints on its host.
    let token = rec["token"].as_str().unwrap();
    assert!(rec["push_url_whip"].as_str().unwrap().starts_with(&d.base));
    let regions = rec["multi_region_push_urls"].as_array().unwrap();
    assert_eq!(regions.len(), 2, "{rec}");
    let eu = &regions[0];
    assert_eq!(eu["region"], "eu");
    let rtmp_port = url::Url::parse(rec["push_url"].as_str().unwrap())
        .unwrap()
        .port()
        .unwrap();
    assert_eq!(
        eu["push_url"],
        format!("rtmp://ingest-eu.example.com:{rtmp_port}/in/{id}?{token}")
    );
    assert_eq!(
        eu["backup_push_url"],
        format!("rtmp://ingest-eu.example.com:{rtmp_port}/in/{id}b?{token}")
    );
    assert!(eu["push_url_srt"]
        .as_str()
        .unwrap()
        .starts_with("srt://ingest-eu.example.com:"));
    assert!(eu["backup_push_url_srt"]
        .as_str()
        .unwrap()
        .ends_with(&format!("?streamid={id}b#{token}")));
    let whip = url::Url::parse(eu["push_url_whip"].as_str().unwrap()).unwrap();
    assert_eq!(whip.host_str(), Some("ingest-eu.example.com"));
    assert_eq!(whip.path(), format!("/whip/{id}"));
    assert!(regions[1]["push_url"]
        .as_str()
        .unwrap()
        .starts_with("rtmp://[2001:db8::7]:"));

    // An unknown resource is refused naming the field; null goes back to this server.
    for body in [
        json!({"name": "x", "cdn_id": 6}),
        json!({"name": "x", "cdn_id": 0}),
    ] {
        let r = d.post("/streaming/streams", body).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown_cdn_resource",
                Some("cdn_id")
            ),
            "{}",
            r.body
        );
    }
    let path = format!("/streaming/streams/{id}");
    let r = d.patch(&path, json!({"stream": {"cdn_id": 6}})).await;
    assert_eq!(r.code(), "unknown_cdn_resource");
    let r = d.patch(&path, json!({"stream": {"cdn_id": null}})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body["hls_cmaf_url"]
        .as_str()
        .unwrap()
        .starts_with(&d.base));

    // Without regions configured the field is absent.
    let dir2 = tempdir();
    let plain = Daemon::start(dir2.path());
    let r = plain.post("/streaming/streams", json!({"name": "p"})).await;
    assert!(r.body.get("multi_region_push_urls").is_none(), "{}", r.body);
}

/// `secure_playback` needs the daemon's signing key: refused (naming the field) without one,
/// and on a daemon with one, the record's playback URLs carry a grant while push URLs do not.
#[tokio::test]
async fn secure_playback_needs_the_signing_key() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let r = d
        .post(
            "/streaming/streams",
            json!({"name": "s", "secure_playback": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(
        (r.code(), r.field()),
        ("no_playback_key", Some("secure_playback"))
    );
    let made = d.post("/streaming/streams", json!({"name": "s"})).await;
    let id = made.body["id"].as_i64().unwrap();
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"secure_playback": true}}),
        )
        .await;
    assert_eq!(r.field(), Some("secure_playback"), "{}", r.body);
    assert_eq!(made.body["secure_playback"], false);

    let keyed = tempdir();
    let d = Daemon::start_with(
        keyed.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            (
                "LIVEPACK_PLAYBACK_SIGNING_KEY",
                "control-api-key-0123456789",
            ),
            ("LIVEPACK_PLAYBACK_TOKEN_TTL_SECS", "600"),
        ],
    );
    let r = d
        .post(
            "/streaming/streams",
            json!({"name": "s", "secure_playback": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["secure_playback"], true);
    let id = r.body["id"].as_i64().unwrap();
    let hls = r.body["hls_cmaf_url"].as_str().unwrap();
    let prefix = format!("/cmaf/{id}/t/");
    assert!(hls.contains(&prefix), "{hls}");
    let expires: i64 = hls
        .split("/t/")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (expires - now - 600).abs() < 30,
        "the configured lifetime: {expires}"
    );
    assert!(!r.body["push_url"].as_str().unwrap().contains("/t/"));
    // SRT read carries the same grant, after the id as the paths do.
    let grant = &hls[hls.find("/t/").unwrap()..hls.find("/master.m3u8").unwrap()];
    let srt = r.body["srt_play_url"].as_str().unwrap();
    assert!(
        srt.ends_with(&format!("?streamid=play:{id}{grant}")),
        "{srt}"
    );
}
