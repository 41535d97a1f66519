//! Builds a stream's pipeline from its [`Plan`]:
//!
//! ```text
//! appsrc(h264|h265|av1) ! h26xparse|av1parse ! avdec_h26x|av1dec ! videoconvert ! videorate ! I420@fps ! tee
//!   tee. ! queue ! livepackscale ! WxH ! x264enc ! h264parse ! cmafmux ! appsink   (per rung)
//! appsrc(aac) ! aacparse ! avdec_aac ! audioconvert ! audioresample ! 48k stereo ! audiorate
//!   ! avenc_aac ! cmafmux ! appsink
//! ```
//!
//! Decode once, scale once per rung. cmafmux asks its encoder for a keyframe at every fragment
//! start (`send-force-keyunit`); all encoders see the same frames with the same timestamps, so
//! the renditions' segments line up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSrc;
use time::OffsetDateTime;

use super::ladder::{output_fps, part_duration, Ladder};
use super::probes::{drop_buffer, holds_keyframe, running_time};
use super::sink;
use super::{PipelineError, APPSRC_MAX_BYTES};
use crate::media::{AudioConfig, VideoCodec, VideoConfig};
use crate::package::sink::{SOURCE_AUDIO, SOURCE_VIDEO};
use crate::package::{Layout, PackagingConfig, Rendition, RenditionKind, RenditionSink};

/// x264 speed/quality trade-off: `veryfast` keeps a 3-rung 720p ladder in real time on two cores.
pub const X264_PRESET: &str = "veryfast";
/// Rungs up to this pixel rate (720p at 60 fps) are encoded on one thread. `tune=zerolatency`
/// makes x264 split each frame into one slice per thread, and a ladder already runs one encoder
/// per rung on the same cores: the slice threads only added wake-ups (N=2: 148 → 142 % CPU, 90
/// → 65 threads) and slices cost bits (720p +0.08 dB). One 720p frame takes ~10 ms on one
/// thread, well inside a 60 fps frame interval; bigger rungs keep x264's own thread count.
const X264_ONE_THREAD_MAX_PIXEL_RATE: u64 = 1280 * 720 * 60;
pub const AUDIO_RATE: i32 = 48_000;
pub const AUDIO_CHANNELS: i32 = 2;
pub const AUDIO_RENDITION: &str = "audio";
/// Screenshots: one every 10 s, at most 1080 px wide (aspect kept).
pub const SCREENSHOT_INTERVAL: Duration = Duration::from_secs(10);
pub const SCREENSHOT_MAX_WIDTH: u32 = 1080;
const JPEG_QUALITY: i32 = 85;

#[derive(Debug, Clone)]
pub struct VideoRung {
    pub name: String,
    pub width: u32,
    pub height: u32,
    pub kbps: u32,
}

/// Everything needed to build one epoch's pipeline.
#[derive(Debug, Clone)]
pub struct Plan {
    pub stream_id: i64,
    pub fps: u32,
    pub segment: Duration,
    /// cmafmux's chunk duration.
    pub part: Duration,
    /// The longest part (PART-TARGET): `part` rounded up to whole frames.
    pub part_target: Duration,
    pub video: Option<VideoConfig>,
    pub audio: Option<AudioConfig>,
    pub video_rungs: Vec<VideoRung>,
    pub audio_kbps: u32,
    /// Wall-clock time of running time 0 (EXT-X-PROGRAM-DATE-TIME base).
    pub wall_base: OffsetDateTime,
    /// Remux the source (see [`Ladder::source`]).
    pub source: bool,
    /// HTML overlays blended into the decoded picture before the ladder (so every rung, the
    /// screenshots and transcoded recordings carry them; the source remux does not).
    pub overlays: Option<Arc<super::overlay::OverlaySet>>,
}

impl Plan {
    pub fn new(
        stream_id: i64,
        ladder: &Ladder,
        video: Option<&VideoConfig>,
        audio: Option<&AudioConfig>,
        measured_fps: Option<f64>,
        packaging: PackagingConfig,
        wall_base: OffsetDateTime,
    ) -> Plan {
        let fps = output_fps(measured_fps);
        let video_rungs = video
            .map(|v| {
                ladder
                    .capped(v.height)
                    .into_iter()
                    .map(|r| {
                        // Keep the source's display shape; even sizes for 4:2:0.
                        let width =
                            (f64::from(r.height) * f64::from(v.width) / f64::from(v.height) / 2.0)
                                .round() as u32
                                * 2;
                        VideoRung {
                            name: r.name,
                            width: width.max(2),
                            height: r.height,
                            kbps: r.video_kbps,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let parts = if video.is_some() {
            part_duration(fps, packaging.segment, packaging.part)
        } else {
            crate::pipeline::ladder::Parts {
                chunk: packaging.part,
                target: packaging.part,
            }
        };
        Plan {
            stream_id,
            fps,
            segment: packaging.segment,
            part: parts.chunk,
            part_target: parts.target,
            video: video.cloned(),
            audio: audio.cloned(),
            video_rungs,
            audio_kbps: ladder.audio_kbps(),
            wall_base,
            source: ladder.source,
            overlays: None,
        }
    }

    pub fn rendition_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.video_rungs.iter().map(|r| r.name.clone()).collect();
        if self.audio.is_some() {
            names.push(AUDIO_RENDITION.into());
        }
        names
    }

    /// The MPEG-TS variants: one per video rung with the audio muxed in, or audio alone.
    fn ts_renditions(&self) -> Vec<Rendition> {
        let audio_bps = if self.audio.is_some() {
            u64::from(self.audio_kbps) * 1000
        } else {
            0
        };
        let all = self.renditions();
        let (videos, audio): (Vec<Rendition>, Vec<Rendition>) = all
            .into_iter()
            .partition(|r| matches!(r.kind, RenditionKind::Video { .. }));
        if videos.is_empty() {
            return audio;
        }
        videos
            .into_iter()
            .map(|mut r| {
                r.nominal_bitrate += audio_bps;
                r
            })
            .collect()
    }

    /// The package renditions this plan produces, in order (video rungs, then audio).
    fn renditions(&self) -> Vec<Rendition> {
        let mut out: Vec<Rendition> = self
            .video_rungs
            .iter()
            .map(|r| {
                Rendition::new(
                    &r.name,
                    RenditionKind::Video {
                        width: r.width,
                        height: r.height,
                        frame_rate: f64::from(self.fps),
                    },
                    "avc1.640028",
                    u64::from(r.kbps) * 1000,
                )
            })
            .collect();
        if self.audio.is_some() {
            out.push(Rendition::new(
                AUDIO_RENDITION,
                RenditionKind::Audio {
                    channels: AUDIO_CHANNELS as u8,
                    sample_rate: AUDIO_RATE as u32,
                },
                "mp4a.40.2",
                u64::from(self.audio_kbps) * 1000,
            ));
        }
        out
    }
}

/// appsrc caps for the source video: MP4-style records and 4-byte length framing.
pub fn video_caps(c: &VideoConfig) -> gst::Caps {
    let (name, format, alignment) = match c.codec {
        VideoCodec::H264 => ("video/x-h264", "avc", "au"),
        VideoCodec::H265 => ("video/x-h265", "hvc1", "au"),
        // One temporal unit per buffer, OBUs with size fields: the MP4 sample format.
        VideoCodec::Av1 => ("video/x-av1", "obu-stream", "tu"),
    };
    gst::Caps::builder(name)
        .field("stream-format", format)
        .field("alignment", alignment)
        .field("codec_data", gst::Buffer::from_slice(c.record.clone()))
        .build()
}

/// Parser and decoder for the input's video codec.
fn video_decoder(c: &VideoConfig) -> Result<[gst::Element; 2], PipelineError> {
    let [parse, decode] = match c.codec {
        VideoCodec::H264 => [make("h264parse")?, make("avdec_h264")?],
        VideoCodec::H265 => [make("h265parse")?, make("avdec_h265")?],
        // libaom's decoder (plugins-bad): GStreamer 1.22 has no dav1d element in Debian 12.
        VideoCodec::Av1 => [make("av1parse")?, make("av1dec")?],
    };
    // Pictures leave the decoder in recycled memory (`recycle`: page faults 10.7 k/s → ~40/s,
    // −4 % of a 720p stream's CPU, then −1.4 % when the decoder's copy went straight into it).
    // libav then decodes into frames of its own and copies each picture out once; with direct
    // rendering it deep-copied every picture it still used as a reference into fresh memory.
    if decode.find_property("direct-rendering").is_some() {
        decode.set_property("direct-rendering", false);
    }
    super::recycle::recycle_output(&decode);
    Ok([parse, decode])
}

pub fn audio_caps(c: &AudioConfig) -> gst::Caps {
    match c {
        AudioConfig::Aac(c) => gst::Caps::builder("audio/mpeg")
            .field("mpegversion", 4i32)
            .field("stream-format", "raw")
            .field("codec_data", gst::Buffer::from_slice(c.asc.clone()))
            .field("rate", c.sample_rate as i32)
            .field("channels", i32::from(c.channels))
            .build(),
        // RFC 7587: one Opus packet per buffer, 48 kHz, mono or stereo (mapping family 0).
        AudioConfig::Opus(c) => gst::Caps::builder("audio/x-opus")
            .field("channel-mapping-family", 0i32)
            .field("rate", 48_000i32)
            .field("channels", i32::from(c.channels.clamp(1, 2)))
            .build(),
    }
}

/// Parser and decoder for the input's audio codec.
/// (parser if any, decoder) of the source audio.
fn audio_decoder(c: &AudioConfig) -> Result<[Option<gst::Element>; 2], PipelineError> {
    Ok(match c {
        AudioConfig::Aac(_) => [Some(make("aacparse")?), Some(make("avdec_aac")?)],
        AudioConfig::Opus(_) => [None, Some(make("opusdec")?)],
    })
}

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
}

fn make(factory: &str) -> Result<gst::Element, PipelineError> {
    gst::ElementFactory::make(factory).build().map_err(|e| {
        PipelineError::Build(format!(
            "{factory}: {e} (is its GStreamer plugin installed?)"
        ))
    })
}

fn capsfilter(caps: gst::Caps) -> Result<gst::Element, PipelineError> {
    gst::ElementFactory::make("capsfilter")
        .property("caps", caps)
        .build()
        .map_err(|e| PipelineError::Build(format!("capsfilter: {e}")))
}

fn link(pipeline: &gst::Pipeline, chain: &[gst::Element]) -> Result<(), PipelineError> {
    pipeline
        .add_many(chain)
        .map_err(|e| PipelineError::Build(e.to_string()))?;
    gst::Element::link_many(chain).map_err(|e| PipelineError::Build(format!("link: {e}")))
}

fn appsrc(caps: gst::Caps) -> Result<AppSrc, PipelineError> {
    let src = AppSrc::builder()
        .caps(&caps)
        .format(gst::Format::Time)
        .is_live(true)
        .max_bytes(APPSRC_MAX_BYTES)
        .build();
    // Never block the ingest: a full queue drops its oldest buffers.
    src.set_property_from_str("leaky-type", "downstream");
    Ok(src)
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
    meter: sink::Meter,
) -> Result<Built, PipelineError> {
    let pipeline = gst::Pipeline::with_name(&format!("stream-{}", plan.stream_id));
    let renditions = plan.renditions();
    let (sinks, ts_sinks) = package.install(Layout {
        segment: plan.segment,
        part: plan.part_target,
        cmaf: renditions,
        ts: plan.ts_renditions(),
    });
    // Metrics follow the first rendition (the top video rung, or audio).
    let meter = Some(meter);
    // Legacy HLS: one mpegtsmux per video rung (audio muxed in), or one for audio alone,
    // muxed only while asked for.
    let ts_gate = super::ts_gate::TsGate::new(&package);
    let ts_muxes = ts_sinks
        .into_iter()
        .map(|sink| ts_branch(&pipeline, plan, sink, ts_gate.clone()))
        .collect::<Result<Vec<_>, _>>()?;

    let mut video_src = None;
    let mut video_grid = None;
    if let Some(v) = &plan.video {
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
        link(&pipeline, &head)?;
        let tee = head.last().expect("tee").clone();
        for (i, rung) in plan.video_rungs.iter().enumerate() {
            let queue = make("queue")?;
            // Bounded by time, not leaky: dropping in one branch only would misalign segments.
            queue.set_property("max-size-buffers", 0u32);
            queue.set_property("max-size-bytes", 0u32);
            queue.set_property("max-size-time", 2_000_000_000u64);
            let enc = make("x264enc")?;
            enc.set_property("bitrate", rung.kbps);
            enc.set_property_from_str("tune", "zerolatency");
            enc.set_property_from_str("speed-preset", X264_PRESET);
            // Keyframes come from cmafmux's force-keyunit requests at fragment starts; the GOP cap
            // is only a fallback, and scene cuts must not add keyframes in one rung only.
            enc.set_property(
                "key-int-max",
                plan.fps * plan.segment.as_secs().max(1) as u32 * 2,
            );
            enc.set_property("option-string", "scenecut=0");
            enc.set_property("threads", x264_threads(rung, plan.fps));
            let sink = sink::appsink(
                sinks[i].clone(),
                plan.wall_base,
                if i == 0 { meter.clone() } else { None },
            );
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
                make("tee")?,
            ];
            link(&pipeline, &chain)?;
            tee.link(&chain[0])
                .map_err(|e| PipelineError::Build(format!("tee → {}: {e}", rung.name)))?;
            let encoded = chain.last().expect("tee");
            let cmaf = [make("queue")?, cmafmux(plan)?, sink.upcast()];
            link(&pipeline, &cmaf)?;
            encoded
                .link(&cmaf[0])
                .map_err(|e| PipelineError::Build(format!("cmaf branch: {e}")))?;
            if i == 0 {
                video_grid = Some(VideoGrid::watch(&cmaf[0]));
            }
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
            link(&pipeline, &ts)?;
            if let Some(pad) = ts[0].static_pad("sink") {
                ts_gate.install(&pad, true);
            }
            encoded
                .link(&ts[0])
                .map_err(|e| PipelineError::Build(format!("ts branch: {e}")))?;
            ts[2]
                .link(&ts_muxes[i])
                .map_err(|e| PipelineError::Build(format!("ts mux video: {e}")))?;
        }
        screenshot_branch(&pipeline, &tee, v, package.clone())?;
        if plan.source {
            let [parser, _] = video_decoder(v)?;
            source_branch(
                &pipeline,
                plan,
                &package,
                &source_tee,
                Some(parser),
                SOURCE_VIDEO,
            )?;
        }
        video_src = Some(src);
    }

    let mut audio_src = None;
    if let Some(a) = &plan.audio {
        let src = appsrc(audio_caps(a))?;
        let enc = make("avenc_aac")?;
        enc.set_property(
            "bitrate",
            i32::try_from(plan.audio_kbps * 1000).unwrap_or(128_000),
        );
        let sink = sink::appsink(
            sinks
                .last()
                .expect("the layout has the audio rendition")
                .clone(),
            plan.wall_base,
            if plan.video.is_none() { meter } else { None },
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
                enc,
                make("tee")?,
            ])
            .collect();
        link(&pipeline, &chain)?;
        if plan.source {
            let [parser, _] = audio_decoder(a)?;
            source_branch(&pipeline, plan, &package, &source_tee, parser, SOURCE_AUDIO)?;
        }
        let encoded = chain.last().expect("tee");
        let cmaf = [make("queue")?, cmafmux(plan)?, sink.upcast()];
        link(&pipeline, &cmaf)?;
        encoded
            .link(&cmaf[0])
            .map_err(|e| PipelineError::Build(format!("audio cmaf branch: {e}")))?;
        if let Some(grid) = &video_grid {
            grid.align(&cmaf[0], &cmaf[1], plan.segment);
        }
        for mux in &ts_muxes {
            let queue = make("queue")?;
            pipeline
                .add(&queue)
                .map_err(|e| PipelineError::Build(e.to_string()))?;
            gst::Element::link_many([encoded, &queue, mux])
                .map_err(|e| PipelineError::Build(format!("ts mux audio: {e}")))?;
            if let Some(pad) = queue.static_pad("sink") {
                ts_gate.install(&pad, plan.video.is_none());
            }
        }
        audio_src = Some(src);
    }
    Ok(Built {
        pipeline,
        video_src,
        audio_src,
    })
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

/// `mpegtsmux → appsink` for a TS variant: the segmenter cuts at keyframes and each cut
/// segment goes to the variant's sink whole. Returns the mux for the inputs, which `gate`
/// opens and closes; the segmenter starts over at each of its generations.
fn ts_branch(
    pipeline: &gst::Pipeline,
    plan: &Plan,
    rendition: RenditionSink,
    gate: Arc<super::ts_gate::TsGate>,
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

/// `tee → queue → (one frame per interval) → videoscale → jpegenc → appsink`; frames between
/// screenshots are dropped by a pad probe before any scaling or encoding work.
fn screenshot_branch(
    pipeline: &gst::Pipeline,
    tee: &gst::Element,
    source: &VideoConfig,
    package: Arc<crate::package::Package>,
) -> Result<(), PipelineError> {
    let width = source.width.min(SCREENSHOT_MAX_WIDTH) / 2 * 2;
    let height = ((f64::from(width) * f64::from(source.height) / f64::from(source.width) / 2.0)
        .round() as u32
        * 2)
    .max(2);
    let queue = make("queue")?;
    // A slow JPEG encode must never hold back the renditions: drop, don't wait.
    queue.set_property_from_str("leaky", "downstream");
    queue.set_property("max-size-buffers", 2u32);
    let interval = SCREENSHOT_INTERVAL.as_nanos() as u64;
    // Streaming-thread state of the probe (u64::MAX: no screenshot taken yet).
    let last = std::sync::atomic::AtomicU64::new(u64::MAX);
    // On the queue's way in: the frames between screenshots are dropped in the tee's thread
    // instead of waking the queue's thread 30 times a second for nothing.
    queue
        .static_pad("sink")
        .expect("queue has a sink pad")
        .add_probe(gst::PadProbeType::BUFFER, move |_pad, info| {
            let pts = info
                .buffer()
                .and_then(|b| b.pts())
                .map_or(0, |t| t.nseconds());
            let prev = last.load(std::sync::atomic::Ordering::Relaxed);
            if prev != u64::MAX && pts < prev.saturating_add(interval) {
                return drop_buffer(info);
            }
            last.store(pts, std::sync::atomic::Ordering::Relaxed);
            gst::PadProbeReturn::Ok
        });
    let enc = make("jpegenc")?;
    enc.set_property("quality", JPEG_QUALITY);
    let sink = gstreamer_app::AppSink::builder().sync(false).build();
    sink.set_callbacks(
        gstreamer_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                if let Some(jpeg) = sample
                    .buffer()
                    .and_then(|b| b.map_readable().ok())
                    .map(|m| bytes::Bytes::copy_from_slice(&m))
                {
                    package.set_screenshot(jpeg);
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    let chain = [
        queue,
        make("videoscale")?,
        capsfilter(
            gst::Caps::builder("video/x-raw")
                .field("width", width as i32)
                .field("height", height as i32)
                .field("pixel-aspect-ratio", gst::Fraction::new(1, 1))
                .build(),
        )?,
        enc,
        sink.upcast(),
    ];
    link(pipeline, &chain)?;
    tee.link(&chain[0])
        .map_err(|e| PipelineError::Build(format!("tee → screenshot: {e}")))
}
