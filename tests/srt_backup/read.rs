//! SRT read end to end: ffprobe, ffmpeg and srt-live-transmit read `srt_play_url` (and each
//! other form of the stream id) from the real daemon while an SRT push is live; refusals are
//! answered at the handshake (a raw caller reads the exact reason); passphrase and signed
//! playback apply to readers; readers are counted in `/metrics` and closed when the stream ends.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::metrics::scrape;
use crate::common::proc::run_within;
use crate::common::srt::{conclude_holding, rejection, CONCLUSION};
use crate::common::{tempdir, Daemon, KEY};
use crate::media::*;

const SIGNING_KEY: &str = "srt-read-playback-key-0123";
const PASSPHRASE: &str = "0123456789abc";

/// ffprobe's streams for an SRT URL (bounded), or its error text.
fn probe(url: &str) -> Result<Vec<(String, u64, u64)>, String> {
    let out = run_within(
        Command::new("ffprobe")
            .args(["-v", "error", "-rw_timeout", "10000000"])
            .args([
                "-analyzeduration",
                "3000000",
                "-show_streams",
                "-of",
                "json",
            ])
            .arg(url),
        "ffprobe",
        Duration::from_secs(30),
    );
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut streams: Vec<(String, u64, u64)> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap_or(0);
            (
                s["codec_name"].as_str().unwrap_or("").to_owned(),
                n("width"),
                n("height"),
            )
        })
        .collect();
    streams.sort();
    Ok(streams)
}

fn av(codec: &str, w: u64, h: u64) -> Vec<(String, u64, u64)> {
    vec![("aac".into(), 0, 0), (codec.into(), w, h)]
}

/// srt-live-transmit reading `url` to its stdout.
fn slt_reader(url: &str) -> Proc {
    Proc::spawn(
        Command::new("srt-live-transmit")
            .args(["-q", url, "file://con"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        "srt-live-transmit",
    )
}

/// Reads `n` bytes of a reader's stdout on a thread (bounded by the caller's wait).
fn take_bytes(p: &mut Proc, n: usize) -> std::thread::JoinHandle<Vec<u8>> {
    let mut out = p.child().stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0; n];
        match out.read_exact(&mut buf) {
            Ok(()) => buf,
            Err(_) => Vec::new(),
        }
    })
}

async fn join(t: std::thread::JoinHandle<Vec<u8>>, within: Duration) -> Vec<u8> {
    let deadline = Instant::now() + within;
    while !t.is_finished() {
        assert!(Instant::now() < deadline, "the reader produced too little");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    t.join().unwrap()
}

/// Waits (bounded) until `/metrics` counts `n` SRT readers of stream `id`.
async fn wait_srt_readers(d: &Daemon, id: i64, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = scrape(d).await.stream("livepack_stream_srt_readers", id);
        if now == n {
            return;
        }
        assert!(Instant::now() < deadline, "{now} SRT readers, not {n}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The answer a raw caller gets for `stream_id` (its socket held while the test runs on).
async fn answer(d: &Daemon, stream_id: &str) -> (Option<u32>, tokio::net::UdpSocket) {
    conclude_holding("127.0.0.1:0", &d.srt, stream_id.as_bytes()).await
}

#[tokio::test]
async fn srt_read_every_form_several_readers_and_refusals() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "2"),
            ("LIVEPACK_PLAYBACK_SIGNING_KEY", SIGNING_KEY),
        ],
    );
    let rec = create(&d, json!({"name": "read"})).await;
    let idle = create(&d, json!({"name": "not live"})).await;
    let id = rec["id"].as_i64().unwrap();
    let play = rec["srt_play_url"].as_str().unwrap().to_owned();
    assert_eq!(play, format!("srt://{}?streamid=play:{id}", d.srt));
    let srt = |sid: &str| format!("srt://{}?streamid={sid}", d.srt);

    // Refused before anything is live, each with its reason.
    let not_live = format!("play:{}", idle["id"]);
    for (sid, reason) in [
        ("play:999999".to_owned(), 1404),
        (not_live, 1404),
        (format!("play:{id}/a/b"), 1400),
        (format!("#!::r={id},m=request,t=abc"), 1400),
    ] {
        assert_eq!(answer(&d, &sid).await.0, Some(rejection(reason)), "{sid}");
    }

    let _push = push(rec["push_url_srt"].as_str().unwrap(), "av-720p.ts", 10);
    let live = wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true
            && r["transcoded_qualities"]
                .as_array()
                .is_some_and(|q| q.len() == 3)
    })
    .await;
    assert_eq!(
        live["transcoded_qualities"],
        json!(["720p", "480p", "360p"])
    );

    // The record's URL: the default rung (720p for a 720p source), H.264 + AAC.
    assert_eq!(probe(&play), Ok(av("h264", 1280, 720)));
    // A rung by name, decoded (an independent decoder accepts the picture stream).
    let (codec, w, h, frames) = decoded_video(&srt(&format!("play:{id}/360p")));
    assert_eq!((codec.as_str(), w, h), ("h264", 640, 360));
    assert!(frames >= 25, "{frames} frames decoded from the 360p rung");
    // The source, remuxed; the access-control form; both percent-encoded.
    assert_eq!(
        probe(&srt(&format!("play:{id}/origin"))),
        Ok(av("h264", 1280, 720))
    );
    let ac = srt(&format!("#!::r={id}/480p,m=request"));
    assert_eq!(probe(&ac), Ok(av("h264", 854, 480)));
    // Two srt-live-transmit readers at once, counted in /metrics while attached.
    let mut a = slt_reader(&play);
    let mut b = slt_reader(&srt(&format!("play:{id}/360p")));
    let (ta, tb) = (take_bytes(&mut a, 400_000), take_bytes(&mut b, 200_000));
    let (ta, tb) = (
        join(ta, Duration::from_secs(20)).await,
        join(tb, Duration::from_secs(20)).await,
    );
    wait_srt_readers(&d, id, 2.0).await;
    assert_eq!(record(&d, id).await["srt_readers"], 2);
    for (bytes, size) in [(ta, (1280, 720)), (tb, (640, 360))] {
        // Whole transport packets from the first byte, readable by ffprobe.
        assert!(bytes.chunks(188).all(|p| p[0] == 0x47), "not TS packets");
        let file = dir.path().join("slt.ts");
        std::fs::write(&file, &bytes).unwrap();
        let streams = probe(file.to_str().unwrap()).unwrap();
        assert!(
            streams.contains(&("h264".into(), size.0, size.1)),
            "{streams:?}"
        );
    }
    drop((a, b));

    // The raw caller sends the stream id as written: the daemon decodes it once. Accepted
    // callers' sockets are held (the listener knows a caller by its address).
    let mut held = Vec::new();
    for sid in [
        format!("play%3A{id}%2F480p"),
        format!("%23%21%3A%3Ar%3D{id}%2Forigin%2Cm%3Drequest"),
    ] {
        let (answer, socket) = answer(&d, &sid).await;
        assert_eq!(answer, Some(CONCLUSION), "{sid}");
        held.push(socket);
    }
    assert_eq!(
        answer(&d, &format!("play:{id}/1080p")).await.0,
        Some(rejection(1404))
    );

    // Signed playback applies to SRT readers: the record's URL carries the grant.
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"secure_playback": true}}),
        )
        .await;
    assert_eq!(r.body["secure_playback"], true, "{}", r.body);
    let signed = r.body["srt_play_url"].as_str().unwrap().to_owned();
    assert!(
        signed.contains(&format!("streamid=play:{id}/t/")),
        "{signed}"
    );
    assert_eq!(
        answer(&d, &format!("play:{id}")).await.0,
        Some(rejection(1401))
    );
    let forged = format!("{}AAAAA", &signed[..signed.len() - 5]);
    let forged_sid = forged.split("streamid=").nth(1).unwrap();
    assert_eq!(answer(&d, forged_sid).await.0, Some(rejection(1401)));
    assert_eq!(probe(&format!("{signed}/360p")), Ok(av("h264", 640, 360)));

    // The stream's passphrase applies to readers: none or a wrong one fails the handshake.
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"secure_playback": false, "srt_passphrase": PASSPHRASE}}),
        )
        .await;
    assert_eq!(r.body["srt_passphrase"], PASSPHRASE, "{}", r.body);
    assert!(probe(&play).is_err(), "read without the passphrase");
    assert!(
        probe(&format!("{play}&passphrase=wrong-passphrase")).is_err(),
        "wrong passphrase"
    );
    assert_eq!(
        probe(&format!("{play}&passphrase={PASSPHRASE}")),
        Ok(av("h264", 1280, 720))
    );

    // A reader is closed when the stream ends.
    let mut reader = Proc::spawn(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-i"])
            .arg(format!("{play}&passphrase={PASSPHRASE}"))
            .args(["-c", "copy", "-f", "mpegts", "-y"])
            .arg(dir.path().join("until-end.ts"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "ffmpeg",
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(reader.try_wait().is_none(), "the ffmpeg reader ended early");
    drop(_push);
    assert!(
        reader.wait_within(Duration::from_secs(20)).is_some(),
        "the reader was not closed when the stream ended"
    );
    let kept = std::fs::metadata(dir.path().join("until-end.ts"))
        .unwrap()
        .len();
    assert!(kept > 100_000, "{kept} bytes read");
}

/// The origin of an HEVC source is HEVC (remuxed, not the rungs' H.264).
#[tokio::test]
async fn srt_read_origin_of_an_hevc_source() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "hevc"})).await;
    let id = rec["id"].as_i64().unwrap();
    let _push = push(rec["push_url_srt"].as_str().unwrap(), "hevc-720p.ts", 5);
    wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true && r["video_height"].is_number()
    })
    .await;
    let origin = format!("srt://{}?streamid=play:{id}/origin", d.srt);
    assert_eq!(probe(&origin), Ok(av("hevc", 1280, 720)));
    let (codec, w, h, frames) = decoded_video(&origin);
    assert_eq!((codec.as_str(), w, h), ("hevc", 1280, 720));
    assert!(frames >= 25, "{frames} HEVC frames decoded");
}
