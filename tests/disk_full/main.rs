//! A full disk under a live DVR stream (audio only: the disk, not the encoder, is under test): segments go on being served from memory, the record
//! says why they are not written, and writing resumes once space is back. The media directory
//! is a real tmpfs, filled to the last byte (needs root or passwordless sudo to mount it).

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/media.rs"]
mod media;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use common::*;
use media::*;

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs(PathBuf);

fn as_root(args: &[&str]) -> std::process::ExitStatus {
    let uid = Command::new("id").arg("-u").output().unwrap().stdout;
    let mut cmd = if String::from_utf8_lossy(&uid).trim() == "0" {
        Command::new(args[0])
    } else {
        let mut c = Command::new("sudo");
        c.arg("-n").arg(args[0]);
        c
    };
    cmd.args(&args[1..]).status().unwrap()
}

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        let at_s = at.to_str().unwrap();
        let ok = as_root(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size}"),
            "tmpfs",
            at_s,
        ]);
        assert!(
            ok.success(),
            "mounting a tmpfs needs root or passwordless sudo (as scripts/test has for apt-get)"
        );
        Tmpfs(at.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        as_root(&["umount", "-l", self.0.to_str().unwrap()]);
    }
}

/// Writes zeros until the file system refuses.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    loop {
        if let Err(e) = f.write_all(&block).and_then(|()| f.flush()) {
            assert_eq!(e.raw_os_error(), Some(28), "{e}"); // ENOSPC
            return;
        }
    }
}

async fn last_msn(url: &str) -> u64 {
    hls::last_msn(&hls::media(&text(url).await.1))
}

#[tokio::test]
async fn a_full_disk_keeps_live_output_going_reports_and_recovers() {
    let _g = heavy().await;
    let dir = tempdir();
    let media_root = data_dir(dir.path()).join("media");
    std::fs::create_dir_all(&media_root).unwrap();
    let _tmpfs = Tmpfs::mount(&media_root, "24m");
    let d = Daemon::start(dir.path());
    let rec = create(
        &d,
        json!({"name": "full", "dvr_enabled": true, "dvr_duration": 600}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let mut ffmpeg = push(rec["push_url"].as_str().unwrap(), "audio.flv", 8);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    wait_segments(rec["hls_cmaf_url"].as_str().unwrap(), 2).await;
    let playlist = format!("{}/cmaf/{id}/audio/index.m3u8", d.base);
    let on_disk = media_root.join(format!("{id}/cmaf/audio"));
    assert!(
        !files_on_disk(&on_disk, "m4s").is_empty(),
        "nothing written"
    );
    assert!(record(&d, id).await["storage_error"].is_null());

    // The disk fills up: the record says so within a segment or two.
    fill(&media_root.join("filler"));
    let r = wait_record(&d, id, Duration::from_secs(15), |r| {
        r["storage_error"].is_string()
    })
    .await;
    let why = r["storage_error"].as_str().unwrap();
    assert!(why.contains("No space left on device"), "{why}");
    assert_eq!(r["live"], true);

    // Live output goes on from memory: new segments are listed and served, not written.
    let written_before = files_on_disk(&on_disk, "m4s");
    let before = last_msn(&playlist).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let after = last_msn(&playlist).await;
    assert!(
        after >= before + 3,
        "the playlist stalled at {before}..{after}"
    );
    let (status, body) = {
        let url = format!("{}/cmaf/{id}/audio/seg_{after}.m4s", d.base);
        let r = reqwest::get(&url).await.unwrap();
        (r.status(), r.bytes().await.unwrap())
    };
    assert_eq!(status, StatusCode::OK);
    assert!(body.len() > 1000);
    let written_during = files_on_disk(&on_disk, "m4s");
    assert!(
        written_during.last() <= written_before.last(),
        "written while the disk was full: {written_during:?}"
    );

    // Space is back: the error clears and new segments are written again.
    std::fs::remove_file(media_root.join("filler")).unwrap();
    let r = wait_record(&d, id, Duration::from_secs(15), |r| {
        r["storage_error"].is_null()
    })
    .await;
    assert_eq!(r["live"], true);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while files_on_disk(&on_disk, "m4s").last() <= Some(&after) {
        assert!(
            std::time::Instant::now() < deadline,
            "no segment written after recovery: {:?}",
            files_on_disk(&on_disk, "m4s")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = text(&playlist).await.1;
    assert!(!text.contains("#EXT-X-DISCONTINUITY"), "{text}");
    assert!(ffmpeg.try_wait().is_none(), "the publisher was cut off");
}
