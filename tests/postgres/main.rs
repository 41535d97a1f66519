//! Several daemons on one PostgreSQL database: the real binary twice, a real PostgreSQL server
//! (`tests/common/pg.rs`), real HTTP and real pushers. What one daemon writes the other reads,
//! concurrent PATCHes through both all land, a live stream has one node, and it moves when that
//! node dies.

mod balancer;
#[path = "../common/mod.rs"]
mod common;
mod flood;
#[path = "../common/media.rs"]
mod media;
mod node_auth;
mod restream;
mod rolling;
mod storage;
mod tls;
mod webhooks;

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use common::pg::PgServer;
use common::proc::run_within;
use common::{free_port, tempdir, Daemon, KEY};

/// CDN resources the PATCHes name in `cdn_id`.
const CDN: &str = "1=https://cdn-one.example";

/// `node`: each daemon on one store needs its own node id (two under one are refused).
fn daemon_on(dir: &std::path::Path, url: &str, node: &str) -> Daemon {
    Daemon::start_with(
        dir,
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_NODE_ID", node),
            ("LIVEPACK_CDN_RESOURCES", CDN),
            ("LIVEPACK_DATABASE_URL", url),
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_share_their_records() {
    let server = PgServer::start();
    let url = server.create_database();
    let (dir_a, dir_b) = (tempdir(), tempdir());
    // Started together: one migrates and seeds, the other waits for it (advisory lock).
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| daemon_on(dir_a.path(), &url, "a"));
        let b = s.spawn(|| daemon_on(dir_b.path(), &url, "b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(
        !dir_a.path().join("data/livepack.db").exists(),
        "no SQLite file beside a PostgreSQL store"
    );

    // Created through A, read through B.
    let created = a
        .post("/streaming/streams", json!({"name": "shared"}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_i64().unwrap();
    let path = format!("/streaming/streams/{id}");
    let on_b = b.get(&path).await;
    assert_eq!(on_b.status, StatusCode::OK, "{}", on_b.body);
    assert_eq!(
        (&on_b.body["name"], &on_b.body["token"]),
        (&created.body["name"], &created.body["token"])
    );
    assert_eq!(
        b.get("/streaming/streams").await.headers["x-total-count"],
        "1"
    );

    // Patched through B, read through A.
    let patched = b
        .patch(
            &path,
            json!({"stream": {"name": "renamed", "dvr_duration": 60}}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    let on_a = a.get(&path).await.body;
    assert_eq!(
        (&on_a["name"], &on_a["dvr_duration"]),
        (&json!("renamed"), &json!(60))
    );

    // Concurrent PATCHes of different fields through both: each re-reads and re-applies when
    // another got in first, so all land.
    let (r1, r2, r3, r4, r5) = tokio::join!(
        a.patch(&path, json!({"stream": {"cdn_id": 1}})),
        b.patch(&path, json!({"stream": {"auto_record": true}})),
        a.patch(&path, json!({"stream": {"projection": "vr180"}})),
        b.patch(&path, json!({"stream": {"client_entity_data": "from b"}})),
        a.patch(&path, json!({"stream": {"dvr_enabled": true}})),
    );
    for r in [r1, r2, r3, r4, r5] {
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    for d in [&a, &b] {
        let rec = d.get(&path).await.body;
        assert_eq!(
            json!([
                rec["name"],
                rec["cdn_id"],
                rec["auto_record"],
                rec["projection"],
                rec["client_entity_data"],
                rec["dvr_enabled"]
            ]),
            json!(["renamed", 1, true, "vr180", "from b", true]),
            "{rec}"
        );
    }

    // The other kinds of record too: a broadcast linking the stream, an app; deletes.
    let broadcast = b
        .post(
            "/streaming/broadcasts",
            json!({"broadcast": {"name": "show", "stream_ids": [id]}}),
        )
        .await;
    assert_eq!(broadcast.status, StatusCode::CREATED, "{}", broadcast.body);
    let bid = broadcast.body["id"].as_i64().unwrap();
    assert_eq!(a.get(&path).await.body["broadcast_ids"], json!([bid]));
    let app = a
        .post("/fastedge/v1/apps", json!({"name": "kept", "binary": 1}))
        .await;
    assert_eq!(app.status, StatusCode::CREATED, "{}", app.body);
    let taken = b
        .post("/fastedge/v1/apps", json!({"name": "kept", "binary": 1}))
        .await;
    assert_eq!(taken.status, StatusCode::CONFLICT, "{}", taken.body);
    assert_eq!(b.delete(&path).await.status, StatusCode::NO_CONTENT);
    assert_eq!(a.get(&path).await.status, StatusCode::NOT_FOUND);
    let left = a.get(&format!("/streaming/broadcasts/{bid}")).await.body;
    assert_eq!(left["stream_ids"], json!([]), "{left}");

    // A restarted daemon finds everything where it was.
    a.terminate();
    let a = daemon_on(dir_a.path(), &url, "a");
    assert_eq!(
        a.get(&format!("/streaming/broadcasts/{bid}")).await.body["name"],
        "show"
    );
    drop((a, b));
}

/// The daemon run with a database it cannot use: refused at start, the setting named, the
/// password not shown. Bounded, since a daemon that started would serve forever.
fn refused_start(url: &str) -> String {
    refused_start_with(url, &[])
}

fn refused_start_with(url: &str, env: &[(&str, &str)]) -> String {
    let dir = tempdir();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_livepack"));
    for (k, _) in std::env::vars() {
        if k.starts_with("LIVEPACK_") {
            cmd.env_remove(k);
        }
    }
    let out = run_within(
        cmd.current_dir(dir.path())
            .env("LIVEPACK_DATA_DIR", dir.path().join("data"))
            .env("LIVEPACK_HTTP_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_RTMP_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_RTMPS_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_SRT_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_WHIP_UDP_MUX_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_WHIP_TCP_MUX_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_DATABASE_URL", url)
            .envs(env.iter().copied()),
        "livepack",
        Duration::from_secs(60),
    );
    assert!(!out.status.success(), "started with {url}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unusable_database_stops_the_start_naming_the_setting() {
    let port = free_port(false);
    let err = refused_start(&format!(
        "postgres://livepack:hunter2@127.0.0.1:{port}/live"
    ));
    assert!(
        err.contains("LIVEPACK_DATABASE_URL") && err.contains("error connecting"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    let err = refused_start("mysql://livepack:hunter2@127.0.0.1/live");
    assert!(err.contains("database_url"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

/// Nodes declare each other dead after this long in the cluster tests (the default is 10 s).
const DEAD_SECS: u64 = 3;

fn node(dir: &std::path::Path, url: &str, id: &str) -> Daemon {
    node_with(dir, url, id, &[])
}

/// [`node`] with more settings (`env`).
fn node_with(dir: &std::path::Path, url: &str, id: &str, env: &[(&str, &str)]) -> Daemon {
    let dead = DEAD_SECS.to_string();
    let mut all = vec![
        ("LIVEPACK_API_KEYS", KEY),
        ("LIVEPACK_DATABASE_URL", url),
        ("LIVEPACK_NODE_ID", id),
        ("LIVEPACK_NODE_DEAD_SECS", &dead),
    ];
    all.extend_from_slice(env);
    Daemon::start_with(dir, &all)
}

/// `url` (a record's push URL naming the node that made the record) aimed at `host_port`.
fn at(url: &str, host_port: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let path = &rest[rest.find(['/', '?']).unwrap_or(rest.len())..];
    format!("{scheme}://{host_port}{path}")
}

/// A record's URL `key` on `base` (`http://host:port`).
fn via_host(rec: &serde_json::Value, key: &str, base: &str) -> String {
    at(
        rec[key].as_str().unwrap(),
        base.trim_start_matches("http://"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_stream_has_one_node_and_moves_when_it_dies() {
    let _heavy = media::heavy().await;
    let server = PgServer::start();
    let url = server.create_database();
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let a = node(dir_a.path(), &url, "node-a");
    let b = node(dir_b.path(), &url, "node-b");
    // A third daemon under a running node's id is refused: it would take that node's leases.
    let err = refused_start_with(&url, &[("LIVEPACK_NODE_ID", "node-a")]);
    assert!(err.contains("node_id node-a is in use"), "{err}");
    let rec = media::create(&a, json!({"name": "cam"})).await;
    let id = rec["id"].as_i64().unwrap();
    let push_url = rec["push_url"].as_str().unwrap().to_owned();
    let srt_url = rec["push_url_srt"].as_str().unwrap().to_owned();
    let whip_url = rec["push_url_whip"].as_str().unwrap().to_owned();

    // Pushed to A: live, and B's API says so from the store.
    let first = media::push(&at(&push_url, &a.rtmp), "av-720p.flv", 20);
    media::wait_record(&a, id, Duration::from_secs(30), |r| r["live"] == true).await;
    // The serving node's status, not just a flag: the renditions it transcodes.
    media::wait_record(&b, id, Duration::from_secs(15), |r| {
        r["live"] == true
            && r["transcoded_qualities"]
                .as_array()
                .is_some_and(|q| q.len() == 3)
    })
    .await;

    // Any node serves any stream: B passes requests to A and streams A's answers back.
    let via = |d: &Daemon, key: &str| {
        at(
            rec[key].as_str().unwrap(),
            d.base.trim_start_matches("http://"),
        )
    };
    let master = via(&b, "hls_cmaf_url");
    media::wait_segments(&master, 2).await;
    let top = master.replace("master.m3u8", "720p/index.m3u8");
    let (status, playlist) = media::text(&top).await;
    assert_eq!(status, StatusCode::OK);
    // A blocking reload through B: held (at A) until the part exists, then answered.
    let next = common::hls::next_msn(&common::hls::media(&playlist)) + 1;
    let listed = |p: &str| {
        let wanted = format!("URI=\"part_{next}_0.m4s\"");
        p.lines()
            .any(|l| l.starts_with("#EXT-X-PART:") && l.contains(&wanted))
    };
    assert!(!listed(&playlist), "{playlist}");
    let (status, blocked) = media::text(&format!("{top}?_HLS_msn={next}&_HLS_part=0")).await;
    assert_eq!(status, StatusCode::OK, "{blocked}");
    assert!(listed(&blocked), "{blocked}");
    let part = reqwest::get(top.replace("index.m3u8", &format!("part_{next}_0.m4s")))
        .await
        .unwrap();
    assert_eq!(part.status(), StatusCode::OK);
    assert!(part.bytes().await.unwrap().windows(4).any(|w| w == b"moof"));
    // The MPD, the TS playlist and the screenshot the same way; and A's own URL still works.
    let (status, ts_master) = media::text(&via(&b, "hls_mpegts_url")).await;
    assert_eq!(status, StatusCode::OK, "{ts_master}");
    // The same playlist as A's own, but for the measured bandwidths of its variants, which
    // may move between the two requests.
    let measured = |m: &str| -> Vec<String> {
        m.lines()
            .map(|l| {
                l.split(',')
                    .filter(|attr| !attr.contains("BANDWIDTH="))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect()
    };
    assert_eq!(
        measured(&ts_master),
        measured(&media::text(&via(&a, "hls_mpegts_url")).await.1)
    );
    let (status, mpd) = media::text(&via(&b, "dash_url")).await;
    assert_eq!(status, StatusCode::OK, "{mpd}");
    let start = |mpd: &str| {
        mpd.split("availabilityStartTime=")
            .nth(1)
            .map(|s| s[..26].to_owned())
    };
    assert!(start(&mpd).is_some(), "{mpd}");
    assert_eq!(
        start(&mpd),
        start(&media::text(&via(&a, "dash_url")).await.1),
        "A's MPD"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shot = reqwest::get(via(&b, "screenshot")).await.unwrap();
        if shot.status() == StatusCode::OK {
            assert_eq!(shot.headers()["content-type"], "image/jpeg");
            break;
        }
        assert!(Instant::now() < deadline, "no screenshot through B");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A request that only claims to be relayed proves nothing (tests/postgres/node_auth.rs:
    // a signed one is answered where it lands, never relayed again).
    let looped = reqwest::Client::new()
        .get(&top)
        .header("x-livepack-relayed-by", "node-a")
        .send()
        .await
        .unwrap();
    assert_eq!(looped.status(), StatusCode::UNAUTHORIZED);

    // Through nginx in front of both nodes (the repo's configuration): playlists, a blocking
    // reload asked by two players at once (both held at the origin until the part exists, since
    // nginx would make a second one poll its cache lock for up to 500 ms) and then by a third
    // (from the cache, under its query), a part, and the LL-DASH segment in progress passed on
    // chunk by chunk.
    let nginx_dir = tempdir();
    let (_nginx, edge) =
        common::nginx::in_front(nginx_dir.path(), &[&a.base, &b.base], "unused-playback-key");
    let top = via_host(&rec, "hls_cmaf_url", &edge).replace("master.m3u8", "720p/index.m3u8");
    let (status, playlist) = media::text(&top).await;
    assert_eq!(status, StatusCode::OK, "{playlist}");
    // The segment after the one in progress, from a fresh playlist (nginx's copy may be 1 s
    // old): its first part is at least a part's time away when the second player asks.
    let fresh = media::text(&top.replace(&edge, &a.base)).await.1;
    let next = common::hls::next_msn(&common::hls::media(&fresh)) + 1;
    let blocking = format!("{top}?_HLS_msn={next}&_HLS_part=0");
    let asked = Instant::now();
    let (one, two) = tokio::join!(reqwest::get(&blocking), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        reqwest::get(&blocking).await
    });
    let mut cache = Vec::new();
    for r in [one.unwrap(), two.unwrap()] {
        assert_eq!(r.status(), StatusCode::OK);
        cache.push(r.headers()["x-cache-status"].to_str().unwrap().to_owned());
        assert!(r
            .text()
            .await
            .unwrap()
            .contains(&format!("part_{next}_0.m4s")));
    }
    let held = asked.elapsed();
    assert!(
        cache.iter().all(|c| c == "MISS"),
        "{cache:?}: both reloads waited at the origin"
    );
    let third = reqwest::get(&blocking).await.unwrap();
    assert_eq!(third.status(), StatusCode::OK);
    assert_eq!(
        third.headers()["x-cache-status"],
        "HIT",
        "an answered reload is cached under its query"
    );
    println!("blocking reload through nginx: both answered {held:?} after the first was asked");
    let part = top.replace("index.m3u8", &format!("part_{next}_0.m4s"));
    let fetched = reqwest::get(&part).await.unwrap();
    assert_eq!(fetched.status(), StatusCode::OK);
    assert!(fetched
        .bytes()
        .await
        .unwrap()
        .windows(4)
        .any(|w| w == b"moof"));
    let again = reqwest::get(&part).await.unwrap();
    assert_eq!(again.headers()["x-cache-status"], "HIT");
    // The next segment, asked for before it starts: its chunks arrive over its 2 s, not at the end.
    let segment = top.replace("index.m3u8", &format!("seg_{}.m4s", next + 1));
    let mut growing = reqwest::get(&segment).await.unwrap();
    assert_eq!(growing.status(), StatusCode::OK);
    let mut arrivals = Vec::new();
    while let Some(chunk) = growing.chunk().await.unwrap() {
        arrivals.push((Instant::now(), chunk.len()));
    }
    let spread = arrivals.last().unwrap().0 - arrivals[0].0;
    assert!(arrivals.len() >= 3, "{} chunks", arrivals.len());
    assert!(
        spread >= Duration::from_millis(1000),
        "all chunks within {spread:?}: buffered"
    );
    println!(
        "LL-DASH segment through nginx: {} chunks over {spread:?}",
        arrivals.len()
    );

    // The control API for a stream A serves, called on B, is answered by A: a recording started
    // and stopped through B is recorded on A's disk, and its video plays through B.
    let start = b
        .call(
            reqwest::Method::PUT,
            &format!("/streaming/streams/{id}/start_recording"),
            None,
        )
        .await;
    assert_eq!(start.status, StatusCode::NO_CONTENT, "{}", start.body);
    media::wait_record(&a, id, Duration::from_secs(10), |r| r["recording"] == true).await;
    assert_eq!(
        media::record(&b, id).await["recording"],
        true,
        "B shows A's view"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let video = media::stop_recording(&b, id).await;
    let video_master = video["hls_url"].as_str().unwrap().to_owned();
    assert!(dir_a
        .path()
        .join(format!("data/videos/{}", video["id"]))
        .is_dir());
    assert!(!dir_b
        .path()
        .join(format!("data/videos/{}", video["id"]))
        .exists());
    let (status, text) =
        media::text(&at(&video_master, b.base.trim_start_matches("http://"))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.starts_with("#EXTM3U"), "{text}");

    // The same stream pushed to B is refused, each protocol its own way, and A stays live.
    let rtmp = media::push(&at(&push_url, &b.rtmp), "av-720p.flv", 0);
    let (ok, err) = media::finish(rtmp, Duration::from_secs(20)).await;
    assert!(!ok, "RTMP publish to B accepted: {err}");
    assert!(
        err.contains(&format!("stream {id} is live on node node-a")),
        "ffmpeg was not told why: {err}"
    );
    // The backup input too: the main/backup switch runs inside the serving node.
    let backup_rtmp = rec["backup_push_url"].as_str().unwrap();
    let rtmp = media::push(&at(backup_rtmp, &b.rtmp), "av-720p.flv", 0);
    let (ok, err) = media::finish(rtmp, Duration::from_secs(20)).await;
    assert!(!ok, "RTMP backup publish to B accepted: {err}");
    assert!(err.contains("is live on node node-a"), "{err}");
    let srt = media::push(&at(&srt_url, &b.srt), "av-720p.ts", 0);
    let (ok, err) = media::finish(srt, Duration::from_secs(20)).await;
    assert!(!ok, "SRT publish to B accepted: {err}");
    // As ffmpeg sends it: everything after `streamid=`, the `#` of `{id}#{token}` included.
    let stream_id = srt_url.split_once("streamid=").unwrap().1;
    assert_eq!(
        common::srt::conclude(&b.srt, stream_id.as_bytes()).await,
        Some(common::srt::rejection(1409)),
        "SRT publish to B: SRT_REJX_CONFLICT"
    );
    let whip_path = &whip_url[whip_url.find("/whip").unwrap()..];
    let refused = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}{whip_path}", b.base))
        .header("content-type", "application/sdp")
        .body(common::whip_offer_without_client())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(
        refused.headers()["location"].to_str().unwrap(),
        format!("{}{whip_path}", a.base),
        "WHIP is sent to the node serving the stream"
    );
    // A WHIP session's resource answers on every node (behind a load balancer the client's
    // DELETE may land on any): a backup offered to A, ended through B.
    let backup = whip_path.replacen(&format!("/whip/{id}?"), &format!("/whip/{id}b?"), 1);
    assert_ne!(&backup, whip_path);
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{}{backup}", a.base))
        .header("content-type", "application/sdp")
        .body(common::whip_offer_without_client())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let session = created.headers()["location"].to_str().unwrap().to_owned();
    let on_b = format!("{}{session}", b.base);
    let patched = http.patch(&on_b).body("").send().await.unwrap();
    assert_eq!(
        patched.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "B passes the PATCH on to A, whose session it is"
    );
    let deleted = http.delete(&on_b).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::OK);
    let gone = http
        .patch(format!("{}{session}", a.base))
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND, "the DELETE reached A");
    assert_eq!(media::record(&a, id).await["live"], true);

    // WHEP the same way: a viewer's offer to B is redirected to A (307, the query kept); a
    // viewer's session on A is ended through B.
    let viewer_offer = common::whip_offer_without_client().replace("a=sendonly", "a=recvonly");
    let redirected = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/whep/{id}?quality=360p", b.base))
        .header("content-type", "application/sdp")
        .body(viewer_offer.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(redirected.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(
        redirected.headers()["location"].to_str().unwrap(),
        format!("{}/whep/{id}?quality=360p", a.base),
        "WHEP is sent to the node serving the stream"
    );
    let viewer = http
        .post(format!("{}/whep/{id}", a.base))
        .header("content-type", "application/sdp")
        .body(viewer_offer)
        .send()
        .await
        .unwrap();
    assert_eq!(viewer.status(), StatusCode::CREATED);
    let session = viewer.headers()["location"].to_str().unwrap().to_owned();
    let deleted = http
        .delete(format!("{}{session}", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        deleted.status(),
        StatusCode::OK,
        "B passes the DELETE on to A"
    );
    let gone = http
        .delete(format!("{}{session}", a.base))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND, "the DELETE reached A");

    // A dies: within the bound B shows the stream off air, then takes the reconnecting publisher;
    // what A acknowledged just before is there.
    let renamed = a
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"name": "cam-renamed"}}),
        )
        .await;
    assert_eq!(renamed.status, StatusCode::OK, "{}", renamed.body);
    let killed = Instant::now();
    a.kill9();
    drop(first);
    media::wait_record(&b, id, Duration::from_secs(DEAD_SECS + 5), |r| {
        r["live"] == false
    })
    .await;
    let off_air = killed.elapsed();
    assert_eq!(media::record(&b, id).await["name"], "cam-renamed");
    println!("node A killed: stream off air on B after {off_air:?} (bound {DEAD_SECS} s)");
    assert!(
        off_air >= Duration::from_secs(DEAD_SECS) - Duration::from_millis(700),
        "off air after {off_air:?}, before A could be dead"
    );
    let again = media::push(&at(&push_url, &b.rtmp), "av-720p.flv", 20);
    media::wait_record(&b, id, Duration::from_secs(30), |r| r["live"] == true).await;
    let master = at(
        rec["hls_cmaf_url"].as_str().unwrap(),
        b.base.trim_start_matches("http://"),
    );
    media::wait_segments(&master, 2).await;
    drop(again);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_stream_is_pulled_by_one_node_and_taken_over_when_it_dies() {
    let _heavy = media::heavy().await;
    let server = PgServer::start();
    let url = server.create_database();
    let src = tempdir();
    let (source, _writer, _http) = live_hls_source(src.path()).await;

    let (dir_a, dir_b) = (tempdir(), tempdir());
    let a = node(dir_a.path(), &url, "node-a");
    let b = node(dir_b.path(), &url, "node-b");
    let rec = media::create(&a, json!({"name": "pulled", "pull": true, "uri": source})).await;
    let id = rec["id"].as_i64().unwrap();
    media::wait_record(&b, id, Duration::from_secs(40), |r| r["live"] == true).await;
    // Exactly one node pulls (the other has no session for it: nothing in its /metrics), and
    // keeps it: the other node, aware of the record, does not start a second pull.
    let serves = |m: &common::metrics::Metrics| {
        m.0.contains_key(&format!("livepack_stream_live{{stream=\"{id}\"}}"))
    };
    tokio::time::sleep(Duration::from_secs(DEAD_SECS + 3)).await;
    let (on_a, on_b) = (
        serves(&common::metrics::scrape(&a).await),
        serves(&common::metrics::scrape(&b).await),
    );
    assert!(on_a != on_b, "pulled by A: {on_a}, by B: {on_b}");
    let (puller, other) = if on_a { (a, b) } else { (b, a) };

    let killed = Instant::now();
    puller.kill9();
    media::wait_record(&other, id, Duration::from_secs(40), |r| r["live"] == false).await;
    media::wait_record(&other, id, Duration::from_secs(40), |r| r["live"] == true).await;
    let moved = killed.elapsed();
    println!("puller killed: PULL live again on the other node after {moved:?}");
    assert!(
        moved <= Duration::from_secs(20),
        "taken over after {moved:?}"
    );
    assert!(serves(&common::metrics::scrape(&other).await));
    let master = at(
        rec["hls_cmaf_url"].as_str().unwrap(),
        other.base.trim_start_matches("http://"),
    );
    media::wait_segments(&master, 2).await;
}

/// A live HLS presentation (ffmpeg writing segments, a static HTTP server) holding at least 4
/// segments: a live source, not one starting (hlsdemux2 waits for three before it delivers).
async fn live_hls_source(dir: &std::path::Path) -> (String, media::Proc, media::Proc) {
    let writer = media::hls_writer(&dir.join("www/live"));
    let http_port = free_port(false);
    let http = media::http_server(&dir.join("www"), http_port);
    let source = format!("http://127.0.0.1:{http_port}/live/index.m3u8");
    let deadline = Instant::now() + Duration::from_secs(30);
    while media::text(&source).await.1.matches("#EXTINF").count() < 4 {
        assert!(
            Instant::now() < deadline,
            "the HLS source never held 4 segments"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    (source, writer, http)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_stream_goes_to_the_node_with_the_most_room() {
    let _heavy = media::heavy().await;
    let server = PgServer::start();
    let url = server.create_database();
    let src = tempdir();
    let (source, _writer, _http) = live_hls_source(src.path()).await;
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let roomy = |dir: &std::path::Path, id: &str| {
        node_with(dir, &url, id, &[("LIVEPACK_MAX_TRANSCODES", "2")])
    };
    let (a, b) = (roomy(dir_a.path(), "node-a"), roomy(dir_b.path(), "node-b"));
    // A transcodes one stream of its two: half its room left, B all of its.
    let pushed = media::create(&a, json!({"name": "on a"})).await;
    let push_url = at(pushed["push_url"].as_str().unwrap(), &a.rtmp);
    let _pusher = media::push(&push_url, "av-720p.flv", 30);
    media::wait_record(
        &a,
        pushed["id"].as_i64().unwrap(),
        Duration::from_secs(30),
        |r| r["live"] == true,
    )
    .await;
    // A few heartbeats: each node has read the other's headroom.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Created on A, whose PULL manager hears of it first: without placement A would pull it.
    let rec = media::create(&a, json!({"name": "pulled", "pull": true, "uri": source})).await;
    let id = rec["id"].as_i64().unwrap();
    media::wait_record(&a, id, Duration::from_secs(40), |r| r["live"] == true).await;
    let serves = |m: &common::metrics::Metrics| {
        m.0.contains_key(&format!("livepack_stream_live{{stream=\"{id}\"}}"))
    };
    assert!(
        serves(&common::metrics::scrape(&b).await),
        "B, the roomier node, does not pull it"
    );
    assert!(
        !serves(&common::metrics::scrape(&a).await),
        "A pulls it too"
    );
}

/// A TCP forwarder to `target` on loopback that can be cut: sending `true` closes every
/// connection through it and refuses new ones — a node losing its database.
async fn cuttable(target: u16) -> (u16, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (cut, cut_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut cut = cut_rx.clone();
        loop {
            let accepted = tokio::select! {
                _ = cut.changed() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((mut inbound, _)) = accepted else {
                continue;
            };
            let mut cut = cut_rx.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    _ = cut.changed() => {}
                }
            });
        }
    });
    (port, cut)
}

/// A node whose heartbeats stop reaching the database stops serving its streams before the
/// other nodes may count it dead and take them: never two nodes on one stream.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_cut_off_from_the_store_stops_its_streams_before_others_take_them() {
    let _heavy = media::heavy().await;
    let server = PgServer::start();
    let url = server.create_database();
    let (port, cut) = cuttable(server.port()).await;
    let url_a = url.replace(&format!(":{}/", server.port()), &format!(":{port}/"));
    assert_ne!(url_a, url);
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let a = node(dir_a.path(), &url_a, "node-a");
    let b = node(dir_b.path(), &url, "node-b");
    let rec = media::create(&b, json!({"name": "cam"})).await;
    let id = rec["id"].as_i64().unwrap();
    let push_url = rec["push_url"].as_str().unwrap().to_owned();
    let pusher = media::push(&at(&push_url, &a.rtmp), "av-720p.flv", 20);
    media::wait_record(&b, id, Duration::from_secs(30), |r| r["live"] == true).await;

    cut.send(true).unwrap();
    let cut_at = Instant::now();
    let (kicked, off_air) = tokio::join!(
        async {
            let (_, err) = media::finish(pusher, Duration::from_secs(30)).await;
            (cut_at.elapsed(), err)
        },
        async {
            media::wait_record(&b, id, Duration::from_secs(30), |r| r["live"] == false).await;
            cut_at.elapsed()
        }
    );
    println!(
        "store cut off from A: A's publisher cut after {:?}, B shows the stream off air after \
         {off_air:?} (bound {DEAD_SECS} s)",
        kicked.0
    );
    assert_ne!(kicked.1, "timed out", "A kept serving without the store");
    assert!(
        kicked.0 < off_air,
        "A stopped ({:?}) after B could take the stream ({off_air:?})",
        kicked.0
    );
    // The publisher reconnecting to B goes live there.
    let again = media::push(&at(&push_url, &b.rtmp), "av-720p.flv", 20);
    media::wait_record(&b, id, Duration::from_secs(30), |r| r["live"] == true).await;
    drop(again);
    drop(a);
}
