//! SRT read end to end: ffprobe, ffmpeg and srt-live-transmit read `srt_play_url` (and each
//! other form of the stream id) from the real daemon while an SRT push is live; refusals are
//! answered at the handshake (a raw caller reads the exact reason); passphrase and signed
//! playback apply to readers; readers are counted in `/metrics` and closed when the stream ends.
//! A high-detail source (large IDRs, 5.1 AAC) pushed over RTMP reads whole at its bitrate.

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

/// A stream as ffprobe shows it: codec, width, height (video), channels (audio).
type Stream = (String, u64, u64, u64);

/// ffprobe's streams for an SRT URL (bounded), or its error text.
fn probe(url: &str) -> Result<Vec<Stream>, String> {
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
    let mut streams: Vec<Stream> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap_or(0);
            (
                s["codec_name"].as_str().unwrap_or("").to_owned(),
                n("width"),
                n("height"),
                n("channels"),
            )
        })
        .collect();
    streams.sort();
    Ok(streams)
}

/// Video and stereo AAC: every rung's audio, and the fixtures' own.
fn av(codec: &str, w: u64, h: u64) -> Vec<Stream> {
    av_channels(codec, w, h, 2)
}

fn av_channels(codec: &str, w: u64, h: u64, channels: u64) -> Vec<Stream> {
    vec![("aac".into(), 0, 0, channels), (codec.into(), w, h, 0)]
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
            streams.contains(&("h264".into(), size.0, size.1, 0)),
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

/// ffmpeg decoding `secs` seconds of every stream behind `url` (bounded): its success, its
/// error output, and the video frames it decoded.
fn decode(url: &str, secs: u32) -> (bool, String, u64) {
    let out = run_within(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-nostats", "-v", "error", "-xerror"])
            .args(["-rw_timeout", "10000000", "-i", url, "-map", "0", "-t"])
            .arg(secs.to_string())
            .args(["-f", "null", "-progress", "pipe:1", "-"]),
        "ffmpeg",
        Duration::from_secs(u64::from(secs) + 30),
    );
    let progress = String::from_utf8_lossy(&out.stdout);
    let frames = progress
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("frame=")?.trim().parse().ok())
        .unwrap_or(0);
    let errors = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), errors, frames)
}

/// Everything srt-live-transmit reads from `url` in `within`, on a thread (the reader is
/// killed at the end, which ends the read).
async fn read_for(url: &str, within: Duration) -> Vec<u8> {
    let mut p = slt_reader(url);
    let mut out = p.child().stdout.take().unwrap();
    let reading = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        buf
    });
    tokio::time::sleep(within).await;
    p.kill();
    reading.join().unwrap()
}

/// The AVERAGE-BANDWIDTH (bit/s) the MPEG-TS master gives rung `rung`: the same encode,
/// packaged for HLS, measured by the daemon on its own path.
async fn ts_average_bandwidth(url: &str, rung: &str) -> f64 {
    let master = text(url).await.1;
    let lines: Vec<&str> = master.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.starts_with(&format!("{rung}/")))
        .unwrap_or_else(|| panic!("no {rung} in {master}"));
    let attr = lines[i - 1]
        .split([':', ','])
        .find_map(|a| a.strip_prefix("AVERAGE-BANDWIDTH="))
        .unwrap_or_else(|| panic!("no AVERAGE-BANDWIDTH in {}", lines[i - 1]));
    attr.parse().unwrap()
}

/// A film-like source — detail everywhere, so each IDR is over 100 KB (well over a hundred SRT
/// payloads handed to the socket at once) — with 5.1 AAC, pushed over RTMP, reads whole over
/// SRT: ffprobe sees the rung (stereo AAC, as every rung) and the origin (5.1 as pushed), ffmpeg
/// decodes seconds of it without an error, and srt-live-transmit receives about the bitrate
/// the daemon sends.
#[tokio::test]
async fn srt_read_high_detail_source() {
    const FIXTURE: &str = "detail-720p25.flv";
    const READ: Duration = Duration::from_secs(10);
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "film"})).await;
    let id = rec["id"].as_i64().unwrap();
    let play = rec["srt_play_url"].as_str().unwrap().to_owned();
    let origin = format!("srt://{}?streamid=play:{id}/origin", d.srt);
    let _push = push(rec["push_url"].as_str().unwrap(), FIXTURE, 20);
    wait_record(&d, id, Duration::from_secs(30), |r| {
        r["live"] == true
            && r["transcoded_qualities"]
                .as_array()
                .is_some_and(|q| q.len() == 3)
    })
    .await;

    assert_eq!(probe(&play), Ok(av("h264", 1280, 720)));
    assert_eq!(
        probe(&format!("srt://{}?streamid=play:{id}/360p", d.srt)),
        Ok(av("h264", 640, 360))
    );
    assert_eq!(probe(&origin), Ok(av_channels("h264", 1280, 720, 6)));

    // Decoded from the first byte (a reader starts at a keyframe), pictures and audio, without
    // an error. At least half of the 6 s have pictures: the origin's start at the source's
    // next keyframe (its GOP is 2 s), its audio at once.
    for url in [&play, &origin] {
        let (ok, errors, frames) = decode(url, 6);
        assert!(ok && errors.is_empty(), "ffmpeg on {url}: {errors}");
        assert!(frames >= 75, "{frames} frames decoded in 6 s from {url}");
    }

    // Two readers at once, each for the same time: what arrives is about the rate of what
    // they read (the rung as the HLS output measures it, the source as pushed).
    let rung_rate = ts_average_bandwidth(rec["hls_mpegts_url"].as_str().unwrap(), "720p").await;
    let source = ffprobe_with(&["-show_format"], fixture(FIXTURE).to_str().unwrap());
    let source_rate: f64 = source["format"]["bit_rate"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let (rung, source) = tokio::join!(read_for(&play, READ), read_for(&origin, READ));
    for (what, bytes, rate) in [("720p", &rung, rung_rate), ("origin", &source, source_rate)] {
        let ratio = bytes.len() as f64 * 8.0 / READ.as_secs_f64() / rate;
        assert!(
            (0.5..2.0).contains(&ratio),
            "{what}: {} bytes in {READ:?} at {rate} bit/s (ratio {ratio:.2})",
            bytes.len()
        );
        assert!(bytes.chunks(188).all(|p| p[0] == 0x47), "{what}: not TS");
    }
    let file = dir.path().join("origin.ts");
    std::fs::write(&file, &source).unwrap();
    assert_eq!(
        probe(file.to_str().unwrap()),
        Ok(av_channels("h264", 1280, 720, 6))
    );
}
