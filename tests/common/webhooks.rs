//! The tests' webhook receiver (`tests/webhook_receiver.py`, Python's own HMAC): started,
//! stopped and restarted on one port; what it accepted and refused, read from its file.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::proc::Proc;

pub struct Receiver {
    _proc: Proc,
    pub port: u16,
    /// Where it appends one JSON line per request it answered.
    pub out: PathBuf,
    /// The secret it verifies with, read at every request.
    pub secret_file: PathBuf,
}

impl Receiver {
    /// Starts on `port` (0: any) in `dir`; `flags` as the script takes them (`--fail-first N`,
    /// `--fail-every K`).
    pub fn start(dir: &Path, port: u16, flags: &[&str]) -> Receiver {
        let out = dir.join("received.jsonl");
        let secret_file = dir.join("webhook-secret");
        let script = super::root().join("tests/webhook_receiver.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script)
            .arg(port.to_string())
            .arg(&secret_file)
            .arg(&out)
            .args(flags)
            .stdout(Stdio::piped());
        let mut proc = Proc::spawn(&mut cmd, "webhook receiver");
        let stdout = proc.child().stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port = line.trim().parse().expect("the receiver prints its port");
        Receiver {
            _proc: proc,
            port,
            out,
            secret_file,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn set_secret(&self, secret: &str) {
        std::fs::write(&self.secret_file, secret).unwrap();
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).expect("the receiver writes JSON lines"))
            .collect()
    }

    /// The events it accepted (2xx), in the order it accepted them.
    pub fn accepted(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["kind"] == "accepted")
            .map(|l| l["event"].clone())
            .collect()
    }

    /// Requests whose signature did not verify.
    pub fn bad_signatures(&self) -> usize {
        self.lines()
            .iter()
            .filter(|l| l["kind"] == "bad_signature")
            .count()
    }

    /// Waits (bounded) until an accepted event matches `pred`; returns all accepted.
    pub async fn until(&self, within: Duration, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.accepted();
            if got.iter().any(&pred) {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "no such event within {within:?}; received: {:#?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Receiver {
    /// Waits (bounded) until an event of `kind` was accepted for each of `streams`.
    pub async fn until_each(&self, within: Duration, kind: &str, streams: &[i64]) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.accepted();
            let missing: Vec<i64> = streams
                .iter()
                .copied()
                .filter(|id| {
                    !got.iter()
                        .any(|e| e["type"] == kind && e["stream_id"] == *id)
                })
                .collect();
            if missing.is_empty() {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "no {kind} within {within:?} for {missing:?}; received: {:#?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The accepted events of `stream`, as (type, event).
pub fn of_stream(accepted: &[Value], stream: i64) -> Vec<Value> {
    accepted
        .iter()
        .filter(|e| e["stream_id"] == stream)
        .cloned()
        .collect()
}

/// Asserts that no event id was accepted twice.
pub fn assert_each_once(accepted: &[Value]) {
    let mut ids: Vec<i64> = accepted.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "an event accepted twice: {accepted:#?}");
}
