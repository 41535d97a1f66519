//! The encoded rungs (and the on-demand Opus audio) into the live media hub: `tee ! queue !
//! appsink` after each rung's encoder, turning its buffers into `media` frames (and its caps
//! into codec configs) for the hub's readers — the package first among them. Costs nothing but
//! a queue while no reader is attached: samples are converted only when the feed is wanted.
//! Publishing never waits (a slow reader loses, counted), so the queue only fills when its
//! thread is starved; it then holds up the encoder rather than drop, because what a tap loses
//! every reader loses, the package included.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSink;

use super::PipelineError;
use crate::hub::{Closer, Feed, Hub};
use crate::media::{
    AacConfig, AudioConfig, Frame, MediaMessage, OpusConfig, TrackKind, VideoCodec, VideoConfig,
};

/// Branches `tee` into the hub as `feed`. `ends` are this pipeline's own readers of the feed
/// (the package's), closed when the tap sees the end of the stream: what was published reaches
/// them, then their end. Other readers stay attached across a pipeline rebuild.
pub fn tap(
    pipeline: &gst::Pipeline,
    tee: &gst::Element,
    hub: &Arc<Hub>,
    feed: Feed,
    ends: Vec<Closer>,
) -> Result<(), PipelineError> {
    let queue = super::elements::make("queue")?;
    // Bounded by time like the rungs' own queues (two seconds), never leaky: see the module.
    queue.set_property("max-size-buffers", 0u32);
    queue.set_property("max-size-bytes", 0u32);
    queue.set_property("max-size-time", 2_000_000_000u64);
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
                let segment = sample
                    .segment()
                    .and_then(|s| s.downcast_ref::<gst::ClockTime>());
                if let Some(frame) = sample
                    .buffer_owned()
                    .zip(segment)
                    .and_then(|(b, segment)| frame_of(b, segment, track))
                {
                    hub.publish(&feed, MediaMessage::Frame(frame));
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .eos(move |_| ends.iter().for_each(Closer::close))
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
/// `all-headers`) — or, for a request at a media time, the first picture at or after it (the
/// tap's frames are on the running time, which is what the event names).
fn keyframes_on_request(pad: &gst::Pad, hub: &std::sync::Weak<Hub>, feed: &Feed) {
    let Some(hub) = hub.upgrade() else { return };
    let pad = pad.downgrade();
    hub.on_keyframe_request(
        feed,
        Arc::new(move |at| {
            if let Some(pad) = pad.upgrade() {
                let event = gstreamer_video::UpstreamForceKeyUnitEvent::builder()
                    .running_time(at.map(gst::ClockTime::from_nseconds))
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
    tap(pipeline, &enc, hub, Feed::Opus, Vec::new())
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

/// A frame on the stream's running time (the source's timeline): an encoder's own timestamps
/// may be offset (x264enc's start at 1000 h, so that DTS never go below zero).
/// The frame's bytes are the encoder's buffer itself, mapped (no copy): readers hold it for as
/// long as they keep the frame.
fn frame_of(
    buffer: gst::Buffer,
    segment: &gst::FormattedSegment<gst::ClockTime>,
    track: TrackKind,
) -> Option<Frame> {
    let pts = segment.to_running_time(buffer.pts()?)?.nseconds();
    let dts = match buffer.dts() {
        // Before the start only with reordered frames, which the rungs do not make (zerolatency).
        Some(dts) => segment
            .to_running_time_full(dts)
            .and_then(|d| d.positive())
            .map_or(0, gst::ClockTime::nseconds),
        None => pts,
    };
    let keyframe = !buffer.flags().contains(gst::BufferFlags::DELTA_UNIT);
    let duration = buffer.duration().map(gst::ClockTime::nseconds);
    let data = buffer.into_mapped_buffer_readable().ok()?;
    Some(Frame {
        track,
        dts,
        pts,
        keyframe,
        duration,
        data: Bytes::from_owner(data),
    })
}
