//! Restreams: hub readers that send a live stream on to other servers (RTMP/RTMPS: YouTube,
//! Twitch, Facebook; SRT), the source as received or a rung as encoded.

pub mod flv;
pub mod manager;
pub mod rtmp;
pub mod runner;
pub mod srt;
pub mod target;
#[cfg(test)]
pub(crate) mod test_support;
pub mod tls;
