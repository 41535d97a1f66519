//! Restreams: hub readers that send a live stream on to other servers (RTMP/RTMPS: YouTube,
//! Twitch, Facebook; SRT), the source as received or a rung as encoded.

pub mod flv;
pub mod rtmp;
pub mod srt;
pub mod target;
pub mod tls;
