//! Opens a pipeline's MPEG-TS HLS branches on demand ([`Package::ts_demand`]): each TS input
//! drops its buffers before any TS work (parser, muxer, segmenter, store) until TS-HLS is asked
//! for; then every input opens at the same keyframe, so the variants' segments line up, and
//! all close again once nobody asked for a while.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use gstreamer as gst;
use gstreamer::prelude::*;

use super::probes::{drop_buffer, holds_keyframe, running_time};
use crate::package::Package;

/// A branch that is closed (no generation is `u64::MAX`).
const CLOSED: u64 = u64::MAX;

pub struct TsGate {
    package: Weak<Package>,
    opening: Mutex<Opening>,
}

/// Where the current opening starts, for the inputs that have not opened yet.
#[derive(Default)]
struct Opening {
    /// Running time of the keyframe every input opens at; `None`: not opened in this pipeline.
    at: Option<gst::ClockTime>,
    /// The package's TS generation that opening belongs to.
    generation: u64,
}

impl TsGate {
    pub fn new(package: &Arc<Package>) -> Arc<TsGate> {
        Arc::new(TsGate {
            package: Arc::downgrade(package),
            opening: Mutex::default(),
        })
    }

    fn opening(&self) -> std::sync::MutexGuard<'_, Opening> {
        self.opening.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The TS generation of what the inputs let through now: the segmenter starts over when it
    /// changes, and its segments are stored under it.
    pub fn generation(&self) -> u64 {
        self.opening().generation
    }

    /// Gates the buffers entering `pad` (a TS input's first pad). `leads`: this input's
    /// keyframes may set the opening point (the video rungs; the audio when there is no video).
    /// Other inputs open at their first buffer from that point on.
    pub fn install(self: &Arc<Self>, pad: &gst::Pad, leads: bool) {
        let gate = self.clone();
        // The generation this input opened in, or CLOSED.
        let open = AtomicU64::new(CLOSED);
        pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
            if gate.pass(pad, info, leads, &open) {
                gst::PadProbeReturn::Ok
            } else {
                drop_buffer(info)
            }
        });
    }

    fn pass(
        &self,
        pad: &gst::Pad,
        info: &gst::PadProbeInfo,
        leads: bool,
        open: &AtomicU64,
    ) -> bool {
        let Some(package) = self.package.upgrade() else {
            return false;
        };
        let demand = package.ts_demand();
        if !demand.wanted {
            open.store(CLOSED, Ordering::Relaxed);
            if demand.live {
                package.pause_ts();
            }
            return false;
        }
        let opened_in = open.load(Ordering::Relaxed);
        if demand.live && opened_in == demand.generation {
            return true;
        }
        open.store(CLOSED, Ordering::Relaxed);
        let Some(rt) = running_time(pad, info) else {
            return false;
        };
        let keyframe = holds_keyframe(info);
        let mut opening = self.opening();
        let current =
            opening.at.is_some() && demand.live && opening.generation == demand.generation;
        if !current {
            if !(leads && keyframe) {
                return false;
            }
            opening.generation = package.ts_opened();
            opening.at = Some(rt);
            tracing::debug!(generation = opening.generation, "TS-HLS muxing starts");
        }
        // Video inputs open at a keyframe; the audio at its first frame from there.
        let ready = (keyframe || !leads) && opening.at.is_some_and(|at| rt >= at);
        if ready {
            open.store(opening.generation, Ordering::Relaxed);
        }
        ready
    }
}
