//! What `live` asks of the parts it does not own: a pipeline per session (`PipelineFactory`,
//! given a `PipelineJob` on the stream's `StreamHandles`) and, with several nodes, the
//! stream's lease (`Leases`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;

use super::publisher::PublishError;
use super::status::{Counters, LiveStatus, SharedStatus};
use crate::hub::{self, Hub};
use crate::package::{Numbering, Package};
use crate::quality::QualitySet;

/// The stream a pipeline works for: where its parts go and what it reports.
#[derive(Clone)]
pub struct StreamHandles {
    pub id: i64,
    pub package: Arc<Package>,
    /// The stream's media fan-out: the switched source and the encoded rungs, to any reader.
    pub hub: Arc<Hub>,
    pub status: SharedStatus,
    pub counters: Arc<Counters>,
}

impl StreamHandles {
    /// The stream's status as shown (API, lease, `/metrics`) at `now`: what its owners wrote,
    /// with the counts kept elsewhere — frames dropped, the players counted by the package,
    /// the hub's WHEP and SRT readers — and the package's storage error.
    pub fn status_now(&self, now: std::time::Instant) -> LiveStatus {
        let s = self
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let realtime = (
            self.hub.readers_named(hub::WHEP_READER),
            self.hub.readers_named(hub::SRT_READER),
        );
        s.with_storage_error(self.package.storage_error())
            .with_counts(
                Counters::get(&self.counters.frames_dropped),
                self.package.audience.count(now),
                realtime,
            )
    }
}

/// What a session's pipeline is given: the stream, its ladder's quality set, its reader of
/// the switched media (ends when both publishers left), and the signal to drain and stop.
pub struct PipelineJob {
    pub stream: StreamHandles,
    pub quality_set: QualitySet,
    /// What the node, full at the publish, could give: the lowest rung or no transcode.
    pub reduction: crate::capacity::Reduction,
    pub media: hub::Reader,
    pub stop: watch::Receiver<bool>,
}

/// Why a pipeline ended its stream early (logged; the stream then ends like any other).
pub type PipelineFailure = Box<dyn std::error::Error + Send + Sync>;

/// Runs pipelines for the registry: GStreamer in the daemon, a fake in the lifecycle tests.
pub trait PipelineFactory: Send + Sync + 'static {
    /// Runs until `job.media` closes (both publishers left) or `job.stop` fires, then drains.
    fn run(
        &self,
        job: PipelineJob,
    ) -> Pin<Box<dyn Future<Output = Result<(), PipelineFailure>> + Send>>;
}

/// Where streams are served when several daemons share the store (`cluster`): a stream's lease
/// is taken before a publish is accepted and given up when the stream is forgotten here.
pub trait Leases: Send + Sync + 'static {
    /// Refused with [`PublishError::LiveElsewhere`] while another live node serves the stream
    /// (unless, with `from_idle`, that node's publisher has left); taken, it says where the
    /// node that served the stream last left its numbering.
    fn take(
        self: Arc<Self>,
        id: i64,
        from_idle: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Numbering, PublishError>> + Send>>;
    fn release(self: Arc<Self>, id: i64);
    /// A publisher came or left: the stream's state is written now, not at the next beat.
    fn state_changed(self: Arc<Self>, id: i64);
    /// The peer a PULL stream is left to (it has clearly more room than this node's
    /// `headroom`), for a while; `None`: this node claims it.
    fn better_placed(&self, _id: i64, _headroom: Option<u32>) -> Option<String> {
        None
    }
}
