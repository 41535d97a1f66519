//! A pipeline's MPEG-TS HLS branches ([`branch`]: muxer, segmenter, store), opened on demand
//! ([`Package::ts_demand`]): each TS input drops its buffers before any TS work until TS-HLS is
//! asked for; then every input opens at the same keyframe, so the variants' segments line up,
//! and all close again once nobody asked for a while.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;

use super::elements::{drop_buffer, holds_keyframe, link, make, running_time};
use super::plan::Plan;
use super::PipelineError;
use crate::package::{Package, RenditionSink};

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

/// `mpegtsmux → appsink` for a TS variant: the segmenter cuts at keyframes and each cut
/// segment goes to the variant's sink whole. Returns the mux for the inputs, which `gate`
/// opens and closes; the segmenter starts over at each of its generations.
pub fn branch(
    pipeline: &gst::Pipeline,
    plan: &Plan,
    rendition: RenditionSink,
    gate: Arc<TsGate>,
) -> Result<gst::Element, PipelineError> {
    let mux = make("mpegtsmux")?;
    // 7 × 188 = 1316-byte buffers, the usual UDP/HTTP framing.
    mux.set_property("alignment", 7i32);
    // The segmenter and the generation its data belongs to (none yet).
    let segmenter = Arc::new(Mutex::new((
        crate::package::ts::TsSegmenter::new(plan.segment),
        None::<u64>,
    )));
    let wall_base = plan.wall_base;
    let store = move |rendition: &RenditionSink,
                      generation: u64,
                      segs: Vec<crate::package::ts::TsSegment>| {
        for seg in segs {
            let part = crate::package::PartIn {
                starts_segment: true,
                independent: true,
                duration: seg.duration,
                pdt: wall_base + Duration::from_nanos(seg.start_pts * 100_000 / 9),
                data: seg.data,
            };
            rendition.segment(generation, part);
        }
    };
    let sink = gstreamer_app::AppSink::builder().sync(false).build();
    // Out of the pipeline's preroll: the gate may keep this sink without a buffer for the whole
    // stream, and a live pipeline reaches PLAYING only once every async sink has one.
    sink.set_property("async", false);
    let (seg_a, seg_b, sink_a, sink_b) =
        (segmenter.clone(), segmenter, rendition.clone(), rendition);
    let store_b = store;
    sink.set_callbacks(
        gstreamer_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                let Some(map) = sample.buffer().and_then(|b| b.map_readable().ok()) else {
                    return Ok(gst::FlowSuccess::Ok);
                };
                let generation = gate.generation();
                let segs = {
                    let mut seg = seg_a.lock().unwrap_or_else(|p| p.into_inner());
                    let (segmenter, current) = &mut *seg;
                    // Muxing resumed after a pause: what came before the gap is no segment.
                    if current.replace(generation).is_some_and(|g| g != generation) {
                        segmenter.restart();
                    }
                    segmenter.push(&map)
                };
                store(&sink_a, generation, segs);
                Ok(gst::FlowSuccess::Ok)
            })
            .eos(move |_| {
                let mut seg = seg_b.lock().unwrap_or_else(|p| p.into_inner());
                let (segmenter, current) = &mut *seg;
                if let Some(generation) = *current {
                    store_b(
                        &sink_b,
                        generation,
                        segmenter.finish().into_iter().collect(),
                    );
                }
            })
            .build(),
    );
    link(pipeline, &[mux.clone(), sink.upcast()])?;
    Ok(mux)
}
