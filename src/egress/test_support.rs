//! Test helpers of the restream senders: nginx-rtmp as a target (recording what it gets, TLS in
//! front when asked), the fixture's media as messages and as FLV tags, ffprobe's reading.

use std::time::Duration;

use crate::egress::flv::{FlvWriter, Tag};
use crate::ingest::rtmp::flv::{FlvReader, FlvTag};
use crate::ingest::rtmp::to_media::FlvToMedia;
use crate::media::MediaMessage;

pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// nginx with its RTMP module recording what it is sent, on a free port; with `tls`
/// (certificate and key files), also its stream module terminating TLS in front of it on
/// another port. The ports: (RTMP, RTMPS).
pub(crate) fn nginx_rtmp(
    dir: &std::path::Path,
    tls: Option<(&std::path::Path, &std::path::Path)>,
) -> (std::process::Child, u16, u16) {
    nginx_rtmp_at(dir, tls, free_port())
}

/// nginx-rtmp again on `port` (a target that restarts).
pub(crate) fn nginx_rtmp_on(dir: &std::path::Path, port: u16) -> (std::process::Child, u16, u16) {
    nginx_rtmp_at(dir, None, port)
}

fn nginx_rtmp_at(
    dir: &std::path::Path,
    tls: Option<(&std::path::Path, &std::path::Path)>,
    port: u16,
) -> (std::process::Child, u16, u16) {
    let tls_port = free_port();
    let front = tls.map_or(String::new(), |(cert, key)| {
        format!(
            "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n\
             stream {{ server {{ listen 127.0.0.1:{tls_port} ssl; ssl_certificate {}; \
             ssl_certificate_key {}; proxy_pass 127.0.0.1:{port}; }} }}\n",
            cert.display(),
            key.display()
        )
    });
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\n{front}\
             daemon off; master_process off; pid {pid}; error_log {dir}/error.log;\n\
             events {{}}\n\
             rtmp {{ server {{ listen 127.0.0.1:{port}; application live {{ live on; \
             record all; record_path {dir}; record_unique off; }} }} }}\n",
            pid = dir.join("nginx.pid").display(),
            dir = dir.display(),
        ),
    )
    .unwrap();
    let child = std::process::Command::new("/usr/sbin/nginx")
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(dir)
        .spawn()
        .expect("nginx (libnginx-mod-rtmp, installed by scripts/test)");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, port, tls_port)
}

/// The fixture's media as the restream writes it: FLV tags from our ingest's reading.
pub(crate) fn fixture_tags() -> Vec<Tag> {
    let (mut writer, mut out) = (FlvWriter::default(), Vec::new());
    for m in fixture_messages() {
        writer.push(&m, &mut out).unwrap();
    }
    out
}

/// ffprobe's reading of what nginx recorded under `key`, once the publisher has left.
pub(crate) async fn recorded(dir: &std::path::Path, key: &str) -> serde_json::Value {
    // nginx closes the recording when the publisher leaves.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    probe(&dir.join(format!("{key}.flv")))
}

/// ffprobe's reading of a media file: its streams' codecs and sizes, its duration.
pub(crate) fn probe(file: &std::path::Path) -> serde_json::Value {
    let probe = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name,width,height:format=duration",
            "-of",
            "json",
        ])
        .arg(file)
        .output()
        .unwrap();
    serde_json::from_slice(&probe.stdout).unwrap()
}

pub(crate) fn assert_fixture(v: &serde_json::Value) {
    let streams = v["streams"].as_array().unwrap();
    let video = streams
        .iter()
        .find(|s| s["codec_name"] == "h264")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(
        (video["width"].as_u64(), video["height"].as_u64()),
        (Some(1280), Some(720)),
        "{v}"
    );
    assert!(streams.iter().any(|s| s["codec_name"] == "aac"), "{v}");
    let duration: f64 = v["format"]["duration"].as_str().unwrap().parse().unwrap();
    assert!((duration - 6.0).abs() <= 1.0, "{v}");
}

/// The 720p fixture as our RTMP ingest reads it: configs and frames, in file order.
pub(crate) fn fixture_messages() -> Vec<MediaMessage> {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/av-720p.flv");
    let bytes = std::fs::read(&fixture).expect("fixtures (scripts/make-fixtures)");
    let mut tags = Vec::new();
    FlvReader::new().push(&bytes, &mut tags).unwrap();
    let mut ingest = FlvToMedia::new();
    tags.into_iter()
        .filter_map(|t| match t {
            FlvTag::Video { timestamp, body } => ingest.video(timestamp, &body).unwrap(),
            FlvTag::Audio { timestamp, body } => ingest.audio(timestamp, &body).unwrap(),
            FlvTag::Script { .. } => None,
        })
        .collect()
}
