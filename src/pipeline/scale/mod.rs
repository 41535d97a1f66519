//! `livepackscale`: the ladder's I420 scaler element, a `VideoFilter` around
//! [`livepack_scale::Scaler`] (one per element: its plans are kept per size pair).
//!
//! Each rung scales the decoded picture to its own size. GStreamer's `videoscale` spent 5 % of a
//! 720p stream's CPU on the 480p rung alone (see `livepack_scale` for why); this element does the
//! same job for I420, the only format the ladder's tee carries, about 3x faster. Same-size caps
//! pass buffers through untouched (the top rung of a source of that size); interlaced pictures
//! are scaled field by field so the fields do not blend.

use std::sync::{Mutex, OnceLock};

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;
use gstreamer::subclass::prelude::*;
use gstreamer_base as gst_base;
use gstreamer_base::subclass::prelude::*;
use gstreamer_video as gst_video;
use gstreamer_video::prelude::*;
use gstreamer_video::subclass::prelude::*;

use livepack_scale::{Scaler, Shape};

/// The factory name the pipeline builder makes.
pub const FACTORY: &str = "livepackscale";

/// Registers the element once per process (after `gst::init`).
pub fn register() -> Result<(), glib::BoolError> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        gst::Element::register(None, FACTORY, gst::Rank::NONE, Scale::static_type())
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(|e| glib::bool_error!("{}", e))
}

glib::wrapper! {
    pub struct Scale(ObjectSubclass<imp::Scale>)
        @extends gst_video::VideoFilter, gst_base::BaseTransform, gst::Element, gst::Object;
}

mod imp {
    use super::*;

    /// The plane scaler and the plans it keeps for the negotiated sizes (plane shapes, strides
    /// included, are read from each frame).
    #[derive(Default)]
    pub struct Scale {
        scaler: Mutex<Scaler>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for Scale {
        const NAME: &'static str = "LivepackScale";
        type Type = super::Scale;
        type ParentType = gst_video::VideoFilter;
    }

    impl ObjectImpl for Scale {}
    impl GstObjectImpl for Scale {}

    impl ElementImpl for Scale {
        fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
            static META: OnceLock<gst::subclass::ElementMetadata> = OnceLock::new();
            Some(META.get_or_init(|| {
                gst::subclass::ElementMetadata::new(
                    "livepack I420 scaler",
                    "Filter/Converter/Video/Scaler",
                    "Resizes I420 video: 2x2 box halvings, then SIMD 2-tap interpolation",
                    "livepack",
                )
            }))
        }

        fn pad_templates() -> &'static [gst::PadTemplate] {
            static TEMPLATES: OnceLock<Vec<gst::PadTemplate>> = OnceLock::new();
            TEMPLATES.get_or_init(|| {
                let caps = gst_video::VideoCapsBuilder::new()
                    .format(gst_video::VideoFormat::I420)
                    .build();
                [gst::PadDirection::Src, gst::PadDirection::Sink]
                    .into_iter()
                    .map(|direction| {
                        let name = if direction == gst::PadDirection::Src {
                            "src"
                        } else {
                            "sink"
                        };
                        gst::PadTemplate::new(name, direction, gst::PadPresence::Always, &caps)
                            .expect("static pad template")
                    })
                    .collect()
            })
        }
    }

    impl BaseTransformImpl for Scale {
        const MODE: gst_base::subclass::BaseTransformMode =
            gst_base::subclass::BaseTransformMode::NeverInPlace;
        const PASSTHROUGH_ON_SAME_CAPS: bool = true;
        const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

        /// Any size on the other side, everything else (format, rate, colorimetry, interlacing)
        /// the same: this element only scales.
        fn transform_caps(
            &self,
            _direction: gst::PadDirection,
            caps: &gst::Caps,
            filter: Option<&gst::Caps>,
        ) -> Option<gst::Caps> {
            let mut other = caps.clone();
            for s in other.make_mut().iter_mut() {
                s.set("width", gst::IntRange::new(1, i32::MAX));
                s.set("height", gst::IntRange::new(1, i32::MAX));
                s.remove_field("pixel-aspect-ratio");
            }
            // The same caps first, so a size both sides accept is kept (passthrough).
            let mut both = caps.clone();
            both.merge(other);
            Some(match filter {
                Some(f) => f.intersect_with_mode(&both, gst::CapsIntersectMode::First),
                None => both,
            })
        }

        /// An unfixed size on the other side is fixed to this side's.
        fn fixate_caps(
            &self,
            _direction: gst::PadDirection,
            caps: &gst::Caps,
            othercaps: gst::Caps,
        ) -> gst::Caps {
            let mut other = othercaps;
            other.truncate();
            if let (Some(this), Some(s)) = (caps.structure(0), other.make_mut().structure_mut(0)) {
                for field in ["width", "height"] {
                    if let Ok(v) = this.get::<i32>(field) {
                        s.fixate_field_nearest_int(field, v);
                    }
                }
                if let Ok(par) = this.get::<gst::Fraction>("pixel-aspect-ratio") {
                    if s.has_field("pixel-aspect-ratio") {
                        s.fixate_field_nearest_fraction("pixel-aspect-ratio", par);
                    } else {
                        s.set("pixel-aspect-ratio", par);
                    }
                }
            }
            other.fixate();
            other
        }
    }

    impl VideoFilterImpl for Scale {
        fn set_info(
            &self,
            _incaps: &gst::Caps,
            _in_info: &gst_video::VideoInfo,
            _outcaps: &gst::Caps,
            _out_info: &gst_video::VideoInfo,
        ) -> Result<(), gst::LoggableError> {
            // New sizes: the old plans (and their scratch planes) are not needed any more.
            self.scaler
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
            Ok(())
        }

        fn transform_frame(
            &self,
            inframe: &gst_video::VideoFrameRef<&gst::BufferRef>,
            outframe: &mut gst_video::VideoFrameRef<&mut gst::BufferRef>,
        ) -> Result<gst::FlowSuccess, gst::FlowError> {
            let mut scaler = self.scaler.lock().unwrap_or_else(|p| p.into_inner());
            // Set for interleaved caps, and per picture for mixed ones.
            let fields = if inframe.is_interlaced() { 2 } else { 1 };
            let size = |info: &gst_video::VideoInfo, p: u32| {
                (info.comp_width(p as u8) as usize, info.comp_height(p as u8))
            };
            for p in 0..3u32 {
                let (in_w, in_h) = size(inframe.info(), p);
                let (out_w, out_h) = size(outframe.info(), p);
                let in_stride = inframe.plane_stride()[p as usize] as usize;
                let out_stride = outframe.plane_stride()[p as usize] as usize;
                let src = inframe.plane_data(p).map_err(|_| gst::FlowError::Error)?;
                let dst = outframe
                    .plane_data_mut(p)
                    .map_err(|_| gst::FlowError::Error)?;
                for field in 0..fields {
                    // Field `field` is every `fields`-th row from row `field`.
                    let rows = |h: u32| (h as usize + fields - 1 - field) / fields;
                    let from = Shape {
                        width: in_w,
                        rows: rows(in_h),
                        stride: in_stride * fields,
                    };
                    let to = Shape {
                        width: out_w,
                        rows: rows(out_h),
                        stride: out_stride * fields,
                    };
                    let src = src.get(field * in_stride..).unwrap_or_default();
                    let dst = dst.get_mut(field * out_stride..).unwrap_or_default();
                    if from.rows == 0 || to.rows == 0 {
                        continue;
                    }
                    if !scaler.scale(src, from, dst, to) {
                        gst::error!(
                            gst::CAT_RUST,
                            imp = self,
                            "plane {p}: buffer shorter than its caps"
                        );
                        return Err(gst::FlowError::Error);
                    }
                }
            }
            Ok(gst::FlowSuccess::Ok)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gstreamer_app as gst_app;

    /// Starts `desc` (initialising GStreamer) and returns it with its element named `name`.
    fn launch<T: IsA<gst::Element>>(desc: &str, name: &str) -> (gst::Pipeline, T) {
        crate::pipeline::init().unwrap();
        let pipeline = gst::parse::launch(desc)
            .unwrap()
            .downcast::<gst::Pipeline>()
            .unwrap();
        let named = element(&pipeline, name);
        (pipeline, named)
    }

    fn element<T: IsA<gst::Element>>(pipeline: &gst::Pipeline, name: &str) -> T {
        pipeline.by_name(name).unwrap().downcast::<T>().unwrap()
    }

    /// Tight planes (no stride padding) of a picture, and its size.
    struct Picture {
        width: u32,
        height: u32,
        planes: [Vec<u8>; 3],
    }

    /// Runs `frames` pictures of `videotestsrc` (`pattern`, I420 1280x720 unless `input` says
    /// otherwise) through `scaler ! caps` and returns the last one out.
    fn run(scaler: &str, input: &str, caps: &str, pattern: &str) -> (Picture, bool) {
        let (pipeline, sink) = launch::<gst_app::AppSink>(
            &format!(
                "videotestsrc pattern={pattern} num-buffers=3 \
                 ! video/x-raw,format=I420,colorimetry=bt709,framerate=30/1,{input} \
                 ! identity name=before ! {scaler} ! {caps} ! appsink name=sink sync=false"
            ),
            "sink",
        );
        // Whether the buffer out is the buffer in (passthrough): compared by pointer.
        let seen = std::sync::Arc::new(Mutex::new(Vec::<usize>::new()));
        let before = pipeline
            .by_name("before")
            .unwrap()
            .static_pad("src")
            .unwrap();
        let s = seen.clone();
        before.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(b) = info.buffer() {
                s.lock().unwrap().push(b.as_ptr() as usize);
            }
            gst::PadProbeReturn::Ok
        });
        pipeline.set_state(gst::State::Playing).unwrap();
        let mut last = None;
        while let Some(sample) = sink.try_pull_sample(gst::ClockTime::from_seconds(10)) {
            last = Some(sample);
        }
        pipeline.set_state(gst::State::Null).unwrap();
        let sample = last.expect("a picture out");
        let passed = seen
            .lock()
            .unwrap()
            .contains(&(sample.buffer().unwrap().as_ptr() as usize));
        let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
        let frame =
            gst_video::VideoFrameRef::from_buffer_ref_readable(sample.buffer().unwrap(), &info)
                .unwrap();
        let planes = [0u32, 1, 2].map(|p| {
            let (w, h) = (
                info.comp_width(p as u8) as usize,
                info.comp_height(p as u8) as usize,
            );
            let stride = frame.plane_stride()[p as usize] as usize;
            let data = frame.plane_data(p).unwrap();
            (0..h)
                .flat_map(|y| data[y * stride..y * stride + w].iter().copied())
                .collect()
        });
        let picture = Picture {
            width: info.width(),
            height: info.height(),
            planes,
        };
        (picture, passed)
    }

    /// PSNR of `a` against `b` over all three planes, in dB.
    fn psnr(a: &Picture, b: &Picture) -> f64 {
        let (mut sum, mut n) = (0.0, 0usize);
        for (pa, pb) in a.planes.iter().zip(&b.planes) {
            assert_eq!(pa.len(), pb.len());
            sum += pa
                .iter()
                .zip(pb)
                .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
                .sum::<f64>();
            n += pa.len();
        }
        10.0 * (255.0f64.powi(2) / (sum / n as f64).max(1e-9)).log10()
    }

    #[test]
    fn the_ladder_sizes_come_out_like_videoscale_s() {
        // GStreamer's own scaler is the independent reference: the same sizes, and pictures
        // that differ by interpolation detail only (a wrong plane, offset or stride would cost
        // far more than 30 dB on this pattern's colour bars, ramps and text-like edges).
        for (w, h) in [(854, 480), (640, 360), (1920, 1080)] {
            let caps = format!("video/x-raw,width={w},height={h},colorimetry=bt709");
            let input = "width=1280,height=720";
            let (ours, passed) = run(FACTORY, input, &caps, "smpte");
            let (theirs, _) = run("videoscale", input, &caps, "smpte");
            assert_eq!((ours.width, ours.height), (w, h));
            assert!(!passed, "{w}x{h}: scaled, not passed through");
            let db = psnr(&ours, &theirs);
            assert!(db > 30.0, "{w}x{h}: {db:.1} dB from videoscale's");
        }
    }

    #[test]
    fn the_same_size_passes_the_buffer_through() {
        let input = "width=1280,height=720";
        let (out, passed) = run(
            FACTORY,
            input,
            "video/x-raw,width=1280,height=720,pixel-aspect-ratio=1/1",
            "ball",
        );
        assert_eq!((out.width, out.height), (1280, 720));
        assert!(passed, "the input buffer itself came out");
    }

    #[test]
    fn a_source_size_change_mid_stream_is_followed() {
        // 1280x720 pictures, then 640x360 (an encoder restarted smaller): the 720p rung goes
        // from passthrough to upscaling, the 480p rung from down- to upscaling, and every
        // picture still comes out at the rung's size.
        for (w, h) in [(1280, 720), (854, 480), (640, 360)] {
            let (pipeline, src) = launch::<gst_app::AppSrc>(
                &format!(
                    "appsrc name=src format=time ! {FACTORY} \
                     ! video/x-raw,width={w},height={h},pixel-aspect-ratio=1/1 \
                     ! appsink name=sink sync=false"
                ),
                "src",
            );
            let sink: gst_app::AppSink = element(&pipeline, "sink");
            pipeline.set_state(gst::State::Playing).unwrap();
            let mut pts = 0u64;
            for (iw, ih) in [(1280u32, 720u32), (640, 360)] {
                let info = gst_video::VideoInfo::builder(gst_video::VideoFormat::I420, iw, ih)
                    .fps(gst::Fraction::new(30, 1))
                    .build()
                    .unwrap();
                src.set_caps(Some(&info.to_caps().unwrap()));
                for _ in 0..5 {
                    let mut buffer = gst::Buffer::from_slice(vec![128u8; info.size()]);
                    buffer
                        .get_mut()
                        .unwrap()
                        .set_pts(gst::ClockTime::from_mseconds(pts * 33));
                    pts += 1;
                    src.push_buffer(buffer).unwrap();
                }
            }
            src.end_of_stream().unwrap();
            let mut sizes = Vec::new();
            while let Some(sample) = sink.try_pull_sample(gst::ClockTime::from_seconds(5)) {
                let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
                sizes.push((info.width(), info.height()));
            }
            pipeline.set_state(gst::State::Null).unwrap();
            assert_eq!(sizes, vec![(w, h); 10], "rung {w}x{h}");
        }
    }

    #[test]
    fn interlaced_fields_are_scaled_apart() {
        // Horizontal lines one row apart: field 1 (even rows) black, field 2 (odd rows) white
        // in the luma plane. Scaled as one picture, 720 → 480 rows would blend them to grey;
        // field by field, each output row stays in its field: black or white.
        crate::pipeline::init().unwrap();
        let (w, h) = (64u32, 72u32);
        let info = gst_video::VideoInfo::builder(gst_video::VideoFormat::I420, w, h)
            .interlace_mode(gst_video::VideoInterlaceMode::Interleaved)
            .fps(gst::Fraction::new(25, 1))
            .build()
            .unwrap();
        let mut buffer = gst::Buffer::with_size(info.size()).unwrap();
        {
            let buf = buffer.get_mut().unwrap();
            let mut frame = gst_video::VideoFrameRef::from_buffer_ref_writable(buf, &info).unwrap();
            let stride = frame.plane_stride()[0] as usize;
            let luma = frame.plane_data_mut(0).unwrap();
            for y in 0..h as usize {
                luma[y * stride..y * stride + w as usize].fill(if y % 2 == 0 { 16 } else { 235 });
            }
        }
        let (pipeline, src) = launch::<gst_app::AppSrc>(
            &format!(
                "appsrc name=src format=time ! {FACTORY} \
                 ! video/x-raw,width=32,height=48 ! appsink name=sink sync=false"
            ),
            "src",
        );
        src.set_caps(Some(&info.to_caps().unwrap()));
        let sink: gst_app::AppSink = element(&pipeline, "sink");
        pipeline.set_state(gst::State::Playing).unwrap();
        src.push_buffer(buffer).unwrap();
        src.end_of_stream().unwrap();
        let sample = sink
            .try_pull_sample(gst::ClockTime::from_seconds(10))
            .expect("a picture out");
        pipeline.set_state(gst::State::Null).unwrap();
        let out = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
        let frame =
            gst_video::VideoFrameRef::from_buffer_ref_readable(sample.buffer().unwrap(), &out)
                .unwrap();
        let stride = frame.plane_stride()[0] as usize;
        let luma = frame.plane_data(0).unwrap();
        for y in 0..48usize {
            let want = if y % 2 == 0 { 16 } else { 235 };
            let row = &luma[y * stride..y * stride + 32];
            assert!(row.iter().all(|&p| p == want), "row {y}: {:?}", &row[..4]);
        }
    }
}
