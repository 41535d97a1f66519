//! What pad probes ask of the buffer they hold: its running time, whether it starts a GOP,
//! and how to drop it cleanly. Shared by the pipeline's builder and the TS gate.

use gstreamer as gst;
use gstreamer::prelude::*;

/// Drops the buffer a probe holds. Taken and handled rather than returning `Drop`: that logged a
/// GStreamer-CRITICAL per buffer (`gst_mini_object_unref` of NULL) from some probes.
pub(super) fn drop_buffer(info: &mut gst::PadProbeInfo) -> gst::PadProbeReturn {
    drop(info.data.take());
    gst::PadProbeReturn::Handled
}

/// Whether a probe holds a buffer that starts a GOP.
pub(super) fn holds_keyframe(info: &gst::PadProbeInfo) -> bool {
    info.buffer()
        .is_some_and(|b| !b.flags().contains(gst::BufferFlags::DELTA_UNIT))
}

/// A buffer's running time on `pad`'s current segment.
pub(super) fn running_time(pad: &gst::Pad, info: &gst::PadProbeInfo) -> Option<gst::ClockTime> {
    let Some(gst::PadProbeData::Buffer(buffer)) = &info.data else {
        return None;
    };
    let pts = buffer.pts()?;
    let segment = pad.sticky_event::<gst::event::Segment>(0)?;
    let segment = segment.segment().downcast_ref::<gst::ClockTime>()?;
    segment.to_running_time(pts)
}
