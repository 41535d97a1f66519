//! The package as one reader of the live media hub: per rendition, a hub reader on its own
//! thread feeding `appsrc → cmafmux → appsink` (the package's sink), in the stream's pipeline.
//! The muxer's fragment-start keyframe requests go back through the hub to the rung's encoder
//! ([`Hub::request_keyframe_at`]), so every rung still cuts its segments at the same times.
//!
//! The reader's queue is deep (seconds of media) and, like every hub reader's, lossy: a package
//! that falls that far behind loses frames rather than stall the encoders and the other
//! readers. A loss is counted in the hub's metrics and logged; the rendition then skips to the
//! next keyframe (asked for at once), so its segments never carry a picture without its
//! references.

use std::sync::Arc;
use std::thread::JoinHandle;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSrc;

use super::PipelineError;
use crate::hub::{Closer, Feed, Hub, Reader, ReaderOptions};
use crate::media::{Frame, MediaMessage, VideoCodec, VideoConfig};

/// Messages a rendition's reader holds before it loses the newest: ~8 s of 30 fps video. The
/// muxer's sink never waits for storage (segments go to the package's writer thread), so only a
/// thread starved for seconds falls this far behind.
const READER_CAPACITY: usize = 256;
/// What the appsrc queues before the reader's thread waits for the muxer.
const APPSRC_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// One rendition's reader: its thread and how to end it.
pub struct PackageReader {
    closer: Closer,
    thread: Option<JoinHandle<()>>,
}

/// Every package reader of one pipeline.
#[derive(Default)]
pub struct PackageReaders(Vec<PackageReader>);

impl PackageReaders {
    pub fn push(&mut self, reader: PackageReader) {
        self.0.push(reader);
    }

    pub fn last_closer(&self) -> Option<Closer> {
        self.0.last().map(|r| r.closer.clone())
    }

    /// Ends every reader and waits for its thread. After the pipeline stopped: a reader still
    /// waiting for media (the pipeline failed before its end reached the taps) wakes here, and
    /// one waiting on its appsrc was released by the pipeline's flush.
    pub fn stop(mut self) {
        self.close();
        for r in &mut self.0 {
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl PackageReaders {
    fn close(&self) {
        for r in &self.0 {
            r.closer.close();
        }
    }
}

/// A pipeline that failed to build or start never reaches [`PackageReaders::stop`]: its
/// readers still end (their threads exit on their own).
impl Drop for PackageReaders {
    fn drop(&mut self) {
        self.close();
    }
}

/// Subscribes the package to `feed` and starts its thread. Returns the appsrc (the muxer's
/// input, where the caller links it) and the reader, whose closer the feed's tap gets: the
/// tap's end of stream ends the reader, which then ends the muxer's input after the last frame.
/// `fps`: a video rung's frame rate (all rungs run at the plan's).
pub fn attach(
    hub: &Arc<Hub>,
    feed: Feed,
    fps: Option<u32>,
) -> Result<(AppSrc, PackageReader), PipelineError> {
    let src = AppSrc::builder()
        .format(gst::Format::Time)
        // Not live: a live source puts cmafmux in live mode, where it aggregates on timeouts —
        // before the first caps arrive, which it takes for a stream without any track. The
        // pipeline is live through its own source; every sink here is `sync=false`.
        .is_live(false)
        .max_bytes(APPSRC_MAX_BYTES)
        .block(true)
        .build();
    let name = match &feed {
        Feed::Video(rung) => rung.clone(),
        other => format!("{other:?}").to_lowercase(),
    };
    let reader = hub.subscribe(
        feed.clone(),
        ReaderOptions::new(format!("package {name}"), READER_CAPACITY),
    );
    forward_keyframe_requests(&src, hub, &feed);
    let closer = reader.closer();
    let feeder = Feeder {
        src: src.clone(),
        hub: Arc::downgrade(hub),
        feed,
        fps,
        gap: Gap::default(),
    };
    let thread = std::thread::Builder::new()
        .name(format!("package-{name}"))
        .spawn(move || feeder.run(reader))
        .map_err(|e| PipelineError::Build(format!("package reader thread: {e}")))?;
    Ok((
        src,
        PackageReader {
            closer,
            thread: Some(thread),
        },
    ))
}

/// The muxer's upstream force-key-unit events (sent at each fragment start for the next one)
/// stop at the appsrc; they go on as keyframe requests through the hub, at the same media
/// time (the appsrc's buffers carry the encoder's timestamps).
fn forward_keyframe_requests(src: &AppSrc, hub: &Arc<Hub>, feed: &Feed) {
    let Some(pad) = src.static_pad("src") else {
        return;
    };
    let (hub, feed) = (Arc::downgrade(hub), feed.clone());
    pad.add_probe(gst::PadProbeType::EVENT_UPSTREAM, move |pad, info| {
        let Some(event) = info.event() else {
            return gst::PadProbeReturn::Ok;
        };
        let Ok(fku) = gstreamer_video::UpstreamForceKeyUnitEvent::parse(event) else {
            return gst::PadProbeReturn::Ok;
        };
        if let Some(hub) = hub.upgrade() {
            let pts = fku.running_time.and_then(|rt| {
                let segment = pad.sticky_event::<gst::event::Segment>(0)?;
                let segment = segment.segment().downcast_ref::<gst::ClockTime>()?;
                segment.position_from_running_time(rt)
            });
            match pts {
                Some(pts) => hub.request_keyframe_at(&feed, pts.nseconds()),
                // The muxer found itself late: a keyframe now.
                None => hub.request_keyframe(&feed),
            };
        }
        // Taken and handled, not `Drop`: that unrefs a NULL event afterwards (a GStreamer-CRITICAL
        // per fragment).
        drop(info.data.take());
        gst::PadProbeReturn::Handled
    });
}

struct Feeder {
    src: AppSrc,
    hub: std::sync::Weak<Hub>,
    feed: Feed,
    /// A video rung's frame rate (`None`: audio).
    fps: Option<u32>,
    gap: Gap,
}

/// A loss and what follows it: the frames up to the next keyframe, which would decode against
/// pictures that never reached the muxer.
#[derive(Default)]
struct Gap {
    /// The reader's loss count as last seen.
    seen: u64,
    open: bool,
}

impl Gap {
    /// Messages lost since the last call (`dropped`: the reader's count now), if any. The hub
    /// loses the newest message to a full queue, so the gap lies after what the reader holds:
    /// skipping from here covers it.
    fn lost(&mut self, dropped: u64) -> Option<u64> {
        let lost = dropped.checked_sub(self.seen).filter(|n| *n > 0)?;
        self.seen = dropped;
        self.open = true;
        Some(lost)
    }

    /// Whether a frame goes to the muxer: after a loss, not before the next keyframe.
    fn admits(&mut self, keyframe: bool) -> bool {
        self.open &= !keyframe;
        !self.open
    }
}

impl Feeder {
    fn run(mut self, mut reader: Reader) {
        while let Some(msg) = reader.blocking_recv() {
            if let Some(lost) = self.gap.lost(reader.dropped()) {
                tracing::warn!(
                    feed = ?self.feed,
                    lost,
                    "the package fell behind its hub feed and lost frames; resuming at the next keyframe"
                );
                if let Some(hub) = self.hub.upgrade() {
                    hub.request_keyframe(&self.feed);
                }
            }
            let pushed = match msg {
                MediaMessage::VideoConfig(c) => {
                    self.src.set_caps(Some(&self.video_caps(&c)));
                    Ok(gst::FlowSuccess::Ok)
                }
                MediaMessage::AudioConfig(c) => {
                    self.src.set_caps(Some(&super::elements::audio_caps(&c)));
                    Ok(gst::FlowSuccess::Ok)
                }
                MediaMessage::Frame(f) => self.push(f),
                MediaMessage::Tracks(_) | MediaMessage::Discontinuity { .. } => {
                    Ok(gst::FlowSuccess::Ok)
                }
            };
            if pushed.is_err() {
                // Flushing: the pipeline is stopping.
                return;
            }
        }
        let _ = self.src.end_of_stream();
    }

    fn video_caps(&self, c: &VideoConfig) -> gst::Caps {
        let mut caps = super::elements::video_caps(c);
        // What the encoder's own caps said beyond the hub's config: the frame rate, square
        // pixels and the colorimetry the pipeline fixed at its head, so the muxer writes the
        // same `moov`.
        if let (Some(fps), VideoCodec::H264, Some(caps)) = (self.fps, c.codec, caps.get_mut()) {
            caps.set("width", c.width as i32);
            caps.set("height", c.height as i32);
            caps.set("framerate", gst::Fraction::new(fps as i32, 1));
            caps.set("pixel-aspect-ratio", gst::Fraction::new(1, 1));
            caps.set("colorimetry", "bt709");
            caps.set("interlace-mode", "progressive");
        }
        caps
    }

    fn push(&mut self, f: Frame) -> Result<gst::FlowSuccess, gst::FlowError> {
        if !self.gap.admits(f.keyframe) {
            return Ok(gst::FlowSuccess::Ok);
        }
        let mut buffer = gst::Buffer::from_slice(f.data);
        {
            let b = buffer.get_mut().expect("a new buffer is writable");
            b.set_pts(gst::ClockTime::from_nseconds(f.pts));
            b.set_dts(gst::ClockTime::from_nseconds(f.dts));
            b.set_duration(f.duration.map(gst::ClockTime::from_nseconds));
            if !f.keyframe {
                b.set_flags(gst::BufferFlags::DELTA_UNIT);
            }
        }
        self.src.push_buffer(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::Gap;

    #[test]
    fn after_a_loss_frames_wait_for_the_next_keyframe() {
        let mut gap = Gap::default();
        assert_eq!(gap.lost(0), None);
        assert!(gap.admits(false), "nothing lost: every frame goes");
        assert_eq!(gap.lost(3), Some(3));
        assert!(!gap.admits(false) && !gap.admits(false));
        assert!(gap.admits(true), "the keyframe restarts");
        assert!(gap.admits(false));
        assert_eq!(gap.lost(3), None, "the same count is no new loss");
        assert_eq!(gap.lost(5), Some(2));
        assert!(
            gap.admits(true),
            "a loss right before a keyframe skips nothing"
        );
    }
}
