//! HTTPS with HTTP/2: with `https_addr` and a certificate from a test CA, curl (an independent
//! client) negotiates `h2` by ALPN and gets a live stream's master playlist, a blocking
//! playlist reload and a part multiplexed on one connection; HTTP/1.1 over TLS still works, and
//! the plain port speaks HTTP/2 by prior knowledge.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::common::certs::TestCa;
use crate::common::proc::run_within;
use crate::common::{free_port, tempdir, Daemon, KEY};
use crate::media::*;

/// One curl run: each URL's (HTTP version, status, new connections, body), in the URLs' order
/// (`--parallel` reports in completion order: matched by URL).
fn curl(args: &[&str], urls: &[String], dir: &std::path::Path) -> Vec<(String, u16, u32, String)> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "20"]).args(args).args([
        "-w",
        "%{url_effective} %{http_version} %{response_code} %{num_connects}\\n",
    ]);
    let files: Vec<_> = (0..urls.len())
        .map(|i| dir.join(format!("curl-{i}.out")))
        .collect();
    for (url, file) in urls.iter().zip(&files) {
        cmd.arg("-o").arg(file).arg(url);
    }
    let out = run_within(&mut cmd, "curl", Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8(out.stdout).unwrap();
    assert_eq!(lines.lines().count(), urls.len(), "{lines}");
    urls.iter()
        .zip(&files)
        .map(|(url, file)| {
            let line = lines
                .lines()
                .find(|l| l.split(' ').next() == Some(url.as_str()))
                .unwrap_or_else(|| panic!("no report for {url}: {lines}"));
            let f: Vec<&str> = line.split(' ').collect();
            let body =
                String::from_utf8_lossy(&std::fs::read(file).unwrap_or_default()).into_owned();
            (
                f[1].to_owned(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                body,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn https_serves_ll_hls_over_http2_with_reloads_and_parts_on_one_connection() {
    let _g = heavy().await;
    let dir = tempdir();
    let ca = TestCa::new("livepack https test CA");
    let (cert, key) = ca.server(&["localhost", "127.0.0.1"]);
    let (cert_file, key_file, ca_file) = (
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
        dir.path().join("ca.pem"),
    );
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let port = free_port(false);
    let https = format!("127.0.0.1:{port}");
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_HTTPS_ADDR", &https),
            ("LIVEPACK_HTTPS_CERT_FILE", cert_file.to_str().unwrap()),
            ("LIVEPACK_HTTPS_KEY_FILE", key_file.to_str().unwrap()),
        ],
    );
    assert!(
        d.banner.iter().any(|l| *l == format!("https: {https}")),
        "{:?}",
        d.banner
    );
    let rec = create(&d, json!({"name": "h2"})).await;
    let _pusher = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 20);
    let master = rec["hls_cmaf_url"].as_str().unwrap().to_owned();
    wait_segments(&master, 2).await;
    let (_, playlist) = text(&master.replace("master.m3u8", "720p/index.m3u8")).await;
    let media = hls::media(&playlist);
    let next = hls::next_msn(&media);
    let part = hls::last_part(&playlist).expect("a part");
    let part = part
        .split("URI=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let tls_base = master
        .replace(d.base.as_str(), &format!("https://{https}"))
        .replace("master.m3u8", "");
    let urls = vec![
        format!("{tls_base}master.m3u8"),
        format!("{tls_base}720p/index.m3u8?_HLS_msn={next}&_HLS_part=1"),
        format!("{tls_base}720p/{part}"),
    ];
    let ca = ca_file.to_str().unwrap();
    let rows = curl(
        &[
            "--http2",
            "--cacert",
            ca,
            "--parallel",
            "--parallel-max",
            "3",
        ],
        &urls,
        dir.path(),
    );
    for (version, status, _, _) in &rows {
        assert_eq!((version.as_str(), *status), ("2", 200), "{rows:?}");
    }
    let connects: u32 = rows.iter().map(|r| r.2).sum();
    assert_eq!(connects, 1, "not multiplexed on one connection: {rows:?}");
    assert!(rows[0].3.contains("#EXT-X-STREAM-INF"), "{}", rows[0].3);
    // The blocking reload was held until the part it asked for was listed.
    let reload = hls::media(&rows[1].3);
    assert!(
        hls::next_msn(&reload) >= next,
        "the reload came back before its segment: {}",
        rows[1].3
    );
    assert!(rows[2].3.len() > 1000, "no part body");

    // HTTP/1.1 over TLS for the clients that do not speak h2; h2c on the plain port.
    let rows = curl(&["--http1.1", "--cacert", ca], &urls[..1], dir.path());
    assert_eq!((rows[0].0.as_str(), rows[0].1), ("1.1", 200), "{rows:?}");
    let rows = curl(
        &["--http2-prior-knowledge"],
        std::slice::from_ref(&master),
        dir.path(),
    );
    assert_eq!((rows[0].0.as_str(), rows[0].1), ("2", 200), "{rows:?}");
    // An untrusted client is refused by its own TLS check: the certificate is the configured one.
    let untrusted = run_within(
        Command::new("curl").args(["-sS", "--max-time", "10", &urls[0]]),
        "curl",
        Duration::from_secs(20),
    );
    assert!(!untrusted.status.success());
}
