//! Videos on an S3-compatible object store: moto's S3 server on loopback (a store
//! nobody here wrote), the real daemon recording real pushes. What the store holds is read back
//! over plain HTTP and compared byte for byte with the recording node's files; playback from
//! the store goes through the same independent readers as every video (m3u8-rs, ffprobe on HLS
//! and DASH with byte ranges, the MP4s).

use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::s3::{stalling, S3};
use crate::common::{tempdir, Daemon, KEY};
use crate::media::heavy;
use crate::vod::{assert_one_media, record_for};

const JOURNAL: &str = "upload.journal";

fn daemon(dir: &Path, endpoint: &str, keep_local_secs: u64) -> Daemon {
    let mut env = S3::env(endpoint);
    env.push(("LIVEPACK_API_KEYS", KEY.into()));
    env.push(("LIVEPACK_RECORD_RESUME_SECS", "1".into()));
    env.push((
        "LIVEPACK_STORAGE_LOCAL_RETENTION_SECS",
        keep_local_secs.to_string(),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Daemon::start_with(dir, &env)
}

async fn wait_video(d: &Daemon, id: i64, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/streaming/videos/{id}");
    for _ in 0..300 {
        let v = d.get(&path).await.body;
        if f(&v) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("video {id}: {what}: {}", d.get(&path).await.body);
}

fn local_dir(dir: &Path, id: i64) -> std::path::PathBuf {
    dir.join(format!("data/videos/{id}"))
}

/// Every file of the video's directory (but the upload journal) has its object, the same
/// bytes (SHA-256), and the store holds nothing else.
async fn assert_objects_are_the_files(s3: &S3, id: i64, local: &Path) {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(local)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .filter(|(n, _)| n != JOURNAL)
        .collect();
    files.sort();
    let objects = s3.objects(id).await;
    assert_eq!(objects, files, "the store's objects vs the local files");
    for (name, _) in objects {
        let stored = Sha256::digest(s3.object(id, &name).await);
        let written = Sha256::digest(std::fs::read(local.join(&name)).unwrap());
        assert_eq!(stored, written, "{name}: the object is not the file");
    }
}

/// The MP4 of each rendition in the video's `converted_videos`.
fn mp4(video: &Value, name: &str) -> String {
    video["converted_videos"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .and_then(|c| c["mp4_url"].as_str())
        .unwrap_or_else(|| panic!("no {name} in {video}"))
        .to_owned()
}

/// A recording goes to the store once finished (`uploading` → `ready`), every object checked
/// against its file; the local files go after `storage_local_retention_secs`; the video then
/// plays from the store alone, byte ranges included; DELETE removes its objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_is_uploaded_and_plays_from_the_store() {
    let _g = heavy().await;
    let s3 = S3::start().await;
    let dir = tempdir();
    let d = daemon(dir.path(), &s3.endpoint(), 8);
    let video = record_for(&d, "transcoded", 1, None).await;
    let id = video["id"].as_i64().unwrap();
    let ready = wait_video(&d, id, "uploaded", |v| v["status"] == "ready").await;
    let local = local_dir(dir.path(), id);
    assert_objects_are_the_files(&s3, id, &local).await;
    let names: Vec<String> = s3.objects(id).await.into_iter().map(|o| o.0).collect();
    for expected in [
        "index.log",
        "master.m3u8",
        "index.mpd",
        "720p.m3u8",
        "720p.mp4",
        "screenshot.jpg",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not stored: {names:?}"
        );
    }
    for _ in 0..100 {
        if !local.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!local.exists(), "the local copy outlived its retention");

    // From the store alone: HLS, DASH and the MP4s as any video; a range of an MP4.
    assert_one_media(&ready, [&mp4(&ready, "720p"), &mp4(&ready, "audio")]).await;
    let part = reqwest::Client::new()
        .get(mp4(&ready, "720p"))
        .header("range", "bytes=100-1099")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    let whole = s3.object(id, "720p.mp4").await;
    assert_eq!(
        part.headers()["content-range"].to_str().unwrap(),
        format!("bytes 100-1099/{}", whole.len())
    );
    assert_eq!(&part.bytes().await.unwrap()[..], &whole[100..1100]);

    assert_eq!(
        d.delete(&format!("/streaming/videos/{id}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(s3.objects(id).await, vec![], "objects left after DELETE");
}

/// An upload stalled mid-way and the daemon killed (`kill -9`): started again, it resumes past
/// what its journal says the store confirmed and completes, every object checked against its
/// file. Then a store that is down when a recording finishes: the video is `upload_failed`,
/// plays from the local copy, and is uploaded once the store is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_completes_after_a_restart_and_a_store_outage() {
    let _g = heavy().await;
    let mut s3 = S3::start().await;
    let dir = tempdir();
    // 150 kB reach the store, then nothing: the small files pass, a media file stalls.
    let (stalled, _) = stalling(s3.port, 150_000).await;
    let d = daemon(dir.path(), &format!("http://127.0.0.1:{stalled}"), 3600);
    let video = record_for(&d, "transcoded", 1, None).await;
    let id = video["id"].as_i64().unwrap();
    let local = local_dir(dir.path(), id);
    let journaled = || {
        std::fs::read_to_string(local.join(JOURNAL))
            .map(|j| j.lines().count())
            .unwrap_or(0)
    };
    for _ in 0..100 {
        if journaled() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = journaled();
    let files = std::fs::read_dir(&local).unwrap().count() - 1;
    assert!(
        before > 0 && before < files,
        "{before} of {files} files confirmed when the daemon is killed"
    );
    assert_eq!(
        d.get(&format!("/streaming/videos/{id}")).await.body["status"],
        "uploading"
    );
    d.kill9();

    let d = daemon(dir.path(), &s3.endpoint(), 3600);
    wait_video(&d, id, "uploaded after the restart", |v| {
        v["status"] == "ready"
    })
    .await;
    assert_objects_are_the_files(&s3, id, &local).await;

    // The store down when the next recording finishes.
    s3.stop();
    let video = record_for(&d, "transcoded", 1, None).await;
    let id = video["id"].as_i64().unwrap();
    let failed = wait_video(&d, id, "upload failed", |v| v["status"] == "upload_failed").await;
    assert!(
        failed["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{failed}"
    );
    let hls = failed["hls_url"].as_str().unwrap();
    let probed = crate::media::ffprobe(hls);
    assert!(
        probed["streams"].as_array().is_some_and(|s| !s.is_empty()),
        "the local copy does not play: {probed}"
    );
    s3.start_again().await;
    let ready = wait_video(&d, id, "uploaded once the store is back", |v| {
        v["status"] == "ready"
    })
    .await;
    assert!(ready["error"].is_null(), "{ready}");
    assert_objects_are_the_files(&s3, id, &local_dir(dir.path(), id)).await;
}
