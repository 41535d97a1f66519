//! Daemon lifecycle and the smaller resources: durability across restart and `kill -9`, graceful
//! SIGTERM, configuration sources, quality sets, profile templates, HTTP-level limits.

use std::process::Command;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::proc::run_within;
use crate::common::{tempdir, Daemon, KEY, UNSET};

/// The daemon run with a configuration it must refuse: bounded, since a daemon that accepts it
/// would serve forever.
fn refused_start(cmd: &mut Command) -> std::process::Output {
    run_within(cmd, "livepack", Duration::from_secs(30))
}

#[tokio::test]
async fn acknowledged_writes_survive_kill_9() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let mut ids = Vec::new();
    for i in 0..20 {
        let r = d
            .post("/streaming/streams", json!({"name": format!("s{i}")}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
        ids.push(r.body["id"].as_i64().unwrap());
    }
    let patched = d
        .patch(
            &format!("/streaming/streams/{}", ids[3]),
            json!({"stream": {"name": "renamed", "dvr_duration": 60}}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK);
    assert_eq!(
        d.delete(&format!("/streaming/streams/{}", ids[4]))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let app = d
        .post("/fastedge/v1/apps", json!({"name": "kept", "binary": 1}))
        .await;
    assert_eq!(app.status, StatusCode::CREATED);
    let qs = d
        .call(
            Method::PUT,
            "/streaming/quality_sets/default",
            Some(json!({"live": {"id": 2}})),
        )
        .await;
    assert_eq!(qs.status, StatusCode::OK);
    let before = d.get(&format!("/streaming/streams/{}", ids[3])).await.body;
    d.kill9();

    let d = Daemon::start(dir.path());
    let list = d.get("/streaming/streams").await;
    assert_eq!(list.headers["x-total-count"], "19");
    let after = d.get(&format!("/streaming/streams/{}", ids[3])).await.body;
    // Same record, same token, same URLs except the port of the new HTTP listener.
    assert_eq!(after["name"], "renamed");
    assert_eq!(after["dvr_duration"], 60);
    assert_eq!(after["token"], before["token"]);
    assert_eq!(after["created_at"], before["created_at"]);
    assert_eq!(
        d.get(&format!("/streaming/streams/{}", ids[4]))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(d.get("/fastedge/v1/apps?name=kept").await.body["count"], 1);
    let sets = d.get("/streaming/quality_sets").await.body;
    let default: Vec<i64> = sets["live"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["default"] == true)
        .map(|s| s["id"].as_i64().unwrap())
        .collect();
    assert_eq!(default, [2]);
}

#[tokio::test]
async fn sigterm_exits_zero_and_data_persists() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let id = d
        .post("/streaming/streams", json!({"name": "x"}))
        .await
        .body["id"]
        .as_i64()
        .unwrap();
    let status = d.terminate();
    assert!(status.success(), "exit status {status:?}");
    let d = Daemon::start(dir.path());
    assert_eq!(
        d.get(&format!("/streaming/streams/{id}")).await.status,
        StatusCode::OK
    );
}

/// Under systemd's `Type=notify` (deploy/livepack.service): `READY=1` once the listeners
/// answer, `WATCHDOG=1` every half `WatchdogSec`, `STOPPING=1` at SIGTERM, then exit 0.
#[tokio::test]
async fn the_service_manager_hears_ready_watchdog_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempdir();
    let path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&path).unwrap();
    manager
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let socket = path.display().to_string();
    let mut d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("NOTIFY_SOCKET", &socket),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let next = || {
        let mut buf = [0u8; 512];
        let n = manager.recv(&mut buf).expect("a notification within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let ready = next();
    assert!(
        ready.starts_with("READY=1\nSTATUS=serving at "),
        "{ready:?}"
    );
    assert_eq!(d.get("/healthz").await.status, StatusCode::OK);
    let started = std::time::Instant::now();
    for _ in 0..3 {
        assert_eq!(next(), "WATCHDOG=1");
    }
    // Every half second (the first at once): three within about a second.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    d.sigterm();
    let stopping = loop {
        let m = next();
        if m != "WATCHDOG=1" {
            break m;
        }
    };
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping:?}");
    let status = d
        .wait_exit(Duration::from_secs(30))
        .expect("exit within 30 s");
    assert!(status.success(), "{status:?}");
}

/// The daemon runs with glibc's mmap threshold fixed (see main.rs) unless the operator set one.
#[tokio::test]
async fn the_daemon_runs_with_a_fixed_malloc_mmap_threshold() {
    let threshold = |d: &Daemon| {
        let environ = std::fs::read(format!("/proc/{}/environ", d.pid())).unwrap();
        environ
            .split(|b| *b == 0)
            .find_map(|v| v.strip_prefix(b"MALLOC_MMAP_THRESHOLD_="))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    assert_eq!(threshold(&d).as_deref(), Some("262144"));
    assert_eq!(d.get("/streaming/streams").await.status, StatusCode::OK);
    drop(d);
    let d = Daemon::start_with(dir.path(), &[("MALLOC_MMAP_THRESHOLD_", "1048576")]);
    assert_eq!(threshold(&d).as_deref(), Some("1048576"));
    drop(d);
    let own = "glibc.malloc.mmap_threshold=1048576";
    let d = Daemon::start_with(dir.path(), &[("GLIBC_TUNABLES", own)]);
    assert_eq!(threshold(&d), None);
}

#[tokio::test]
async fn config_file_then_env_then_flags() {
    let dir = tempdir();
    std::fs::write(
        dir.path().join("livepack.toml"),
        "public_url = \"https://file.example.com\"\nrtmp_addr = \"127.0.0.1:1935\"\nsrt_addr = \"127.0.0.1:7001\"\nfastedge_app_domain = \"apps.example.com\"\n",
    )
    .unwrap();
    // The file (in the daemon's cwd) sets the RTMP port; the environment overrides the file's SRT
    // port and public URL, and a flag overrides the environment's public URL.
    let d = Daemon::start_full(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_RTMP_ADDR", UNSET),
            ("LIVEPACK_SRT_ADDR", "127.0.0.1:7002"),
            ("LIVEPACK_PUBLIC_URL", "https://env.example.com"),
        ],
        &["--public-url", "https://live.example.com/base/"],
    );
    assert!(
        d.banner
            .iter()
            .any(|l| l == "public_url: https://live.example.com/base/"),
        "{:?}",
        d.banner
    );
    let rec = d
        .post("/streaming/streams", json!({"name": "x"}))
        .await
        .body;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap();
    assert_eq!(
        rec["push_url"],
        format!("rtmp://live.example.com:1935/in/{id}?{token}")
    );
    assert_eq!(
        rec["push_url_srt"],
        format!("srt://live.example.com:7002?streamid={id}#{token}")
    );
    assert_eq!(
        rec["hls_cmaf_url"],
        format!("https://live.example.com/base/cmaf/{id}/master.m3u8")
    );
    let app = d
        .post("/fastedge/v1/apps", json!({"name": "web", "binary": 1}))
        .await
        .body;
    assert_eq!(app["url"], "https://web.apps.example.com");
}

#[test]
fn bad_configuration_is_refused_with_the_key_named() {
    let dir = tempdir();
    for (env, needle) in [
        (("LIVEPACK_HTTP_ADDR", "localhost:80"), "LIVEPACK_HTTP_ADDR"),
        (("LIVEPACK_PUBLIC_URL", "ftp://x"), "public_url"),
    ] {
        let out = refused_start(
            Command::new(env!("CARGO_BIN_EXE_livepack"))
                .current_dir(dir.path())
                .env("LIVEPACK_DATA_DIR", dir.path().join("data"))
                .env(env.0, env.1),
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{needle} not named in: {err}");
    }
    std::fs::write(dir.path().join("bad.toml"), "http_adr = \"127.0.0.1:1\"").unwrap();
    let out = refused_start(
        Command::new(env!("CARGO_BIN_EXE_livepack"))
            .current_dir(dir.path())
            .args(["--config", "bad.toml"]),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("http_adr"));
}

#[tokio::test]
async fn quality_sets_listing_and_default_switch() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let r = d.get("/streaming/quality_sets").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["vod"], json!([]));
    let live = r.body["live"].as_array().unwrap();
    let default: Vec<&Value> = live.iter().filter(|s| s["default"] == true).collect();
    assert_eq!(default.len(), 1);
    let heights: Vec<i64> = default[0]["qualities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["height"].as_i64().unwrap())
        .collect();
    assert_eq!(heights, [1080, 720, 480, 360]);
    for q in default[0]["qualities"].as_array().unwrap() {
        for k in [
            "id",
            "name",
            "height",
            "video_bitrate_kbps",
            "audio_bitrate_kbps",
            "video_codec",
            "audio_codec",
        ] {
            assert!(q.get(k).is_some(), "quality lacks {k}");
        }
    }
    let other = live.iter().find(|s| s["default"] == false).unwrap()["id"]
        .as_i64()
        .unwrap();
    let r = d
        .call(
            Method::PUT,
            "/streaming/quality_sets/default",
            Some(json!({"live": {"id": other}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let now: Vec<i64> = r.body["live"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["default"] == true)
        .map(|s| s["id"].as_i64().unwrap())
        .collect();
    assert_eq!(now, [other]);

    for (body, status, code, field) in [
        (
            json!({"live": {"id": 999}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_quality_set",
            "live.id",
        ),
        (
            json!({"live": {"id": "1"}}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "live.id",
        ),
        (
            json!({"live": {}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "live.id",
        ),
        (
            json!({"live": {"id": 1, "x": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_field",
            "live.x",
        ),
        (
            json!({}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            "live",
        ),
        (
            json!({"live": 1}),
            StatusCode::BAD_REQUEST,
            "invalid_type",
            "live",
        ),
    ] {
        let r = d
            .call(
                Method::PUT,
                "/streaming/quality_sets/default",
                Some(body.clone()),
            )
            .await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (status, code, Some(field)),
            "{body}"
        );
    }
}

#[tokio::test]
async fn profile_templates_seeded_once_plus_operator_file() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let r = d.get("/security/iaas/profile-templates").await;
    assert_eq!(r.status, StatusCode::OK);
    let shipped = r.body.as_array().unwrap().clone();
    assert!(!shipped.is_empty());
    let ids: Vec<i64> = shipped.iter().map(|t| t["id"].as_i64().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "sorted by id");
    for t in &shipped {
        for k in [
            "id",
            "name",
            "description",
            "fields",
            "base_template",
            "version",
            "created",
            "template_sifter",
        ] {
            assert!(t.get(k).is_some(), "template lacks {k}: {t}");
        }
        assert!(t["name"].as_str().unwrap().chars().count() <= 100);
        assert_eq!(t["version"].as_str().unwrap().len(), 36);
        for f in t["fields"].as_array().unwrap() {
            for k in [
                "id",
                "name",
                "description",
                "field_type",
                "required",
                "default",
                "validation_schema",
            ] {
                assert!(f.get(k).is_some(), "field lacks {k}: {f}");
            }
        }
    }
    drop(d);

    let extra = dir.path().join("extra.json");
    std::fs::write(&extra, json!([{
        "id": 100, "name": "Operator VoIP", "description": "SIP and RTP", "base_template": ids[0],
        "version": "0b5d0a51-8c1e-4c55-9d0a-3a7c7f0e2b11", "created": "2026-11-01T00:00:00Z",
        "template_sifter": null,
        "fields": [{"id": 1000, "name": "sip_port", "description": "SIP port", "field_type": "port",
                    "required": true, "default": "5060", "validation_schema": {"type": "integer"}}]
    }]).to_string()).unwrap();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_PROFILE_TEMPLATES_FILE", extra.to_str().unwrap()),
        ],
    );
    let all = d.get("/security/iaas/profile-templates").await.body;
    assert_eq!(all.as_array().unwrap().len(), shipped.len() + 1);
    assert_eq!(
        all.as_array().unwrap().last().unwrap()["name"],
        "Operator VoIP"
    );
    drop(d);

    // A broken operator file stops the start with a message naming the problem.
    std::fs::write(&extra, json!([{"id": 101, "name": "x", "fields": [], "version": "nope", "created": "2026-11-01T00:00:00Z"}]).to_string()).unwrap();
    let out = refused_start(
        Command::new(env!("CARGO_BIN_EXE_livepack"))
            .current_dir(dir.path())
            .env("LIVEPACK_HTTP_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_DATA_DIR", dir.path().join("data"))
            .env("LIVEPACK_PROFILE_TEMPLATES_FILE", &extra),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a UUID"));
}

#[tokio::test]
async fn unknown_routes_wrong_methods_and_oversized_headers() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let r = d.get("/streaming/nothing").await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
    let r = d.get("/streaming/streams/abc").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = d.raw(Method::GET, "/nothing/here", &[], None).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));

    let r = d.call(Method::PUT, "/streaming/streams", None).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
    assert_eq!(r.headers["allow"], "GET, POST");
    let r = d
        .call(Method::POST, "/streaming/streams/1", Some(json!({})))
        .await;
    assert_eq!(r.headers["allow"], "GET, PATCH, DELETE");

    // Request heads over the limit get 431 and the daemon carries on.
    let huge = "x".repeat(64 * 1024);
    let resp = reqwest::Client::new()
        .get(d.url("/healthz"))
        .header("x-filler", huge)
        .send()
        .await;
    let resp = resp.expect("the daemon answers an oversized head instead of dropping it");
    assert_eq!(resp.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(
        d.raw(Method::GET, "/healthz", &[], None).await.status,
        StatusCode::OK
    );
}
