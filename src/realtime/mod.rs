//! Real-time playback: readers of the live media hub that send a stream on as it is encoded —
//! WHEP viewers (WebRTC, sub-second) sharing the WHIP ingest's ICE ports, and SRT readers
//! (MPEG-TS on the SRT ingest port).

pub mod srt_read;
pub mod whep;
