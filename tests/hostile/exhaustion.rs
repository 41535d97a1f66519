//! One host tries to exhaust the daemon: from 127.0.0.2, twice the soft
//! file limit the daemon was started with (1024, as service managers start daemons) in slow
//! connections against each TCP listener in turn — HTTP (WHIP offer heads whose body never
//! comes), RTMP, RTMPS and ICE-TCP (nothing after connect). Meanwhile, from 127.0.0.1, the API
//! answers, the live stream's next part is served and a new push goes live; the slow
//! connections are closed within their deadline, and afterwards descriptors and tasks are back
//! to where they were. SRT, one UDP socket for all, is capped per address by callers: silent
//! publishers hold their places until the idle deadline, handshakes are refused meanwhile.

use std::net::{Ipv4Addr, SocketAddr};

use bytes::Bytes;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use futures::StreamExt;

use super::common::metrics::try_scrape;
use super::common::srt::{conclude_from, conclude_holding, rejection, CONCLUSION};
use super::common::*;
use super::media::*;
use super::{closed_within, SLACK};

const SOFT_LIMIT: usize = 1024;
/// Twice the daemon's soft limit, from one address.
const SLOW: usize = 2 * SOFT_LIMIT;
/// The deadlines the daemon runs with here (short, so the test is).
const DEADLINE_SECS: u64 = 6;
/// ICE-TCP's first frame deadline is fixed (`tcp_mux::FIRST_FRAME_TIMEOUT`).
const ICE_TCP_DEADLINE: Duration = Duration::from_secs(5);
const HTTP_PER_IP: usize = 64;
const RTMP_PER_IP: usize = 8;
const ICE_TCP_PER_IP: usize = 4;

/// This test process needs SLOW descriptors of its own and more: soft to hard.
fn raise_own_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let now = getrlimit(Resource::Nofile);
    let want = (4 * SLOW) as u64;
    let hard = now.maximum.unwrap_or(u64::MAX).max(want);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(want.min(hard)),
            maximum: Some(hard),
        },
    )
    .expect("raise the test's own file limit");
}

async fn connect_from_second_host(addr: SocketAddr) -> Option<TcpStream> {
    let s = TcpSocket::new_v4().ok()?;
    s.bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), 0)))
        .ok()?;
    tokio::time::timeout(Duration::from_secs(2), s.connect(addr))
        .await
        .ok()?
        .ok()
}

/// How one slow connection ended: how long the daemon kept it, and what it sent.
struct Outcome {
    opened: Instant,
    kept: Duration,
    sent: Vec<u8>,
}

/// SLOW connections from 127.0.0.2 at once, each sending `first` and then nothing, each read
/// until the daemon closes it (bounded by `within`; a connection still open then fails).
async fn flood(addr: SocketAddr, first: Bytes, within: Duration) -> Vec<Outcome> {
    // Connects at most 128 at a time: more would overflow the listen backlog (1024), and the
    // kernel then leaves client sockets established that the server side never had.
    let connecting = std::sync::Arc::new(tokio::sync::Semaphore::new(128));
    let one = move |first: Bytes, connecting: std::sync::Arc<tokio::sync::Semaphore>| async move {
        let permit = connecting.acquire_owned().await.unwrap();
        let mut s = connect_from_second_host(addr).await?;
        drop(permit);
        let opened = Instant::now();
        let _ = s.write_all(&first).await;
        let sent = closed_within(s, within, "a slow connection").await;
        Some(Outcome {
            opened,
            kept: opened.elapsed(),
            sent,
        })
    };
    let tasks: Vec<_> = (0..SLOW)
        .map(|_| tokio::spawn(one(first.clone(), connecting.clone())))
        .collect();
    let mut out = Vec::with_capacity(SLOW);
    for t in tasks {
        if let Some(o) = t.await.unwrap() {
            out.push(o);
        }
    }
    assert!(
        out.len() > SLOW / 2,
        "only {} of {SLOW} connections could be made to {addr}",
        out.len()
    );
    out
}

/// The most of `held` admitted at the same instant. The daemon closes an admitted connection
/// `deadline` after its accept, which may come later than the client's connect (the backlog),
/// so each is counted from `deadline` before its close; and a close frees its place a little
/// before the client sees it, so a close and an admission within 50 ms count as apart.
fn most_at_once(held: &[&Outcome], deadline: Duration) -> usize {
    let apart = Duration::from_millis(50);
    let mut edges: Vec<(Instant, i32)> = held
        .iter()
        .flat_map(|o| {
            let closed = o.opened + o.kept;
            let admitted = o.opened.max(closed - deadline);
            [(admitted, 1), (closed - apart, -1)]
        })
        .collect();
    // Closes before opens at the same instant.
    edges.sort();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        open += step;
        most = most.max(open);
    }
    most as usize
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

async fn tasks(d: &Daemon) -> f64 {
    try_scrape(&reqwest::Client::new(), &d.base, &d.key)
        .await
        .expect("/metrics")
        .value("livepack_tasks")
}

/// What a legitimate client on 127.0.0.1 must get while the flood is held: the API, the
/// victim's next part, and a new push going live over `push_base` (`rtmp://…` or `rtmps://…`).
async fn legitimate_client_is_served(d: &Daemon, victim: i64, newcomer: &Value, push_base: &str) {
    let r = d.get(&format!("/streaming/streams/{victim}")).await;
    assert_eq!(r.status, StatusCode::OK, "the API during the flood");
    let playlist = format!("{}/cmaf/{victim}/720p/index.m3u8", d.base);
    let (status, first) = text(&playlist).await;
    assert_eq!(status, StatusCode::OK);
    let newest = |t: &str| -> String {
        t.lines()
            .rev()
            .filter(|l| l.starts_with("#EXT-X-PART:"))
            .find_map(|l| l.split("URI=\"").nth(1)?.split('"').next())
            .expect("a part")
            .to_owned()
    };
    let was = newest(&first);
    let started = Instant::now();
    let next = loop {
        let (_, now) = text(&playlist).await;
        let part = newest(&now);
        if part != was {
            break part;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no new part in 5 s during the flood"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let url = format!("{}/cmaf/{victim}/720p/{next}", d.base);
    let part = reqwest::get(&url).await.unwrap();
    assert_eq!(part.status(), StatusCode::OK, "{url}");
    assert!(!part.bytes().await.unwrap().is_empty());

    let id = newcomer["id"].as_i64().unwrap();
    let key = newcomer["push_url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let mut pusher = push(&format!("{push_base}/in/{key}"), "audio.flv", 20);
    wait_record(d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    pusher.kill();
    wait_record(d, id, Duration::from_secs(20), |r| r["live"] == false).await;
}

/// SRT from 127.0.0.2: callers that publish and then send nothing hold their places up to the
/// per-address cap (2 here; the next gets `SRT_REJX_OVERLOAD`) until the idle deadline frees
/// them; twice the soft limit of refused handshakes meanwhile; a new SRT push from 127.0.0.1
/// goes live all the while.
async fn srt_callers_from_one_host_are_capped(d: &Daemon) {
    const SECOND_HOST: &str = "127.0.0.2:0";
    let mut silent = Vec::new();
    for name in ["srt-a", "srt-b", "srt-c"] {
        silent.push(create(d, json!({"name": name})).await);
    }
    let sid = |r: &Value| format!("{}#{}", r["id"], r["token"].as_str().unwrap());
    let started = Instant::now();
    // Their sockets stay bound until the end (silent all the while): a bogus caller below on a
    // port reused from one of them would be taken for that open connection.
    let mut held = Vec::new();
    for r in &silent[..2] {
        let (answer, socket) = conclude_holding(SECOND_HOST, &d.srt, sid(r).as_bytes()).await;
        assert_eq!(answer, Some(CONCLUSION), "a publisher within the cap");
        held.push(socket);
    }
    let third = sid(&silent[2]);
    let answer = conclude_from(SECOND_HOST, &d.srt, third.as_bytes()).await;
    assert_eq!(
        answer,
        Some(rejection(1402)),
        "over the per-address cap: overload"
    );
    // Twice the soft limit of handshakes with a wrong token, 64 at a time: each refused.
    let bogus = format!("{}#{}", silent[2]["id"], "0".repeat(32));
    let refused = futures::stream::iter(0..SLOW)
        .map(|_| conclude_from(SECOND_HOST, &d.srt, bogus.as_bytes()))
        .buffer_unordered(64)
        .filter(|a| futures::future::ready(*a != Some(CONCLUSION)))
        .count()
        .await;
    assert_eq!(refused, SLOW, "a wrong token was accepted");
    // Meanwhile a new SRT push from 127.0.0.1 goes live.
    let newcomer = create(d, json!({"name": "srt-newcomer"})).await;
    let id = newcomer["id"].as_i64().unwrap();
    let mut pusher = push(newcomer["push_url_srt"].as_str().unwrap(), "audio.flv", 20);
    wait_record(d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    pusher.kill();
    // The silent publishers are dropped at the idle deadline: the third gets in.
    let deadline = started + Duration::from_secs(DEADLINE_SECS) + SLACK;
    loop {
        let answer = conclude_from(SECOND_HOST, &d.srt, third.as_bytes()).await;
        if answer == Some(CONCLUSION) {
            eprintln!(
                "srt: places freed after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the silent SRT publishers still hold their places: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_host_cannot_exhaust_any_listener() {
    let _g = heavy().await;
    raise_own_limit();
    let dir = tempdir();
    let t = DEADLINE_SECS.to_string();
    let ice_tcp = format!("127.0.0.1:{}", free_port(false));
    let (http_cap, rtmp_cap, ice_cap) = (
        HTTP_PER_IP.to_string(),
        RTMP_PER_IP.to_string(),
        ICE_TCP_PER_IP.to_string(),
    );
    let limit = format!("--nofile={SOFT_LIMIT}:{}", 4 * SOFT_LIMIT);
    let d = Daemon::start_wrapped(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_INGEST_HANDSHAKE_TIMEOUT_SECS", &t),
            ("LIVEPACK_HTTP_HEADER_TIMEOUT_SECS", &t),
            ("LIVEPACK_HTTP_BODY_TIMEOUT_SECS", &t),
            ("LIVEPACK_HTTP_STALL_TIMEOUT_SECS", &t),
            ("LIVEPACK_HTTP_MAX_CONNECTIONS_PER_IP", &http_cap),
            ("LIVEPACK_RTMP_MAX_CONNECTIONS_PER_IP", &rtmp_cap),
            ("LIVEPACK_WHIP_TCP_MAX_CONNECTIONS_PER_IP", &ice_cap),
            ("LIVEPACK_SRT_MAX_CONNECTIONS_PER_IP", "2"),
            ("LIVEPACK_INGEST_IDLE_TIMEOUT_SECS", &t),
            ("LIVEPACK_WHIP_TCP_MUX_ADDR", &ice_tcp),
            ("LIVEPACK_GRACE_PERIOD_SECS", "0"),
        ],
        &[],
        &["prlimit", &limit, "--"],
    );
    // The daemon raised its soft limit to the hard one.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let nums: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(nums, ["4096", "4096"], "{line}");

    let victim = create(&d, json!({"name": "victim"})).await;
    let id = victim["id"].as_i64().unwrap();
    let newcomer = create(&d, json!({"name": "newcomer"})).await;
    let mut ffmpeg = push(victim["push_url"].as_str().unwrap(), "av-720p.flv", 40);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    wait_segments(victim["hls_cmaf_url"].as_str().unwrap(), 2).await;
    let (fds_before, tasks_before) = (open_fds(d.pid()), tasks(&d).await);

    let rtmp_base = format!("rtmp://{}", d.rtmp);
    let rtmps_base = format!("rtmps://{}", d.rtmps);
    let whip_head = format!(
        "POST /whip/{id}?token=x HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\nContent-Length: 100000\r\n\r\n"
    );
    let http: SocketAddr = d.base.trim_start_matches("http://").parse().unwrap();
    // (listener, address, what each slow connection sends, its per-address cap, its deadline,
    // the scheme of the new push made meanwhile)
    type Phase<'a> = (&'a str, SocketAddr, &'a [u8], usize, Duration, &'a str);
    let phases: [Phase; 4] = [
        (
            "http",
            http,
            whip_head.as_bytes(),
            HTTP_PER_IP,
            Duration::from_secs(DEADLINE_SECS),
            &rtmp_base,
        ),
        (
            "rtmp",
            d.rtmp.parse().unwrap(),
            &[3],
            RTMP_PER_IP,
            Duration::from_secs(DEADLINE_SECS),
            &rtmp_base,
        ),
        (
            "rtmps",
            d.rtmps.parse().unwrap(),
            &[],
            RTMP_PER_IP,
            Duration::from_secs(DEADLINE_SECS),
            &rtmps_base,
        ),
        (
            "ice-tcp",
            ice_tcp.parse().unwrap(),
            &[],
            ICE_TCP_PER_IP,
            ICE_TCP_DEADLINE,
            &rtmp_base,
        ),
    ];
    for (name, addr, first, cap, deadline, push_base) in phases {
        let within = deadline + SLACK;
        let flood = tokio::spawn(flood(addr, Bytes::copy_from_slice(first), within));
        legitimate_client_is_served(&d, id, &newcomer, push_base).await;
        let outcomes = flood.await.unwrap();
        // Refused at accept: closed at once. Admitted: kept until the deadline, then closed
        // (`closed_within` above failed the test for any still open past it).
        let (held, refused): (Vec<&Outcome>, Vec<&Outcome>) =
            outcomes.iter().partition(|o| o.kept >= deadline / 2);
        let longest = held.iter().map(|o| o.kept).max().unwrap_or_default();
        // The cap is on connections open at once: a flood that outlasts the deadline (a slow
        // machine) is rightly let in again when the first ones are closed.
        let at_once = most_at_once(&held, deadline);
        eprintln!(
            "{name}: {} connections, {} refused at once, {} held (cap {cap}, at most {at_once} \
             at once) for at most {:.1} s",
            outcomes.len(),
            refused.len(),
            held.len(),
            longest.as_secs_f64()
        );
        assert!(
            !held.is_empty() && at_once <= cap,
            "{name}: {at_once} held at once from one address, cap {cap}"
        );
        if name == "http" {
            for o in &held {
                let text = String::from_utf8_lossy(&o.sent);
                assert!(text.starts_with("HTTP/1.1 408"), "{text}");
            }
            for o in &refused {
                let text = String::from_utf8_lossy(&o.sent);
                assert!(text.starts_with("HTTP/1.1 503"), "{text}");
            }
        }
    }

    srt_callers_from_one_host_are_capped(&d).await;

    // Nothing leaks: descriptors and tasks come back (lingering closes last 2 s at most).
    let started = Instant::now();
    loop {
        let (fds, tasks_now) = (open_fds(d.pid()), tasks(&d).await);
        if fds <= fds_before + 8 && tasks_now <= tasks_before + 8.0 {
            eprintln!("fds {fds_before} → {fds}, tasks {tasks_before} → {tasks_now}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "leak: fds {fds_before} → {fds}, tasks {tasks_before} → {tasks_now}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        ffmpeg.try_wait().is_none(),
        "the victim's publisher was cut off"
    );
    assert_eq!(record(&d, id).await["live"], true);
    // The same live stream serves the Host header test (one transcode for both).
    super::host_header::hostile_hosts_are_never_reflected(&d, id).await;
}
