//! The stream's screenshot: one decoded picture every [`SCREENSHOT_INTERVAL`], scaled and
//! JPEG-encoded off the renditions' path, into the package.

use std::sync::Arc;

use gstreamer as gst;
use gstreamer::prelude::*;

use super::elements::{capsfilter, drop_buffer, link, make};
use super::plan::{JPEG_QUALITY, SCREENSHOT_INTERVAL, SCREENSHOT_MAX_WIDTH};
use super::PipelineError;
use crate::media::VideoConfig;

/// `tee → queue → (one frame per interval) → videoscale → jpegenc → appsink`; frames between
/// screenshots are dropped by a pad probe before any scaling or encoding work.
pub fn branch(
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
