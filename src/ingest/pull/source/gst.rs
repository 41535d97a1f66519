//! The source process's GStreamer pipeline: fetches one source URL and hands out its
//! elementary streams re-muxed as MPEG-TS, so every PULL source ends in the same TS → media
//! adapter as an SRT push:
//!
//! ```text
//! urisourcebin (rtmp2src | srtsrc | souphttpsrc + hlsdemux2/dashdemux2, via the gateway) ! parsebin
//!   ! h264parse|h265parse ! byte-stream ─┐
//!   ! aacparse  ! ADTS ────────┴─ mpegtsmux ! appsink → [`Frame::Data`]
//! ```
//!
//! Other codecs are dropped with a log line. The pipeline is never stopped or disposed: its
//! process is killed (see [`super`]).

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSink;
use tokio::sync::mpsc;

use super::wire::Frame;
use super::Container;
use crate::ingest::pull::rewrite::PlaylistKind;
use crate::media::TrackKind;

/// Why a source pipeline could not be built or stopped working; sent to the daemon as the
/// text of a [`Frame::Failed`], the reason its log gives for leaving the source.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("{0}")]
    Init(#[from] gst::glib::Error),
    #[error("{factory}: {error} (is its GStreamer plugin installed?)")]
    Missing {
        factory: &'static str,
        error: gst::glib::BoolError,
    },
    /// Adding, linking or starting elements.
    #[error("{0}")]
    Gst(#[from] gst::glib::BoolError),
    /// A pad or bus the pipeline's shape promises was not there.
    #[error("{0}")]
    MissingPart(&'static str),
    #[error("link to mux: {0:?}")]
    LinkToMux(gst::PadLinkError),
    #[error("link: {0:?}")]
    Link(gst::PadLinkError),
    #[error("{0:?}")]
    PadLink(gst::PadLinkError),
    #[error("linking a stream: {0}")]
    LinkingStream(Box<PipelineError>),
    #[error("source pad: {0}")]
    SourcePad(Box<PipelineError>),
    /// An error message from the pipeline's bus (connect refused, 404, bad data…).
    #[error("{message} ({debug:?})")]
    Bus {
        message: gst::glib::Error,
        debug: Option<gst::glib::GString>,
    },
}

/// Frames queued between GStreamer and the writer to the daemon; a full queue drops data.
const FRAME_QUEUE: usize = 256;
/// HTTP request timeout for souphttpsrc (manifest and segments), in seconds.
const HTTP_TIMEOUT_SECS: u32 = 10;

/// Sends a control frame (not data): waits for room rather than lose it. Nothing runs in an
/// async runtime in the source process, so blocking here is allowed.
fn tell(frames: &mpsc::Sender<Frame>, frame: Frame) {
    let _ = frames.blocking_send(frame);
}

fn make(factory: &'static str) -> Result<gst::Element, PipelineError> {
    gst::ElementFactory::make(factory)
        .build()
        .map_err(|error| PipelineError::Missing { factory, error })
}

/// Whether a stream of these caps is taken: H.264/HEVC video, AAC audio (MPEG-1/2 audio layers
/// are audio/mpeg too, with mpegversion 1).
fn taken_kind(caps: &gst::CapsRef) -> Option<TrackKind> {
    let s = caps.structure(0)?;
    match s.name().as_str() {
        "video/x-h264" | "video/x-h265" => Some(TrackKind::Video),
        // Caps not fixed yet (`mpegversion={2,4}`) are AAC too.
        "audio/mpeg" if s.get::<i32>("mpegversion").ok().is_none_or(|v| v != 1) => {
            Some(TrackKind::Audio)
        }
        _ => None,
    }
}

/// An elementary stream from parsebin → the TS muxer, if it is a codec the pipeline takes.
fn link_stream(
    bin: &gst::Pipeline,
    pad: &gst::Pad,
    mux: &gst::Element,
    stream: i64,
    declared: &DeclaredTracks,
) -> Result<(), PipelineError> {
    let caps = pad
        .current_caps()
        .or_else(|| Some(pad.query_caps(None)))
        .ok_or(PipelineError::MissingPart("no caps"))?;
    let name = caps
        .structure(0)
        .map(|s| s.name().to_string())
        .unwrap_or_default();
    let taken = taken_kind(&caps);
    let video_parser = match taken {
        Some(TrackKind::Video) if name == "video/x-h265" => Some("h265parse"),
        Some(TrackKind::Video) => Some("h264parse"),
        _ => None,
    };
    let aac = taken == Some(TrackKind::Audio);
    let taken = taken.is_some();
    let chain: Vec<gst::Element> = if let Some(parser) = video_parser {
        let parse = make(parser)?;
        // Parameter sets before every keyframe: the TS adapter rebuilds its config from them.
        parse.set_property("config-interval", -1i32);
        vec![
            parse,
            capsfilter(
                gst::Caps::builder(name.as_str())
                    .field("stream-format", "byte-stream")
                    .field("alignment", "au")
                    .build(),
            )?,
            mux_queue()?,
        ]
    } else if aac {
        vec![
            make("aacparse")?,
            capsfilter(
                gst::Caps::builder("audio/mpeg")
                    .field("mpegversion", 4i32)
                    .field("stream-format", "adts")
                    .build(),
            )?,
            mux_queue()?,
        ]
    } else {
        tracing::info!(stream, codec = %caps, "PULL source stream ignored (only H.264, HEVC and AAC are taken)");
        vec![make("fakesink")?]
    };
    bin.add_many(&chain)?;
    gst::Element::link_many(&chain)?;
    // Downstream first, so the first buffer finds a linked path all the way to the muxer.
    if taken {
        let last = chain.last().expect("non-empty");
        let sink = mux
            .request_pad_simple("sink_%d")
            .ok_or(PipelineError::MissingPart("mpegtsmux refused a pad"))?;
        last.static_pad("src")
            .ok_or(PipelineError::MissingPart("no src pad"))?
            .link(&sink)
            .map_err(PipelineError::LinkToMux)?;
    }
    for e in chain.iter().rev() {
        e.sync_state_with_parent()?;
    }
    if taken {
        declared.add(if aac {
            TrackKind::Audio
        } else {
            TrackKind::Video
        });
    }
    pad.link(
        &chain[0]
            .static_pad("sink")
            .ok_or(PipelineError::MissingPart("no sink pad"))?,
    )
    .map_err(PipelineError::Link)?;
    Ok(())
}

/// The tracks the source's demuxer has exposed so far, told to the daemon as they grow.
struct DeclaredTracks {
    tracks: std::sync::Mutex<crate::media::Tracks>,
    events: mpsc::Sender<Frame>,
}

impl DeclaredTracks {
    fn add(&self, kind: TrackKind) {
        let mut t = self.tracks.lock().unwrap_or_else(|p| p.into_inner());
        let before = *t;
        match kind {
            TrackKind::Video => t.video = true,
            TrackKind::Audio => t.audio = true,
        }
        if *t != before {
            tell(&self.events, Frame::Tracks(*t));
        }
    }
}

/// How much of one stream may wait in front of the muxer for the others. mpegtsmux interleaves
/// by time, so a source joined mid-GOP holds its audio until the video's first keyframe: up to
/// a whole GOP (hardware encoders: 4–10 s). With the queue's 1 s default the audio queue filled,
/// blocked the demuxer, and the video that would have unblocked the muxer never came.
const MUX_QUEUE: std::time::Duration = std::time::Duration::from_secs(15);
/// The same queue's bound in bytes, so a high-bitrate video stream cannot grow it without end.
const MUX_QUEUE_BYTES: u32 = 64 * 1024 * 1024;

fn mux_queue() -> Result<gst::Element, PipelineError> {
    let queue = make("queue")?;
    queue.set_property("max-size-time", MUX_QUEUE.as_nanos() as u64);
    queue.set_property("max-size-buffers", 0u32);
    queue.set_property("max-size-bytes", MUX_QUEUE_BYTES);
    Ok(queue)
}

fn capsfilter(caps: gst::Caps) -> Result<gst::Element, PipelineError> {
    Ok(gst::ElementFactory::make("capsfilter")
        .property("caps", caps)
        .build()?)
}

/// Starts fetching `uri` (an HTTP(S) source arrives here as its loopback gateway URL, with
/// the kind of playlist the gateway found there): the pipeline, which the caller keeps for the
/// process's life, and what it reports.
pub fn start(
    stream: i64,
    uri: &str,
    playlist: Option<PlaylistKind>,
    container: Container,
) -> Result<(gst::Pipeline, mpsc::Receiver<Frame>), PipelineError> {
    gst::init()?;
    let (tx, rx) = mpsc::channel(FRAME_QUEUE);
    let pipeline = gst::Pipeline::with_name(&format!("pull-{stream}"));
    let sink = match container {
        Container::Flv => flv_branch(&pipeline, uri)?,
        Container::Ts => demuxing_branch(&pipeline, uri, playlist, stream, &tx)?,
    };
    report_adaptive_demuxers(&pipeline, &tx);
    let data = tx.clone();
    sink.set_callbacks(
        gstreamer_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                if let Some(map) = sample.buffer().and_then(|b| b.map_readable().ok()) {
                    // A full queue means the daemon is behind: drop rather than stall the
                    // source (the TS adapter resynchronises).
                    if data.is_closed() {
                        return Err(gst::FlowError::Flushing);
                    }
                    let _ = data.try_send(Frame::Data(Bytes::copy_from_slice(&map)));
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    let bus = pipeline.bus().ok_or(PipelineError::MissingPart("no bus"))?;
    std::thread::spawn(move || {
        for msg in bus.iter_timed(gst::ClockTime::NONE) {
            let frame = match msg.view() {
                gst::MessageView::Error(e) => Frame::Failed(
                    PipelineError::Bus {
                        message: e.error(),
                        debug: e.debug(),
                    }
                    .to_string(),
                ),
                gst::MessageView::Eos(_) => Frame::Eos,
                _ => continue,
            };
            if tx.blocking_send(frame).is_err() {
                break;
            }
        }
    });
    let pipeline_for_start = pipeline.clone();
    // Going to PLAYING can block on network elements; meanwhile the caller writes out what the
    // pipeline reports.
    std::thread::spawn(move || {
        if let Err(e) = pipeline_for_start.set_state(gst::State::Playing) {
            tracing::debug!(error = %e, "PULL source did not start (the bus says why)");
        }
    });
    Ok((pipeline, rx))
}

/// Each adaptive (HLS/DASH) demuxer the pipeline creates is reported, so the daemon counts the
/// demuxers its source processes hold.
fn report_adaptive_demuxers(pipeline: &gst::Pipeline, tx: &mpsc::Sender<Frame>) {
    let tx = tx.clone();
    pipeline.connect_deep_element_added(move |_, _, element| {
        if let Some(f) = element.factory().filter(|f| f.klass().contains("Adaptive")) {
            tell(&tx, Frame::Demuxer(f.name().to_string()));
        }
    });
}

/// `rtmp2src ! appsink`: what the RTMP server plays, as the FLV stream it is. Read by our own
/// FLV reader and the RTMP push's adapter, so `onMetaData` declares the tracks at once (an RTMP
/// server such as nginx-rtmp sends no video tag before the encoder's next keyframe, and
/// GStreamer's flvdemux exposes no pad before one) and Enhanced RTMP codecs come through.
fn flv_branch(pipeline: &gst::Pipeline, uri: &str) -> Result<AppSink, PipelineError> {
    let src = make("rtmp2src")?;
    src.set_property("location", uri);
    // The server sends in real time: no clock sync needed (its buffers carry no timestamps).
    let sink = AppSink::builder().sync(false).build();
    pipeline.add_many([&src, sink.upcast_ref()])?;
    src.link(&sink)?;
    Ok(sink)
}

/// `urisourcebin ! parsebin` per source pad, each taken stream re-muxed by one `mpegtsmux`
/// into the appsink.
fn demuxing_branch(
    pipeline: &gst::Pipeline,
    uri: &str,
    playlist: Option<PlaylistKind>,
    stream: i64,
    tx: &mpsc::Sender<Frame>,
) -> Result<AppSink, PipelineError> {
    let src = make("urisourcebin")?;
    src.set_property("uri", uri);
    let mux = make("mpegtsmux")?;
    mux.set_property("alignment", 7i32);
    // Synchronised to the clock: an HLS/DASH demuxer fetches its first segments in a burst, which
    // must reach the outputs in real time like a pushed stream, not ahead of the wall clock.
    let sink = AppSink::builder().sync(true).build();
    pipeline.add_many([&src, &mux, sink.upcast_ref()])?;
    mux.link(&sink)?;
    tune_http_source(&src);
    if let Some(kind) = playlist {
        force_playlist_caps(pipeline, &src, kind);
    }
    let declared = std::sync::Arc::new(DeclaredTracks {
        tracks: Default::default(),
        events: tx.clone(),
    });
    declare_demuxer_pads(pipeline, declared.clone());
    parse_each_source_pad(pipeline, &src, &mux, stream, declared, tx);
    Ok(sink)
}

/// Sets the HTTP source urisourcebin picks (our gateway's) to our timeout and user agent.
fn tune_http_source(src: &gst::Element) {
    src.connect("source-setup", false, move |args| {
        let element = args[1].get::<gst::Element>().ok()?;
        let factory = element.factory().map(|f| f.name().to_string());
        // srtsrc keeps retrying a refused connection (the first-data timeout moves on);
        // `auto-reconnect=false` would end it at once, but GStreamer 1.22's srtsrc then aborts
        // the process (g_mutex_clear on a locked mutex) when the pipeline stops.
        if factory.as_deref() == Some("souphttpsrc") {
            element.set_property("timeout", HTTP_TIMEOUT_SECS);
            element.set_property("user-agent", "livepack-pull");
        }
        None
    });
}

/// urisourcebin typefinds what souphttpsrc reads; a known playlist is forced instead.
fn force_playlist_caps(pipeline: &gst::Pipeline, src: &gst::Element, kind: PlaylistKind) {
    let caps = gst::Caps::builder(kind.caps()).build();
    let bin = src.clone();
    pipeline.connect_deep_element_added(move |_, parent, element| {
        let typefind = element.factory().is_some_and(|f| f.name() == "typefind");
        if typefind && parent.upcast_ref::<gst::Element>() == &bin {
            element.set_property("force-caps", &caps);
        }
    });
}

/// The container's demuxer (flvdemux, tsdemux, qtdemux… inside parsebin or an adaptive
/// demuxer) adds a pad per stream as soon as its headers say so: the declaration. parsebin
/// itself exposes a video stream only once its parser has a keyframe.
fn declare_demuxer_pads(pipeline: &gst::Pipeline, declared: std::sync::Arc<DeclaredTracks>) {
    pipeline.connect_deep_element_added(move |_, _, element| {
        let demuxer = element
            .factory()
            .is_some_and(|f| f.klass().contains("Demuxer") && !f.klass().contains("Adaptive"));
        if !demuxer {
            return;
        }
        let declared = declared.clone();
        element.connect_pad_added(move |_, pad| {
            let kind = pad
                .current_caps()
                .or_else(|| {
                    pad.pad_template_caps()
                        .is_fixed()
                        .then(|| pad.pad_template_caps())
                })
                .and_then(|caps| taken_kind(&caps));
            if let Some(kind) = kind {
                declared.add(kind);
            }
        });
    });
}

/// Each source pad (one per adaptive stream) gets its own parsebin, whose streams are linked
/// into `mux`; failures are reported as [`Frame::Failed`].
fn parse_each_source_pad(
    pipeline: &gst::Pipeline,
    src: &gst::Element,
    mux: &gst::Element,
    stream: i64,
    declared: std::sync::Arc<DeclaredTracks>,
    tx: &mpsc::Sender<Frame>,
) {
    let weak = pipeline.downgrade();
    let mux_for_pads = mux.clone();
    let errors = tx.clone();
    src.connect_pad_added(move |_, pad| {
        let Some(pipeline) = weak.upgrade() else {
            return;
        };
        let result = (|| -> Result<(), PipelineError> {
            let parse = make("parsebin")?;
            pipeline.add(&parse)?;
            let weak = pipeline.downgrade();
            let mux = mux_for_pads.clone();
            let errors = errors.clone();
            let declared = declared.clone();
            parse.connect_pad_added(move |_, pad| {
                let Some(pipeline) = weak.upgrade() else {
                    return;
                };
                if let Err(e) = link_stream(&pipeline, pad, &mux, stream, &declared) {
                    let error = PipelineError::LinkingStream(Box::new(e));
                    tell(&errors, Frame::Failed(error.to_string()));
                }
            });
            parse.sync_state_with_parent()?;
            pad.link(
                &parse
                    .static_pad("sink")
                    .ok_or(PipelineError::MissingPart("no sink pad"))?,
            )
            .map_err(PipelineError::PadLink)?;
            Ok(())
        })();
        if let Err(e) = result {
            let error = PipelineError::SourcePad(Box::new(e));
            tell(&errors, Frame::Failed(error.to_string()));
        }
    });
}
