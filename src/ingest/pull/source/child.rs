//! The source process (`livepack pull-source`): reads its [`Request`] from stdin, runs the
//! GStreamer pipeline ([`super::gst`]) and writes what it reports to stdout as
//! [`super::wire`] frames, until the daemon kills it. It also ends when stdin closes, which is
//! how it learns that the daemon is gone, even one killed without a chance to kill it first,
//! and when the daemon stops reading. It ends as the daemon would end it, by SIGKILL: a normal
//! exit would run library exit handlers while GStreamer's threads still run, and could hang
//! there with no one left to kill it.

use std::io::{BufRead, Read, Write};
use std::os::fd::AsFd;

use bytes::BytesMut;

use super::wire::{self, Frame};
use super::{Container, Request};

/// The request is one line of JSON; the URI in it is at most 4096 characters (the API's limit)
/// or a gateway URL, so this is ample.
const MAX_REQUEST: u64 = 64 * 1024;

/// Runs the source process; returns (the exit code) only when it got no usable request (the
/// reason on stderr) or its pipeline could not be built (the reason sent to the daemon).
pub fn run() -> i32 {
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    if let Err(e) = (&mut stdin).take(MAX_REQUEST).read_line(&mut line) {
        eprintln!("pull-source: cannot read the request: {e}");
        return 2;
    }
    let request: Request = match serde_json::from_str(&line) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pull-source: bad request: {e}");
            return 2;
        }
    };
    drop(stdin);
    // stdout is line-buffered in Rust; the frames go through a descriptor of their own.
    let out = match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => {
            eprintln!("pull-source: cannot write to stdout: {e}");
            return 2;
        }
    };
    std::thread::spawn(end_when_stdin_closes);
    let container = Container::of(&request.uri);
    match super::gst::start(request.stream, &request.uri, request.playlist, container) {
        // The pipeline is held, never dropped: the process ends by being killed, which
        // disposes no GStreamer element.
        Ok((_pipeline, frames)) => {
            write_frames(frames, out);
            end()
        }
        // Nothing runs yet: a normal exit.
        Err(e) => {
            let mut buf = BytesMut::new();
            wire::encode(&Frame::Failed(e.to_string()), &mut buf);
            let _ = (&out).write_all(&buf);
            0
        }
    }
}

/// Ends the process at once.
fn end() -> ! {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    // SIGKILL cannot be caught or ignored: never reached.
    std::process::abort()
}

/// Frames that queued up while the last write went out are written together, up to this much.
const WRITE_BATCH: usize = 64 * 1024;

/// Writes each frame to the daemon, several at once when they queued up meanwhile. Returns when
/// the daemon stops reading.
fn write_frames(mut frames: tokio::sync::mpsc::Receiver<Frame>, mut out: std::fs::File) {
    let mut buf = BytesMut::new();
    while let Some(frame) = frames.blocking_recv() {
        wire::encode(&frame, &mut buf);
        while let Ok(more) = frames.try_recv() {
            wire::encode(&more, &mut buf);
            if buf.len() >= WRITE_BATCH {
                break;
            }
        }
        if out.write_all(&buf).is_err() {
            return;
        }
        buf.clear();
    }
}

/// The daemon holds the other end of stdin open for as long as it wants this source.
fn end_when_stdin_closes() {
    let mut sink = [0u8; 256];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    end()
}
