//! Bounds a stream's output delay when its transcode falls behind real time. The backlog of a
//! slow transcode gathers in the source's appsrc (the queues after it are bounded and block);
//! once it holds more than [`SKIP_ABOVE`] of media at a keyframe, the decoders' input skips that
//! whole GOP: `videorate` repeats the last picture over the gap, which the encoders take at a
//! fraction of a real picture's cost, so the outputs catch up instead of drifting further
//! behind. Whole GOPs only, so no picture is decoded without its references; the source remux
//! (origin recordings) and the audio keep every frame. Each skip is counted and logged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSrc;

use super::elements::{drop_buffer, holds_keyframe};
use crate::live::Counters;

/// The media queued ahead of the decoder past which a GOP is skipped: with the 2 s the rungs'
/// queues hold, the outputs stay within about 3 s of the input.
pub const SKIP_ABOVE: Duration = Duration::from_millis(1000);

/// Installs the skipping on `pad` (the decoder side of the source tee), reading the backlog
/// from `src`.
pub fn install(pad: &gst::Pad, src: &AppSrc, stream: i64, counters: Arc<Counters>) {
    // Weak: the probe lives in the pipeline, which holds the appsrc.
    let src = src.downgrade();
    let skipping = AtomicBool::new(false);
    // The probe's frames (up to a second of them) come in one burst at the start: the first
    // GOP is never skipped.
    let started = AtomicBool::new(false);
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        if holds_keyframe(info) && started.swap(true, Ordering::Relaxed) {
            let backlog = src
                .upgrade()
                .and_then(|s| s.current_level_time())
                .map_or(Duration::ZERO, |t| Duration::from_nanos(t.nseconds()));
            let skip = backlog > SKIP_ABOVE;
            if skip {
                let n = counters.gops_skipped.fetch_add(1, Ordering::Relaxed) + 1;
                if n == 1 || n.is_multiple_of(10) {
                    tracing::warn!(
                        stream,
                        backlog_ms = backlog.as_millis() as u64,
                        gops_skipped = n,
                        "the transcode is behind real time: a GOP skipped to catch up"
                    );
                }
            }
            skipping.store(skip, Ordering::Relaxed);
        }
        if skipping.load(Ordering::Relaxed) {
            return drop_buffer(info);
        }
        gst::PadProbeReturn::Ok
    });
}
