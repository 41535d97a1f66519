//! A PULL source that flaps: an HLS source whose encoder restarts its playlist on every
//! refresh, so GStreamer 1.22's hlsdemux2 loses sync each time and its seek back to the live
//! edge fails — which leaves a lock held in the demuxer for good. Disposing such a demuxer
//! aborts the process that does it (the first test shows it on this machine's GStreamer);
//! the daemon runs each source in a process it kills, and after hundreds of such attempts is
//! back where it started (the second).

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use super::common::metrics::scrape;
use super::common::proc::Proc;
use super::common::raw_http;
use super::common::{tempdir, Daemon, KEY};
use super::media::{self, create};

/// When the source restarts its playlist.
#[derive(Clone, Copy)]
enum Restarts {
    /// On the second request, and never again after (the playlist then stays as it is).
    Once,
    /// On every request.
    Always,
}

/// A live HLS source on 127.0.0.1 whose playlists list two segments of a new encoder run each
/// time it restarts, the media sequence jumping between 100 and 0 — too few segments for
/// hlsdemux2's seek to the live edge after it loses sync. Each segment is the first half second
/// of the TS fixture, announced as a quarter (`EXTINF`): hlsdemux2 refreshes a playlist as often
/// as its last segment lasts. The padding line lets GStreamer's typefinder see a playlist when it reads the source
/// directly.
fn restarting_hls_source(dir: &Path, restarts: Restarts) -> u16 {
    let cut = dir.join("segment.ts");
    let fixture = media::fixture("av-720p.ts");
    let ok = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-i"])
        .arg(&fixture)
        .args(["-t", "0.5", "-c", "copy"])
        .arg(&cut)
        .status()
        .unwrap();
    assert!(ok.success(), "ffmpeg could not cut the fixture");
    let segment = std::sync::Arc::new(std::fs::read(cut).unwrap());
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    raw_http::serve(move |path, mut s| {
        let body = if path.ends_with(".m3u8") {
            let n = requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let run = match restarts {
                Restarts::Once => n.min(1),
                Restarts::Always => n,
            };
            let first = if run % 2 == 0 { 100 } else { 0 };
            let mut p = format!(
                        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXT-X-MEDIA-SEQUENCE:{first}\n"
                    );
            for seq in first..first + 2 {
                p.push_str(&format!("#EXTINF:0.25,\nrun{run}/{seq}.ts\n"));
            }
            p.push_str(&format!("#{}\n", "x".repeat(8192)));
            p.into_bytes()
        } else if path.ends_with(".ts") {
            segment.to_vec()
        } else {
            let _ = s.write_all(
                b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            );
            return;
        };
        let _ = s.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        let _ = s.write_all(&body);
    })
}

/// Why the daemon runs its sources in processes of their own, shown on this machine's
/// GStreamer: a process that stops and disposes a pipeline whose hlsdemux2 lost sync and failed
/// to seek back to the live edge aborts. gst-launch-1.0 stands in for such a process (SIGINT:
/// it sets the pipeline to NULL and disposes it). Once this fails, GStreamer is fixed (upstream
/// since 1.22.10) and sources could run in the daemon again.
#[test]
fn gstreamer_aborts_disposing_an_hls_demuxer_that_lost_sync() {
    let dir = tempdir();
    let port = restarting_hls_source(dir.path(), Restarts::Once);
    let log = dir.path().join("gst.log");
    let mut gst = Proc::spawn(
        Command::new("gst-launch-1.0")
            .arg("urisourcebin")
            .arg(format!("uri=http://127.0.0.1:{port}/live.m3u8"))
            .args(["!", "fakesink", "sync=true"])
            .env("GST_DEBUG", "hlsdemux2:2")
            .env("GST_DEBUG_NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap()),
        "gst-launch-1.0",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !read(&log).contains("Seeking failed") {
        assert!(
            gst.try_wait().is_none(),
            "gst-launch ended:\n{}",
            read(&log)
        );
        assert!(Instant::now() < deadline, "no lost sync:\n{}", read(&log));
        std::thread::sleep(Duration::from_millis(100));
    }
    gst.signal(Signal::SIGINT);
    let status = gst
        .wait_within(Duration::from_secs(20))
        .expect("gst-launch did not end after SIGINT");
    assert_eq!(
        status.signal(),
        Some(Signal::SIGABRT as i32),
        "{status}: disposed without aborting; is GStreamer fixed?\n{}",
        read(&log)
    );
    assert!(
        read(&log).contains("g_mutex_clear() called on uninitialised or locked mutex"),
        "{}",
        read(&log)
    );
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// Attempts on the flapping source; the soak (`scripts/soak --pull-flaps`) runs hundreds.
const FLAPS: u64 = 50;

/// What is compared with the baseline: resident memory, open fds and threads, read from
/// `/proc` (not from the daemon's own figures), and the runtime's tasks (only it can count
/// them).
const READINGS: [&str; 4] = ["rss", "fds", "threads", "livepack_tasks"];

/// The process's readings as the kernel shows them, beside its task count.
async fn readings(d: &Daemon) -> std::collections::BTreeMap<&'static str, f64> {
    let pid = d.pid();
    let status = read(Path::new(&format!("/proc/{pid}/status")));
    let kb = |key: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
    };
    let count = |dir: String| std::fs::read_dir(dir).map_or(0, |d| d.count()) as f64;
    [
        ("rss", kb("VmRSS:") * 1024.0),
        ("fds", count(format!("/proc/{pid}/fd"))),
        ("threads", count(format!("/proc/{pid}/task"))),
        ("livepack_tasks", scrape(d).await.value("livepack_tasks")),
    ]
    .into_iter()
    .collect()
}

/// The daemon's child processes, as the kernel lists them (each source is one).
fn children(d: &Daemon) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", d.pid())).unwrap();
    tasks
        .flat_map(|t| {
            read(&t.unwrap().path().join("children"))
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A PULL of the flapping source, attempt after attempt, each ending with its demuxer locked
/// and silent: the daemon lives on, counts the demuxers while their processes run, and once the
/// pull stops holds the memory, fds and tasks it held before (±5 %) and the same threads (the
/// runtime's idle blocking threads aside, see [`threads_but_the_runtimes`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_flaps_costs_nothing_once_it_stops() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = Daemon::start_logged(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            // Each attempt ends soon after the demuxer falls silent, and the next follows.
            ("LIVEPACK_PULL_FIRST_DATA_TIMEOUT_MS", "500"),
            ("LIVEPACK_PULL_CYCLE_PAUSE_MS", "0"),
            // The source processes' hlsdemux2 warnings say when the lost sync happened.
            ("GST_DEBUG", "hlsdemux2:2"),
            ("GST_DEBUG_NO_COLOR", "1"),
        ],
    );
    let port = restarting_hls_source(dir.path(), Restarts::Always);
    let uri = format!("http://127.0.0.1:{port}/live.m3u8");
    let rec = create(&d, json!({"name": "flapping", "pull": true, "uri": uri})).await;
    let id = rec["id"].as_i64().unwrap();
    // One attempt first: what the first sets up once (the runtime's SIGCHLD watch, allocator
    // arenas) is not what a flap costs.
    wait_starts(&d, 2, Duration::from_secs(30)).await;
    let baseline = quiet(&d, id, false).await;
    assert!(children(&d).is_empty());
    let own_threads = threads_but_the_runtimes(&d);

    let started = Instant::now();
    let first = scrape(&d).await.value("livepack_pull_source_starts_total") as u64;
    let mut demuxers_seen = 0.0f64;
    while (scrape(&d).await.value("livepack_pull_source_starts_total") as u64) < first + FLAPS {
        let m = scrape(&d).await;
        demuxers_seen = demuxers_seen.max(m.value("livepack_pull_demuxers"));
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {} attempts in 120 s",
            m.value("livepack_pull_source_starts_total") as u64 - first
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "{FLAPS} attempts on the flapping source in {:?}",
        started.elapsed()
    );
    let (after, metrics) = (quiet(&d, id, true).await, scrape(&d).await);
    assert_eq!(threads_but_the_runtimes(&d), own_threads);

    let lost = read(&Daemon::log_file(dir.path()))
        .matches("Seeking failed")
        .count() as u64;
    assert!(
        lost >= FLAPS / 2,
        "the seek to the live edge failed {lost} times in {FLAPS} attempts"
    );
    assert!(demuxers_seen >= 1.0, "no demuxer counted while flapping");
    assert_eq!(metrics.value("livepack_pull_demuxers"), 0.0);
    assert_eq!(metrics.value("livepack_pull_source_crashes_total"), 0.0);
    for name in READINGS {
        let (b, a) = (baseline[name], after[name]);
        println!("{name}: {b} before, {a} after {FLAPS} attempts");
        let slack = if name == "threads" {
            RUNTIME_IDLE_SLACK
        } else {
            0.0
        };
        assert!(
            (a - b).abs() <= (b * 0.05).max(slack),
            "{name}: {b} before, {a} after {FLAPS} attempts"
        );
    }
}

/// Waits until `n` source processes were started.
async fn wait_starts(d: &Daemon, n: u64, within: Duration) {
    let deadline = Instant::now() + within;
    while (scrape(d).await.value("livepack_pull_source_starts_total") as u64) < n {
        assert!(Instant::now() < deadline, "fewer than {n} attempts");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The daemon's threads by name, but for the runtime's (`tokio-rt-worker`): its workers and
/// its blocking threads, of which it keeps a varying number idle, each ended 10 s after its last
/// use, and the periodic store calls use them in turn. Every other thread is the daemon's own
/// (its main thread, named ones) or GStreamer's.
fn threads_but_the_runtimes(d: &Daemon) -> std::collections::BTreeMap<String, u32> {
    let mut names = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", d.pid())).unwrap() {
        let comm = std::fs::read_to_string(task.unwrap().path().join("comm")).unwrap_or_default();
        let name = comm.trim();
        if name != "tokio-rt-worker" {
            *names.entry(name.to_owned()).or_default() += 1;
        }
    }
    names
}

/// How many more idle blocking threads than before the runtime may hold after the flaps: how
/// many it keeps depends on what ran last, not on how many attempts there were.
const RUNTIME_IDLE_SLACK: f64 = 3.0;

/// Stops the pull (`active=false`), waits until no source process is left (none counted, none
/// a child of the daemon) and the runtime has had time to end idle blocking threads, and
/// returns the readings then; unless `last`, starts the pull again.
async fn quiet(d: &Daemon, id: i64, last: bool) -> std::collections::BTreeMap<&'static str, f64> {
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"active": false}}),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    while scrape(d).await.value("livepack_pull_sources") > 0.0 || !children(d).is_empty() {
        assert!(
            Instant::now() < deadline,
            "source processes left running: {:?}",
            children(d)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    let m = readings(d).await;
    if !last {
        let r = d
            .patch(
                &format!("/streaming/streams/{id}"),
                json!({"stream": {"active": true}}),
            )
            .await;
        assert!(r.status.is_success(), "{}", r.body);
    }
    m
}
