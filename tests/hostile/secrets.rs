//! Secrets never reach the log or world-readable files: a full session — RTMP and SRT pushes
//! (the SRT one encrypted), refusals on every ingest (already live, inactive, wrong token,
//! WHIP with `?token=`), a PULL source with `user:password@` — then the daemon's whole log is
//! searched for every secret it was given; and the data directory is the owner's only.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::common::*;
use super::media::*;

const API_KEY: &str = "apikey-Zq8rT5vW2yX4pL";
const PASSPHRASE: &str = "srtpass-Lm4nB8vC2xQ7";
const PULL_PASSWORD: &str = "pullpw-Hk3mN7pQ9sR2";
const WRONG_TOKEN: &str = "wrongtokenJd6fG1hK5m0";

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The log as text: tracing colours its fields when it can (the escapes split `key=value`).
fn read_log(dir: &Path) -> String {
    let raw = std::fs::read_to_string(Daemon::log_file(dir)).unwrap();
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, ended by a letter.
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A WHIP POST to `url` (token in its query), no client behind the offer: its status.
async fn whip_post(url: &str) -> u16 {
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/sdp")
        .body(whip_offer_without_client())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A push ffmpeg must be refused at.
async fn refused(url: &str, fixture: &str) {
    let (ok, err) = finish(push(url, fixture, 0), Duration::from_secs(20)).await;
    assert!(!ok, "push to {url} was accepted: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_the_log_and_the_data_dir_is_private() {
    let _g = heavy().await;
    let dir = tempdir();
    let env = [
        ("LIVEPACK_API_KEYS", API_KEY),
        ("LIVEPACK_GRACE_PERIOD_SECS", "1"),
        // Everything of ours a refusal or a source may log, and the dependencies' info.
        ("RUST_LOG", "info,livepack=debug"),
    ];
    let d = Daemon::start_logged(dir.path(), &env);
    let data = data_dir(dir.path());
    assert_eq!(mode(&data), 0o700, "fresh data dir");
    assert_eq!(mode(&data.join("livepack.db")), 0o600, "fresh database");
    // The database's -wal and -shm (open now), the RTMPS key and certificate: all 0600.
    let files: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    assert!(files.len() >= 4, "{files:?}");
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }

    // RTMP: live, then refused as already live on RTMP, SRT and WHIP (its token in the query).
    let a = create(&d, json!({"name": "rtmp"})).await;
    let mut tokens: Vec<String> = vec![a["token"].as_str().unwrap().to_owned()];
    let a_push = push(a["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    wait_record(
        &d,
        a["id"].as_i64().unwrap(),
        Duration::from_secs(30),
        |r| r["live"] == true,
    )
    .await;
    refused(a["push_url"].as_str().unwrap(), "av-720p.flv").await;
    refused(a["push_url_srt"].as_str().unwrap(), "av-720p.ts").await;
    let whip = a["push_url_whip"].as_str().unwrap();
    assert_ne!(
        whip_post(whip).await,
        201,
        "a second publisher on a live input"
    );
    let wrong = whip.replace(&tokens[0], WRONG_TOKEN);
    assert_eq!(whip_post(&wrong).await, 401, "{wrong}");
    let wrong_rtmp = a["push_url"]
        .as_str()
        .unwrap()
        .replace(&tokens[0], WRONG_TOKEN);
    refused(&wrong_rtmp, "av-720p.flv").await;
    drop(a_push);

    // Inactive: refused on RTMP and WHIP.
    let c = create(&d, json!({"name": "off", "active": false})).await;
    tokens.push(c["token"].as_str().unwrap().to_owned());
    refused(c["push_url"].as_str().unwrap(), "av-720p.flv").await;
    assert_ne!(whip_post(c["push_url_whip"].as_str().unwrap()).await, 201);

    // SRT with a passphrase: live.
    let b = create(&d, json!({"name": "srt", "srt_passphrase": PASSPHRASE})).await;
    tokens.push(b["token"].as_str().unwrap().to_owned());
    let srt = format!(
        "{}&passphrase={PASSPHRASE}",
        b["push_url_srt"].as_str().unwrap()
    );
    let b_push = push(&srt, "av-720p.ts", 20);
    wait_record(
        &d,
        b["id"].as_i64().unwrap(),
        Duration::from_secs(30),
        |r| r["live"] == true,
    )
    .await;
    drop(b_push);

    // PULL: an RTMP source that is not there, then an HLS one, both with credentials.
    let hls_dir = dir.path().join("hls");
    let _writer = hls_writer(&hls_dir);
    let port = free_port(false);
    let _server = http_server(&hls_dir, port);
    let dead = free_port(false);
    let uri = format!(
        "rtmp://puller:{PULL_PASSWORD}@127.0.0.1:{dead}/live/x \
         http://puller:{PULL_PASSWORD}@127.0.0.1:{port}/index.m3u8"
    );
    let p = create(&d, json!({"name": "pull", "pull": true, "uri": uri})).await;
    wait_record(
        &d,
        p["id"].as_i64().unwrap(),
        Duration::from_secs(60),
        |r| r["live"] == true,
    )
    .await;

    let _ = d.terminate();
    let log = read_log(dir.path());
    // The session's refusals and sources were logged: the search below searched something.
    for said in [
        "rtmp publish refused",
        "SRT publish refused",
        "WHIP publish refused",
        "PULL source opening",
    ] {
        assert!(log.contains(said), "no `{said}` in the log:\n{log}");
    }
    let mut secrets: Vec<&str> = vec![API_KEY, PASSPHRASE, PULL_PASSWORD, WRONG_TOKEN];
    secrets.extend(tokens.iter().map(String::as_str));
    for secret in secrets {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(secret)).collect();
        assert!(lines.is_empty(), "`{secret}` is in the log: {lines:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_data_dir_and_database_are_tightened_at_start() {
    let dir = tempdir();
    let env = [("LIVEPACK_API_KEYS", KEY)];
    let d = Daemon::start_logged(dir.path(), &env);
    let _ = d.terminate();
    // What an older version (or a careless copy) left: 0755 and 0644.
    let data = data_dir(dir.path());
    let db = data.join("livepack.db");
    let set = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    set(&data, 0o755).unwrap();
    set(&db, 0o644).unwrap();
    let d = Daemon::start_logged(dir.path(), &env);
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&db), 0o600);
    for wal in ["livepack.db-wal", "livepack.db-shm"] {
        let p = data.join(wal);
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{wal}");
        }
    }
    // Still the same store.
    assert_eq!(d.get("/streaming/streams").await.status, 200);
    let _ = d.terminate();
    let log = read_log(dir.path());
    let warned = |path: &Path, old: &str| {
        log.lines().any(|l| {
            l.contains("WARN")
                && l.contains("tightened")
                && l.contains(&format!("path={}", path.display()))
                && l.contains(&format!("old_mode={old}"))
        })
    };
    assert!(
        warned(&data, "0755"),
        "no warning for the directory:\n{log}"
    );
    assert!(warned(&db, "0644"), "no warning for the database:\n{log}");
}
