//! Test harness shared by the end-to-end suites: runs the real `livepack` binary on 127.0.0.1
//! with ephemeral ports and a temporary data dir, and talks to it over real HTTP.
#![allow(dead_code)]

pub mod certs;
pub mod hls;
pub mod metrics;
pub mod nginx;
pub mod pg;
pub mod proc;
pub mod raw_http;
pub mod rtmp;
pub mod s3;
pub mod srt;
pub mod webhooks;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use proc::Proc;

/// Marks a variable the harness would set as removed instead.
pub const UNSET: &str = "<unset>";
pub const KEY: &str = "test-key-0123456789";
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Daemon {
    child: Proc,
    pub base: String,
    pub key: String,
    pub banner: Vec<String>,
    pub rtmp: String,
    pub rtmps: String,
    /// The SRT listener's `host:port`.
    pub srt: String,
    client: reqwest::Client,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    /// The stable error code of a JSON error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or("<no error code>")
    }
    pub fn field(&self) -> Option<&str> {
        self.body["error"]["field"].as_str()
    }
}

impl Daemon {
    /// Starts with the test key configured.
    pub fn start(dir: &Path) -> Daemon {
        Daemon::start_with(dir, &[("LIVEPACK_API_KEYS", KEY)])
    }

    pub fn start_with(dir: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_full(dir, env, &[])
    }

    /// `env` overrides the harness defaults; a value of [`UNSET`] removes the variable.
    pub fn start_full(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Daemon {
        Daemon::spawn(dir, env, args, Stdio::inherit(), &[])
    }

    /// As [`Daemon::start_full`], run through `wrapper` (e.g. `prlimit --nofile=1024:4096 --`).
    pub fn start_wrapped(
        dir: &Path,
        env: &[(&str, &str)],
        args: &[&str],
        wrapper: &[&str],
    ) -> Daemon {
        Daemon::spawn(dir, env, args, Stdio::inherit(), wrapper)
    }

    /// Like [`Daemon::start_with`], its log (stderr) appended to [`Daemon::log_file`] for the
    /// test to read; `RUST_LOG` in `env` sets how much is logged.
    pub fn start_logged(dir: &Path, env: &[(&str, &str)]) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(Daemon::log_file(dir))
            .unwrap();
        Daemon::spawn(dir, env, &[], Stdio::from(log), &[])
    }

    /// Where [`Daemon::start_logged`] writes the log of daemons started on `dir`.
    pub fn log_file(dir: &Path) -> PathBuf {
        dir.join("daemon.log")
    }

    fn spawn(
        dir: &Path,
        env: &[(&str, &str)],
        args: &[&str],
        stderr: Stdio,
        wrapper: &[&str],
    ) -> Daemon {
        let bin = env!("CARGO_BIN_EXE_livepack");
        let mut cmd = match wrapper.split_first() {
            None => Command::new(bin),
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(bin);
                c
            }
        };
        for (k, _) in std::env::vars() {
            if k.starts_with("LIVEPACK_") {
                cmd.env_remove(k);
            }
        }
        cmd.current_dir(dir)
            // LIVEPACK_TEST_LOG=info shows the daemons' logs when a test needs explaining.
            .env(
                "RUST_LOG",
                std::env::var("LIVEPACK_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("LIVEPACK_HTTP_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_RTMP_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_RTMPS_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_SRT_ADDR", "127.0.0.1:0")
            // Not the shared default port 8189: daemons run side by side in the tests.
            .env("LIVEPACK_WHIP_UDP_MUX_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_WHIP_TCP_MUX_ADDR", "127.0.0.1:0")
            .env("LIVEPACK_DATA_DIR", dir.join("data"))
            // The machine is loaded by the tests themselves (and by the other test binaries):
            // the measured capacity check would refuse publishes at random. Off, except where a
            // test sets it.
            .env("LIVEPACK_ADMISSION_CPU_PERCENT", "100")
            .envs(player_assets())
            .envs(env.iter().copied().filter(|(_, v)| *v != UNSET))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (k, _) in env.iter().filter(|(_, v)| *v == UNSET) {
            cmd.env_remove(k);
        }
        let mut child = Proc::spawn(&mut cmd, "livepack");
        let stdout = child.child().stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut banner = Vec::new();
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let done = line.starts_with("try:");
                    banner.push(line);
                    if done {
                        break;
                    }
                }
                Err(_) => panic!(
                    "daemon did not print its banner: {banner:?}, status {:?}",
                    child.try_wait()
                ),
            }
        }
        let value = |k: &str| {
            banner
                .iter()
                .find_map(|l| l.strip_prefix(&format!("{k}: ")))
                .map(str::to_owned)
        };
        let base = format!("http://{}", value("http").expect("http line"));
        let key = env
            .iter()
            .find(|(k, _)| *k == "LIVEPACK_API_KEYS")
            .map(|(_, v)| v.split(',').next().unwrap().trim().to_owned())
            .or_else(|| value("api_key"))
            // A key generated by an earlier start is printed no more: it is in the file.
            .or_else(|| {
                let file = value("api_key_file")?;
                Some(std::fs::read_to_string(file).ok()?.trim().to_owned())
            })
            .unwrap();
        let rtmp = value("rtmp").expect("rtmp line");
        let rtmps = value("rtmps").expect("rtmps line");
        let srt = value("srt").expect("srt line");
        Daemon {
            child,
            rtmp,
            rtmps,
            srt,
            base,
            key,
            banner,
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                // An API call the daemon never answers fails the test instead of hanging the
                // suite (a tests/browser run once waited > 15 min with nothing on the wire).
                .timeout(Duration::from_secs(120))
                // The daemon closes a kept-alive connection that sends no request for 10 s
                // (`http_header_timeout_secs`); a request sent on it just then fails with
                // `IncompleteMessage` (seen on a `stop_recording` after a 10 s wait). Pooled
                // connections are dropped before that.
                .pool_idle_timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
        }
    }

    /// `kill -9`: no chance to flush anything.
    pub fn kill9(mut self) {
        assert!(self.child.try_wait().is_none(), "the daemon had exited");
        self.child.kill();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then wait (bounded) for the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        self.child.signal(Signal::SIGTERM);
        self.child
            .wait_within(Duration::from_secs(15))
            .expect("daemon did not exit within 15 s of SIGTERM")
    }

    /// SIGTERM, without waiting: the test watches what the stopping daemon does.
    pub fn sigterm(&mut self) {
        self.child.signal(Signal::SIGTERM);
    }

    /// Waits up to `within` for the exit (after [`Daemon::sigterm`]); `None`: it did not come
    /// (the daemon is killed then).
    pub fn wait_exit(mut self, within: Duration) -> Option<ExitStatus> {
        self.child.wait_within(within)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request with the daemon's API key.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        let auth = format!("apikey {}", self.key);
        self.raw(
            method,
            path,
            &[("authorization", auth.as_str())],
            body.map(|b| b.to_string()),
        )
        .await
    }

    /// A request with exactly the given headers and raw body.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> Reply {
        let mut req = self.client.request(method, self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None).await
    }
    /// `PUT /streaming/streams/{id}/kick`: cuts the stream's publishers.
    pub async fn kick(&self, id: i64) -> Reply {
        let path = format!("/streaming/streams/{id}/kick");
        self.call(Method::PUT, &path, None).await
    }
    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(body)).await
    }
    pub async fn patch(&self, path: &str, body: Value) -> Reply {
        self.call(Method::PATCH, path, Some(body)).await
    }
    pub async fn delete(&self, path: &str) -> Reply {
        self.call(Method::DELETE, path, None).await
    }
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

/// The daemon looks for the player libraries in the checkout its binary was built in, three
/// levels above it (`target/debug/livepack`); a CARGO_TARGET_DIR outside the checkout defeats
/// that, so then the harness names them. Otherwise that lookup stays the one under test.
fn player_assets() -> Option<(&'static str, PathBuf)> {
    let bin = Path::new(env!("CARGO_BIN_EXE_livepack"));
    let built_in = bin.ancestors().nth(3)?.join("node_modules");
    (!built_in.join("hls.js").is_dir())
        .then(|| ("LIVEPACK_PLAYER_ASSETS_DIR", root().join("node_modules")))
}

/// The repository root (fixtures, scripts, the browser drivers and their node_modules).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A port free on 127.0.0.1 right now (TCP or UDP), for a server the test starts.
/// A free TCP port below the kernel's ephemeral range, for a daemon that must come back on its
/// port after a stop: no port-0 bind (another test's daemon, a client's connection) is ever
/// given one of these, so nothing takes it while the daemon is down.
pub fn lasting_port() -> u16 {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000u16.min(ephemeral / 2);
    for _ in 0..1000 {
        let port = rand::Rng::gen_range(&mut rand::thread_rng(), low..ephemeral);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {low}..{ephemeral}");
}

pub fn free_port(udp: bool) -> u16 {
    let addr = if udp {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
    } else {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
    };
    addr.unwrap().port()
}

/// Waits (bounded) until a local server accepts TCP connections on `port`.
pub fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A syntactically valid offer that no client stands behind: the session is created, ICE never
/// completes.
pub fn whip_offer_without_client() -> String {
    let fp = (0..32)
        .map(|i| format!("{i:02X}"))
        .collect::<Vec<_>>()
        .join(":");
    let section = |kind: &str, mid: u8, codecs: &str| {
        format!(
            "m={kind} 9 UDP/TLS/RTP/SAVPF {pts}\r\nc=IN IP4 0.0.0.0\r\na=rtcp:9 IN IP4 0.0.0.0\r\n\
             a=ice-ufrag:Abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\na=fingerprint:sha-256 {fp}\r\n\
             a=setup:actpass\r\na=mid:{mid}\r\na=sendonly\r\na=rtcp-mux\r\na=msid:s t{mid}\r\n{codecs}\
             a=ssrc:{ssrc} cname:whiptest\r\na=ssrc:{ssrc} msid:s t{mid}\r\n",
            ssrc = 1000 + u32::from(mid),
            pts = if kind == "audio" { "111" } else { "102" },
        )
    };
    format!(
        "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\na=msid-semantic: WMS s\r\n{}{}",
        section("audio", 0, "a=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;useinbandfec=1\r\n"),
        section(
            "video",
            1,
            "a=rtpmap:102 H264/90000\r\na=rtcp-fb:102 nack pli\r\n\
             a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n"
        ),
    )
}
