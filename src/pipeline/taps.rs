//! The encoded rungs (and the on-demand Opus audio) into the live media hub: `tee ! queue(leaky) ! appsink` after each
//! rung's encoder, turning its buffers into `media` frames (and its caps into codec configs)
//! for the hub's readers. Costs nothing but a queue while no reader is attached: samples are
//! converted only when the feed is wanted. Leaky, so a tap never holds up the encoder or the
//! other branches of its tee.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSink;

use super::PipelineError;
use crate::hub::{Feed, Hub};
use crate::media::{
    AacConfig, AudioConfig, Frame, MediaMessage, OpusConfig, TrackKind, VideoCodec, VideoConfig,
};

/// Buffers a tap queues (about a second of video) before it drops the oldest.
const TAP_QUEUE_BUFFERS: u32 = 32;

/// Branches `tee` into the hub as `feed`.
pub fn tap(
    pipeline: &gst::Pipeline,
    tee: &gst::Element,
    hub: &Arc<Hub>,
    feed: Feed,
) -> Result<(), PipelineError> {
    let queue = super::elements::make("queue")?;
    queue.set_property("max-size-buffers", TAP_QUEUE_BUFFERS);
    queue.set_property("max-size-bytes", 0u32);
    queue.set_property("max-size-time", 0u64);
    queue.set_property_from_str("leaky", "downstream");
    let sink = AppSink::builder().sync(false).build();
    // Not part of preroll: a branch nobody reads must never hold the pipeline's start.
    sink.set_property("async", false);
    let track = match feed {
        Feed::Audio | Feed::Opus => TrackKind::Audio,
        Feed::Video(_) | Feed::Source => TrackKind::Video,
    };
    let hub = Arc::downgrade(hub);
    let (gate, feed_for_gate) = (hub.clone(), feed.clone());
    let last_caps: Mutex<Option<gst::Caps>> = Mutex::new(None);
    sink.set_callbacks(
        gstreamer_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                let Some(hub) = hub.upgrade() else {
                    return Err(gst::FlowError::Eos);
                };
                if !hub.wanted(&feed) {
                    // The last reader left with this sample in the queue.
                    return Ok(gst::FlowSuccess::Ok);
                }
                if let Some(caps) = sample.caps() {
                    let mut last = last_caps.lock().unwrap_or_else(|p| p.into_inner());
                    // Compared in place: a copy per frame only to compare would allocate.
                    if last.as_deref() != Some(caps) {
                        *last = Some(caps.to_owned());
                        if let Some(config) = config_of(caps) {
                            hub.publish(&feed, config);
                        }
                    }
                }
                if let Some(frame) = sample.buffer().and_then(|b| frame_of(b, track)) {
                    hub.publish(&feed, MediaMessage::Frame(frame));
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    pipeline
        .add_many([&queue, sink.upcast_ref()])
        .map_err(|e| PipelineError::Build(e.to_string()))?;
    gst::Element::link_many([tee, &queue, sink.upcast_ref()])
        .map_err(|e| PipelineError::Build(format!("hub tap: {e}")))?;
    if let Some(pad) = queue.static_pad("sink") {
        if matches!(feed_for_gate, Feed::Video(_)) {
            keyframes_on_request(&pad, &gate, &feed_for_gate);
        }
        drop_unless_wanted(&pad, gate, feed_for_gate);
    }
    Ok(())
}

/// A reader's keyframe request becomes an upstream force-key-unit event from the tap: through
/// the rung's tee and parser to its x264enc, which makes the next picture an IDR (with SPS/PPS:
/// `all-headers`).
fn keyframes_on_request(pad: &gst::Pad, hub: &std::sync::Weak<Hub>, feed: &Feed) {
    let Some(hub) = hub.upgrade() else { return };
    let pad = pad.downgrade();
    hub.on_keyframe_request(
        feed,
        Arc::new(move || {
            if let Some(pad) = pad.upgrade() {
                let event = gstreamer_video::UpstreamForceKeyUnitEvent::builder()
                    .all_headers(true)
                    .build();
                // From any thread: the event goes upstream on the caller's thread, and the
                // encoder only flags its next frame.
                let _ = pad.push_event(event);
            }
        }),
    );
}

/// Drops buffers on `pad` while `feed` has no reader: an unread tap or branch never wakes its
/// queue's thread (caps and other events still pass, so a later reader starts right).
fn drop_unless_wanted(pad: &gst::Pad, hub: std::sync::Weak<Hub>, feed: Feed) {
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        match hub.upgrade() {
            Some(hub) if hub.wanted(&feed) => gst::PadProbeReturn::Ok,
            _ => super::elements::drop_buffer(info),
        }
    });
}

/// `raw tee → queue → (gate) → audioconvert → opusenc → hub` as [`Feed::Opus`]: the second
/// audio codec WebRTC readers need, encoded only while one is attached. The gate before the
/// encoder drops every buffer while the feed has no reader, so an idle branch costs a queue,
/// not an encoder; the first buffer after a reader attaches starts the encoder afresh.
pub fn on_demand_opus(
    pipeline: &gst::Pipeline,
    raw: &gst::Element,
    hub: &Arc<Hub>,
) -> Result<(), PipelineError> {
    let make = super::elements::make;
    let queue = make("queue")?;
    queue.set_property_from_str("leaky", "downstream");
    let convert = make("audioconvert")?;
    let enc = make("opusenc")?;
    // Voice and music at WebRTC's usual rate; 20 ms frames, as browsers send.
    enc.set_property("bitrate", 96_000i32);
    let chain = [queue.clone(), convert, enc.clone()];
    pipeline
        .add_many(&chain)
        .map_err(|e| PipelineError::Build(e.to_string()))?;
    gst::Element::link_many([raw, &chain[0], &chain[1], &chain[2]])
        .map_err(|e| PipelineError::Build(format!("opus branch: {e}")))?;
    // Before the queue: an idle branch does not even wake its thread.
    if let Some(pad) = queue.static_pad("sink") {
        drop_unless_wanted(&pad, Arc::downgrade(hub), Feed::Opus);
    }
    tap(pipeline, &enc, hub, Feed::Opus)
}

/// The codec config the encoder's caps carry (avcC for H.264, the AudioSpecificConfig for
/// AAC).
fn config_of(caps: &gst::CapsRef) -> Option<MediaMessage> {
    let s = caps.structure(0)?;
    if s.name() == "audio/x-opus" {
        return Some(MediaMessage::AudioConfig(AudioConfig::Opus(OpusConfig {
            channels: s.get::<i32>("channels").ok()?.clamp(0, 255) as u8,
        })));
    }
    let record = s
        .get::<gst::Buffer>("codec_data")
        .ok()
        .and_then(|b| b.map_readable().ok().map(|m| Bytes::copy_from_slice(&m)))?;
    match s.name().as_str() {
        "video/x-h264" => Some(MediaMessage::VideoConfig(VideoConfig {
            codec: VideoCodec::H264,
            record,
            width: s.get::<i32>("width").ok()?.max(0) as u32,
            height: s.get::<i32>("height").ok()?.max(0) as u32,
        })),
        "audio/mpeg" => Some(MediaMessage::AudioConfig(AudioConfig::Aac(AacConfig {
            asc: record,
            sample_rate: s.get::<i32>("rate").ok()?.max(0) as u32,
            channels: s.get::<i32>("channels").ok()?.clamp(0, 255) as u8,
        }))),
        _ => None,
    }
}

fn frame_of(buffer: &gst::BufferRef, track: TrackKind) -> Option<Frame> {
    let pts = buffer.pts()?.nseconds();
    let dts = buffer.dts().map_or(pts, |d| d.nseconds());
    let data = buffer.map_readable().ok()?;
    Some(Frame {
        track,
        dts,
        pts,
        keyframe: !buffer.flags().contains(gst::BufferFlags::DELTA_UNIT),
        data: Bytes::copy_from_slice(&data),
    })
}
