//! Builds a stream's pipeline from its [`Plan`]:
//!
//! ```text
//! appsrc(h264|h265|av1) ! h26xparse|av1parse ! avdec_h26x|av1dec ! videoconvert ! videorate ! I420@fps ! tee
//!   tee. ! queue ! livepackscale ! WxH ! x264enc ! h264parse ! tee ! queue ! appsink → hub   (per rung)
//! appsrc(aac) ! aacparse ! avdec_aac ! audioconvert ! audioresample ! 48k stereo ! audiorate
//!   ! avenc_aac ! tee ! queue ! appsink → hub
//! hub → appsrc ! cmafmux ! appsink → package                                             (per rendition)
//! ```
//!
//! Decode once, scale once per rung. The package reads each rung from the hub like any other
//! reader ([`super::package_reader`]). cmafmux asks its rung's encoder for a keyframe at every
//! fragment start (`send-force-keyunit`, through the hub); all encoders see the same frames with
//! the same timestamps, so the renditions' segments line up.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSrc;

use super::elements::{
    appsrc, audio_caps, audio_decoder, capsfilter, drop_buffer, holds_keyframe, link, make,
    running_time, video_caps, video_decoder,
};
use super::package_reader::PackageReaders;
use super::plan::{Plan, VideoRung, AUDIO_CHANNELS, AUDIO_RATE, X264_ONE_THREAD_MAX_PIXEL_RATE};
use super::sink;
use super::PipelineError;
use crate::hub::Feed;
use crate::media::{AudioConfig, VideoConfig};
use crate::package::sink::{SOURCE_AUDIO, SOURCE_VIDEO};
use crate::package::{Layout, RenditionSink};

/// `tee → gate → queue → parser → cmafmux → appsink` for one source track, remuxed as received
/// into fragments of the segment length, to the package's observe-only source sink `name`.
///
/// The tee sits before the live path's parser, so each branch negotiates its own caps. The gate
/// drops everything until an origin recording wants the source ([`Package::wants_source`]),
/// then opens at the next keyframe and stays open for the rest of this pipeline: a stream that
/// is not recorded pays nothing for the branch (it cost ~3.5 % more CPU always on, enough to
/// tip a loaded 2-core machine), and the muxer never holds a GOP from before a pause. The queue
/// is leaky: a muxer that waits never holds back the live renditions (what it loses is a gap in
/// the recording, not in live output). One single-stream muxer per track, as the rungs have: a
/// two-pad isofmp4mux in this live pipeline aggregates only on timeouts (seconds late).
fn source_branch(
    pipeline: &gst::Pipeline,
    plan: &Plan,
    package: &Arc<crate::package::Package>,
    tee: &gst::Element,
    parser: Option<gst::Element>,
    name: &str,
) -> Result<(), PipelineError> {
    let queue = make("queue")?;
    queue.set_property_from_str("leaky", "downstream");
    queue.set_property("max-size-buffers", 0u32);
    queue.set_property("max-size-bytes", 64u32 * 1024 * 1024);
    queue.set_property("max-size-time", 6_000_000_000u64);
    let mux = make("cmafmux")?;
    mux.set_property(
        "fragment-duration",
        gst::ClockTime::from_nseconds(plan.segment.as_nanos() as u64),
    );
    // Upstream is the publisher's encoder: keyframes cannot be asked for.
    mux.set_property("send-force-keyunit", false);
    let sink = sink::appsink(package.source_sink(name), plan.wall_base, None);
    // Out of the pipeline's preroll: a live pipeline reaches PLAYING only when every async
    // sink has a buffer, and until then the rungs' sinks block on theirs. This branch is
    // gated (and its muxer emits a whole GOP at a time), so waiting for it held the live
    // outputs back for seconds at every (re)start.
    sink.set_property("async", false);
    let chain: Vec<gst::Element> = std::iter::once(queue.clone())
        .chain(parser)
        .chain([mux, sink.upcast()])
        .collect();
    link(pipeline, &chain)?;
    let pad = queue
        .static_pad("sink")
        .ok_or_else(|| PipelineError::Build(format!("source {name} branch: no queue pad")))?;
    let package = Arc::downgrade(package);
    let open = std::sync::atomic::AtomicBool::new(false);
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        if !open.load(std::sync::atomic::Ordering::Relaxed) {
            let wanted = package.upgrade().is_some_and(|p| p.wants_source());
            if !(wanted && holds_keyframe(info)) {
                return drop_buffer(info);
            }
            open.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        gst::PadProbeReturn::Ok
    });
    tee.link(&queue)
        .map_err(|e| PipelineError::Build(format!("source {name} branch: {e}")))
}

pub struct Built {
    pub pipeline: gst::Pipeline,
    pub video_src: Option<AppSrc>,
    pub audio_src: Option<AppSrc>,
    /// The package's hub readers: stopped once the pipeline is.
    pub package_readers: PackageReaders,
}

fn cmafmux(plan: &Plan) -> Result<gst::Element, PipelineError> {
    let mux = make("cmafmux")?;
    mux.set_property(
        "fragment-duration",
        gst::ClockTime::from_nseconds(plan.segment.as_nanos() as u64),
    );
    mux.set_property(
        "chunk-duration",
        gst::ClockTime::from_nseconds(plan.part.as_nanos() as u64),
    );
    Ok(mux)
}

/// The video's segment grid, for the audio to follow. cmafmux starts each fragment where the last
/// one ended and closes it at the last whole frame within its duration; video fragments start on
/// forced keyframes exactly every segment, but an AAC frame (1024 samples, 21.3 ms) does not
/// divide 2 s, so audio segments were 93 frames (1.984 s) each and drifted 16 ms per segment from
/// the video's — 29 s an hour — and hls.js, starting a stream at go-live where the audio ended
/// before the video, re-loaded the last part in a loop and stalled. The audio muxer is asked to
/// split at every video boundary instead (its own duration is only a fallback, a frame longer),
/// so each audio segment ends with the first frame that reaches the boundary: within one AAC
/// frame of the video's, never drifting.
#[derive(Clone, Default)]
struct VideoGrid {
    /// Running time of the first buffer the top rung's muxer receives: its first fragment start.
    start: Arc<Mutex<Option<gst::ClockTime>>>,
}

impl VideoGrid {
    fn watch(video_mux_queue: &gst::Element) -> VideoGrid {
        let grid = VideoGrid::default();
        let start = grid.start.clone();
        if let Some(pad) = video_mux_queue.static_pad("src") {
            pad.add_probe(
                gst::PadProbeType::BUFFER,
                move |pad, info| match running_time(pad, info) {
                    Some(rt) => {
                        *start.lock().unwrap_or_else(|e| e.into_inner()) = Some(rt);
                        gst::PadProbeReturn::Remove
                    }
                    None => gst::PadProbeReturn::Ok,
                },
            );
        }
        grid
    }

    /// Requests the audio muxer's splits, each before the audio reaches it.
    fn align(&self, audio_mux_queue: &gst::Element, audio_mux: &gst::Element, segment: Duration) {
        let segment = gst::ClockTime::from_nseconds(segment.as_nanos() as u64);
        // A frame longer than a segment: the requested split always comes first.
        audio_mux.set_property(
            "fragment-duration",
            segment + gst::ClockTime::from_mseconds(100),
        );
        let start = self.start.clone();
        let mux = audio_mux.downgrade();
        let next: Mutex<Option<gst::ClockTime>> = Mutex::new(None);
        let Some(pad) = audio_mux_queue.static_pad("src") else {
            return;
        };
        pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
            let (Some(rt), Some(first)) = (
                running_time(pad, info),
                *start.lock().unwrap_or_else(|e| e.into_inner()),
            ) else {
                return gst::PadProbeReturn::Ok;
            };
            let Some(mux) = mux.upgrade() else {
                return gst::PadProbeReturn::Remove;
            };
            let mut next = next.lock().unwrap_or_else(|e| e.into_inner());
            // The first video boundary after the first audio buffer — never the video's start
            // itself: the audio begins with it, give or take a frame, and a split there would
            // leave a sliver of a segment and number the audio one ahead.
            let boundary = next.get_or_insert_with(|| {
                let n = rt
                    .saturating_sub(first)
                    .nseconds()
                    .div_ceil(segment.nseconds())
                    .max(1);
                first + segment * n
            });
            // Split at the first frame that starts at or after the boundary, exactly at its start:
            // the muxer closes a fragment with the last frame that ends by the split time, so a
            // time between two frames would leave a one-frame fragment behind it.
            if rt >= *boundary {
                mux.emit_by_name::<()>("split-at-running-time", &[&rt]);
                while *boundary <= rt {
                    *boundary += segment;
                }
            }
            gst::PadProbeReturn::Ok
        });
    }
}

/// Builds the pipeline (state NULL) and installs the plan's renditions in the package.
pub fn build(
    plan: &Plan,
    package: Arc<crate::package::Package>,
    hub: &Arc<crate::hub::Hub>,
    meter: sink::Meter,
) -> Result<Built, PipelineError> {
    let pipeline = gst::Pipeline::with_name(&format!("stream-{}", plan.stream_id));
    let (sinks, ts_sinks) = package.install(Layout {
        segment: plan.segment,
        part: plan.part_target,
        cmaf: plan.renditions(),
        ts: plan.ts_renditions(),
    });
    // Legacy HLS: one mpegtsmux per video rung (audio muxed in), or one for audio alone,
    // muxed only while asked for.
    let ts_gate = super::ts_gate::TsGate::new(&package);
    let ts_muxes = ts_sinks
        .into_iter()
        .map(|sink| super::ts_gate::branch(&pipeline, plan, sink, ts_gate.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let b = Builder {
        pipeline,
        plan,
        package,
        hub,
        sinks,
        ts_gate,
        ts_muxes,
        // Metrics follow the first rendition (the top video rung, or audio).
        meter: Some(meter),
        package_readers: RefCell::default(),
    };
    let (video_src, video_grid) = match &plan.video {
        Some(v) => {
            let (src, grid) = b.video(v)?;
            (Some(src), grid)
        }
        None => (None, None),
    };
    let audio_src = match &plan.audio {
        Some(a) => Some(b.audio(a, video_grid.as_ref())?),
        None => None,
    };
    Ok(Built {
        pipeline: b.pipeline,
        video_src,
        audio_src,
        package_readers: b.package_readers.into_inner(),
    })
}

/// What every branch of one pipeline is built with.
struct Builder<'a> {
    pipeline: gst::Pipeline,
    plan: &'a Plan,
    package: Arc<crate::package::Package>,
    hub: &'a Arc<crate::hub::Hub>,
    /// The package's CMAF sinks: one per video rung, then the audio's.
    sinks: Vec<RenditionSink>,
    ts_gate: Arc<super::ts_gate::TsGate>,
    /// One per video rung (or one for audio alone).
    ts_muxes: Vec<gst::Element>,
    meter: Option<sink::Meter>,
    package_readers: RefCell<PackageReaders>,
}

impl Builder<'_> {
    /// `appsrc → decode → I420@fps → (overlays) → tee`, a branch per rung, the screenshot and
    /// the source remux. The source's appsrc, and the top rung's segment grid for the audio.
    fn video(&self, v: &VideoConfig) -> Result<(AppSrc, Option<VideoGrid>), PipelineError> {
        if self.plan.passthrough {
            return self.passthrough(v);
        }
        let (pipeline, plan) = (&self.pipeline, self.plan);
        let src = appsrc(video_caps(v))?;
        let [parse, decode] = video_decoder(v)?;
        let source_tee = make("tee")?;
        let overlay = plan
            .overlays
            .clone()
            .map(super::overlay::element)
            .transpose()
            .map_err(PipelineError::Build)?;
        let head: Vec<gst::Element> = [
            src.clone().upcast::<gst::Element>(),
            source_tee.clone(),
            parse,
            decode,
            make("videoconvert")?,
            make("videorate")?,
            capsfilter(
                gst::Caps::builder("video/x-raw")
                    .field("format", "I420")
                    .field("framerate", gst::Fraction::new(plan.fps as i32, 1))
                    // Decoders leave the colorimetry out when the stream does not signal it, and
                    // GStreamer then guesses it from each picture's size: BT.709 at 720p, BT.601
                    // below. Each SD rung's scaler converted the matrix for nothing (12 % of the
                    // ladder's CPU, and a rounding loss). Stated here, the guess is made once at
                    // the source (an SD or BT.601 source is converted once, correctly) and every
                    // rung keeps it: the scalers only scale and x264 tags the streams BT.709.
                    .field("colorimetry", "bt709")
                    .build(),
            )?,
        ]
        .into_iter()
        .chain(overlay)
        .chain([make("tee")?])
        .collect();
        link(pipeline, &head)?;
        // On the parser after the source tee: the source remux keeps every frame.
        if let (Some(meter), Some(pad)) = (&self.meter, head[2].static_pad("sink")) {
            super::catch_up::install(&pad, &src, plan.stream_id, meter.counters.clone());
        }
        let tee = head.last().expect("tee").clone();
        let mut grid = None;
        for (i, rung) in plan.video_rungs.iter().enumerate() {
            let package_src = self.rung(&tee, i, rung)?;
            if i == 0 {
                grid = Some(VideoGrid::watch(&package_src));
            }
        }
        super::screenshot::branch(pipeline, &tee, v, self.package.clone())?;
        self.video_remux(v, &source_tee)?;
        Ok((src, grid))
    }

    /// The source's video remuxed as received, for origin recordings ([`source_branch`]).
    fn video_remux(&self, v: &VideoConfig, source_tee: &gst::Element) -> Result<(), PipelineError> {
        if !self.plan.source {
            return Ok(());
        }
        let [parser, _] = video_decoder(v)?;
        source_branch(
            &self.pipeline,
            self.plan,
            &self.package,
            source_tee,
            Some(parser),
            SOURCE_VIDEO,
        )
    }

    /// A passthrough: `appsrc → tee → h264parse → avc/au → tee`, the source's own frames as the
    /// one video rung (no decoder, so no screenshot and no overlay), and the source remux.
    fn passthrough(&self, v: &VideoConfig) -> Result<(AppSrc, Option<VideoGrid>), PipelineError> {
        let (pipeline, plan) = (&self.pipeline, self.plan);
        let rung = plan.video_rungs.first().ok_or_else(|| {
            PipelineError::Build("a passthrough plan without its rung".to_owned())
        })?;
        let src = appsrc(video_caps(v))?;
        let source_tee = make("tee")?;
        let [parse, _] = video_decoder(v)?;
        let head = [
            src.clone().upcast::<gst::Element>(),
            source_tee.clone(),
            parse,
            avc_whole_pictures()?,
            make("tee")?,
        ];
        link(pipeline, &head)?;
        let mux = cmafmux(plan)?;
        // Keyframes are the publisher's encoder's: none can be asked for.
        mux.set_property("send-force-keyunit", false);
        let package_src = self.encoded(head.last().expect("tee"), 0, rung, mux)?;
        let grid = VideoGrid::watch(&package_src);
        self.video_remux(v, &source_tee)?;
        Ok((src, Some(grid)))
    }

    /// One rung: `queue → scale → x264enc → h264parse → tee`, into the hub (read by the package)
    /// and TS. Returns the package's appsrc for the rung (the top rung's segment grid is watched
    /// there).
    fn rung(
        &self,
        tee: &gst::Element,
        i: usize,
        rung: &VideoRung,
    ) -> Result<gst::Element, PipelineError> {
        let (pipeline, plan) = (&self.pipeline, self.plan);
        let queue = make("queue")?;
        // Bounded by time, not leaky: dropping in one branch only would misalign segments.
        queue.set_property("max-size-buffers", 0u32);
        queue.set_property("max-size-bytes", 0u32);
        queue.set_property("max-size-time", 2_000_000_000u64);
        let enc = make("x264enc")?;
        enc.set_property("bitrate", rung.kbps);
        enc.set_property_from_str("tune", "zerolatency");
        enc.set_property_from_str("speed-preset", plan.x264_preset);
        // Keyframes come from cmafmux's force-keyunit requests at fragment starts; the GOP cap
        // is only a fallback, and scene cuts must not add keyframes in one rung only.
        enc.set_property(
            "key-int-max",
            plan.fps * plan.segment.as_secs().max(1) as u32 * 2,
        );
        enc.set_property("option-string", "scenecut=0");
        enc.set_property("threads", x264_threads(rung, plan.fps));
        let chain = [
            queue,
            make(super::scale::FACTORY)?,
            capsfilter(
                gst::Caps::builder("video/x-raw")
                    .field("width", rung.width as i32)
                    .field("height", rung.height as i32)
                    .field("pixel-aspect-ratio", gst::Fraction::new(1, 1))
                    .build(),
            )?,
            enc,
            capsfilter(
                gst::Caps::builder("video/x-h264")
                    .field("profile", "high")
                    .build(),
            )?,
            make("h264parse")?,
            avc_whole_pictures()?,
            make("tee")?,
        ];
        link(pipeline, &chain)?;
        tee.link(&chain[0])
            .map_err(|e| PipelineError::Build(format!("tee → {}: {e}", rung.name)))?;
        self.encoded(chain.last().expect("tee"), i, rung, cmafmux(plan)?)
    }

    /// A rung's encoded frames (length-prefixed H.264, whole pictures) from `encoded`, a tee:
    /// into the package through the hub (`mux`), to the hub's other readers, and into TS.
    /// Returns the package's appsrc for the rung.
    fn encoded(
        &self,
        encoded: &gst::Element,
        i: usize,
        rung: &VideoRung,
        mux: gst::Element,
    ) -> Result<gst::Element, PipelineError> {
        let (pipeline, plan) = (&self.pipeline, self.plan);
        let sink = sink::appsink(
            self.sinks[i].clone(),
            plan.wall_base,
            if i == 0 { self.meter.clone() } else { None },
        );
        let feed = Feed::Video(rung.name.clone());
        let package_src = self.package_branch(feed.clone(), Some(plan.fps), mux, sink)?;
        super::taps::tap(pipeline, encoded, self.hub, feed, self.closers())?;
        // The same encoded frames, re-framed as Annex B with SPS/PPS on every IDR, into TS.
        let parse = make("h264parse")?;
        parse.set_property("config-interval", -1i32);
        let ts = [
            make("queue")?,
            parse,
            capsfilter(
                gst::Caps::builder("video/x-h264")
                    .field("stream-format", "byte-stream")
                    .field("alignment", "au")
                    .build(),
            )?,
        ];
        link(pipeline, &ts)?;
        if let Some(pad) = ts[0].static_pad("sink") {
            self.ts_gate.install(&pad, true);
        }
        encoded
            .link(&ts[0])
            .map_err(|e| PipelineError::Build(format!("ts branch: {e}")))?;
        ts[2]
            .link(&self.ts_muxes[i])
            .map_err(|e| PipelineError::Build(format!("ts mux video: {e}")))?;
        Ok(package_src)
    }

    /// `hub → appsrc → mux → sink`: the package reading `feed`. Returns the appsrc.
    fn package_branch(
        &self,
        feed: Feed,
        fps: Option<u32>,
        mux: gst::Element,
        sink: gstreamer_app::AppSink,
    ) -> Result<gst::Element, PipelineError> {
        let (src, reader) = super::package_reader::attach(self.hub, feed, fps)?;
        self.package_readers.borrow_mut().push(reader);
        let chain = [src.upcast(), mux, sink.upcast()];
        link(&self.pipeline, &chain)?;
        let [src, ..] = chain;
        Ok(src)
    }

    /// The closer of the package reader attached last: its feed's tap ends it.
    fn closers(&self) -> Vec<crate::hub::Closer> {
        self.package_readers
            .borrow()
            .last_closer()
            .into_iter()
            .collect()
    }

    /// `appsrc → decode → 48 kHz stereo → audiorate → avenc_aac → tee`, into CMAF (on the
    /// video's segment grid), every TS variant and the hub; the source remux.
    fn audio(&self, a: &AudioConfig, grid: Option<&VideoGrid>) -> Result<AppSrc, PipelineError> {
        let (pipeline, plan) = (&self.pipeline, self.plan);
        let src = appsrc(audio_caps(a))?;
        let enc = make("avenc_aac")?;
        enc.set_property(
            "bitrate",
            i32::try_from(plan.audio_kbps * 1000).unwrap_or(128_000),
        );
        let sink = sink::appsink(
            self.sinks
                .last()
                .expect("the layout has the audio rendition")
                .clone(),
            plan.wall_base,
            if plan.video.is_none() {
                self.meter.clone()
            } else {
                None
            },
        );
        let source_tee = make("tee")?;
        let [parse, decode] = audio_decoder(a)?;
        let chain: Vec<gst::Element> = std::iter::once(src.clone().upcast::<gst::Element>())
            .chain(std::iter::once(source_tee.clone()))
            .chain(parse)
            .chain(decode)
            .chain([
                make("audioconvert")?,
                make("audioresample")?,
                capsfilter(
                    gst::Caps::builder("audio/x-raw")
                        .field("rate", AUDIO_RATE)
                        .field("channels", AUDIO_CHANNELS)
                        .build(),
                )?,
                // Fills gaps with silence (a main/backup switch keeps media time in step with the
                // wall clock, so the outage is a gap) and drops overlaps: the AAC track stays
                // continuous, as players need.
                make("audiorate")?,
                make("tee")?,
                enc,
                make("tee")?,
            ])
            .collect();
        link(pipeline, &chain)?;
        let raw = &chain[chain.len() - 3];
        super::taps::on_demand_opus(pipeline, raw, self.hub)?;
        if plan.source {
            let [parser, _] = audio_decoder(a)?;
            source_branch(
                pipeline,
                plan,
                &self.package,
                &source_tee,
                parser,
                SOURCE_AUDIO,
            )?;
        }
        let encoded = chain.last().expect("tee");
        let mux = cmafmux(plan)?;
        let package_src = self.package_branch(Feed::Audio, None, mux.clone(), sink)?;
        super::taps::tap(pipeline, encoded, self.hub, Feed::Audio, self.closers())?;
        if let Some(grid) = grid {
            grid.align(&package_src, &mux, plan.segment);
        }
        for mux in &self.ts_muxes {
            let queue = make("queue")?;
            pipeline
                .add(&queue)
                .map_err(|e| PipelineError::Build(e.to_string()))?;
            gst::Element::link_many([encoded, &queue, mux])
                .map_err(|e| PipelineError::Build(format!("ts mux audio: {e}")))?;
            if let Some(pad) = queue.static_pad("sink") {
                self.ts_gate.install(&pad, plan.video.is_none());
            }
        }
        Ok(src)
    }
}

/// Length-prefixed H.264, whole pictures, with the avcC in the caps: what the hub's readers
/// get (the TS branch re-frames its copy as Annex B).
fn avc_whole_pictures() -> Result<gst::Element, PipelineError> {
    capsfilter(
        gst::Caps::builder("video/x-h264")
            .field("stream-format", "avc")
            .field("alignment", "au")
            .build(),
    )
}

/// x264's `threads` for a rung: 1, or 0 (x264 decides) above `X264_ONE_THREAD_MAX_PIXEL_RATE`.
fn x264_threads(rung: &VideoRung, fps: u32) -> u32 {
    let rate = u64::from(rung.width) * u64::from(rung.height) * u64::from(fps);
    if rate <= X264_ONE_THREAD_MAX_PIXEL_RATE {
        1
    } else {
        0
    }
}
