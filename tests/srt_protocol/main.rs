//! The vendored srt-protocol's hostile-input tests (known crashers of 0.4.4, a parse fuzz loop,
//! the listener driven with hostile handshakes), run on every CI run so a dropped patch shows.

#[allow(clippy::all)]
#[path = "../../vendor/srt-protocol/tests/hostile_packets.rs"]
mod hostile_packets;
