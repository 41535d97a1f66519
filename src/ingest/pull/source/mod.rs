//! A PULL source: one source URL fetched by GStreamer in a process of its own (this binary's
//! `pull-source` command, [`child`]), which writes the source's media to its stdout as
//! [`wire`] frames — MPEG-TS re-muxed by [`gst`], or an RTMP server's FLV as received — and
//! what happens to it (tracks declared, failure, end). The daemon reads them as
//! [`SourceEvent`]s and stops the source by killing the process.
//!
//! Why a process: GStreamer 1.22's adaptive demuxers (hlsdemux2, dashdemux2) leave a lock held
//! when their seek back to the live edge fails — their answer to a live playlist they lost
//! sync with, such as an encoder restarting its playlist — and output nothing from then on.
//! Setting such a pipeline to NULL then deadlocks if sync was lost once more, and disposing
//! the demuxer aborts the process (`g_mutex_clear()` on a locked mutex); fixed upstream in
//! 1.22.10, while Debian 12 ships 1.22.0. Neither can be undone from outside, so no state
//! change or disposal of a source pipeline ever runs in the daemon: SIGKILL ends the source
//! whatever state its elements are in, and the OS takes back its memory, threads and sockets.

mod child;
mod gst;
pub mod wire;

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::rewrite::PlaylistKind;
use wire::{Frame, WireError};

pub use child::run as run_child;

/// The binary's hidden command that runs a source process.
pub const COMMAND: &str = "pull-source";

/// Why a source could not be started or stopped working; the fetcher logs it as the reason it
/// left the source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot start the source process: {0}")]
    Spawn(std::io::Error),
    #[error("cannot send the source process its request: {0}")]
    Request(std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
    /// What the source process reported: its pipeline failed (connect refused, 404, bad
    /// data…) or could not be built.
    #[error("{0}")]
    Failed(String),
    #[error("source process ended ({0})")]
    Exited(std::process::ExitStatus),
}

#[derive(Debug)]
pub enum SourceEvent {
    /// The demuxer's streams that are taken (H.264/HEVC video, AAC audio), sent when a new one
    /// appears, before its data: the source's declaration of its tracks. The re-muxed TS's own
    /// PMT is no declaration: mpegtsmux lists a stream only once its first buffer arrived, which
    /// for video joined mid-GOP is the next keyframe.
    Tracks(crate::media::Tracks),
    Data(bytes::Bytes),
    /// The source failed (connect refused, 404, bad data, its process died…); the fetcher
    /// moves on.
    Error(SourceError),
    /// The source ended (a VOD playlist, the remote closed cleanly).
    Eos,
}

/// The byte stream a source's [`SourceEvent::Data`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// An RTMP server's FLV stream, as received.
    Flv,
    /// Everything else, re-muxed as MPEG-TS.
    Ts,
}

impl Container {
    pub fn of(uri: &str) -> Container {
        if uri.starts_with("rtmp://") || uri.starts_with("rtmps://") {
            Container::Flv
        } else {
            Container::Ts
        }
    }
}

/// What the daemon asks of a source process, on its stdin: not in its arguments, which every
/// local user can read in `/proc`, since source URLs can carry credentials.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Request {
    stream: i64,
    uri: String,
    playlist: Option<PlaylistKind>,
}

/// A killed process is reaped within this; longer means the kernel is in trouble, and it is
/// left to the runtime's reaper.
const REAP_WITHIN: Duration = Duration::from_secs(5);
/// How long a process whose stdout closed has to show how it ended.
const EXIT_WITHIN: Duration = Duration::from_secs(1);
/// Read from the process's stdout at a time, at least.
const READ_CHUNK: usize = 64 * 1024;

/// In `/metrics`, so what flapping sources cost is seen, not guessed: source processes alive,
/// the adaptive demuxers they hold, processes started, and those that died by a signal the
/// daemon did not send (a GStreamer crash, contained).
static ALIVE: AtomicU64 = AtomicU64::new(0);
static DEMUXERS: AtomicU64 = AtomicU64::new(0);
static STARTED: AtomicU64 = AtomicU64::new(0);
static CRASHED: AtomicU64 = AtomicU64::new(0);

/// The sources' counts for `/metrics`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub alive: u64,
    pub demuxers: u64,
    pub started: u64,
    pub crashed: u64,
}

pub fn counts() -> Counts {
    Counts {
        alive: ALIVE.load(Ordering::Relaxed),
        demuxers: DEMUXERS.load(Ordering::Relaxed),
        started: STARTED.load(Ordering::Relaxed),
        crashed: CRASHED.load(Ordering::Relaxed),
    }
}

/// A running source process. [`Source::stop`] kills and reaps it; dropped without that, it is
/// killed all the same (and reaped by the runtime).
pub struct Source {
    /// What its data events carry.
    pub container: Container,
    child: Child,
    stdout: ChildStdout,
    /// Held open: the process exits when it reads EOF here.
    _stdin: ChildStdin,
    read: BytesMut,
    /// Adaptive demuxers this process reported, counted in [`DEMUXERS`] until it is gone.
    demuxers: u64,
    /// Its stdout closed or could not be read: no more events.
    ended: bool,
}

/// Starts fetching `uri` in a source process (an HTTP(S) source arrives here as its loopback
/// gateway URL, with the kind of playlist the gateway found there).
pub async fn start(
    stream: i64,
    uri: &str,
    playlist: Option<PlaylistKind>,
) -> Result<Source, SourceError> {
    // This very binary, even if its file was replaced (an upgrade) since the daemon started.
    let mut child = tokio::process::Command::new("/proc/self/exe")
        .arg(COMMAND)
        .env(
            crate::logging::FORMAT_ENV,
            crate::logging::format().as_str(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(SourceError::Spawn)?;
    STARTED.fetch_add(1, Ordering::Relaxed);
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill().await;
        return Err(SourceError::Spawn(std::io::Error::other(
            "no pipe to the process",
        )));
    };
    let mut line = serde_json::to_vec(&Request {
        stream,
        uri: uri.to_owned(),
        playlist,
    })
    .expect("a request serialises");
    line.push(b'\n');
    if let Err(e) = stdin.write_all(&line).await {
        // Kills and reaps.
        let _ = child.kill().await;
        return Err(SourceError::Request(e));
    }
    ALIVE.fetch_add(1, Ordering::Relaxed);
    Ok(Source {
        container: Container::of(uri),
        child,
        stdout,
        _stdin: stdin,
        read: BytesMut::new(),
        demuxers: 0,
        ended: false,
    })
}

impl Source {
    /// The next event; `None` once the process's stdout has closed and how it ended was told.
    /// Cancel-safe: what was read stays in the source for the next call.
    pub async fn next(&mut self) -> Option<SourceEvent> {
        while !self.ended {
            let frame = match wire::decode(&mut self.read) {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    self.read_more().await;
                    continue;
                }
                Err(e) => {
                    self.ended = true;
                    return Some(SourceEvent::Error(e.into()));
                }
            };
            return Some(match frame {
                Frame::Tracks(t) => SourceEvent::Tracks(t),
                Frame::Data(d) => SourceEvent::Data(d),
                Frame::Failed(text) => SourceEvent::Error(SourceError::Failed(text)),
                Frame::Eos => SourceEvent::Eos,
                Frame::Demuxer(name) => {
                    tracing::debug!(demuxer = %name, "PULL source process holds an adaptive demuxer");
                    self.demuxers += 1;
                    DEMUXERS.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            });
        }
        if self.child.id().is_some() {
            // The process closed its stdout without being asked: it exited, or crashed.
            if let Ok(Ok(status)) = tokio::time::timeout(EXIT_WITHIN, self.child.wait()).await {
                if crashed(status) {
                    CRASHED.fetch_add(1, Ordering::Relaxed);
                }
                return Some(SourceEvent::Error(SourceError::Exited(status)));
            }
        }
        None
    }

    /// Appends what the process wrote next to `read`; sets `ended` at its end.
    async fn read_more(&mut self) {
        self.read.reserve(READ_CHUNK);
        if !matches!(self.stdout.read_buf(&mut self.read).await, Ok(n) if n > 0) {
            self.ended = true;
        }
    }

    /// Kills the process and reaps it.
    pub async fn stop(mut self) {
        // Whatever its pipeline is doing, even holding a lock for good: see the module's notes.
        let _ = self.child.start_kill();
        if tokio::time::timeout(REAP_WITHIN, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                pid = self.child.id(),
                "PULL source process not reaped after SIGKILL; left to the runtime"
            );
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        ALIVE.fetch_sub(1, Ordering::Relaxed);
        DEMUXERS.fetch_sub(self.demuxers, Ordering::Relaxed);
    }
}

/// Ended by a signal, seen in [`Source::next`]: the daemon kills only in [`Source::stop`], so
/// the signal was someone else's (an abort, a segfault, the OOM killer).
fn crashed(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal().is_some()
}
