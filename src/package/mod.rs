//! Packaging: the per-stream segment store fed by the pipeline, and the renderers that turn it
//! into LL-HLS playlists (later LL-DASH and MPEG-TS HLS). Never imports ingest.

pub mod hls;
pub mod store;

pub use store::{PackagingConfig, PartIn, Rendition, RenditionKind, StreamPackage};
