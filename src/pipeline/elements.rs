//! GStreamer building blocks the pipeline's branches share: making and linking elements, the
//! appsrc caps and decoders for each source codec, and the pad-probe helpers the gates use.

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSrc;

use super::{PipelineError, APPSRC_MAX_BYTES};
use crate::media::{AudioConfig, VideoCodec, VideoConfig};

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
pub fn video_decoder(c: &VideoConfig) -> Result<[gst::Element; 2], PipelineError> {
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
pub fn audio_decoder(c: &AudioConfig) -> Result<[Option<gst::Element>; 2], PipelineError> {
    Ok(match c {
        AudioConfig::Aac(_) => [Some(make("aacparse")?), Some(make("avdec_aac")?)],
        AudioConfig::Opus(_) => [None, Some(make("opusdec")?)],
    })
}

pub fn make(factory: &str) -> Result<gst::Element, PipelineError> {
    gst::ElementFactory::make(factory).build().map_err(|e| {
        PipelineError::Build(format!(
            "{factory}: {e} (is its GStreamer plugin installed?)"
        ))
    })
}

pub fn capsfilter(caps: gst::Caps) -> Result<gst::Element, PipelineError> {
    gst::ElementFactory::make("capsfilter")
        .property("caps", caps)
        .build()
        .map_err(|e| PipelineError::Build(format!("capsfilter: {e}")))
}

pub fn link(pipeline: &gst::Pipeline, chain: &[gst::Element]) -> Result<(), PipelineError> {
    pipeline
        .add_many(chain)
        .map_err(|e| PipelineError::Build(e.to_string()))?;
    gst::Element::link_many(chain).map_err(|e| PipelineError::Build(format!("link: {e}")))
}

pub fn appsrc(caps: gst::Caps) -> Result<AppSrc, PipelineError> {
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

/// Drops the buffer a probe holds. Taken and handled rather than returning `Drop`: that logged a
/// GStreamer-CRITICAL per buffer (`gst_mini_object_unref` of NULL) from some probes.
pub fn drop_buffer(info: &mut gst::PadProbeInfo) -> gst::PadProbeReturn {
    drop(info.data.take());
    gst::PadProbeReturn::Handled
}

/// Whether a probe holds a buffer that starts a GOP.
pub fn holds_keyframe(info: &gst::PadProbeInfo) -> bool {
    info.buffer()
        .is_some_and(|b| !b.flags().contains(gst::BufferFlags::DELTA_UNIT))
}

/// A buffer's running time on `pad`'s current segment.
pub fn running_time(pad: &gst::Pad, info: &gst::PadProbeInfo) -> Option<gst::ClockTime> {
    let Some(gst::PadProbeData::Buffer(buffer)) = &info.data else {
        return None;
    };
    let pts = buffer.pts()?;
    let segment = pad.sticky_event::<gst::event::Segment>(0)?;
    let segment = segment.segment().downcast_ref::<gst::ClockTime>()?;
    segment.to_running_time(pts)
}
