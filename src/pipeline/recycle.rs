//! Decoded pictures in recycled memory: the decoder copies each picture out of libav into a
//! block that comes back when the last buffer sharing it is gone, and is handed out again.
//!
//! Why: a 720p picture is 1.4 MB, above glibc's mmap threshold, so every fresh one is a new
//! mapping whose pages fault in on first write (10.7 k faults/s per 25 fps stream) and whose
//! unmapping shoots down TLBs. The decoder's own buffer pool should recycle them but cannot here:
//! `videorate` keeps the previous picture and pushes a copy that *shares* its memory, and a pool
//! discards a buffer whose memory is still shared when it comes back ("memory not writable");
//! with libav's direct rendering, every picture libav still keeps as a reference was also
//! deep-copied into fresh memory. So the decoder is handed a pool of our own (answering its
//! allocation query) whose buffers wrap recycled blocks: a buffer coming back is simply let go,
//! and its block returns when the memory itself is freed, so sharing is harmless and nothing is
//! reused while any buffer still reads it. libav's one copy of each picture out of its own frame
//! lands in warm memory, and there is no second copy.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;
use gstreamer::subclass::prelude::*;
use gstreamer_video as gst_video;

/// Spare blocks kept per decoder. Pictures in flight hold their own blocks; the spares only
/// absorb the ebb and flow between them. Measured on a 720p30 stream (blocks taken by the
/// decoder when it starts a picture): 2 spares still left ~6 fresh blocks a second (2 k page
/// faults/s), 4 leave ~0.2 a second (the daemon's faults at the level of the earlier copy-out
/// design, RSS unchanged); 8 cost 6 MiB more RSS for nothing. A backlog that clears (queues hold
/// up to 2 s) returns more blocks, and the surplus is freed, not kept.
const SPARE_BLOCKS: usize = 4;

/// Blocks handed back, all of one size (a decoder's pictures share one size; a size change
/// drops the old ones).
#[derive(Default)]
struct Spares {
    blocks: Mutex<Vec<Box<[u8]>>>,
    /// Blocks allocated fresh rather than taken back: the figure recycling keeps low.
    fresh: AtomicUsize,
}

impl Spares {
    fn take(&self, len: usize) -> Box<[u8]> {
        let mut spares = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(block) = spares.pop() {
            if block.len() == len {
                return block;
            }
        }
        drop(spares);
        self.fresh.fetch_add(1, Ordering::Relaxed);
        vec![0u8; len].into_boxed_slice()
    }

    fn give_back(&self, block: Box<[u8]>) {
        let mut spares = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
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

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.block
    }
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

mod imp {
    use super::*;

    /// The pool's state: the blocks it lends and the picture size its configuration names.
    #[derive(Default)]
    pub struct RecyclingPool {
        pub(super) spares: OnceLock<Arc<Spares>>,
        pub(super) size: AtomicUsize,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for RecyclingPool {
        const NAME: &'static str = "LivepackRecyclingPool";
        type Type = super::RecyclingPool;
        type ParentType = gst::BufferPool;
    }

    impl ObjectImpl for RecyclingPool {}
    impl GstObjectImpl for RecyclingPool {}

    impl BufferPoolImpl for RecyclingPool {
        fn set_config(&self, config: &mut gst::BufferPoolConfigRef) -> bool {
            let Some((_, size, _, _)) = config.params() else {
                return false;
            };
            self.size.store(size as usize, Ordering::Relaxed);
            self.parent_set_config(config)
        }

        fn alloc_buffer(
            &self,
            _params: Option<&gst::BufferPoolAcquireParams>,
        ) -> Result<gst::Buffer, gst::FlowError> {
            let spares = self
                .spares
                .get()
                .ok_or(gst::FlowError::NotNegotiated)?
                .clone();
            let block = spares.take(self.size.load(Ordering::Relaxed));
            Ok(gst::Buffer::from_mut_slice(Lent { block, spares }))
        }

        // A buffer that comes back is let go rather than queued for reuse: its memory may still
        // be shared (`videorate`), and its block returns to the spares once that memory is freed.
        // Tagged, the base class frees it and keeps its count of live buffers right (it refuses
        // to stop while any seems alive).
        fn release_buffer(&self, mut buffer: gst::Buffer) {
            if let Some(b) = buffer.get_mut() {
                b.set_flags(gst::BufferFlags::TAG_MEMORY);
            }
            self.parent_release_buffer(buffer);
        }
    }
}

glib::wrapper! {
    /// A buffer pool over recycled blocks (see the module doc).
    pub struct RecyclingPool(ObjectSubclass<imp::RecyclingPool>) @extends gst::BufferPool, gst::Object;
}

impl RecyclingPool {
    fn new(spares: Arc<Spares>) -> Self {
        let pool: Self = glib::Object::new();
        let _ = pool.imp().spares.set(spares);
        pool
    }
}

/// Makes `decoder` write its pictures into recycled blocks (see the module doc) by answering its
/// allocation query with a [`RecyclingPool`]; what downstream answered otherwise (metas,
/// allocation parameters) stands. Decoders that render into memory of their own (libav's direct
/// rendering) should have that turned off, or they deep-copy reference pictures anyway.
pub fn recycle_output(decoder: &gst::Element) {
    recycle_with(decoder, Arc::new(Spares::default()));
}

fn recycle_with(decoder: &gst::Element, spares: Arc<Spares>) {
    let Some(pad) = decoder.static_pad("src") else {
        return;
    };
    // Answered here: downstream first (its metas and parameters stand, and a query nobody
    // downstream answers still gets the pool), then the pool put first.
    pad.add_probe(
        gst::PadProbeType::QUERY_DOWNSTREAM | gst::PadProbeType::PUSH,
        move |pad, info| {
            let Some(gst::PadProbeData::Query(query)) = info.data.as_mut() else {
                return gst::PadProbeReturn::Ok;
            };
            if query.type_() != gst::QueryType::Allocation {
                return gst::PadProbeReturn::Ok;
            }
            if let Some(peer) = pad.peer() {
                peer.query(query);
            }
            if let gst::QueryViewMut::Allocation(q) = query.view_mut() {
                offer_pool(q, &spares);
            }
            gst::PadProbeReturn::Handled
        },
    );
}

/// Puts a recycling pool first in an answered allocation query, sized for its caps' pictures.
fn offer_pool(q: &mut gst::query::Allocation, spares: &Arc<Spares>) {
    let (Some(caps), _) = q.get() else {
        return;
    };
    let Ok(info) = gst_video::VideoInfo::from_caps(caps) else {
        return;
    };
    let pool = RecyclingPool::new(spares.clone());
    let size = info.size() as u32;
    // No minimum (nothing is allocated ahead) and no maximum (a bounded pool could stall the
    // decoder while the queues downstream hold pictures).
    if q.allocation_pools().next().is_none() {
        q.add_allocation_pool(Some(&pool), size, 0, 0);
    } else {
        q.set_nth_allocation_pool(0, Some(&pool), size, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spare_count(spares: &Spares) -> usize {
        spares.blocks.lock().unwrap().len()
    }

    fn active_pool(spares: &Arc<Spares>, size: u32) -> RecyclingPool {
        let pool = RecyclingPool::new(spares.clone());
        let mut config = pool.config();
        config.set_params(None, size, 0, 0);
        pool.set_config(config).unwrap();
        pool.set_active(true).unwrap();
        pool
    }

    fn filled(pool: &RecyclingPool, fill: u8) -> gst::Buffer {
        let mut buffer = pool.acquire_buffer(None).unwrap();
        buffer.get_mut().unwrap().map_writable().unwrap().fill(fill);
        buffer
    }

    #[test]
    fn a_block_is_reused_only_after_every_buffer_sharing_it_is_gone() {
        gst::init().unwrap();
        let spares = Arc::new(Spares::default());
        let pool = active_pool(&spares, 1000);
        let first = filled(&pool, 1);
        assert_eq!(first.size(), 1000);
        let address = first.map_readable().unwrap().as_ptr();
        // What videorate does: a metadata copy that shares the memory, pushed on while the
        // original goes back to the pool.
        let shared = first.copy();
        drop(first);
        assert_eq!(
            spare_count(&spares),
            0,
            "still read through the shared copy"
        );
        let second = filled(&pool, 2);
        assert_ne!(second.map_readable().unwrap().as_ptr(), address);
        assert!(
            shared.map_readable().unwrap().iter().all(|&b| b == 1),
            "not overwritten"
        );
        drop(shared);
        assert_eq!(spare_count(&spares), 1);
        let third = filled(&pool, 3);
        assert_eq!(
            third.map_readable().unwrap().as_ptr(),
            address,
            "the block came back"
        );
        assert_eq!(spares.fresh.load(Ordering::Relaxed), 2);
        // Spares are bounded, and a new picture size drops blocks of the old one.
        let more: Vec<_> = (0..SPARE_BLOCKS)
            .map(|i| filled(&pool, 4 + i as u8))
            .collect();
        drop((second, third, more));
        assert_eq!(spare_count(&spares), SPARE_BLOCKS);
        pool.set_active(false).unwrap();
        let other = active_pool(&spares, 100);
        drop(filled(&other, 9));
        assert_eq!(spare_count(&spares), 1);
    }

    type Picture = (Option<gst::ClockTime>, Vec<u8>);

    /// Encodes `frames` of a moving test pattern into an MPEG-TS file; from picture `resize_at`
    /// on, the source is 640x480 instead of 320x240. Encoded once and decoded twice: x264enc's
    /// restart at a size change is timed by its threads, so two encodes may differ there.
    fn encode(frames: u32, resize_at: Option<usize>) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        let pipeline = gst::parse::launch(&format!(
            "videotestsrc name=src pattern=ball num-buffers={frames} \
             ! capsfilter name=size caps=video/x-raw,format=I420,width=320,height=240,framerate=25/1 \
             ! x264enc speed-preset=ultrafast tune=zerolatency key-int-max=10 ! h264parse \
             ! mpegtsmux ! filesink location={}",
            file.path().display()
        ))
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
        if let Some(at) = resize_at {
            let size = pipeline.by_name("size").unwrap();
            let seen = AtomicUsize::new(0);
            let src = pipeline.by_name("src").unwrap().static_pad("src").unwrap();
            src.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
                if seen.fetch_add(1, Ordering::Relaxed) + 1 == at {
                    let caps = gst::Caps::builder("video/x-raw")
                        .field("format", "I420")
                        .field("width", 640)
                        .field("height", 480)
                        .field("framerate", gst::Fraction::new(25, 1))
                        .build();
                    size.set_property("caps", caps);
                }
                gst::PadProbeReturn::Ok
            });
        }
        pipeline.set_state(gst::State::Playing).unwrap();
        let bus = pipeline.bus().unwrap();
        let end = bus.timed_pop_filtered(
            gst::ClockTime::from_seconds(30),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        );
        pipeline.set_state(gst::State::Null).unwrap();
        assert!(
            matches!(
                end.as_ref().map(|m| m.view()),
                Some(gst::MessageView::Eos(_))
            ),
            "{end:?}"
        );
        file
    }

    /// Decodes `encoded` through `videorate` (which shares memory) and returns every output
    /// picture's bytes and timestamp, and the fresh blocks it took.
    fn decode(recycle: bool, encoded: &std::path::Path) -> (Vec<Picture>, usize) {
        let pipeline = gst::parse::launch(&format!(
            "filesrc location={} ! tsdemux ! h264parse \
             ! avdec_h264 name=dec direct-rendering=false ! videorate ! video/x-raw,framerate=25/1 \
             ! appsink name=out sync=false",
            encoded.display()
        ))
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
        let spares = Arc::new(Spares::default());
        if recycle {
            recycle_with(&pipeline.by_name("dec").unwrap(), spares.clone());
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
        (out, spares.fresh.load(Ordering::Relaxed))
    }

    fn assert_same(plain: &[Picture], recycled: &[Picture]) {
        assert_eq!(recycled.len(), plain.len());
        for (i, (a, b)) in plain.iter().zip(recycled).enumerate() {
            assert_eq!(a.0, b.0, "picture {i} timestamp");
            assert!(a.1 == b.1, "picture {i} differs");
        }
    }

    #[test]
    fn a_new_picture_size_mid_stream_gets_blocks_of_its_size() {
        gst::init().unwrap();
        let encoded = encode(40, Some(20));
        let (plain, _) = decode(false, encoded.path());
        let (recycled, fresh) = decode(true, encoded.path());
        assert!(fresh >= 2, "blocks of both sizes came from the pool");
        let small = 320 * 240 * 3 / 2;
        let large = 640 * 480 * 3 / 2;
        assert_eq!(recycled.first().unwrap().1.len(), small);
        assert_eq!(recycled.last().unwrap().1.len(), large);
        assert_same(&plain, &recycled);
    }

    #[test]
    fn recycled_decoding_outputs_the_same_pictures_in_few_blocks() {
        gst::init().unwrap();
        let encoded = encode(60, None);
        let (plain, _) = decode(false, encoded.path());
        let (recycled, fresh) = decode(true, encoded.path());
        assert_eq!(plain.len(), 60);
        assert_same(&plain, &recycled);
        // Not one picture the same as the next: a block reused too early would repeat one.
        assert!(recycled.windows(2).all(|w| w[0].1 != w[1].1));
        // The decoder wrote into the pool's blocks, and reused them: 60 pictures in a handful.
        assert!(
            (1..=12).contains(&fresh),
            "{fresh} fresh blocks for 60 pictures"
        );
    }
}
