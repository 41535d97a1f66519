//! Signed playback end to end: a stream with `secure_playback` is played through its signed
//! URLs (ffprobe following the playlists' relative URLs, which carry the token), refused
//! without one, with an expired one, another stream's or another key's — each token computed
//! apart from the daemon, with openssl — and the same through nginx with the repository's
//! configuration, whose cache then shares one entry between viewers' tokens.

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{tempdir, Daemon, KEY};
use crate::media::{
    create, ffprobe, heavy, push, stop_recording, text, wait_record, wait_segments,
};

const SIGNING_KEY: &str = "test-playback-key-0123456789";

/// `base64url(MD5("{expires}:{resource}:{key}"))` without padding, by openssl.
fn openssl_token(expires: i64, resource: &str, key: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf '%s' '{expires}:{resource}:{key}' | openssl md5 -binary | base64 | tr '+/' '-_' | tr -d '='"
        ))
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The (expires, token) of a signed URL `…/{id}/t/{expires}/{token}/…`.
fn grant_of(url: &str) -> (i64, String) {
    let after = url
        .split("/t/")
        .nth(1)
        .unwrap_or_else(|| panic!("not signed: {url}"));
    let mut parts = after.split('/');
    (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().to_owned(),
    )
}

async fn status(url: &str) -> (StatusCode, usize) {
    let r = reqwest::get(url).await.unwrap();
    let status = r.status();
    (status, r.bytes().await.unwrap().len())
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_stream_plays_only_with_its_token_here_and_through_nginx() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_PLAYBACK_SIGNING_KEY", SIGNING_KEY),
        ],
    );
    let plain = create(&d, json!({"name": "plain"})).await;
    let rec = create(&d, json!({"name": "signed", "secure_playback": true})).await;
    let id = rec["id"].as_i64().unwrap();
    let master = rec["hls_cmaf_url"].as_str().unwrap().to_owned();
    let (expires, token) = grant_of(&master);
    // The daemon's token is the documented formula, computed apart; a day from now.
    assert_eq!(
        token,
        openssl_token(expires, &format!("s{id}"), SIGNING_KEY)
    );
    assert!((expires - now() - 86_400).abs() < 60, "{expires}");
    for field in ["dash_url", "hls_mpegts_url", "iframe_url", "screenshot"] {
        let url = rec[field].as_str().unwrap();
        assert_eq!(grant_of(url), (expires, token.clone()), "{field}: {url}");
    }
    assert!(!plain["hls_cmaf_url"].as_str().unwrap().contains("/t/"));

    let mut pusher = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 3);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    wait_segments(&master, 2).await;
    // An independent reader follows the relative URLs: they carry the token.
    let probed = ffprobe(&master);
    let codecs: Vec<&str> = probed["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["codec_name"].as_str())
        .collect();
    assert!(
        codecs.contains(&"h264") && codecs.contains(&"aac"),
        "{probed}"
    );
    let signed = |path: &str| d.url(&format!("/cmaf/{id}/t/{expires}/{token}/{path}"));
    let media_playlist = text(&signed("720p/index.m3u8")).await.1;
    let first = crate::common::hls::media(&media_playlist).segments[0]
        .uri
        .clone();
    let segment = format!("720p/{first}");
    for path in ["index.mpd", "720p/index.m3u8", &segment] {
        assert_eq!(status(&signed(path)).await.0, StatusCode::OK, "{path}");
    }
    let page = text(rec["iframe_url"].as_str().unwrap()).await;
    assert_eq!(page.0, StatusCode::OK);
    assert!(
        page.1
            .contains(&format!("/cmaf/{id}/t/{expires}/{token}/master.m3u8")),
        "the page hands out its grant"
    );

    // Refused, with nothing said: no token, expired, another stream's, another key's, bent.
    let other = plain["id"].as_i64().unwrap();
    let past = now() - 10;
    let bad_grants = [
        (past, openssl_token(past, &format!("s{id}"), SIGNING_KEY)),
        (
            expires,
            openssl_token(expires, &format!("s{other}"), SIGNING_KEY),
        ),
        (
            expires,
            openssl_token(expires, &format!("s{id}"), "another-key-0123456789"),
        ),
        (expires + 1, token.clone()),
    ];
    let mut refused = vec![
        d.url(&format!("/cmaf/{id}/master.m3u8")),
        d.url(&format!("/cmaf/{id}/720p/{first}")),
        d.url(&format!("/cmaf/{id}/index.mpd")),
        d.url(&format!("/mpegts/{id}/master_mpegts.m3u8")),
        d.url(&format!("/screenshots/{id}/last.jpg")),
        d.url(&format!("/player/{id}")),
        d.url(&format!("/player/{id}/status.json")),
    ];
    for (e, t) in &bad_grants {
        refused.push(d.url(&format!("/cmaf/{id}/t/{e}/{t}/master.m3u8")));
        refused.push(d.url(&format!("/player/{id}/t/{e}/{t}")));
    }
    for url in &refused {
        assert_eq!(status(url).await, (StatusCode::FORBIDDEN, 0), "{url}");
    }
    // A stream without secure_playback is unaffected.
    assert_eq!(
        status(&d.url(&format!("/player/{other}"))).await.0,
        StatusCode::OK
    );

    // Through nginx: checked at the edge with the same formula; viewers' tokens share the cache.
    let edge_dir = tempdir();
    let (_nginx, edge) = crate::common::nginx::in_front(edge_dir.path(), &[&d.base], SIGNING_KEY);
    let at_edge = |e: i64, t: &str, path: &str| format!("{edge}/cmaf/{id}/t/{e}/{t}/{path}");
    let segment = format!("720p/{first}");
    let r = reqwest::get(at_edge(expires, &token, &segment))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let later = expires + 100;
    let other_viewer = openssl_token(later, &format!("s{id}"), SIGNING_KEY);
    let r = reqwest::get(at_edge(later, &other_viewer, &segment))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["x-cache-status"],
        "HIT",
        "one cache entry for both tokens"
    );
    assert_eq!(
        ffprobe(&at_edge(expires, &token, "master.m3u8"))["streams"]
            .as_array()
            .map(Vec::len),
        probed["streams"].as_array().map(Vec::len)
    );
    for (e, t) in &bad_grants {
        let r = reqwest::get(at_edge(*e, t, &segment)).await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{e} {t}");
        assert!(
            r.headers().get("x-cache-status").is_none(),
            "refused before the cache"
        );
    }
    let r = reqwest::get(format!("{edge}/cmaf/{id}/{segment}"))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "no token through nginx");

    // A recording of the stream: its files are signed for the video.
    let start_rec = format!("/streaming/streams/{id}/start_recording");
    assert_eq!(
        d.call(reqwest::Method::PUT, &start_rec, None).await.status,
        StatusCode::NO_CONTENT
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let video = stop_recording(&d, id).await;
    let vid = video["id"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let video = loop {
        let v = d.get(&format!("/streaming/videos/{vid}")).await.body;
        if v["status"] == "ready" {
            break v;
        }
        assert!(Instant::now() < deadline, "video never ready: {v}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    pusher.kill();
    let vod = video["hls_url"].as_str().unwrap();
    let (ve, vt) = grant_of(vod);
    assert_eq!(vt, openssl_token(ve, &format!("v{vid}"), SIGNING_KEY));
    assert!(!ffprobe(vod)["streams"].as_array().unwrap().is_empty());
    let plain_vod = vod.replace(&format!("/t/{ve}/{vt}"), "");
    assert_eq!(status(&plain_vod).await, (StatusCode::FORBIDDEN, 0));
    let as_stream = vod.replace(&vt, &openssl_token(ve, &format!("s{id}"), SIGNING_KEY));
    assert_eq!(
        status(&as_stream).await.0,
        StatusCode::FORBIDDEN,
        "a stream token is not a video's"
    );

    // secure_playback off: plain URLs play again (within the lookups' second).
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"secure_playback": false}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(!r.body["hls_cmaf_url"].as_str().unwrap().contains("/t/"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while status(&d.url(&format!("/player/{id}"))).await.0 != StatusCode::OK {
        assert!(
            Instant::now() < deadline,
            "still refused after secure_playback: false"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
