//! Real-time playback: readers of the live media hub that send a stream on as it is encoded —
//! WHEP viewers (WebRTC, sub-second) and SRT readers — sharing the WHIP ingest's ICE ports.

pub mod whep;
