//! Viewers at scale: N LL-HLS viewers on one transcoded live stream, each doing what hls.js in
//! low-latency mode does — a blocking playlist reload for the next part (`_HLS_msn`/`_HLS_part`),
//! then that part — on a connection of its own, over HTTP/1.1 or HTTP/2 (h2c, prior
//! knowledge). Not a browser: one Tokio process holds every viewer, so the daemon is what the
//! figures measure.
//!
//! For each protocol and N, against the release daemon started here (one stream pushed by
//! ffmpeg in real time from a fixture), after a warm-up, over SECONDS:
//! - part delivery: when a part's last byte was received, after its last frame entered the
//!   ingest (the segment's PROGRAM-DATE-TIME, the daemon's wall clock at ingest, plus the parts
//!   before it and its own duration) — p50 and p99;
//! - requests answered per second, errors (failed requests and connections);
//! - the daemon's CPU (% of one core; per 100 viewers over its CPU with the stream and no
//!   viewer, measured first in the same run) and RSS (per viewer over the same baseline).
//!
//! Usage: cargo bench --bench viewers -- [--clients 500,1000,2000] [--protocols 1,2]
//!        [--seconds 20] [--fixture av-720p] [--binary target/release/livepack]
//! (needs the release build: `cargo build --release`; ffmpeg)

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

const KEY: &str = "viewers-bench-key";

struct Args {
    clients: Vec<usize>,
    protocols: Vec<u8>,
    seconds: u64,
    fixture: String,
    binary: String,
}

fn args() -> Args {
    let mut a = Args {
        clients: vec![500, 1000, 2000],
        protocols: vec![1, 2],
        seconds: 20,
        // The test card: its transcode leaves the most of the two cores to the viewers.
        fixture: "av-720p".into(),
        binary: "target/release/livepack".into(),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let value = || argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--clients" => a.clients = value().split(',').filter_map(|v| v.parse().ok()).collect(),
            "--protocols" => {
                a.protocols = value().split(',').filter_map(|v| v.parse().ok()).collect()
            }
            "--seconds" => a.seconds = value().parse().unwrap_or(a.seconds),
            "--fixture" => a.fixture = value(),
            "--binary" => a.binary = value(),
            // `cargo bench` adds `--bench`.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

/// The release daemon on loopback ports, its data in a temporary directory.
struct Daemon {
    child: Child,
    http: SocketAddr,
    rtmp: String,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(binary: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(binary)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("LIVEPACK_HTTP_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_RTMP_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_RTMPS_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_SRT_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_WHIP_UDP_MUX_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_WHIP_TCP_MUX_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_DATA_DIR", dir.path().join("data"))
            .env("LIVEPACK_API_KEYS", KEY)
            // Every viewer comes from 127.0.0.1: as behind a CDN, the address is not capped.
            .env("LIVEPACK_TRUSTED_PROXIES", "127.0.0.1")
            .env("LIVEPACK_HTTP_MAX_CONNECTIONS", "8192")
            .env("LIVEPACK_ADMISSION_CPU_PERCENT", "100")
            .env("RUST_LOG", "warn")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{binary}: {e} (cargo build --release first)"));
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (mut http, mut rtmp) = (None, None);
        for line in stdout.lines().map_while(Result::ok) {
            if let Some(v) = line.strip_prefix("http: ") {
                http = v.parse().ok();
            }
            if let Some(v) = line.strip_prefix("rtmp: ") {
                rtmp = Some(v.to_owned());
            }
            if line.starts_with("try:") {
                break;
            }
        }
        Daemon {
            child,
            http: http.expect("the daemon's http line"),
            rtmp: rtmp.expect("the daemon's rtmp line"),
            _dir: dir,
        }
    }

    /// The daemon's CPU seconds and RSS (MiB), from /proc.
    fn usage(&self) -> (f64, f64) {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
        let f: Vec<&str> = after.split_whitespace().collect();
        let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        (ticks as f64 / 100.0, rss_kib / 1024.0)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One connection to the daemon, HTTP/1.1 or HTTP/2.
enum Conn {
    H1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
}

impl Conn {
    async fn open(addr: SocketAddr, protocol: u8) -> Result<Conn, String> {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let io = TokioIo::new(tcp);
        if protocol == 2 {
            // The flow-control windows Chromium advertises (6 MiB a stream, 15 MiB the
            // connection): with h2's 64 KiB default a part took window updates to arrive, which
            // no browser viewer waits for.
            let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(6 * 1024 * 1024)
                .initial_connection_window_size(15 * 1024 * 1024)
                .handshake(io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(Conn::H2(send))
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(Conn::H1(send))
        }
    }

    /// GETs `path`; its status and body.
    async fn get(&mut self, addr: SocketAddr, path: &str) -> Result<(u16, Bytes), String> {
        let req = Request::get(path)
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = match self {
            Conn::H1(s) => {
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(req).await
            }
            Conn::H2(s) => {
                // h2 wants the full URI.
                let (mut parts, body) = req.into_parts();
                parts.uri = format!("http://{addr}{path}")
                    .parse()
                    .map_err(|e| format!("{e}"))?;
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(Request::from_parts(parts, body)).await
            }
        }
        .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    }
}

/// What one viewer needs of a media playlist: the next part to ask for, and where each listed
/// part's media ends in wall time.
struct Listed {
    /// (msn, part index, URI, media end).
    parts: Vec<(u64, u64, String, OffsetDateTime)>,
    /// The part after the last listed one: (msn, index).
    next: (u64, u64),
}

fn parse_playlist(text: &str) -> Option<Listed> {
    let mut msn: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))?
        .trim()
        .parse()
        .ok()?;
    // Where the current segment starts in wall time: a PROGRAM-DATE-TIME, or the previous
    // segment's start plus its EXTINF.
    let mut start: Option<OffsetDateTime> = None;
    let (mut extinf, mut offset, mut index) = (0.0f64, 0.0f64, 0u64);
    let mut parts = Vec::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:") {
            start = OffsetDateTime::parse(v.trim(), &Rfc3339).ok();
        } else if let Some(attrs) = line.strip_prefix("#EXT-X-PART:") {
            offset += attr(attrs, "DURATION")?.parse::<f64>().ok()?;
            let uri = attr(attrs, "URI")?.trim_matches('"').to_owned();
            if let Some(start) = start {
                parts.push((msn, index, uri, start + Duration::from_secs_f64(offset)));
            }
            index += 1;
        } else if let Some(v) = line.strip_prefix("#EXTINF:") {
            extinf = v.split(',').next()?.parse().ok()?;
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            start = start.map(|s| s + Duration::from_secs_f64(extinf));
            (msn, index, offset) = (msn + 1, 0, 0.0);
        }
    }
    Some(Listed {
        parts,
        next: (msn, index),
    })
}

fn attr<'a>(attrs: &'a str, name: &str) -> Option<&'a str> {
    attrs.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then_some(v)
    })
}

#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    errors: AtomicU64,
    /// Part bytes received once measuring.
    bytes: AtomicU64,
    /// Part delivery delays (ms) once measuring.
    delays: Mutex<Vec<f64>>,
}

/// One viewer: its own connection, reloads and parts, until `until`; delays counted after
/// `from`.
async fn viewer(
    addr: SocketAddr,
    protocol: u8,
    playlist: String,
    from: Instant,
    until: Instant,
    t: Arc<Tally>,
) {
    let dir = playlist.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
    let mut conn = match Conn::open(addr, protocol).await {
        Ok(c) => c,
        Err(_) => {
            t.errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let mut next = None;
    while Instant::now() < until {
        let path = match next {
            None => playlist.clone(),
            Some((m, p)) => format!("{playlist}?_HLS_msn={m}&_HLS_part={p}"),
        };
        let listed = match conn.get(addr, &path).await {
            Ok((200, body)) => parse_playlist(&String::from_utf8_lossy(&body)),
            _ => None,
        };
        t.requests.fetch_add(1, Ordering::Relaxed);
        let Some(listed) = listed else {
            t.errors.fetch_add(1, Ordering::Relaxed);
            match Conn::open(addr, protocol).await {
                Ok(c) => conn = c,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
            continue;
        };
        // The part asked for (or, at the start, the newest listed).
        let wanted = next.unwrap_or_else(|| {
            listed
                .parts
                .last()
                .map_or(listed.next, |(m, p, _, _)| (*m, *p))
        });
        // The part asked for, or the first after it (a segment that ended at that part).
        if let Some((_, _, uri, end)) = listed.parts.iter().find(|(m, p, _, _)| (*m, *p) >= wanted)
        {
            let got = conn.get(addr, &format!("{dir}/{uri}")).await;
            t.requests.fetch_add(1, Ordering::Relaxed);
            match got {
                Ok((200, body)) => {
                    if Instant::now() >= from {
                        t.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                        let delay = (OffsetDateTime::now_utc() - *end).as_seconds_f64() * 1000.0;
                        t.delays.lock().unwrap().push(delay);
                    }
                }
                _ => {
                    t.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        next = Some(listed.next);
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn api(addr: SocketAddr, method: &str, path: &str, body: &str) -> serde_json::Value {
    let client = reqwest::Client::new();
    let url = format!("http://{addr}{path}");
    let req = match method {
        "POST" => client.post(url).body(body.to_owned()),
        _ => client.get(url),
    };
    req.header("authorization", format!("apikey {KEY}"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn run(args: &Args, protocol: u8, clients: usize) {
    let daemon = Daemon::start(&args.binary);
    let rec = api(
        daemon.http,
        "POST",
        "/streaming/streams",
        r#"{"name":"viewers"}"#,
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap();
    let fixture = format!(
        "{}/fixtures/{}.flv",
        env!("CARGO_MANIFEST_DIR"),
        args.fixture
    );
    let mut pusher = Command::new("ffmpeg")
        .args([
            "-hide_banner",
            "-loglevel",
            "error",
            "-re",
            "-stream_loop",
            "-1",
            "-i",
        ])
        .arg(&fixture)
        .args(["-c", "copy", "-f", "flv"])
        .arg(format!("rtmp://{}/in/{id}?{token}", daemon.rtmp))
        .stdin(Stdio::null())
        .spawn()
        .expect("ffmpeg");
    let playlist = format!("/cmaf/{id}/720p/index.m3u8");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = api(daemon.http, "GET", &format!("/streaming/streams/{id}"), "").await;
        if r["transcoding_speed"].is_number() {
            break;
        }
        assert!(Instant::now() < deadline, "the stream never went live");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The baseline: the stream and no viewer.
    let (base0, _) = daemon.usage();
    let b0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (base1, rss0) = daemon.usage();
    let baseline = 100.0 * (base1 - base0) / b0.elapsed().as_secs_f64();
    let tally = Arc::new(Tally::default());
    let warmup = Duration::from_secs(5);
    let start = Instant::now();
    let from = start + warmup;
    let until = from + Duration::from_secs(args.seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients {
        // Joins spread over the first two seconds, as an audience does.
        let delay = Duration::from_millis((i as u64 * 2000) / clients as u64);
        let (t, playlist, addr) = (tally.clone(), playlist.clone(), daemon.http);
        tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            viewer(addr, protocol, playlist, from, until, t).await;
        });
    }
    tokio::time::sleep_until(from.into()).await;
    let (cpu0, _) = daemon.usage();
    let requests0 = tally.requests.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let mut rss = 0.0f64;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss = rss.max(daemon.usage().1);
    }
    let wall = t0.elapsed().as_secs_f64();
    let (cpu1, _) = daemon.usage();
    let requests = tally.requests.load(Ordering::Relaxed) - requests0;
    while tasks.join_next().await.is_some() {}
    let _ = pusher.kill();
    let _ = pusher.wait();
    let mut delays = tally.delays.lock().unwrap().clone();
    delays.sort_by(|a, b| a.total_cmp(b));
    let cpu = 100.0 * (cpu1 - cpu0) / wall;
    println!(
        "| HTTP/{} | {clients} | {:.0} | {:.0} | {} | {:.0} | {:.0} | {} | {:.0} | {:.1} | {:.0} | {:.0} |",
        if protocol == 2 { "2" } else { "1.1" },
        requests as f64 / wall,
        tally.bytes.load(Ordering::Relaxed) as f64 * 8.0 / 1e6 / wall,
        delays.len(),
        percentile(&delays, 0.5),
        percentile(&delays, 0.99),
        tally.errors.load(Ordering::Relaxed),
        cpu,
        (cpu - baseline).max(0.0) * 100.0 / clients as f64,
        rss,
        (rss - rss0).max(0.0) * 1024.0 / clients as f64,
    );
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: a smoke run of minutes
    // against a release build there is not a test.
    if !std::env::args().any(|a| a == "--bench") {
        println!("viewers: a benchmark; run it with `cargo bench --bench viewers`");
        return;
    }
    let args = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "| protocol | viewers | requests/s | parts Mbit/s | parts | part p50 ms | part p99 ms | errors | daemon CPU % | viewers' CPU % per 100 | RSS MiB | RSS KiB per viewer |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &protocol in &args.protocols {
        for &clients in &args.clients {
            rt.block_on(run(&args, protocol, clients));
        }
    }
}
