//! The publish authorization hook against a service written apart (`tests/auth_service.py`):
//! for RTMP, SRT and WHIP a yes lets the publisher in, a no and a service too slow keep it out
//! the way each protocol refuses, a wrong token never reaches the service, and the service
//! hears who asked.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::proc::Proc;
use crate::common::srt::{conclude, rejection, CONCLUSION};
use crate::common::{root, tempdir, whip_offer_without_client, Daemon, KEY};
use crate::media::{create, finish, heavy, push, wait_record};

fn service(out: &std::path::Path) -> (Proc, u16) {
    let mut cmd = Command::new("python3");
    cmd.arg(root().join("tests/auth_service.py"))
        .arg(out)
        .stdout(Stdio::piped());
    let mut p = Proc::spawn(&mut cmd, "auth service");
    let mut line = String::new();
    BufReader::new(p.child().stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (p, line.trim().parse().unwrap())
}

fn questions(out: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn whip(d: &Daemon, id: i64, token: &str, query: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(d.url(&format!("/whip/{id}?token={token}&{query}")))
        .header("content-type", "application/sdp")
        .body(whip_offer_without_client())
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_decides_for_rtmp_srt_and_whip_and_fails_closed() {
    // Not alongside the timing bounds of the other hostile tests.
    let _g = heavy().await;
    let dir = tempdir();
    let out = dir.path().join("questions.jsonl");
    let (_service, port) = service(&out);
    let hook = format!("http://127.0.0.1:{port}/auth?key=s3cret-of-the-daemon");
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_PUBLISH_AUTH_URL", &hook),
            ("LIVEPACK_PUBLISH_AUTH_TIMEOUT_MS", "1000"),
            ("LIVEPACK_PUBLISH_AUTH_CACHE_SECS", "0"),
        ],
    );
    let rec = create(&d, json!({"name": "guarded"})).await;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap().to_owned();
    let rtmp = rec["push_url"].as_str().unwrap().to_owned();

    // RTMP: refused, too slow (fail closed), then let in.
    for (query, why) in [
        (
            "user=bad",
            "refused by the authorization service (HTTP 403)",
        ),
        ("user=slow", "authorization service unavailable"),
    ] {
        let (ok, err) = finish(
            push(&format!("{rtmp}&{query}"), "audio.flv", 0),
            Duration::from_secs(20),
        )
        .await;
        assert!(!ok, "{query}: accepted");
        assert!(err.contains(why), "{query}: {err}");
    }
    let mut pusher = push(&format!("{rtmp}&user=good"), "audio.flv", 20);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    pusher.kill();
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == false).await;

    // SRT (the access-control stream id's own keys): SRT_REJX_FORBIDDEN, SRT_REJX_DOWN, in.
    // A stream of its own: the RTMP publisher's slot is not waited for.
    let srt_rec = create(&d, json!({"name": "guarded-srt"})).await;
    let (sid_id, sid_token) = (
        srt_rec["id"].as_i64().unwrap(),
        srt_rec["token"].as_str().unwrap().to_owned(),
    );
    let sid = |u: &str| format!("#!::r={sid_id},t={sid_token},u={u}");
    let s = d.srt.clone();
    assert_eq!(
        conclude(&s, sid("bad").as_bytes()).await,
        Some(rejection(1403))
    );
    assert_eq!(
        conclude(&s, sid("slow").as_bytes()).await,
        Some(rejection(1503))
    );
    assert_eq!(conclude(&s, sid("good").as_bytes()).await, Some(CONCLUSION));

    // WHIP: 403, 503, then 201 (another stream: the SRT caller holds the first).
    let other = create(&d, json!({"name": "guarded-whip"})).await;
    let (wid, wtoken) = (
        other["id"].as_i64().unwrap(),
        other["token"].as_str().unwrap().to_owned(),
    );
    for (query, status, code) in [
        ("user=bad", StatusCode::FORBIDDEN, "publish_refused"),
        (
            "user=slow",
            StatusCode::SERVICE_UNAVAILABLE,
            "authorization_unavailable",
        ),
    ] {
        let r = whip(&d, wid, &wtoken, query).await;
        assert_eq!(r.status(), status, "{query}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{body}");
    }
    let r = whip(&d, wid, &wtoken, "user=good").await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let session = r.headers()["location"].to_str().unwrap().to_owned();
    let gone = reqwest::Client::new()
        .delete(d.url(&session))
        .send()
        .await
        .unwrap();
    assert!(gone.status().is_success());

    // A wrong token is refused by the daemon before the service hears of it.
    let before = questions(&out).len();
    let (ok, _) = finish(
        push(&rtmp.replace(&token, &"0".repeat(32)), "audio.flv", 0),
        Duration::from_secs(20),
    )
    .await;
    assert!(!ok);
    assert_eq!(
        conclude(
            &s,
            format!("#!::r={id},t={},u=good", "0".repeat(32)).as_bytes()
        )
        .await,
        Some(rejection(1401))
    );
    assert_eq!(
        questions(&out).len(),
        before,
        "a wrong token reached the service"
    );

    // What the service heard: each protocol, slot, the caller's address and parameters.
    let asked = questions(&out);
    let of = |protocol: &str| -> Vec<&Value> {
        asked.iter().filter(|q| q["protocol"] == protocol).collect()
    };
    assert_eq!(of("rtmp").len(), 3, "{asked:#?}");
    assert_eq!(of("srt").len(), 3, "{asked:#?}");
    assert_eq!(of("whip").len(), 3, "{asked:#?}");
    for q in &asked {
        assert_eq!(q["slot"], "main", "{q}");
        assert!(
            q["remote_addr"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{q}"
        );
        assert!(
            !q.to_string().contains(&token) && !q.to_string().contains(&wtoken),
            "a token sent to the service: {q}"
        );
    }
    assert_eq!(of("rtmp")[2]["query"], "user=good");
    assert_eq!(of("srt")[2]["query"], "u=good");
    assert_eq!(of("whip")[2]["query"], "user=good");
    assert_eq!(of("whip")[2]["stream_id"], wid);
}
