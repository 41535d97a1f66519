//! MPEG-TS as an ingest payload (SRT pushes, PULL sources): a sans-IO demuxer and the TS → media
//! adapter.

pub mod demux;
pub mod to_media;
