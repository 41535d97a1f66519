//! Restreams on two nodes: the node serving a stream runs its restreams, whichever
//! node the API calls reach, and every node shows what they are doing; when that node dies,
//! the node the encoder comes back to takes the restreams over with the stream.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::common::pg::PgServer;
use super::common::{free_port, tempdir};
use super::media::{self, wait_restream};
use super::{at, node, DEAD_SECS};

#[tokio::test(flavor = "multi_thread")]
async fn the_serving_node_runs_the_restreams_and_another_takes_them_over() {
    let _heavy = media::heavy().await;
    let server = PgServer::start();
    let url = server.create_database();
    let (dir_a, dir_b, target_dir) = (tempdir(), tempdir(), tempdir());
    let port = free_port(false);
    let recorded = target_dir.path().join("recorded");
    std::fs::create_dir_all(&recorded).unwrap();
    let _target = super::common::nginx::rtmp(
        &target_dir.path().join("nginx"),
        port,
        &format!(
            "record all; record_path {}; record_unique on;",
            recorded.display()
        ),
    );
    let a = node(dir_a.path(), &url, "node-a");
    let b = node(dir_b.path(), &url, "node-b");
    let rec = media::create(&a, json!({"name": "out"})).await;
    let id = rec["id"].as_i64().unwrap();
    let push_url = rec["push_url"].as_str().unwrap().to_owned();

    // Made through B; the stream is pushed to A, which runs it. Both show A's state.
    let made = b
        .post(
            "/streaming/restreams",
            json!({"name": "out", "stream_id": id,
                   "uri": format!("rtmp://127.0.0.1:{port}/live/the-key")}),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    let rid = made.body["id"].as_i64().unwrap();
    let first = media::push(&at(&push_url, &a.rtmp), "av-720p.flv", 20);
    let sending =
        |r: &serde_json::Value| r["live"] == true && r["bytes_sent"].as_u64() > Some(100_000);
    wait_restream(&b, rid, "live, as B shows it", sending).await;
    wait_restream(&a, rid, "live, as A shows it", sending).await;

    // Deactivated and activated again through B: A follows (it reads the records again).
    let off = b
        .patch(
            &format!("/streaming/restreams/{rid}"),
            json!({"active": false}),
        )
        .await;
    assert_eq!(off.status, StatusCode::OK, "{}", off.body);
    wait_restream(&a, rid, "stopped on A", |r| r["live"] == false).await;
    let on = b
        .patch(
            &format!("/streaming/restreams/{rid}"),
            json!({"active": true}),
        )
        .await;
    assert_eq!(on.status, StatusCode::OK, "{}", on.body);
    wait_restream(&b, rid, "sending again", |r| r["live"] == true).await;

    // A dies; the encoder comes back to B, which takes the stream and its restream.
    a.kill9();
    drop(first);
    media::wait_record(&b, id, Duration::from_secs(DEAD_SECS + 5), |r| {
        r["live"] == false
    })
    .await;
    let _again = media::push(&at(&push_url, &b.rtmp), "av-720p.flv", 20);
    let taken = wait_restream(&b, rid, "taken over by B", sending).await;
    assert_eq!(
        taken["reconnects"], 0,
        "a fresh start, not a failure: {taken}"
    );

    // nginx recorded A's publishes and B's as readable H.264 (its file names have the second
    // of the publish: A's two may share one).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let files: Vec<_> = std::fs::read_dir(&recorded)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    for f in files {
        let codecs = probe_codecs(&f);
        assert!(
            codecs.contains(&"h264".to_owned()),
            "{}: {codecs:?}",
            f.display()
        );
    }
}

fn probe_codecs(path: &std::path::Path) -> Vec<String> {
    let out = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}
