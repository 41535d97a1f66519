//! End to end: ffmpeg and srt-live-transmit push MPEG-TS over SRT into the real daemon; refusals
//! (stream id, token, state, passphrase) are answered at the handshake; hostile datagrams do not
//! take the listener down; main and backup pushes fail over and back with a discontinuity.
//! SRT read (`read`): players on `srt_play_url` and its other forms.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/media.rs"]
mod media;
mod read;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use reqwest::StatusCode;
use serde_json::{json, Value};

use common::hls::{discontinuities, last_part};
use common::{tempdir, Daemon};
use media::*;

/// ffmpeg feeding srt-live-transmit (the Haivision reference client) through a pipe.
fn push_slt(url: &str, loops: u32) -> (Proc, Proc) {
    let mut ffmpeg = Proc::spawn(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re", "-stream_loop"])
            .arg(loops.to_string())
            .arg("-i")
            .arg(fixture("av-720p.ts"))
            .args(["-c", "copy", "-f", "mpegts", "-"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        "ffmpeg",
    );
    let slt = Proc::spawn(
        Command::new("srt-live-transmit")
            .args(["-q", "file://con", url])
            .stdin(ffmpeg.child().stdout.take().unwrap())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "srt-live-transmit",
    );
    (ffmpeg, slt)
}

/// EXT-X-MEDIA-SEQUENCE of a playlist's text.
fn first_msn(playlist: &str) -> u64 {
    hls::first_msn(&hls::media(playlist))
}

/// Asserts a refused push: ffmpeg fails quickly and the record shows nothing started.
async fn refused(d: &Daemon, url: &str, rec: &Value) {
    let t0 = Instant::now();
    let (ok, err) = finish(push(url, "av-720p.ts", 0), Duration::from_secs(20)).await;
    assert!(!ok, "push to {url} was accepted");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "refusal of {url} took {:?}: {err}",
        t0.elapsed()
    );
    let r = record(d, rec["id"].as_i64().unwrap()).await;
    assert_eq!(r["live"], false, "{url}");
    assert!(r["started_at_primary"].is_null(), "{url}: {r}");
    let (status, _) = text(r["hls_cmaf_url"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{url}");
}

#[tokio::test]
async fn srt_push_plays_and_one_protocol_holds_the_main_input() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "srt"})).await;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap();
    let srt_url = rec["push_url_srt"].as_str().unwrap();
    assert_eq!(srt_url, format!("srt://{}?streamid={id}#{token}", d.srt));
    assert_eq!(
        rec["backup_push_url_srt"],
        format!("srt://{}?streamid={id}b#{token}", d.srt)
    );

    // ffmpeg over SRT with the record's own URL.
    let ffmpeg = push(srt_url, "av-720p.ts", 1);
    let live = wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true && r["transcoding_speed"].is_number()
    })
    .await;
    assert_eq!(
        (live["video_width"].clone(), live["video_height"].clone()),
        (json!(1280), json!(720))
    );
    let fps = live["frame_rate"].as_f64().unwrap();
    assert!((29.0..31.5).contains(&fps), "frame_rate {fps}");
    assert_eq!(live["backup_live"], false);

    // An RTMP publish to the main input live over SRT is refused.
    let (ok, _) = finish(
        push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 0),
        Duration::from_secs(15),
    )
    .await;
    assert!(!ok, "RTMP took over a main input live over SRT");

    // The LL-HLS output plays (ffprobe reads every rendition).
    let master = rec["hls_cmaf_url"].as_str().unwrap().to_owned();
    wait_segments(&master, 2).await;
    let probe = ffprobe(&master);
    let streams = probe["streams"].as_array().unwrap();
    let mut heights: Vec<i64> = streams
        .iter()
        .filter(|s| s["codec_type"] == "video")
        .map(|s| s["height"].as_i64().unwrap())
        .collect();
    heights.sort();
    heights.dedup();
    assert_eq!(heights, [360, 480, 720]);
    assert!(streams.iter().any(|s| s["codec_name"] == "aac"));

    // The caller leaves: the stream ends cleanly (ENDLIST after the 2 s grace period).
    let (ok, err) = finish(ffmpeg, Duration::from_secs(40)).await;
    assert!(ok, "ffmpeg SRT push failed: {err}");
    let ended = wait_record(&d, id, Duration::from_secs(15), |r| r["live"] == false).await;
    assert!(ended["finished_at_primary"].is_string(), "{ended}");
    let base = master.trim_end_matches("master.m3u8");
    wait_endlist(&format!("{base}720p/index.m3u8")).await;

    // The reverse: RTMP holds the main input, an SRT publish to it is refused.
    let rtmp = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 2);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let ac = format!("srt://{}?streamid=#!::r={id},m=publish,t={token}", d.srt);
    let (ok, _) = finish(push(&ac, "av-720p.ts", 0), Duration::from_secs(15)).await;
    assert!(!ok, "SRT took over a main input live over RTMP");
    drop(rtmp);
    wait_record(&d, id, Duration::from_secs(15), |r| r["live"] == false).await;

    // srt-live-transmit with the access-control stream id syntax.
    let _slt = push_slt(&ac, 2);
    wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true && r["transcoding_speed"].is_number()
    })
    .await;
}

#[tokio::test]
async fn srt_refusals_and_passphrases() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    // A stream kept live over SRT throughout: a listener failure would cut it.
    let keeper = create(&d, json!({"name": "keeper"})).await;
    let keeper_id = keeper["id"].as_i64().unwrap();
    let _keeper_push = push(keeper["push_url_srt"].as_str().unwrap(), "av-720p.ts", 5);
    wait_record(&d, keeper_id, Duration::from_secs(20), |r| {
        r["live"] == true
    })
    .await;
    let keeper_pl = format!(
        "{}720p/index.m3u8",
        keeper["hls_cmaf_url"]
            .as_str()
            .unwrap()
            .trim_end_matches("master.m3u8")
    );

    let ok = create(&d, json!({"name": "target"})).await;
    let inactive = create(&d, json!({"name": "off", "active": false})).await;
    let pull = create(
        &d,
        json!({"name": "pull", "pull": true, "uri": "srt://127.0.0.1:9"}),
    )
    .await;
    let (id, token) = (ok["id"].as_i64().unwrap(), ok["token"].as_str().unwrap());
    let srt = &d.srt;
    let at = |rec: &Value, sid: &str| (format!("srt://{srt}?streamid={sid}"), rec.clone());
    let cases = [
        (format!("srt://{srt}"), ok.clone()),
        at(&ok, "garbage"),
        at(&ok, &format!("{id}")),
        at(&ok, &format!("999#{token}")),
        at(&ok, &format!("{id}#wrongtoken")),
        at(&ok, &format!("#!::r={id},m=request,t={token}")),
        at(&ok, &format!("#!::r={id},t={token},x")),
        at(
            &inactive,
            &format!("{}#{}", inactive["id"], inactive["token"].as_str().unwrap()),
        ),
        at(
            &pull,
            &format!("{}#{}", pull["id"], pull["token"].as_str().unwrap()),
        ),
    ];
    for (url, rec) in &cases {
        refused(&d, url, rec).await;
    }
    // The keeper's own main input is taken.
    let (ok_push, _) = finish(
        push(keeper["push_url_srt"].as_str().unwrap(), "av-720p.ts", 0),
        Duration::from_secs(15),
    )
    .await;
    assert!(!ok_push, "a second SRT publisher took a live main input");

    // Passphrase set on the record: SRT encryption enforces it at the handshake.
    let secret = create(
        &d,
        json!({"name": "secret", "srt_passphrase": "0123456789abc"}),
    )
    .await;
    let base = secret["push_url_srt"].as_str().unwrap().to_owned();
    refused(&d, &base, &secret).await;
    refused(&d, &format!("{base}&passphrase=wrong-passphrase"), &secret).await;
    // A passphrase offered to a stream without one (srt-protocol 0.4.4 panicked its listener).
    refused(
        &d,
        &format!(
            "{}&passphrase=0123456789abc",
            ok["push_url_srt"].as_str().unwrap()
        ),
        &ok,
    )
    .await;
    for keylen in ["16", "32"] {
        // A stream each, so one ending does not race the next start.
        let enc = create(
            &d,
            json!({"name": keylen, "srt_passphrase": "0123456789abc"}),
        )
        .await;
        let good = push(
            &format!(
                "{}&passphrase=0123456789abc&pbkeylen={keylen}",
                enc["push_url_srt"].as_str().unwrap()
            ),
            "av-720p.ts",
            0,
        );
        let r = wait_record(
            &d,
            enc["id"].as_i64().unwrap(),
            Duration::from_secs(20),
            // The publish time is stored off the media path: it may land just after `live`.
            |r| r["live"] == true && r["started_at_primary"].is_string(),
        )
        .await;
        assert!(r["started_at_primary"].is_string());
        let (ok, err) = finish(good, Duration::from_secs(20)).await;
        assert!(ok, "encrypted push with pbkeylen={keylen}: {err}");
    }

    // Not MPEG-TS over SRT (FLV): the connection is closed, the caller fails.
    let flv = Proc::spawn(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re", "-i"])
            .arg(fixture("av-720p.flv"))
            .args(["-c", "copy", "-f", "flv"])
            .arg(ok["push_url_srt"].as_str().unwrap())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
        "ffmpeg",
    );
    let (ok_flv, _) = finish(flv, Duration::from_secs(20)).await;
    assert!(!ok_flv, "FLV over SRT was taken");

    // The keeper is still live and its playlist still advancing.
    let before = last_part(&text(&keeper_pl).await.1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = last_part(&text(&keeper_pl).await.1);
    assert_ne!(before, after, "the keeper stalled");
    let r = record(&d, keeper_id).await;
    assert_eq!(r["live"], true, "{r}");
}

/// A stream with its main pushed over RTMP and its backup over SRT, both received and
/// transcoded, two segments out, no discontinuity yet: its record, its 720p playlist's URL and
/// the two pushers.
async fn main_and_backup_on_air(d: &Daemon, name: &str) -> (Value, String, Proc, Proc) {
    let rec = create(d, json!({ "name": name })).await;
    let id = rec["id"].as_i64().unwrap();
    let pl_url = format!(
        "{}720p/index.m3u8",
        rec["hls_cmaf_url"]
            .as_str()
            .unwrap()
            .trim_end_matches("master.m3u8")
    );
    let main = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    let backup = push(
        rec["backup_push_url_srt"].as_str().unwrap(),
        "av-720p.ts",
        20,
    );
    let both = wait_record(d, id, Duration::from_secs(20), |r| {
        r["live"] == true && r["backup_live"] == true && r["transcoding_speed"].is_number()
    })
    .await;
    assert!(both["started_at_primary"].is_string() && both["started_at_backup"].is_string());
    wait_segments(rec["hls_cmaf_url"].as_str().unwrap(), 2).await;
    let start = text(&pl_url).await.1;
    assert_eq!(discontinuities(&start), 0, "{start}");
    (rec, pl_url, main, backup)
}

#[tokio::test]
async fn main_and_backup_fail_over_and_back() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let (rec, pl_url, mut main, backup) = main_and_backup_on_air(&d, "failover").await;
    let id = rec["id"].as_i64().unwrap();

    // Follows the playlist: media sequence never goes back; returns the longest pause between
    // two published parts and when the predicate on the playlist first held.
    async fn watch(
        url: &str,
        within: Duration,
        msn: &mut u64,
        until: impl Fn(&str) -> bool,
    ) -> Duration {
        let deadline = Instant::now() + within;
        let mut last = (None, Instant::now());
        let mut longest = Duration::ZERO;
        loop {
            let t = text(url).await.1;
            let seq = first_msn(&t);
            assert!(seq >= *msn, "media sequence went back: {seq} < {msn}\n{t}");
            *msn = seq;
            let part = last_part(&t);
            if part != last.0 {
                longest = longest.max(last.1.elapsed());
                last = (part, Instant::now());
            }
            if until(&t) {
                return longest;
            }
            assert!(Instant::now() < deadline, "playlist never got there:\n{t}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut msn = 0;

    // The main stops delivering (stopped, its TCP connection still open): after the 3 s
    // timeout the outputs come from the backup, with one discontinuity.
    main.signal(Signal::SIGSTOP);
    let stopped = Instant::now();
    let pause = watch(&pl_url, Duration::from_secs(20), &mut msn, |t| {
        discontinuities(t) == 1
    })
    .await;
    let r = wait_record(&d, id, Duration::from_secs(5), |r| r["live"] == false).await;
    assert_eq!(r["backup_live"], true, "{r}");
    eprintln!(
        "failover: longest pause between parts {pause:?}; discontinuity listed {:?} after the main stopped",
        stopped.elapsed()
    );
    // Players keep playing: the playlist advances and ffprobe reads across the switch.
    let t = text(&pl_url).await.1;
    watch(&pl_url, Duration::from_secs(10), &mut msn, |now| {
        last_part(now) != last_part(&t)
    })
    .await;
    let probe = ffprobe(rec["hls_cmaf_url"].as_str().unwrap());
    assert!(probe["streams"].as_array().unwrap().len() >= 4);
    let dash = ffprobe(rec["dash_url"].as_str().unwrap());
    assert!(dash["streams"].as_array().unwrap().len() >= 4, "{dash}");

    // The main comes back (a new connection): the outputs return to it, a second discontinuity.
    drop(main);
    let mut main = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true && r["backup_live"] == true
    })
    .await;
    let back = Instant::now();
    let pause = watch(&pl_url, Duration::from_secs(20), &mut msn, |t| {
        discontinuities(t) == 2
    })
    .await;
    eprintln!(
        "return to main: longest pause between parts {pause:?}, discontinuity after {:?}",
        back.elapsed()
    );

    // With the backup gone the outputs keep coming: they follow the main.
    drop(backup);
    wait_record(&d, id, Duration::from_secs(15), |r| {
        r["backup_live"] == false
    })
    .await;
    let t = text(&pl_url).await.1;
    watch(&pl_url, Duration::from_secs(10), &mut msn, |now| {
        first_msn(now) >= first_msn(&t) + 2
    })
    .await;
    assert_eq!(discontinuities(&text(&pl_url).await.1), 2);

    // A silent main without a backup: the stream turns off.
    main.signal(Signal::SIGSTOP);
    let r = wait_record(&d, id, Duration::from_secs(10), |r| r["live"] == false).await;
    assert_eq!(r["backup_live"], false);
}

/// The store is locked (another writer holds SQLite's write lock) when the main publisher
/// leaves: the backup goes on air at once all the same, no frame is dropped, and the main's
/// finish time reaches the record once the store takes writes again.
#[tokio::test]
async fn a_failover_never_waits_for_the_store() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let (rec, pl_url, mut main, _backup) = main_and_backup_on_air(&d, "locked store").await;
    let id = rec["id"].as_i64().unwrap();

    // Held until dropped: every write of the daemon waits for it (and gives up after its busy
    // timeout).
    let db = common::data_dir(dir.path()).join("livepack.db");
    let lock = rusqlite::Connection::open(&db).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let locked_for = Duration::from_secs(12);
    let locked_at = Instant::now();

    main.kill();
    // Below the store's busy timeout (5 s): a switch that waited for the write would miss it.
    let switch_deadline = Instant::now() + Duration::from_secs(4);
    let deadline = locked_at + locked_for - Duration::from_secs(2);
    let switched = loop {
        if discontinuities(&text(&pl_url).await.1) == 1 {
            break locked_at.elapsed();
        }
        assert!(
            Instant::now() < switch_deadline,
            "the backup was not on air while the store was locked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("switched to the backup {switched:?} after the main left, store locked");
    // The outputs go on from the backup while the store is still locked.
    let t = text(&pl_url).await.1;
    loop {
        let now = text(&pl_url).await.1;
        if last_part(&now) != last_part(&t) {
            break;
        }
        assert!(Instant::now() < deadline, "the outputs stalled:\n{now}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(locked_for.saturating_sub(locked_at.elapsed())).await;
    lock.execute_batch("COMMIT").unwrap();
    drop(lock);

    let r = wait_record(&d, id, Duration::from_secs(10), |r| {
        r["live"] == false && r["backup_live"] == true
    })
    .await;
    assert!(r["finished_at_primary"].is_string(), "{r}");
    // Stored, not only shown: the write that the lock refused was tried again.
    let stored = || {
        rusqlite::Connection::open(&db)
            .unwrap()
            .query_row(
                "SELECT finished_at_primary_ms FROM streams WHERE id = ?1",
                [id],
                |row| row.get::<_, Option<i64>>(0),
            )
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while stored().is_none() {
        assert!(
            Instant::now() < deadline,
            "the finish time was never stored"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m = common::metrics::scrape(&d).await;
    assert_eq!(
        m.stream("livepack_stream_frames_dropped_total", id),
        0.0,
        "frames were dropped during the failover"
    );
}
