//! One GStreamer pipeline per live stream: `media` frames in through appsrc, decoded once,
//! scaled once per rung, x264/AAC encoded, CMAF-muxed (`cmafmux` chunks = LL-HLS parts) and
//! handed to the stream's [`Package`] from appsink callbacks. A failing pipeline ends only its
//! own stream.

mod build;
mod catch_up;
mod elements;
mod ladder;
pub(crate) mod overlay;
mod package_reader;
mod plan;
mod probe;
mod recycle;
pub(crate) mod scale;
mod screenshot;
mod sink;
mod taps;
mod ts_gate;
mod wpe;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use tokio::sync::mpsc;

use crate::live::{
    Counters, PipelineFactory, PipelineFailure, PipelineJob, PipelinePart, SharedStatus,
    StreamHandles,
};
use crate::media::{AudioConfig, Frame, MediaMessage, TrackKind, VideoCodec, VideoConfig};
use crate::package::Package;
pub use ladder::Ladder;

/// How long a drained pipeline may take to flush its last parts at the end.
const EOS_TIMEOUT: Duration = Duration::from_secs(5);
/// appsrc queue bound: past it the oldest buffers are dropped (the ingest never blocks).
const APPSRC_MAX_BYTES: u64 = 32 * 1024 * 1024;

use probe::{measure_fps, probe, Probe};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("GStreamer initialisation: {0}")]
    Init(String),
    #[error("cannot build the pipeline: {0}")]
    Build(String),
    #[error("pipeline state change failed: {0}")]
    State(String),
    #[error("pipeline error from {source_name}: {message}")]
    Runtime {
        source_name: String,
        message: String,
    },
    #[error("no usable media within {0:?}")]
    NoMedia(Duration),
}

/// Initialises GStreamer and registers the statically linked `cmafmux` and our scaler once per
/// process.
pub fn init() -> Result<(), PipelineError> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        gst::init().map_err(|e| e.to_string())?;
        scale::register().map_err(|e| e.to_string())?;
        gstfmp4::plugin_register_static().map_err(|e| e.to_string())
    })
    .clone()
    .map_err(PipelineError::Init)
}

/// The daemon's [`PipelineFactory`]: a GStreamer pipeline per session.
pub struct GstPipelines {
    /// Where each stream's HTML overlays are drawn from; `None`: no overlays (no WPE plugin).
    pub overlays: Option<Arc<overlay::OverlayHub>>,
}

impl PipelineFactory for GstPipelines {
    fn run(
        &self,
        job: PipelineJob,
    ) -> Pin<Box<dyn Future<Output = Result<(), PipelineFailure>> + Send>> {
        let ladder = Ladder {
            // Always built: its gate keeps it idle until an origin recording starts, and the
            // record's `record_type` may change while the stream is live.
            source: true,
            shed: job.reduction == crate::capacity::Reduction::LowestRung,
            passthrough: job.reduction == crate::capacity::Reduction::Passthrough,
            ..Ladder::from_set(&job.quality_set)
        };
        let overlays = self.overlays.as_ref().map(|h| h.set_for(job.stream.id));
        Box::pin(async move {
            run(job.stream, ladder, overlays, job.media, job.stop)
                .await
                .map_err(PipelineFailure::from)
        })
    }
}

/// Runs the stream's pipelines until the publisher leaves (the channel closes) or one fails.
/// A track that appears after the start, or a codec the decoders were not built for, ends the
/// running pipeline and builds the next one on the same package at the next keyframe: the
/// outputs continue with a discontinuity (the same as a reconnect within the grace period).
pub async fn run(
    stream: StreamHandles,
    ladder: Ladder,
    overlays: Option<Arc<overlay::OverlaySet>>,
    mut rx: crate::hub::Reader,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), PipelineError> {
    let ran = run_pipelines(&stream, &ladder, overlays, &mut rx, &mut stop).await;
    // The rungs' readers see the end of the session's outputs (the source's already ended, or
    // ends now that this reader of it is gone).
    stream.hub.end_all();
    ran
}

/// [`run`]'s pipelines, one after another while the input's tracks or codecs change.
async fn run_pipelines(
    stream: &StreamHandles,
    ladder: &Ladder,
    overlays: Option<Arc<overlay::OverlaySet>>,
    rx: &mut crate::hub::Reader,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), PipelineError> {
    let mut seed = Vec::new();
    let mut ladder = ladder.clone();
    loop {
        let Some(probe) = probe(rx, std::mem::take(&mut seed)).await? else {
            return Ok(());
        };
        let ran = run_one(stream, &ladder, overlays.clone(), probe, rx, stop).await;
        crate::heap::released();
        match ran? {
            Pumped::Ended => return Ok(()),
            Pumped::Rebuild(carried) => {
                tracing::info!(
                    stream = stream.id,
                    "the input's tracks or codecs changed; rebuilding the pipeline"
                );
                seed = carried;
            }
            Pumped::Faster(carried) => {
                let preset = plan::faster_preset(ladder.preset).unwrap_or(ladder.preset);
                tracing::warn!(
                    stream = stream.id,
                    from = ladder.preset,
                    to = preset,
                    "the transcode is behind real time; rebuilding with a faster x264 preset"
                );
                ladder.preset = preset;
                seed = carried;
            }
        }
        stream.package.mark_discontinuity();
    }
}

/// How a pipeline's run ended.
enum Pumped {
    /// The publisher left or the stream was stopped.
    Ended,
    /// The input now carries what this pipeline cannot take: what to start the next one with.
    Rebuild(Vec<MediaMessage>),
    /// The transcode stayed behind real time: the next one, with a faster preset, starts with
    /// this (a keyframe).
    Faster(Vec<MediaMessage>),
}

/// One pipeline: built from the probe, fed until it ends, drained.
async fn run_one(
    stream: &StreamHandles,
    ladder: &Ladder,
    overlays: Option<Arc<overlay::OverlaySet>>,
    probe: Probe,
    rx: &mut crate::hub::Reader,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Pumped, PipelineError> {
    let StreamHandles {
        id: stream_id,
        package,
        hub,
        status,
        counters,
    } = stream.clone();
    init()?;
    let base = probe.frames.iter().map(|f| f.dts).min().unwrap_or(0);
    let plan = plan::Plan {
        overlays,
        ..plan::Plan::new(
            stream_id,
            ladder,
            probe.video.as_ref(),
            probe.audio.as_ref(),
            probe.fps,
            package.read(|p| p.configured()),
            probe.wall_time_of(base),
        )
    };
    {
        let mut s = status.lock().unwrap_or_else(|p| p.into_inner());
        s.set_pipeline_part(PipelinePart {
            transcoded_qualities: if plan.passthrough {
                Vec::new()
            } else {
                plan.video_rungs.iter().map(|r| r.name.clone()).collect()
            },
            shed_qualities: plan.shed.clone(),
            transcoding_preset: plan.x264_preset.to_owned(),
            frame_rate: probe.fps.map(|f| (f * 100.0).round() / 100.0),
            video_size: probe.video.as_ref().map(|v| (v.width, v.height)),
        });
    }
    let built = {
        let package = package.clone();
        let meter = sink::Meter {
            speed: Arc::new(Mutex::new(sink::SpeedWindow::default())),
            status: status.clone(),
            counters: counters.clone(),
        };
        let plan = plan.clone();
        tokio::task::spawn_blocking(move || build::build(&plan, package, &hub, meter))
            .await
            .map_err(|e| PipelineError::Build(e.to_string()))??
    };
    tracing::info!(
        stream = stream_id,
        renditions = ?plan.rendition_names(),
        video_codec = probe.video.as_ref().map(|v| v.codec.name()),
        fps = plan.fps,
        part_ms = plan.part.as_millis() as u64,
        "pipeline starting"
    );
    // From here on the pipeline is stopped however this ends: also when this future is dropped
    // mid-stream (its task cancelled, the runtime shut down) or starting it fails.
    let pipeline = Arc::new(StopOnDrop(built.pipeline.clone()));
    let bus_rx = watch_bus(&pipeline.0);
    set_state(&pipeline, gst::State::Playing).await?;

    let mut pusher = Pusher {
        video: built.video_src.clone(),
        audio: built.audio_src.clone(),
        base,
        counters,
        fps_window: VecDeque::new(),
        status: status.clone(),
        package: package.clone(),
        wall_base: plan.wall_base,
        video_codec: plan.video.as_ref().map(|v| v.codec),
        audio_codec: plan.audio.clone(),
        video_config: plan.video.clone(),
        audio_config: plan.audio.clone(),
        started: std::time::Instant::now(),
        faster: plan::faster_preset(plan.x264_preset),
    };
    for f in probe.frames {
        pusher.push(f);
    }
    let result = pump(rx, &mut pusher, bus_rx, stop).await;
    drain(&pipeline, built).await?;
    tracing::info!(stream = stream_id, "pipeline stopped");
    result
}

/// The orderly end: the last parts flushed by EOS, the pipeline stopped, then its package
/// readers (none of them waits on its appsrc any more).
async fn drain(pipeline: &Arc<StopOnDrop>, built: build::Built) -> Result<(), PipelineError> {
    for src in [&built.video_src, &built.audio_src].into_iter().flatten() {
        let _ = src.end_of_stream();
    }
    let bus = pipeline.0.bus().expect("pipelines have a bus");
    let _ = tokio::task::spawn_blocking(move || {
        bus.timed_pop_filtered(
            gst::ClockTime::from_nseconds(EOS_TIMEOUT.as_nanos() as u64),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
    })
    .await;
    let stopped = set_state(pipeline, gst::State::Null).await;
    let readers = built.package_readers;
    let _ = tokio::task::spawn_blocking(move || readers.stop()).await;
    stopped
}

async fn pump(
    rx: &mut crate::hub::Reader,
    pusher: &mut Pusher,
    mut bus_rx: mpsc::Receiver<PipelineError>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Pumped, PipelineError> {
    loop {
        let msg = tokio::select! {
            _ = async { drop(stop.wait_for(|s| *s).await) } => return Ok(Pumped::Ended),
            msg = rx.recv() => msg,
            err = bus_rx.recv() => match err {
                Some(e) => return Err(e),
                None => continue,
            },
        };
        let Some(msg) = msg else {
            return Ok(Pumped::Ended);
        };
        if let Some(seed) = pusher.rebuild_for(&msg) {
            return Ok(Pumped::Rebuild(seed));
        }
        if let Some(seed) = pusher.too_slow(&msg) {
            return Ok(Pumped::Faster(seed));
        }
        match msg {
            MediaMessage::Frame(f) => pusher.push(f),
            MediaMessage::VideoConfig(c) => pusher.video_config(c),
            MediaMessage::AudioConfig(c) => pusher.audio_config(c),
            MediaMessage::Discontinuity { at } => pusher.discontinuity(at),
            // What the input declares matters only before a pipeline starts.
            MediaMessage::Tracks(_) => {}
        }
    }
}

struct Pusher {
    video: Option<gstreamer_app::AppSrc>,
    audio: Option<gstreamer_app::AppSrc>,
    /// Subtracted from every timestamp so the pipeline's running time starts at 0.
    base: u64,
    fps_window: VecDeque<u64>,
    status: SharedStatus,
    package: Arc<Package>,
    /// Wall-clock time of running time 0 (the parts' EXT-X-PROGRAM-DATE-TIME base).
    wall_base: time::OffsetDateTime,
    counters: Arc<Counters>,
    /// The codecs the decoders were built for (`None`: no such branch).
    video_codec: Option<VideoCodec>,
    audio_codec: Option<AudioConfig>,
    /// The input's latest configs, carried into a rebuild.
    video_config: Option<VideoConfig>,
    audio_config: Option<AudioConfig>,
    /// When this pipeline started, and the preset a rebuild would move to.
    started: std::time::Instant,
    faster: Option<&'static str>,
}

/// A transcode slower than this over a whole speed window is rebuilt with a faster preset.
const SLOW_SPEED: f64 = 0.95;
/// How long a pipeline runs before its speed can make it rebuild: a full speed window after
/// its first seconds.
const SLOW_AFTER: Duration = Duration::from_secs(15);

impl Pusher {
    /// Whether this pipeline has been below real time for its last speed window and a faster
    /// preset is left: the next pipeline starts at this video keyframe.
    fn too_slow(&self, msg: &MediaMessage) -> Option<Vec<MediaMessage>> {
        let MediaMessage::Frame(f) = msg else {
            return None;
        };
        if f.track != TrackKind::Video || !f.keyframe || self.faster.is_none() {
            return None;
        }
        if self.started.elapsed() < SLOW_AFTER {
            return None;
        }
        let speed = self
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .transcoding_speed()?;
        (speed < SLOW_SPEED).then(|| self.seed(msg))
    }

    /// Whether `msg` needs another pipeline, and what that one starts with: a video keyframe
    /// or audio for a branch this pipeline lacks, or a config of another codec.
    fn rebuild_for(&self, msg: &MediaMessage) -> Option<Vec<MediaMessage>> {
        // Runs for every message: decide without allocating; build the seed only to rebuild.
        let needed = match msg {
            MediaMessage::Frame(f) => match f.track {
                TrackKind::Video => {
                    self.video.is_none() && f.keyframe && self.video_config.is_some()
                }
                TrackKind::Audio => self.audio.is_none() && self.audio_config.is_some(),
            },
            MediaMessage::VideoConfig(c) => self.video_codec.is_some_and(|codec| codec != c.codec),
            MediaMessage::AudioConfig(c) => {
                self.audio_codec.as_ref().is_some_and(|a| !a.same_codec(c))
            }
            _ => false,
        };
        if !needed {
            return None;
        }
        Some(self.seed(msg))
    }

    /// What the next pipeline starts with: the latest configs, less the one `msg` replaces,
    /// then `msg` itself.
    fn seed(&self, msg: &MediaMessage) -> Vec<MediaMessage> {
        let video = self
            .video_config
            .clone()
            .filter(|_| !matches!(msg, MediaMessage::VideoConfig(_)));
        let audio = self
            .audio_config
            .clone()
            .filter(|_| !matches!(msg, MediaMessage::AudioConfig(_)));
        video
            .map(MediaMessage::VideoConfig)
            .into_iter()
            .chain(audio.map(MediaMessage::AudioConfig))
            .chain(std::iter::once(msg.clone()))
            .collect()
    }

    fn push(&mut self, f: Frame) {
        if f.track == TrackKind::Video && self.video.is_some() {
            self.measure(f.dts);
        }
        let src = match f.track {
            TrackKind::Video => self.video.as_ref(),
            TrackKind::Audio => self.audio.as_ref(),
        };
        let Some(src) = src else { return };
        let dts = f.dts.saturating_sub(self.base);
        let pts = f.pts.saturating_sub(self.base).max(dts);
        let mut buffer = gst::Buffer::from_slice(f.data);
        {
            let b = buffer.get_mut().expect("fresh buffer is writable");
            b.set_pts(gst::ClockTime::from_nseconds(pts));
            b.set_dts(gst::ClockTime::from_nseconds(dts));
            if !f.keyframe {
                b.set_flags(gst::BufferFlags::DELTA_UNIT);
            }
        }
        // A full appsrc drops its oldest buffer to take this one (it never blocks the ingest).
        if src.current_level_bytes() + buffer.size() as u64 > APPSRC_MAX_BYTES {
            Counters::add(&self.counters.frames_dropped, 1);
        }
        // Errors here mean the pipeline is flushing or gone; the bus reports why.
        let _ = src.push_buffer(buffer);
    }

    /// The source changed at input decode time `at`: every output marks the first segment
    /// that starts from there on.
    fn discontinuity(&mut self, at: u64) {
        let from = self.wall_base + Duration::from_nanos(at.saturating_sub(self.base));
        self.package.discontinuity_from(from);
    }

    /// Source frame rate over the last ~2 s, published as `frame_rate`.
    fn measure(&mut self, dts: u64) {
        self.fps_window.push_back(dts);
        while self.fps_window.len() > 2
            && dts.saturating_sub(*self.fps_window.front().expect("non-empty")) > 2_000_000_000
        {
            self.fps_window.pop_front();
        }
        if self.fps_window.len().is_multiple_of(15) {
            if let Some(fps) = measure_fps(self.fps_window.iter().copied()) {
                let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
                s.set_frame_rate((fps * 100.0).round() / 100.0);
            }
        }
    }

    /// New parameters of the same codec (a resolution change): new caps on the running
    /// decoder.
    fn video_config(&mut self, c: VideoConfig) {
        if let Some(src) = &self.video {
            src.set_caps(Some(&elements::video_caps(&c)));
            let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
            s.set_video_size(c.width, c.height);
        }
        self.video_config = Some(c);
    }

    fn audio_config(&mut self, c: AudioConfig) {
        if let Some(src) = &self.audio {
            src.set_caps(Some(&elements::audio_caps(&c)));
        }
        self.audio_config = Some(c);
    }
}

/// Forwards pipeline errors from a blocking bus reader to the async side.
fn watch_bus(pipeline: &gst::Pipeline) -> mpsc::Receiver<PipelineError> {
    let (tx, rx) = mpsc::channel(4);
    let bus = pipeline.bus().expect("pipelines have a bus");
    let weak = pipeline.downgrade();
    std::thread::Builder::new()
        .name("gst-bus".into())
        .spawn(move || loop {
            if weak.upgrade().is_none() || tx.is_closed() {
                return;
            }
            let Some(msg) = bus.timed_pop_filtered(
                gst::ClockTime::from_mseconds(200),
                &[gst::MessageType::Error, gst::MessageType::Warning],
            ) else {
                continue;
            };
            match msg.view() {
                gst::MessageView::Error(e) => {
                    let err = PipelineError::Runtime {
                        source_name: msg
                            .src()
                            .map(|s| s.path_string().to_string())
                            .unwrap_or_default(),
                        message: format!("{} ({:?})", e.error(), e.debug()),
                    };
                    let _ = tx.blocking_send(err);
                    return;
                }
                gst::MessageView::Warning(w) => {
                    tracing::warn!(error = %w.error(), debug = ?w.debug(), "pipeline warning");
                }
                _ => {}
            }
        })
        .expect("spawning a thread");
    rx
}

/// A pipeline set to NULL when the last handle on it is dropped.
///
/// A pipeline must reach NULL before its last reference goes: GStreamer only warns ("Trying to
/// dispose element …, but it is in PLAYING") and frees the elements while their streaming
/// threads still run in them. The appsrcs are freed first (the package readers let theirs go
/// as soon as they are closed), so their threads go on in `gst_app_src_create` on a freed
/// queue and abort the whole process ("gstappsrc.c:1736: code should not be reached"), or
/// crash elsewhere. [`run_one`] stops its pipeline itself when it ends; this covers the ways
/// it can end without doing so: starting the pipeline failed, or its future was dropped (a
/// cancelled task, a runtime shutting down, a panic).
struct StopOnDrop(gst::Pipeline);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        // Blocking, but brief, and NULL again after the orderly stop costs nothing.
        let _ = self.0.set_state(gst::State::Null);
    }
}

/// Changes the pipeline's state off the async threads. The blocking task holds a handle too: a
/// future dropped while it runs leaves it to stop the pipeline after the change it made.
async fn set_state(pipeline: &Arc<StopOnDrop>, state: gst::State) -> Result<(), PipelineError> {
    let p = pipeline.clone();
    tokio::task::spawn_blocking(move || p.0.set_state(state))
        .await
        .map_err(|e| PipelineError::State(e.to_string()))?
        .map(|_| ())
        .map_err(|e| PipelineError::State(format!("{state:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::{Tracks, TRACK_WAIT};
    use crate::package::{PackageState, PackagingConfig};
    use crate::quality::QualitySets;
    use gstreamer_app::AppSink;

    /// A transcode below real time for a whole speed window, at a video keyframe, is rebuilt
    /// with the next faster preset (seeded with its configs and that keyframe); not before the
    /// window, not between keyframes, not at the fastest preset, not when it keeps up.
    #[test]
    fn a_slow_transcode_asks_for_a_faster_preset_at_a_keyframe() {
        let status = SharedStatus::default();
        let config = VideoConfig {
            codec: VideoCodec::H264,
            record: bytes::Bytes::from_static(b"avcc"),
            width: 1280,
            height: 720,
        };
        let mut pusher = Pusher {
            video: None,
            audio: None,
            base: 0,
            fps_window: VecDeque::new(),
            status: status.clone(),
            package: Arc::new(Package::new(PackageState::new(
                PackagingConfig::default(),
                vec![],
            ))),
            wall_base: time::OffsetDateTime::now_utc(),
            counters: Arc::default(),
            video_codec: Some(VideoCodec::H264),
            audio_codec: None,
            video_config: Some(config),
            audio_config: None,
            started: std::time::Instant::now(),
            faster: plan::faster_preset(ladder::X264_PRESET),
        };
        assert_eq!(pusher.faster, Some("superfast"));
        let frame = |keyframe| {
            MediaMessage::Frame(Frame {
                track: TrackKind::Video,
                dts: 0,
                pts: 0,
                keyframe,
                duration: None,
                data: bytes::Bytes::from_static(b"x"),
            })
        };
        status.lock().unwrap().set_transcoding_speed(0.8);
        assert!(
            pusher.too_slow(&frame(true)).is_none(),
            "before a whole window"
        );
        pusher.started -= SLOW_AFTER;
        assert!(
            pusher.too_slow(&frame(false)).is_none(),
            "between keyframes"
        );
        let seed = pusher.too_slow(&frame(true)).expect("rebuilt");
        assert!(matches!(seed[0], MediaMessage::VideoConfig(_)));
        assert!(matches!(&seed[1], MediaMessage::Frame(f) if f.keyframe));
        status.lock().unwrap().set_transcoding_speed(0.97);
        assert!(pusher.too_slow(&frame(true)).is_none(), "keeps up");
        status.lock().unwrap().set_transcoding_speed(0.5);
        pusher.faster = plan::faster_preset("ultrafast");
        assert!(pusher.too_slow(&frame(true)).is_none(), "no faster preset");
    }

    /// The top rung the source's size allows, as the pipeline built it (once it runs).
    fn top_rung(status: &SharedStatus) -> Option<String> {
        status
            .lock()
            .unwrap()
            .transcoded_qualities()
            .first()
            .cloned()
    }

    /// The switched source as the input task publishes it: a hub feed and the pipeline's
    /// reader of it. Dropping the sender ends the feed, as the input task does.
    struct Tx(Arc<crate::hub::Hub>);

    impl Tx {
        async fn send(&self, m: MediaMessage) -> Result<(), MediaMessage> {
            self.try_send(m)
        }

        /// A frame at `t` ns (dts = pts: the test sources have no B-frames).
        fn frame(&self, track: TrackKind, t: u64, keyframe: bool, data: bytes::Bytes) {
            self.try_send(MediaMessage::Frame(Frame {
                track,
                dts: t,
                pts: t,
                keyframe,
                duration: None,
                data,
            }))
            .unwrap();
        }

        fn try_send(&self, m: MediaMessage) -> Result<(), MediaMessage> {
            let published = self.0.publish(&crate::hub::Feed::Source, m);
            assert_eq!(published.dropped, 0, "the test's queue is too small");
            Ok(())
        }
    }

    impl Drop for Tx {
        fn drop(&mut self) {
            self.0.end(&crate::hub::Feed::Source);
        }
    }

    fn source_channel(capacity: usize) -> (Tx, crate::hub::Reader) {
        let hub = crate::hub::Hub::new();
        let reader = hub.subscribe(
            crate::hub::Feed::Source,
            crate::hub::ReaderOptions::new("pipeline", capacity),
        );
        (Tx(hub), reader)
    }

    /// Runs a test-source → encoder pipeline ending in `appsink name=out`: (codec_data of the
    /// caps, [(pts ns, keyframe, data)]).
    fn run_encoder(desc: &str) -> (bytes::Bytes, Vec<(u64, bool, bytes::Bytes)>) {
        init().unwrap();
        let pipeline = gst::parse::launch(desc)
            .unwrap()
            .downcast::<gst::Pipeline>()
            .unwrap();
        let sink = pipeline
            .by_name("out")
            .unwrap()
            .downcast::<AppSink>()
            .unwrap();
        pipeline.set_state(gst::State::Playing).unwrap();
        let mut codec_data = None;
        let mut out = Vec::new();
        while let Ok(sample) = sink.pull_sample() {
            if codec_data.is_none() {
                let caps = sample.caps().unwrap();
                let data = caps
                    .structure(0)
                    .unwrap()
                    .get::<gst::Buffer>("codec_data")
                    .unwrap();
                codec_data = Some(bytes::Bytes::copy_from_slice(&data.map_readable().unwrap()));
            }
            let b = sample.buffer().unwrap();
            out.push((
                b.pts().unwrap().nseconds(),
                !b.flags().contains(gst::BufferFlags::DELTA_UNIT),
                bytes::Bytes::copy_from_slice(&b.map_readable().unwrap()),
            ));
        }
        pipeline.set_state(gst::State::Null).unwrap();
        (codec_data.unwrap(), out)
    }

    /// Encodes `frames` of a test pattern with x264: (avcC, [(pts ns, keyframe, data)]).
    fn encode(
        width: i32,
        height: i32,
        frames: i32,
    ) -> (bytes::Bytes, Vec<(u64, bool, bytes::Bytes)>) {
        run_encoder(&format!(
            "videotestsrc num-buffers={frames} ! video/x-raw,width={width},height={height},framerate=30/1,format=I420 \
             ! x264enc tune=zerolatency key-int-max=30 speed-preset=ultrafast \
             ! video/x-h264,stream-format=avc,alignment=au ! appsink name=out sync=false"
        ))
    }

    /// Encodes `buffers` of a sine as AAC-LC 48 kHz stereo: (AudioSpecificConfig, [(pts ns,
    /// raw frame)]).
    fn encode_aac(buffers: i32) -> (bytes::Bytes, Vec<(u64, bytes::Bytes)>) {
        let (asc, frames) = run_encoder(&format!(
            "audiotestsrc num-buffers={buffers} samplesperbuffer=1024 \
             ! audio/x-raw,rate=48000,channels=2 ! avenc_aac ! aacparse \
             ! audio/mpeg,stream-format=raw ! appsink name=out sync=false"
        ));
        (asc, frames.into_iter().map(|(t, _, d)| (t, d)).collect())
    }

    /// The frames a hub reader got until `n` frames came (bounded): configs, then frames.
    async fn read_feed(r: &mut crate::hub::Reader, n: usize) -> (Vec<MediaMessage>, Vec<Frame>) {
        let (mut configs, mut frames) = (Vec::new(), Vec::new());
        while frames.len() < n {
            match tokio::time::timeout(Duration::from_secs(20), r.recv()).await {
                Ok(Some(MediaMessage::Frame(f))) => frames.push(f),
                Ok(Some(m)) => configs.push(m),
                Ok(None) | Err(_) => break,
            }
        }
        (configs, frames)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hub_readers_attach_to_the_encoded_rungs_while_live_and_see_the_end() {
        use crate::hub::{Feed, ReaderOptions};
        let (avcc, video) = encode(640, 360, 300);
        let (asc, audio) = encode_aac(300);
        let base = video[0].0;
        let package = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![],
        )));
        let hub = crate::hub::Hub::new();
        let (tx, rx) = source_channel(8192);
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        let status = SharedStatus::default();
        let stream = StreamHandles {
            id: 1,
            package: package.clone(),
            hub: hub.clone(),
            status: status.clone(),
            counters: Arc::<Counters>::default(),
        };
        let ladder = Ladder::from_set(QualitySets::builtin().get(1).unwrap());
        let mut rung = Feed::Audio;
        let task = tokio::spawn(run(stream, ladder, None, rx, stop));
        tx.send(MediaMessage::VideoConfig(
            crate::media::codec::parse_avcc(avcc).unwrap(),
        ))
        .await
        .unwrap();
        let asc = crate::media::codec::parse_asc(asc).unwrap();
        tx.send(MediaMessage::AudioConfig(AudioConfig::Aac(asc)))
            .await
            .unwrap();
        let mut audio = audio.into_iter().peekable();
        let mut first = None;
        let mut again = None;
        for (i, (pts, keyframe, data)) in video.into_iter().enumerate() {
            let pts = pts - base;
            while let Some((t, a)) = audio.next_if(|(t, _)| *t <= pts) {
                tx.frame(TrackKind::Audio, t, true, a);
            }
            tx.frame(TrackKind::Video, pts, keyframe, data);
            // Readers attach while live: one after 2 s, detached; another after 5.5 s.
            if i == 60 {
                rung = Feed::Video(top_rung(&status).expect("the pipeline runs by now"));
                first = Some((
                    hub.subscribe(rung.clone(), ReaderOptions::new("test", 1024)),
                    hub.subscribe(Feed::Audio, ReaderOptions::new("test", 1024)),
                    hub.subscribe(Feed::Opus, ReaderOptions::new("test", 1024)),
                ));
            }
            if i == 165 {
                again = Some(hub.subscribe(rung.clone(), ReaderOptions::new("again", 1024)));
                // A reader joining mid-GOP asks for a keyframe rather than waiting for the next.
                assert!(hub.request_keyframe(&rung));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (mut v, mut a, mut opus) = first.unwrap();
        let (configs, frames) = read_feed(&mut v, 30).await;
        // The rung's own avcC first, then length-prefixed H.264 at the rung's size.
        let Some(MediaMessage::VideoConfig(c)) = configs.first() else {
            panic!("no video config first: {configs:?}")
        };
        assert_eq!((c.width, c.height), (640, 360), "{c:?}");
        assert!(crate::media::codec::parse_avcc(c.record.clone()).is_ok());
        assert_eq!(frames.len(), 30);
        for f in &frames {
            let len = u32::from_be_bytes(f.data[..4].try_into().unwrap()) as usize;
            assert!(len + 4 <= f.data.len(), "not length-prefixed NAL units");
        }
        assert!(frames.windows(2).all(|w| w[1].dts > w[0].dts));
        // On the stream's running time (the source's timeline), not the encoder's 1000 h
        // offset: it attached 2 s in.
        assert!(
            (1_500_000_000..3_000_000_000).contains(&frames[0].pts),
            "{}",
            frames[0].pts
        );
        assert!(frames
            .iter()
            .all(|f| f.duration == Some(33_333_333) || f.duration == Some(33_333_334)));
        let (configs, frames) = read_feed(&mut a, 30).await;
        assert!(
            matches!(configs.first(), Some(MediaMessage::AudioConfig(AudioConfig::Aac(c))) if c.sample_rate == 48_000),
            "{configs:?}"
        );
        assert_eq!(frames.len(), 30);
        // The on-demand Opus branch: encoded from when its reader attached, 20 ms frames.
        let (configs, frames) = read_feed(&mut opus, 30).await;
        assert!(
            matches!(configs.first(), Some(MediaMessage::AudioConfig(AudioConfig::Opus(c))) if c.channels == 2),
            "{configs:?}"
        );
        assert_eq!(frames.len(), 30);
        assert!(
            frames[0].pts >= 1_900_000_000,
            "encoded before anyone read it: {} ns",
            frames[0].pts
        );
        // 20 ms apart, but for the encoder's 6.5 ms look-ahead at its start.
        let steps: Vec<u64> = frames.windows(2).map(|w| w[1].pts - w[0].pts).collect();
        assert!(steps[1..].iter().all(|d| *d == 20_000_000), "{steps:?}");
        // Detached: the hub forgets them; the later reader starts with the config again.
        drop((v, a, opus));
        let mut later = again.unwrap();
        let (configs, frames) = read_feed(&mut later, 10).await;
        assert!(matches!(
            configs.first(),
            Some(MediaMessage::VideoConfig(_))
        ));
        assert_eq!(frames.len(), 10);
        // 5.5 s in, 2 s segments: the natural keyframe is 15 frames away; the requested one
        // comes within the encoder's queue.
        let key = frames.iter().position(|f| f.keyframe);
        assert!(key.is_some_and(|k| k < 8), "keyframe at {key:?}");
        // Left: that reader and the package, one reader per rendition, which lost nothing.
        let mut names: Vec<_> = hub
            .stats()
            .into_iter()
            .map(|s| (s.name, s.dropped))
            .collect();
        names.sort();
        let renditions = package.read(|p| p.renditions().len());
        assert_eq!(names.len(), 1 + renditions, "{names:?}");
        assert!(names
            .iter()
            .all(|(n, d)| *d == 0 && (n == "again" || n.starts_with("package "))));
        drop(tx);
        task.await.unwrap().unwrap();
        // The session is over: its readers see the end.
        while let Some(m) = later.try_recv() {
            drop(m);
        }
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), later.recv())
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_track_that_appears_later_rebuilds_the_pipeline_with_it() {
        let (avcc, video) = encode(640, 360, 150);
        let (asc, audio) = encode_aac(100);
        // x264enc stamps from 1000 h (GstVideoEncoder's offset): from 0, like the audio.
        let base = video[0].0;
        let video: Vec<_> = video
            .into_iter()
            .map(|(t, k, d)| (t - base, k, d))
            .collect();
        let package = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![],
        )));
        let (tx, rx) = source_channel(8192);
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        let stream = StreamHandles {
            id: 1,
            package: package.clone(),
            hub: crate::hub::Hub::new(),
            status: SharedStatus::default(),
            counters: Arc::<Counters>::default(),
        };
        let ladder = Ladder::from_set(QualitySets::builtin().get(1).unwrap());
        let task = tokio::spawn(run(stream, ladder, None, rx, stop));
        let config = crate::media::codec::parse_avcc(avcc).unwrap();
        tx.send(MediaMessage::VideoConfig(config)).await.unwrap();
        // Nothing declared, video only for 3 s: the pipeline starts without audio.
        let mut audio = audio.into_iter().peekable();
        let asc = crate::media::codec::parse_asc(asc).unwrap();
        for (pts, keyframe, data) in video {
            if pts >= 3_000_000_000 {
                if let Some(asc) = Some(asc.clone()).filter(|_| audio.peek().is_some()) {
                    if pts < 3_040_000_000 {
                        tx.send(MediaMessage::AudioConfig(AudioConfig::Aac(asc)))
                            .await
                            .unwrap();
                    }
                }
                while let Some((t, a)) = audio.next_if(|(t, _)| *t + 3_000_000_000 <= pts) {
                    let t = t + 3_000_000_000;
                    tx.frame(TrackKind::Audio, t, true, a);
                }
            }
            tx.frame(TrackKind::Video, pts, keyframe, data);
            if pts < 1_500_000_000 {
                // Real time for the start, so the probe decides on video alone.
                tokio::time::sleep(Duration::from_millis(33)).await;
            }
        }
        drop(tx);
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let (names, marked) = package.read(|p| {
            (
                p.renditions()
                    .iter()
                    .map(|r| r.name.clone())
                    .collect::<Vec<_>>(),
                p.renditions()[0].segments().iter().any(|s| s.discontinuity),
            )
        });
        // The audio joined the outputs, in a new pipeline whose first segment is marked.
        assert_eq!(names, ["360p", "audio"]);
        assert!(marked, "no discontinuity at the rebuild");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sequence_header_change_mid_stream_keeps_the_outputs_going() {
        let (avcc_a, frames_a) = encode(1280, 720, 90);
        let (avcc_b, frames_b) = encode(640, 360, 90);
        let package = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![],
        )));
        let status = SharedStatus::default();
        let (tx, rx) = source_channel(4096);
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        let ladder = Ladder::from_set(QualitySets::builtin().get(1).unwrap());
        let counters = Arc::<Counters>::default();
        let stream = StreamHandles {
            id: 1,
            package: package.clone(),
            hub: crate::hub::Hub::new(),
            status: status.clone(),
            counters: counters.clone(),
        };
        let task = tokio::spawn(run(stream, ladder, None, rx, stop));
        let send_all = |avcc: bytes::Bytes, frames: Vec<(u64, bool, bytes::Bytes)>, offset: u64| {
            let config = crate::media::codec::parse_avcc(avcc).unwrap();
            tx.try_send(MediaMessage::VideoConfig(config)).unwrap();
            for (pts, keyframe, data) in frames {
                let t = pts + offset;
                tx.try_send(MediaMessage::Frame(Frame {
                    track: TrackKind::Video,
                    dts: t,
                    pts: t,
                    keyframe,
                    duration: None,
                    data,
                }))
                .unwrap();
            }
        };
        send_all(avcc_a, frames_a, 0);
        // The encoder restarts at 640x360 with new SPS/PPS, timestamps continuing.
        send_all(avcc_b, frames_b, 3_000_000_000);
        drop(tx);
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let (media, ladder_names) = package.read(|p| {
            let top = &p.renditions()[0];
            let media: Duration = top.segments().iter().map(|s| s.duration()).sum();
            (
                media,
                p.renditions()
                    .iter()
                    .map(|r| r.name.clone())
                    .collect::<Vec<_>>(),
            )
        });
        // The ladder chosen at the start (from 720p) stays; media kept flowing past the change.
        assert_eq!(ladder_names, ["720p", "480p", "360p"]);
        assert!(
            media >= Duration::from_millis(5500),
            "only {media:?} of 6 s came out"
        );
        let s = status.lock().unwrap().clone();
        assert_eq!((s.video_width(), s.video_height()), (Some(640), Some(360)));
        // Every part of the top rung was counted; nothing had to be dropped.
        let parts: usize = package.read(|p| {
            p.renditions()[0]
                .segments()
                .iter()
                .map(|s| s.parts.len())
                .sum()
        });
        let published = Counters::get(&counters.parts_published);
        assert!(
            parts > 0 && published >= parts as u64,
            "{published} counted, {parts} kept"
        );
        assert_eq!(Counters::get(&counters.frames_dropped), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pipeline_dropped_mid_stream_is_stopped_before_it_is_freed() {
        use crate::hub::{Feed, ReaderOptions};
        use std::sync::atomic::{AtomicBool, Ordering};
        // An id of its own: GStreamer's complaint names the pipeline (`stream-<id>`).
        const ID: i64 = 4711;
        let freed_live = Arc::new(AtomicBool::new(false));
        let handler = {
            let seen = freed_live.clone();
            gst::glib::log_set_handler(
                Some("GStreamer"),
                gst::glib::LogLevels::LEVEL_CRITICAL,
                false,
                false,
                move |domain, level, message| {
                    if message.contains(&format!("dispose element stream-{ID},")) {
                        seen.store(true, Ordering::SeqCst);
                    }
                    gst::glib::log_default_handler(domain, level, Some(message));
                },
            )
        };
        let (avcc, video) = encode(640, 360, 60);
        let base = video[0].0;
        let hub = crate::hub::Hub::new();
        let status = SharedStatus::default();
        let stream = StreamHandles {
            id: ID,
            package: Arc::new(Package::new(PackageState::new(
                PackagingConfig::default(),
                vec![],
            ))),
            hub: hub.clone(),
            status: status.clone(),
            counters: Arc::<Counters>::default(),
        };
        let (tx, rx) = source_channel(4096);
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        let ladder = Ladder::from_set(QualitySets::builtin().get(1).unwrap());
        let task = tokio::spawn(run(stream, ladder, None, rx, stop));
        tx.send(MediaMessage::VideoConfig(
            crate::media::codec::parse_avcc(avcc).unwrap(),
        ))
        .await
        .unwrap();
        let mut rung = None;
        for (pts, keyframe, data) in video {
            tx.frame(TrackKind::Video, pts - base, keyframe, data);
            if rung.is_none() {
                rung = top_rung(&status)
                    .map(|top| hub.subscribe(Feed::Video(top), ReaderOptions::new("test", 1024)));
            }
            tokio::time::sleep(Duration::from_millis(33)).await;
        }
        // Streaming: the top rung's encoder reached the hub, and the input is still open.
        let (_, frames) = read_feed(rung.as_mut().expect("the pipeline runs by now"), 1).await;
        assert_eq!(frames.len(), 1);
        // Dropped mid-stream, as a runtime shutting down (or a failing test) drops the task.
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        gst::glib::log_remove_handler(Some("GStreamer"), handler);
        assert!(
            !freed_live.load(Ordering::SeqCst),
            "the pipeline was freed while PLAYING, its streaming threads still running"
        );
        drop(tx);
    }

    fn frame(track: TrackKind, ms: u64, keyframe: bool) -> MediaMessage {
        MediaMessage::Frame(Frame {
            track,
            dts: ms * 1_000_000,
            pts: ms * 1_000_000,
            keyframe,
            duration: None,
            data: bytes::Bytes::from_static(b"x"),
        })
    }

    fn configs() -> (MediaMessage, MediaMessage) {
        (
            MediaMessage::VideoConfig(
                crate::media::codec::parse_avcc(bytes::Bytes::from_static(
                    crate::media::codec::tests::AVCC_720P,
                ))
                .unwrap(),
            ),
            MediaMessage::AudioConfig(AudioConfig::Opus(crate::media::OpusConfig { channels: 2 })),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn the_probe_waits_for_declared_video_and_starts_at_its_keyframe() {
        let (tx, mut rx) = source_channel(4096);
        let (video, audio) = configs();
        tx.send(MediaMessage::Tracks(Tracks {
            video: true,
            audio: true,
        }))
        .await
        .unwrap();
        tx.send(audio).await.unwrap();
        // 3 s of audio first (far past the 1 s probe time), then the video.
        for ms in (0..3000).step_by(20) {
            tx.send(frame(TrackKind::Audio, ms, true)).await.unwrap();
        }
        tx.send(video).await.unwrap();
        for (i, ms) in (3000..3600).step_by(40).enumerate() {
            tx.send(frame(TrackKind::Video, ms, i == 0)).await.unwrap();
            tx.send(frame(TrackKind::Audio, ms, true)).await.unwrap();
        }
        let p = probe(&mut rx, Vec::new()).await.unwrap().unwrap();
        assert!(p.video.is_some() && p.audio.is_some());
        let first = p.frames.iter().map(|f| f.dts).min().unwrap();
        assert_eq!(first, 3_000_000_000, "audio before the keyframe is dropped");
        assert!((p.fps.unwrap() - 25.0).abs() < 0.1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_probe_gives_up_a_declared_track_after_the_wait_and_keeps_the_audio() {
        let (tx, mut rx) = source_channel(4096);
        let (_, audio) = configs();
        tx.send(MediaMessage::Tracks(Tracks {
            video: true,
            audio: true,
        }))
        .await
        .unwrap();
        tx.send(audio).await.unwrap();
        tx.send(frame(TrackKind::Audio, 0, true)).await.unwrap();
        tx.send(frame(TrackKind::Audio, 20, true)).await.unwrap();
        let started = tokio::time::Instant::now();
        let p = probe(&mut rx, Vec::new()).await.unwrap().unwrap();
        assert_eq!(started.elapsed(), TRACK_WAIT);
        assert!(p.video.is_none() && p.audio.is_some());
        assert_eq!(p.frames.len(), 2);
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn undeclared_the_probe_takes_what_came_in_its_time_and_a_rebuild_seed_first() {
        let (tx, mut rx) = source_channel(4096);
        let (video, audio) = configs();
        tx.send(audio.clone()).await.unwrap();
        for ms in (0..=1000).step_by(20) {
            tx.send(frame(TrackKind::Audio, ms, true)).await.unwrap();
        }
        let p = probe(&mut rx, Vec::new()).await.unwrap().unwrap();
        assert!(p.video.is_none() && p.audio.is_some());

        // A rebuild for a late video: the seed's configs and keyframe come before the channel.
        let seed = vec![video, audio, frame(TrackKind::Video, 2000, true)];
        for ms in (2040..2600).step_by(40) {
            tx.send(frame(TrackKind::Video, ms, false)).await.unwrap();
            tx.send(frame(TrackKind::Audio, ms, true)).await.unwrap();
        }
        let p = probe(&mut rx, seed).await.unwrap().unwrap();
        assert!(p.video.is_some() && p.audio.is_some());
        assert_eq!(p.frames[0].dts, 2_000_000_000);
        assert!(p.frames[0].keyframe);
    }

    #[test]
    fn fps_from_rtmp_millisecond_timestamps() {
        // 30 fps as RTMP carries it: 33/34 ms steps.
        let dts = (0..30u64).map(|i| (i * 1000 / 30) * 1_000_000);
        let fps = measure_fps(dts).unwrap();
        assert!((fps - 30.3).abs() < 0.5, "{fps}");
        assert_eq!(measure_fps([0u64, 1].into_iter()), None);
    }
}
