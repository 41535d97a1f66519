//! What a live stream reports while it runs: the receiving/transcoding status shown in the
//! record and the monotonic counters behind `/metrics`. Written by the input switch and the
//! pipeline's threads, read by the API and delivery; depends on nothing else in the crate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The receiving/transcoding state of a stream; all off while nothing is received. Serialised
/// into the stream's lease, so the API of every node shows it (fields it lacks default).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LiveStatus {
    pub live: bool,
    pub backup_live: bool,
    pub transcoded_qualities: Vec<String>,
    pub recording_duration: f64,
    pub transcoding_speed: Option<f64>,
    pub frame_rate: Option<f64>,
    pub video_height: Option<u32>,
    pub video_width: Option<u32>,
    /// Why segments are not being written (disk full, …), since when; `None` when they are.
    pub storage_error: Option<String>,
}

/// Shared, updated by the pipeline's threads, read by the API.
pub type SharedStatus = Arc<Mutex<LiveStatus>>;

/// Monotonic per-stream counters for `/metrics`, kept while the registry knows the stream
/// (across reconnects within the grace period), updated without locks from the ingest, the
/// input switch and the pipeline's threads.
#[derive(Debug, Default)]
pub struct Counters {
    /// Media frames received from publishers (main and backup).
    pub frames_received: AtomicU64,
    /// Frames lost because a queue between ingest and encoder was full: the pipeline fell
    /// behind real time.
    pub frames_dropped: AtomicU64,
    /// Parts (CMAF chunks) published for the top rendition.
    pub parts_published: AtomicU64,
    /// Wall time from the ingest of the last frame of the newest part to its publication, µs;
    /// assumes a publisher sending in real time, as live encoders do.
    pub output_delay_us: AtomicU64,
}

impl Counters {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A live stream's state for `/metrics`.
pub struct StreamMetrics {
    pub id: i64,
    pub status: LiveStatus,
    pub counters: Arc<Counters>,
}
