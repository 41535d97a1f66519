//! Ingest: protocol listeners that authenticate publishers against the stream records and turn
//! what they receive into `media` messages for the registry. Never imports the pipeline.

pub mod mpegts;
pub mod rtmp;
