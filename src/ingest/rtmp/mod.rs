//! RTMP and RTMPS ingest (rml_rtmp): listener, connection shell, chunk guard, publish keys and
//! the FLV → media adapter.

pub mod conn;
pub mod guard;
pub mod key;
pub mod listener;
pub mod to_media;
