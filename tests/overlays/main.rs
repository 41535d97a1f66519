//! HTML overlays end to end: a local page with a solid red body is rendered by WPE WebKit and
//! burned into the transcoded picture; ffmpeg decodes the lowest rung and the screenshot and
//! finds red in the box (scaled from the 1920×1080 space) and not elsewhere; PATCH moves it,
//! DELETE removes it, and pages that 404 or never answer leave the stream live at speed. What a
//! page loads goes through the daemon's guarded proxy: a sub-resource at a blocked address is
//! never fetched. Transcoded recordings carry the overlay; origin recordings do not.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/media.rs"]
mod media;

use std::io::{Read, Write};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{tempdir, Daemon};
use media::{push, wait_record};

/// Request lines a page server has seen.
type Seen = Arc<Mutex<Vec<String>>>;

/// A page server on 127.0.0.1: `/red` a solid red page that also loads two images, `/pixel`
/// (allowed) and `/secret` at 0.0.0.0 (which Linux routes to this listener; the URL policy
/// refuses it); `/missing` a 404; `/hang` accepts and never answers.
fn pages() -> (String, Seen) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let seen = Seen::default();
    let log = seen.clone();
    let red = format!(
        "<!doctype html><html><body style=\"margin:0\"><div style=\"position:absolute;inset:0;background:#ff0000\"></div>\
         <img src=\"{base}/pixel\" style=\"opacity:0\"><img src=\"http://0.0.0.0:{port}/secret\" style=\"opacity:0\"></body></html>"
    );
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten().take(500) {
            let mut conn = conn;
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            log.lock()
                .unwrap()
                .push(req.lines().next().unwrap_or_default().to_owned());
            let (status, body) = if req.starts_with("GET /red") {
                ("200 OK", red.as_str())
            } else if req.starts_with("GET /hang") {
                held.push(conn); // never answered
                continue;
            } else {
                ("404 Not Found", "not here")
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (base, seen)
}

/// The first frame of the newest complete segment of `rendition`, decoded by ffmpeg; `None`
/// while the rendition has no complete segment.
async fn newest_frame(d: &Daemon, id: i64, rendition: &str) -> Option<(Vec<u8>, u32, u32)> {
    let base = format!("{}/cmaf/{id}/{rendition}/", d.base);
    let (_, playlist) = media::text(&format!("{base}index.m3u8")).await;
    let init = playlist
        .lines()
        .rev()
        .filter_map(|l| l.split("URI=\"").nth(1))
        .find(|u| u.starts_with("init_"))
        .map(|u| u.trim_end_matches('"').to_owned())?;
    let seg = playlist
        .lines()
        .rev()
        .find(|l| l.starts_with("seg_"))?
        .to_owned();
    let mut bytes = reqwest::get(format!("{base}{init}"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    bytes.extend_from_slice(
        &reqwest::get(format!("{base}{seg}"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    );
    Some(decode(&bytes))
}

/// ffmpeg decodes the first frame of `media` to RGB: (pixels, width, height).
fn decode(media: &[u8]) -> (Vec<u8>, u32, u32) {
    let dir = tempdir();
    let path = dir.path().join("frame.in");
    std::fs::write(&path, media).unwrap();
    let probe = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            "v",
            "-show_entries",
            "stream=width,height",
        ])
        .args(["-of", "csv=p=0"])
        .arg(&path)
        .output()
        .unwrap();
    let dims = String::from_utf8_lossy(&probe.stdout).trim().to_owned();
    let (w, h) = dims.split_once(',').expect("a picture size");
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&path)
        .args(["-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.stdout, w.parse().unwrap(), h.parse().unwrap())
}

/// The pixels of a decoded frame at the 4×4 grid inside a box given in the 1920×1080 space.
fn grid_pixels(frame: &(Vec<u8>, u32, u32), x: u32, y: u32, bw: u32, bh: u32) -> Vec<[u8; 3]> {
    let (data, w, h) = frame;
    let mut out = Vec::new();
    for i in 1..=4 {
        for j in 1..=4 {
            let px = ((x + bw * i / 5) * w / 1920) as usize;
            let py = ((y + bh * j / 5) * h / 1080) as usize;
            let at = (py * *w as usize + px) * 3;
            out.push([data[at], data[at + 1], data[at + 2]]);
        }
    }
    out
}

fn red(p: [u8; 3]) -> bool {
    p[0] > 180 && p[1] < 90 && p[2] < 90
}

/// A box in the 1920×1080 space: x, y, width, height.
type Boxed = (u32, u32, u32, u32);

/// Polls until `ok` holds for the box's pixels in the newest segment of the lowest rung.
async fn until_pixels(d: &Daemon, id: i64, b: Boxed, what: &str, ok: impl Fn(&[[u8; 3]]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let px = newest_frame(d, id, "360p")
            .await
            .map(|frame| grid_pixels(&frame, b.0, b.1, b.2, b.3));
        if px.as_deref().is_some_and(&ok) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {px:?}");
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlay_is_burned_into_its_box_moves_and_goes() {
    let _g = media::heavy().await;
    let (pages, seen) = pages();
    let dir = tempdir();
    // Loopback pages: the test's own server (the URL policy refuses only link-local/metadata).
    let d = Daemon::start(dir.path());
    let rec = d
        .post(
            "/streaming/streams",
            json!({"name": "ov", "html_overlay": true}),
        )
        .await;
    assert_eq!(rec.status, reqwest::StatusCode::CREATED, "{}", rec.body);
    let id = rec.body["id"].as_i64().unwrap();
    let _push = push(rec.body["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let created = d
        .post(
            &format!("/streaming/streams/{id}/overlays"),
            json!([{"url": format!("{pages}/red"), "x": 960, "y": 540, "width": 960, "height": 540}]),
        )
        .await;
    assert_eq!(
        created.status,
        reqwest::StatusCode::CREATED,
        "{}",
        created.body
    );
    let overlay = created.body[0]["id"].as_i64().unwrap();
    // The lowest rung: red in the bottom-right quarter, not in the top-left one.
    let (inside, outside) = ((960, 540, 960, 540), (0, 0, 960, 540));
    until_pixels(&d, id, inside, "red in the box", |px| {
        px.iter().all(|p| red(*p))
    })
    .await;
    let frame = newest_frame(&d, id, "360p").await.expect("a segment");
    let px = grid_pixels(&frame, 0, 0, 960, 540);
    assert!(
        px.iter().filter(|p| red(**p)).count() < px.len() / 2,
        "not elsewhere: {px:?}"
    );
    // The page loaded its allowed image; the one at a blocked address never left the daemon.
    let lines = seen.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.starts_with("GET /pixel")),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains("/secret")), "{lines:?}");
    // Moved to the top-left quarter, live.
    let r = d
        .patch(
            &format!("/streaming/streams/{id}/overlays/{overlay}"),
            json!({"x": 0, "y": 0}),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::OK, "{}", r.body);
    until_pixels(&d, id, outside, "moved to the top-left", |px| {
        px.iter().all(|p| red(*p))
    })
    .await;
    // The screenshot shows it too (renewed every 10 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let jpeg = reqwest::get(format!("{}/screenshots/{id}/last.jpg", d.base))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let px = grid_pixels(&decode(&jpeg), 0, 0, 960, 540);
        if px.iter().all(|p| red(*p)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the screenshot carries the overlay: {px:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Deleted: gone from the picture.
    let r = d
        .delete(&format!("/streaming/streams/{id}/overlays/{overlay}"))
        .await;
    assert_eq!(r.status, reqwest::StatusCode::NO_CONTENT);
    until_pixels(&d, id, outside, "gone after DELETE", |px| {
        px.iter().filter(|p| red(**p)).count() < px.len() / 2
    })
    .await;
    // Pages that 404 or never answer: skipped, the stream stays live at speed.
    let r = d
        .post(
            &format!("/streaming/streams/{id}/overlays"),
            json!([
                {"url": format!("{pages}/missing"), "stretch": true},
                {"url": format!("{pages}/hang"), "x": 0, "y": 0, "width": 100, "height": 100}
            ]),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::CREATED, "{}", r.body);
    tokio::time::sleep(Duration::from_secs(12)).await;
    let rec: Value = d.get(&format!("/streaming/streams/{id}")).await.body;
    assert_eq!(rec["live"], true, "{rec}");
    let speed = rec["transcoding_speed"].as_f64().unwrap_or(0.0);
    assert!(speed >= 0.95, "speed {speed} with failing pages");
}

/// The bytes of a URL.
async fn fetch(url: &str) -> Vec<u8> {
    let r = reqwest::get(url).await.unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.bytes().await.unwrap().to_vec()
}

/// Records the live stream for a few seconds as `record_type`: the video.
async fn record_for_a_while(d: &Daemon, id: i64, record_type: &str) -> Value {
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"record_type": record_type}}),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::OK, "{}", r.body);
    let r = d
        .call(
            reqwest::Method::PUT,
            &format!("/streaming/streams/{id}/start_recording"),
            None,
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::NO_CONTENT, "{}", r.body);
    tokio::time::sleep(Duration::from_secs(7)).await;
    let video = media::stop_recording(d, id).await;
    assert_eq!(video["record_type"], record_type, "{video}");
    video
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcoded_recordings_carry_overlays_and_origin_recordings_do_not() {
    let _g = media::heavy().await;
    let (pages, _) = pages();
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = d
        .post(
            "/streaming/streams",
            json!({"name": "ovrec", "html_overlay": true}),
        )
        .await;
    let id = rec.body["id"].as_i64().unwrap();
    let _push = push(rec.body["push_url"].as_str().unwrap(), "av-720p.flv", 40);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let r = d
        .post(
            &format!("/streaming/streams/{id}/overlays"),
            json!([{"url": format!("{pages}/red"), "stretch": true}]),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::CREATED, "{}", r.body);
    let full = (0, 0, 1920, 1080);
    until_pixels(&d, id, full, "red over the whole picture", |px| {
        px.iter().all(|p| red(*p))
    })
    .await;

    let transcoded = record_for_a_while(&d, id, "transcoded").await;
    let renditions: Vec<&Value> = transcoded["converted_videos"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["height"].as_u64() > Some(0)) // not the audio
        .collect();
    assert!(renditions.len() >= 2, "{transcoded}");
    for rendition in renditions {
        let mp4 = fetch(rendition["mp4_url"].as_str().unwrap()).await;
        let px = grid_pixels(&decode(&mp4), 0, 0, 1920, 1080);
        assert!(
            px.iter().all(|p| red(*p)),
            "{} carries the overlay: {px:?}",
            rendition["name"]
        );
    }

    let origin = record_for_a_while(&d, id, "origin").await;
    let url = origin["origin_url"].as_str().expect("an origin MP4");
    let px = grid_pixels(&decode(&fetch(url).await), 0, 0, 1920, 1080);
    assert!(
        px.iter().filter(|p| red(**p)).count() < px.len() / 2,
        "the origin recording is the source as received: {px:?}"
    );
    // The live output still carries it.
    until_pixels(&d, id, full, "still red live", |px| {
        px.iter().all(|p| red(*p))
    })
    .await;
}
