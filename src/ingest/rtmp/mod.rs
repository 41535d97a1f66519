//! RTMP and RTMPS ingest (rml_rtmp): listener, connection shell, FLV → media adapter.

pub mod guard;
pub mod to_media;
