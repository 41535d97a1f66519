//! Formats shared by ingest and package: container parsers/writers, sans-IO (bytes in, values
//! out), below both so that neither has to import the other.

pub mod mpegts;
pub mod mpegts_mux;
