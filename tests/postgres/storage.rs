//! Videos on object storage in a cluster: two nodes on one PostgreSQL and one S3
//! store (moto's server on loopback). A video recorded on node A plays from node B out of the
//! store, and still does once A is killed: nothing is relayed to A.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::common::pg::PgServer;
use super::common::s3::S3;
use super::common::{tempdir, Daemon, KEY};
use super::media;
use super::{at, DEAD_SECS};

fn node(dir: &std::path::Path, db: &str, id: &str, s3: &S3) -> Daemon {
    let dead = DEAD_SECS.to_string();
    let mut env: Vec<(&str, String)> = S3::env(&s3.endpoint());
    env.extend([
        ("LIVEPACK_API_KEYS", KEY.to_owned()),
        ("LIVEPACK_DATABASE_URL", db.to_owned()),
        ("LIVEPACK_NODE_ID", id.to_owned()),
        ("LIVEPACK_NODE_DEAD_SECS", dead),
        ("LIVEPACK_RECORD_RESUME_SECS", "1".to_owned()),
    ]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Daemon::start_with(dir, &env)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stored_video_plays_from_any_node_after_its_recording_node_dies() {
    let _heavy = media::heavy().await;
    let server = PgServer::start();
    let url = server.create_database();
    let s3 = S3::start().await;
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let a = node(dir_a.path(), &url, "node-a", &s3);
    let b = node(dir_b.path(), &url, "node-b", &s3);
    let rec = media::create(
        &a,
        json!({"name": "cam", "auto_record": true, "record_type": "transcoded", "quality_set_id": 3}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let push = media::push(
        &at(rec["push_url"].as_str().unwrap(), &a.rtmp),
        "av-720p.flv",
        1,
    );
    let (ok, err) = media::finish(push, Duration::from_secs(60)).await;
    assert!(ok, "{err}");
    let mut video = serde_json::Value::Null;
    for _ in 0..300 {
        let listed = b
            .get(&format!("/streaming/videos?stream_id={id}"))
            .await
            .body;
        video = listed[0].clone();
        if video["status"] == "ready" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(video["status"], "ready", "{video}");
    let vid = video["id"].as_i64().unwrap();
    assert!(!s3.objects(vid).await.is_empty());

    a.kill9();
    let on_b = |key: &str| {
        at(
            video[key].as_str().unwrap(),
            b.base.trim_start_matches("http://"),
        )
    };
    let (status, master) = media::text(&on_b("hls_url")).await;
    assert_eq!(status, StatusCode::OK, "{master}");
    let (codec, width, height, frames) = media::decoded_video(&on_b("hls_url"));
    assert_eq!((codec.as_str(), width, height), ("h264", 1280, 720));
    assert!(frames > 30, "{frames} frames decoded");
    let mp4 = video["converted_videos"][0]["mp4_url"].as_str().unwrap();
    let mp4 = at(mp4, b.base.trim_start_matches("http://"));
    media::assert_first_100_bytes(&mp4).await;
}
