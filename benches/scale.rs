//! The ladder scaler against GStreamer's `videoscale`, element for element: the same decoded
//! 720p picture pushed through `appsrc ! SCALER ! WxH ! appsink` for each rung size. `cargo bench
//! --bench scale`; the last figures are in benches/README.md.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use gstreamer_video as gst_video;

/// Pictures per timed batch: enough that the pipeline's start-up is not what is measured.
const BATCH: u64 = 60;

struct Rig {
    pipeline: gst::Pipeline,
    src: gst_app::AppSrc,
    sink: gst_app::AppSink,
    picture: gst::Buffer,
    pts: u64,
}

impl Rig {
    fn new(scaler: &str, width: u32, height: u32) -> Self {
        livepack::scaler::init().expect("GStreamer");
        let pipeline = gst::parse::launch(&format!(
            "appsrc name=src format=time ! {scaler} \
             ! video/x-raw,width={width},height={height},colorimetry=bt709 \
             ! appsink name=sink sync=false max-buffers=4"
        ))
        .expect("pipeline")
        .downcast::<gst::Pipeline>()
        .expect("a pipeline");
        let info = gst_video::VideoInfo::builder(gst_video::VideoFormat::I420, 1280, 720)
            .fps(gst::Fraction::new(30, 1))
            .colorimetry(&"bt709".parse().expect("colorimetry"))
            .build()
            .expect("info");
        let src = pipeline
            .by_name("src")
            .expect("src")
            .downcast::<gst_app::AppSrc>()
            .expect("appsrc");
        src.set_caps(Some(&info.to_caps().expect("caps")));
        let sink = pipeline
            .by_name("sink")
            .expect("sink")
            .downcast::<gst_app::AppSink>()
            .expect("appsink");
        // A picture with detail everywhere (xorshift noise over ramps), as decoded video has.
        let mut data = vec![0u8; info.size()];
        let mut state = 0x2545_f491u32;
        for (i, b) in data.iter_mut().enumerate() {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            *b = ((i % 1280) as u32 / 6 + (state & 31)) as u8;
        }
        pipeline.set_state(gst::State::Playing).expect("playing");
        Rig {
            pipeline,
            src,
            sink,
            picture: gst::Buffer::from_slice(data),
            pts: 0,
        }
    }

    /// Pushes `n` pictures through and waits for all of them.
    fn run(&mut self, n: u64) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            let mut buffer = self.picture.copy();
            buffer
                .get_mut()
                .expect("fresh")
                .set_pts(gst::ClockTime::from_nseconds(self.pts * 33_333_333));
            self.pts += 1;
            self.src.push_buffer(buffer).expect("push");
            self.sink
                .try_pull_sample(gst::ClockTime::from_seconds(5))
                .expect("a picture out");
        }
        start.elapsed()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

fn scalers(c: &mut Criterion) {
    let mut group = c.benchmark_group("scale 1280x720 I420");
    for (w, h) in [(854, 480), (640, 360)] {
        for scaler in [livepack::scaler::FACTORY, "videoscale"] {
            let mut rig = Rig::new(scaler, w, h);
            rig.run(5);
            group.bench_function(format!("{scaler} → {w}x{h} ({BATCH} pictures)"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| rig.run(BATCH)).sum())
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(6));
    targets = scalers
}
criterion_main!(benches);
