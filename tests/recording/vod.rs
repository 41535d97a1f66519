//! One recorded video, three presentations: its VOD HLS, its DASH MPD and its MP4 download
//! must present the same media. Checked with readers that are not ours: m3u8-rs for
//! the playlists, ffprobe for the durations and for the top-level boxes of each media file
//! (its `-v trace` log), the HTTP `Content-Length` for each file's size.

use std::time::Duration;

use m3u8_rs::{MasterPlaylist, MediaPlaylist};
use serde_json::{json, Value};

use crate::common::{tempdir, Daemon};
use crate::media::{self, create, heavy, push, stop_recording, wait_record};

/// One frame at 25 fps: how far a playlist's EXTINF sum may be from the recorded duration.
const FRAME: f64 = 0.040;
/// How far ffprobe's durations of the HLS, the DASH and the download may be apart.
const SAME: f64 = 0.1;

/// `url` resolved against the directory of `base` (the video's URLs are all siblings).
fn sibling(base: &str, name: &str) -> String {
    format!("{}/{name}", base.rsplit_once('/').unwrap().0)
}

async fn get_text(url: &str) -> String {
    let (status, text) = media::text(url).await;
    assert!(status.is_success(), "{url}: {status}");
    text
}

/// The size of a media file as the server announces it.
async fn size_of(url: &str) -> u64 {
    let r = reqwest::Client::new().head(url).send().await.unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Every media playlist of the master (variants and alternative renditions), by URI.
fn media_uris(master: &MasterPlaylist) -> Vec<String> {
    let mut uris: Vec<String> = master.variants.iter().map(|v| v.uri.clone()).collect();
    uris.extend(master.alternatives.iter().filter_map(|a| a.uri.clone()));
    uris.sort();
    uris.dedup();
    uris
}

/// A file's top-level boxes before its first `moof` as ffmpeg's MP4 reader logs them
/// (`type:'sidx' parent:'root' sz: SIZE END_OF_HEADER FILE_SIZE`): (type, start, size).
fn head_boxes(url: &str) -> Vec<(String, u64, u64)> {
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "trace", "-rw_timeout", "15000000", "-i", url])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    let mut boxes = Vec::new();
    for line in log.lines().filter(|l| l.contains("parent:'root'")) {
        let kind = line.split("type:'").nth(1).unwrap()[..4].to_owned();
        let nums: Vec<u64> = line
            .split("sz: ")
            .nth(1)
            .unwrap()
            .split(' ')
            .map(|n| n.parse().unwrap())
            .collect();
        // Our boxes have 32-bit sizes: an 8-byte header.
        boxes.push((kind.clone(), nums[1] - 8, nums[0]));
        if kind == "moof" {
            break;
        }
    }
    assert!(
        boxes.last().is_some_and(|b| b.0 == "moof"),
        "{url}: no moof: {boxes:?}"
    );
    boxes
}

/// Asserts that the byte ranges of `playlist` (its `EXT-X-MAP`s and its segments, in order)
/// tile each media file it names from byte 0 to the file's size, with no gap or overlap but
/// the file's segment index: the map is exactly `ftyp`+`moov`, then come the `sidx` (DASH's
/// index, HLS has its own) and the `free` box reserved for it, and the first segment starts at
/// the file's first fragment. A fragment left out of the playlist is a gap holding a `moof`.
async fn assert_tiles_its_files(playlist_url: &str, playlist: &MediaPlaylist, text: &str) {
    // (file, the next byte a range must start at)
    let mut open: Option<(String, u64)> = None;
    let mut files = Vec::new();
    for (n, s) in playlist.segments.iter().enumerate() {
        if let Some(map) = &s.map {
            files.extend(open.take());
            let r = map
                .byte_range
                .as_ref()
                .unwrap_or_else(|| panic!("EXT-X-MAP without BYTERANGE:\n{text}"));
            assert_eq!(r.offset, Some(0), "the init starts the file:\n{text}");
            let boxes = head_boxes(&sibling(playlist_url, &map.uri));
            let kinds: Vec<&str> = boxes.iter().map(|b| b.0.as_str()).collect();
            // cmafmux starts each fragment with a `styp`.
            assert!(
                kinds == ["ftyp", "moov", "sidx", "free", "moof"]
                    || kinds == ["ftyp", "moov", "sidx", "free", "styp", "moof"],
                "{}: {kinds:?}",
                map.uri
            );
            let (_, moov_at, moov_len) = boxes[1];
            assert_eq!(
                r.length,
                moov_at + moov_len,
                "the map is ftyp+moov:\n{text}"
            );
            for w in boxes.windows(2) {
                assert_eq!(w[1].1, w[0].1 + w[0].2, "{}: {boxes:?}", map.uri);
            }
            // The first segment must start with the first fragment (its styp or moof).
            open = Some((map.uri.clone(), boxes[4].1));
        }
        let (uri, next) = open
            .as_mut()
            .unwrap_or_else(|| panic!("segment {n} before any EXT-X-MAP:\n{text}"));
        assert_eq!(&s.uri, uri, "segment {n} is in the file of its map");
        let r = s
            .byte_range
            .as_ref()
            .unwrap_or_else(|| panic!("segment {n} without EXT-X-BYTERANGE:\n{text}"));
        // RFC 8216bis §4.4.4.2: without an offset, the range follows the previous one.
        let offset = r.offset.unwrap_or(*next);
        assert_eq!(
            offset, *next,
            "segment {n} of {uri}: a gap or an overlap before it:\n{text}"
        );
        *next = offset + r.length;
    }
    files.extend(open);
    assert!(!files.is_empty(), "no segment in {playlist_url}:\n{text}");
    for (uri, end) in files {
        let size = size_of(&sibling(playlist_url, &uri)).await;
        assert_eq!(
            end, size,
            "{uri}: the ranges end at {end} of {size} bytes:\n{text}"
        );
    }
}

/// The length of the media of `kind` (`v` or `a`) that ffprobe demuxes from `url`: from its
/// first packet's start to its last one's end. (ffmpeg 5.1's DASH reader keeps only the whole
/// seconds of an MPD's durations: the container durations cannot be compared to 0.1 s.)
fn probed_secs(url: &str, kind: &str) -> f64 {
    let select = format!("{kind}:0");
    let args = [
        "-select_streams",
        &select,
        "-show_entries",
        "packet=pts_time,duration_time",
    ];
    let probed = media::ffprobe_with(&args, url);
    let packets = probed["packets"].as_array().cloned().unwrap_or_default();
    let num = |p: &Value, k: &str| p[k].as_str().and_then(|s| s.parse::<f64>().ok());
    let spans: Vec<(f64, f64)> = packets
        .iter()
        .filter_map(|p| Some((num(p, "pts_time")?, num(p, "duration_time").unwrap_or(0.0))))
        .collect();
    assert!(!spans.is_empty(), "{url}: no {kind} packets");
    let start = spans.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let end = spans
        .iter()
        .map(|s| s.0 + s.1)
        .fold(f64::NEG_INFINITY, f64::max);
    end - start
}

/// The checks of the module doc on a ready video; `downloads`: the MP4 download holding its
/// picture, then the one holding its sound (one file for an origin recording; a transcoded
/// one has an MP4 per rendition).
pub(crate) async fn assert_one_media(video: &Value, downloads: [&str; 2]) {
    assert_eq!(video["status"], "ready", "{video}");
    let duration = video["duration"].as_u64().unwrap() as f64 / 1000.0;
    let hls = video["hls_url"].as_str().unwrap();
    let master_text = get_text(hls).await;
    let master = m3u8_rs::parse_master_playlist_res(master_text.as_bytes())
        .unwrap_or_else(|e| panic!("{e:?}:\n{master_text}"));
    let variants: Vec<&str> = master.variants.iter().map(|v| v.uri.as_str()).collect();
    let uris = media_uris(&master);
    assert!(!variants.is_empty(), "{master_text}");
    for uri in uris {
        let url = sibling(hls, &uri);
        let text = get_text(&url).await;
        let playlist = m3u8_rs::parse_media_playlist_res(text.as_bytes())
            .unwrap_or_else(|e| panic!("{e:?}:\n{text}"));
        assert_tiles_its_files(&url, &playlist, &text).await;
        let extinf: f64 = playlist
            .segments
            .iter()
            .map(|s| f64::from(s.duration))
            .sum();
        // The variants (video); an audio rendition may end on its own frame boundaries.
        assert!(
            !variants.contains(&uri.as_str()) || (extinf - duration).abs() <= FRAME,
            "{uri}: EXTINF sum {extinf} s, recorded {duration} s:\n{text}"
        );
    }
    let dash = video["dash_url"].as_str().unwrap();
    for (kind, download) in ["v", "a"].into_iter().zip(downloads) {
        let probed = [
            ("HLS", probed_secs(hls, kind)),
            ("DASH", probed_secs(dash, kind)),
            ("MP4", probed_secs(download, kind)),
        ];
        for (a, x) in probed {
            for (b, y) in probed {
                assert!(
                    (x - y).abs() <= SAME,
                    "{kind}: {a} {x} s vs {b} {y} s: {probed:?}"
                );
            }
        }
        // The recorded duration is the picture's (the sound may end a few frames apart).
        if kind == "v" {
            let hls = probed[0].1;
            assert!(
                (hls - duration).abs() <= FRAME,
                "picture {hls} s, recorded {duration} s"
            );
        } else {
            let apart = (probed[0].1 - duration).abs();
            // Half a 2 s fragment of sound, and a frame.
            assert!(
                apart <= 1.05,
                "sound {} s, picture {duration} s",
                probed[0].1
            );
        }
    }
}

/// Pushes `loops + 1` times the 6 s fixture to a new `auto_record` stream of `record_type`;
/// `stop_after`: stops the recording then, otherwise the video ends with the push (the
/// daemon's resume time is 1 s). Returns the video.
pub(crate) async fn record_for(
    d: &Daemon,
    record_type: &str,
    loops: u32,
    stop_after: Option<u64>,
) -> Value {
    let rec = create(
        d,
        json!({"name": record_type, "auto_record": true, "record_type": record_type, "quality_set_id": 3}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let _push = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", loops);
    wait_record(d, id, Duration::from_secs(20), |r| r["recording"] == true).await;
    if let Some(secs) = stop_after {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        return stop_recording(d, id).await;
    }
    let within = Duration::from_secs(6 * u64::from(loops + 1) + 30);
    wait_record(d, id, within, |r| r["recording"] == false).await;
    let listed = d.get(&format!("/streaming/videos?stream_id={id}")).await;
    listed.body[0].clone()
}

fn daemon(dir: &std::path::Path) -> Daemon {
    Daemon::start_with(
        dir,
        &[
            ("LIVEPACK_API_KEYS", crate::common::KEY),
            ("LIVEPACK_RECORD_RESUME_SECS", "1"),
        ],
    )
}

/// A 30 s push recorded `transcoded` from its start to its end. Each
/// rendition's playlist addresses every fragment of its file, the first one too, and its
/// EXTINF sum is the recorded duration; HLS, DASH and the MP4 read the same length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcoded_recording_presents_the_same_media_in_hls_dash_and_mp4() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = daemon(dir.path());
    let video = record_for(&d, "transcoded", 4, None).await;
    let ms = video["duration"].as_u64().unwrap();
    assert!(
        (27_000..=31_000).contains(&ms),
        "{ms} ms of a 30 s push: {video}"
    );
    let converted = video["converted_videos"].as_array().unwrap();
    let mp4 = |name: &str| {
        let c = converted.iter().find(|c| c["name"] == name);
        c.and_then(|c| c["mp4_url"].as_str())
            .unwrap_or_else(|| panic!("no {name} in {video}"))
            .to_owned()
    };
    assert_one_media(&video, [&mp4("720p"), &mp4("audio")]).await;
}

/// The same for an origin recording stopped by request (its download is `origin_url`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_recording_presents_the_same_media_in_hls_dash_and_mp4() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = daemon(dir.path());
    let video = record_for(&d, "origin", 10, Some(12)).await;
    let mp4 = video["origin_url"].as_str().unwrap();
    assert_one_media(&video, [mp4, mp4]).await;
}
