//! appsink → package: each cmafmux chunk arrives as one buffer list (`[init] + moof/mdat header +
//! frames`); it becomes one part. A header buffer without `DELTA_UNIT` starts a fragment (a new
//! segment); `HEADER|DISCONT` is the init segment (ftyp+moov). The header buffer carries the
//! chunk's PTS and its exact duration, so no MP4 parsing is needed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSink;
use time::OffsetDateTime;

use crate::live::{Counters, SharedStatus};
use crate::package::{PartIn, RenditionSink};

/// Window over which `transcoding_speed` is measured.
pub const SPEED_WINDOW: Duration = Duration::from_secs(10);

/// Media time produced per wall time over the last [`SPEED_WINDOW`].
#[derive(Debug, Default)]
pub struct SpeedWindow {
    entries: VecDeque<(Instant, Duration)>,
    started: Option<Instant>,
}

impl SpeedWindow {
    pub fn add(&mut self, now: Instant, media: Duration) -> f64 {
        let started = *self
            .started
            .get_or_insert(now.checked_sub(media).unwrap_or(now));
        self.entries.push_back((now, media));
        let from = now
            .checked_sub(SPEED_WINDOW)
            .map_or(started, |w| w.max(started));
        while self.entries.front().is_some_and(|(t, _)| *t < from) {
            self.entries.pop_front();
        }
        let produced: Duration = self.entries.iter().map(|(_, d)| *d).sum();
        let wall = now.duration_since(from).max(Duration::from_millis(1));
        produced.as_secs_f64() / wall.as_secs_f64()
    }
}

/// `avc1.PPCCLL` from the avcC box inside an init segment (RFC 6381 §3.3).
pub fn avc_codec_string(init: &[u8]) -> Option<String> {
    let at = init.windows(4).position(|w| w == b"avcC")? + 4;
    let b = init.get(at + 1..at + 4)?;
    Some(format!("avc1.{:02x}{:02x}{:02x}", b[0], b[1], b[2]))
}

/// Where the first rendition's parts report the stream's speed, delay and counts.
#[derive(Clone)]
pub struct Meter {
    pub speed: Arc<Mutex<SpeedWindow>>,
    pub status: SharedStatus,
    pub counters: Arc<Counters>,
}

impl Meter {
    fn part_published(&self, media: Duration, media_end: OffsetDateTime) {
        let value = self
            .speed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(Instant::now(), media);
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_transcoding_speed((value * 1000.0).round() / 1000.0);
        let delay = OffsetDateTime::now_utc() - media_end;
        Counters::add(&self.counters.parts_published, 1);
        self.counters.output_delay_us.store(
            delay.whole_microseconds().clamp(0, i128::from(u64::MAX)) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

pub fn appsink(
    rendition: RenditionSink,
    wall_base: OffsetDateTime,
    meter: Option<Meter>,
) -> AppSink {
    let sink = AppSink::builder().sync(false).build();
    sink.set_property("buffer-list", true);
    sink.set_callbacks(
        gstreamer_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                on_sample(&sample, &rendition, wall_base, meter.as_ref());
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    sink
}

fn on_sample(
    sample: &gst::Sample,
    rendition: &RenditionSink,
    wall_base: OffsetDateTime,
    meter: Option<&Meter>,
) {
    let buffers: Vec<&gst::BufferRef> = match (sample.buffer_list(), sample.buffer()) {
        (Some(list), _) => list.iter().collect(),
        (None, Some(b)) => vec![b],
        (None, None) => return,
    };
    let mut init = None;
    let mut header: Option<&gst::BufferRef> = None;
    let mut data = Vec::new();
    for b in buffers {
        let flags = b.flags();
        if flags.contains(gst::BufferFlags::HEADER) && flags.contains(gst::BufferFlags::DISCONT) {
            init = b.map_readable().ok().map(|m| Bytes::copy_from_slice(&m));
            continue;
        }
        if header.is_none() && flags.contains(gst::BufferFlags::HEADER) {
            header = Some(b);
        }
        if let Ok(m) = b.map_readable() {
            data.extend_from_slice(&m);
        }
    }
    let running = |pts: gst::ClockTime| -> u64 {
        sample
            .segment()
            .and_then(|s| s.downcast_ref::<gst::ClockTime>())
            .and_then(|s| s.to_running_time(pts))
            .unwrap_or(pts)
            .nseconds()
    };
    let part = header.map(|h| {
        let starts_segment = !h.flags().contains(gst::BufferFlags::DELTA_UNIT);
        let pts = h.pts().map(running).unwrap_or(0);
        PartIn {
            starts_segment,
            // A fragment always opens on a keyframe; later chunks may too, but cmafmux erases
            // that flag, so they are not claimed independent.
            independent: starts_segment,
            duration: Duration::from_nanos(h.duration().map_or(0, |d| d.nseconds())),
            pdt: wall_base + Duration::from_nanos(pts),
            data: Bytes::from(std::mem::take(&mut data)),
        }
    });
    let media = part.as_ref().map(|p| (p.duration, p.pdt + p.duration));
    if let Some(init) = init {
        let codecs = avc_codec_string(&init);
        rendition.init(init, codecs);
    }
    if let Some(part) = part {
        rendition.part(part);
    }
    if let (Some(meter), Some((media, media_end))) = (meter, media) {
        meter.part_published(media, media_end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_is_media_over_wall_time() {
        let mut w = SpeedWindow::default();
        let t0 = Instant::now();
        let half = Duration::from_millis(500);
        let mut last = 0.0;
        for i in 1..=40u32 {
            last = w.add(t0 + half * i, half);
        }
        assert!((last - 1.0).abs() < 0.06, "{last}");
        // Half as fast.
        let mut w = SpeedWindow::default();
        for i in 1..=40u32 {
            last = w.add(t0 + half * 2 * i, half);
        }
        assert!((last - 0.5).abs() < 0.06, "{last}");
    }

    #[test]
    fn codec_string_from_avcc() {
        let init = [b"....avcC".as_slice(), &[1, 0x64, 0x00, 0x1f, 0xff]].concat();
        assert_eq!(avc_codec_string(&init).as_deref(), Some("avc1.64001f"));
        assert_eq!(avc_codec_string(b"moov"), None);
    }
}
