//! Decoded pictures in recycled memory: each picture leaves the decoder copied into a block
//! that comes back when the last buffer sharing it is gone, and is handed out again.
//!
//! Why: a 720p picture is 1.4 MB, above glibc's mmap threshold, so every fresh one is a new
//! mapping whose pages fault in on first write (10.7 k faults/s per 25 fps stream) and whose
//! unmapping shoots down TLBs. GStreamer's buffer pools should recycle them but cannot here:
//! `videorate` keeps the previous picture and pushes a copy that *shares* its memory, and a pool
//! discards a buffer whose memory is still shared when it comes back ("memory not writable");
//! with libav's direct rendering, every picture libav still keeps as a reference was also
//! deep-copied into fresh memory. The blocks here are recycled when the memory itself is freed,
//! so sharing is harmless and nothing is reused while any buffer still reads it; the decoder's
//! own pool gets each buffer back at once, unshared, and recycles it too. The price is one
//! memcpy of the picture into warm memory, against a fresh mapping per picture.

use std::sync::{Arc, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_video as gst_video;

/// Spare blocks kept per decoder. Pictures in flight hold their own blocks; the spares only
/// absorb the ebb and flow between them. Measured on a 720p stream: 1 or 2 spares already take
/// page faults from 10.7 k/s to ~250/s; 8 cost 8 MiB more RSS for nothing. A backlog that clears
/// (queues hold up to 2 s) returns more blocks, and the surplus is freed, not kept.
const SPARE_BLOCKS: usize = 2;

/// Blocks handed back, all of one size (a decoder's pictures share one size; a size change
/// drops the old ones).
#[derive(Default)]
struct Spares(Mutex<Vec<Box<[u8]>>>);

impl Spares {
    fn take(&self, len: usize) -> Box<[u8]> {
        let mut spares = self.0.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(block) = spares.pop() {
            if block.len() == len {
                return block;
            }
        }
        drop(spares);
        vec![0u8; len].into_boxed_slice()
    }

    fn give_back(&self, block: Box<[u8]>) {
        let mut spares = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if spares.len() < SPARE_BLOCKS && spares.last().is_none_or(|b| b.len() == block.len()) {
            spares.push(block);
        }
    }
}

/// One block lent to a `GstMemory`; dropped when GStreamer frees that memory, i.e. after the
/// last buffer sharing it is gone.
struct Lent {
    block: Box<[u8]>,
    spares: Arc<Spares>,
}

impl AsMut<[u8]> for Lent {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.block
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.spares.give_back(std::mem::take(&mut self.block));
    }
}

/// Makes every picture `decoder` pushes leave it in a recycled block (see the module doc):
/// same bytes, so the same layout (strides, plane offsets) its video meta describes, same
/// timestamps, flags and metas. Decoders that render into memory of their own (libav's direct
/// rendering) should have that turned off, or they deep-copy reference pictures anyway.
pub fn recycle_output(decoder: &gst::Element) {
    let Some(pad) = decoder.static_pad("src") else {
        return;
    };
    let spares = Arc::new(Spares::default());
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        if let Some(gst::PadProbeData::Buffer(buffer)) = info.data.as_mut() {
            if let Some(copy) = recycled_copy(&spares, buffer) {
                *buffer = copy;
            }
        }
        gst::PadProbeReturn::Ok
    });
}

/// `buffer`'s bytes, timestamps, flags and metas in a recycled block; `None` (the buffer goes
/// on as it is) when it cannot be read.
fn recycled_copy(spares: &Arc<Spares>, buffer: &gst::BufferRef) -> Option<gst::Buffer> {
    let mut block = spares.take(buffer.size());
    buffer.copy_to_slice(0, &mut block).ok()?;
    let mut copy = gst::Buffer::from_mut_slice(Lent {
        block,
        spares: spares.clone(),
    });
    buffer
        .copy_into(
            copy.get_mut().expect("a fresh buffer is writable"),
            gst::BufferCopyFlags::FLAGS
                | gst::BufferCopyFlags::TIMESTAMPS
                | gst::BufferCopyFlags::META,
            ..,
        )
        .ok()?;
    // The video meta (strides, plane offsets) is tagged as describing memory, so a copy without
    // the memory leaves it out; the bytes are the same, so is the layout.
    if let Some(meta) = buffer.meta::<gst_video::VideoMeta>() {
        gst_video::VideoMeta::add_full(
            copy.get_mut().expect("a fresh buffer is writable"),
            meta.video_frame_flags(),
            meta.format(),
            meta.width(),
            meta.height(),
            meta.offset(),
            meta.stride(),
        )
        .ok()?;
    }
    Some(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picture(fill: u8, pts_ms: u64) -> gst::Buffer {
        let mut buffer = gst::Buffer::from_slice(vec![fill; 64 * 48 * 3 / 2 + 256]);
        {
            let b = buffer.get_mut().unwrap();
            b.set_pts(gst::ClockTime::from_mseconds(pts_ms));
            b.set_duration(gst::ClockTime::from_mseconds(40));
            b.set_flags(gst::BufferFlags::DELTA_UNIT);
            // A padded layout (stride 80, planes at their own offsets), as decoders produce.
            gst_video::VideoMeta::add_full(
                b,
                gst_video::VideoFrameFlags::empty(),
                gst_video::VideoFormat::I420,
                64,
                48,
                &[0, 80 * 48, 80 * 48 + 48 * 24],
                &[80, 48, 48],
            )
            .unwrap();
        }
        buffer
    }

    fn spare_count(spares: &Spares) -> usize {
        spares.0.lock().unwrap().len()
    }

    #[test]
    fn a_copy_keeps_bytes_timing_flags_and_layout() {
        gst::init().unwrap();
        let spares = Arc::new(Spares::default());
        let src = picture(7, 120);
        let copy = recycled_copy(&spares, &src).unwrap();
        assert_eq!(*copy.map_readable().unwrap(), *src.map_readable().unwrap());
        assert_eq!(copy.pts(), src.pts());
        assert_eq!(copy.duration(), src.duration());
        assert!(copy.flags().contains(gst::BufferFlags::DELTA_UNIT));
        let meta = copy
            .meta::<gst_video::VideoMeta>()
            .expect("video meta kept");
        assert_eq!(meta.stride(), &[80, 48, 48]);
        assert_eq!(meta.offset(), &[0, 80 * 48, 80 * 48 + 48 * 24]);
    }

    #[test]
    fn a_block_is_reused_only_after_every_buffer_sharing_it_is_gone() {
        gst::init().unwrap();
        let spares = Arc::new(Spares::default());
        let first = recycled_copy(&spares, &picture(1, 0)).unwrap();
        let address = first.map_readable().unwrap().as_ptr();
        // What videorate does: a metadata copy that shares the memory, pushed on while the
        // original is kept.
        let shared = first.copy();
        drop(first);
        assert_eq!(
            spare_count(&spares),
            0,
            "still read through the shared copy"
        );
        let second = recycled_copy(&spares, &picture(2, 40)).unwrap();
        assert_ne!(second.map_readable().unwrap().as_ptr(), address);
        assert!(
            shared.map_readable().unwrap().iter().all(|&b| b == 1),
            "not overwritten"
        );
        drop(shared);
        assert_eq!(spare_count(&spares), 1);
        let third = recycled_copy(&spares, &picture(3, 80)).unwrap();
        assert_eq!(
            third.map_readable().unwrap().as_ptr(),
            address,
            "the block came back"
        );
        assert!(third.map_readable().unwrap().iter().all(|&b| b == 3));
        // Spares are bounded, and a new picture size drops blocks of the old one.
        drop((second, third));
        assert_eq!(spare_count(&spares), SPARE_BLOCKS);
        let other = gst::Buffer::from_slice(vec![9u8; 100]);
        drop(recycled_copy(&spares, &other).unwrap());
        assert_eq!(spare_count(&spares), 1);
    }

    /// Decodes `frames` of a moving test pattern through `videorate` (which shares memory) and
    /// returns every output picture's bytes and timestamp.
    fn decode(recycle: bool, frames: u32) -> Vec<(Option<gst::ClockTime>, Vec<u8>)> {
        let pipeline = gst::parse::launch(&format!(
            "videotestsrc pattern=ball num-buffers={frames} ! video/x-raw,width=320,height=240,framerate=25/1 \
             ! x264enc speed-preset=ultrafast tune=zerolatency key-int-max=10 ! h264parse \
             ! avdec_h264 name=dec direct-rendering={} ! videorate ! video/x-raw,framerate=25/1 \
             ! appsink name=out sync=false",
            !recycle
        ))
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
        if recycle {
            recycle_output(&pipeline.by_name("dec").unwrap());
        }
        let sink = pipeline
            .by_name("out")
            .unwrap()
            .downcast::<gstreamer_app::AppSink>()
            .unwrap();
        pipeline.set_state(gst::State::Playing).unwrap();
        let mut out = Vec::new();
        while let Ok(sample) = sink.pull_sample() {
            let buffer = sample.buffer().unwrap();
            out.push((buffer.pts(), buffer.map_readable().unwrap().to_vec()));
        }
        pipeline.set_state(gst::State::Null).unwrap();
        out
    }

    #[test]
    fn recycled_decoding_outputs_the_same_pictures() {
        gst::init().unwrap();
        let plain = decode(false, 60);
        let recycled = decode(true, 60);
        assert_eq!(plain.len(), 60);
        assert_eq!(recycled.len(), plain.len());
        for (i, (a, b)) in plain.iter().zip(&recycled).enumerate() {
            assert_eq!(a.0, b.0, "picture {i} timestamp");
            assert!(a.1 == b.1, "picture {i} differs");
        }
        // Not one picture the same as the next: a block reused too early would repeat one.
        assert!(recycled.windows(2).all(|w| w[0].1 != w[1].1));
    }
}
