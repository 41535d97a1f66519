//! The vendored srt-protocol's hostile-input tests (known crashers of 0.4.4, a parse fuzz loop,
//! the listener driven with hostile handshakes), run on every CI run so a dropped patch shows;
//! and its listener under srt-tokio with real sockets (a caller on a reused port, large frames
//! sent to libsrt).

#[allow(clippy::all)]
#[path = "../../vendor/srt-protocol/tests/hostile_packets.rs"]
mod hostile_packets;

mod large_frames;
#[allow(dead_code)]
#[path = "../common/proc.rs"]
mod proc;
mod reused_port;

#[allow(dead_code)]
#[path = "../common/srt.rs"]
mod srt;
