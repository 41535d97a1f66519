//! The sink API: the only way the pipeline writes into a package. A (re)built pipeline
//! installs its [`Layout`] and gets one [`RenditionSink`] per rendition, keyed by output kind
//! and name; it hands over init segments, CMAF parts and whole TS segments through them and
//! screenshots through [`Package::set_screenshot`]. What happens next (retention, storage,
//! renderers) is the package's business.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{CompletedSegment, Output, Package, PackageEvent, PartIn, Rendition, SegmentKey};

/// Track names of the source remux (one single-stream fragmented MP4 each).
pub const SOURCE_VIDEO: &str = "source-video";
pub const SOURCE_AUDIO: &str = "source-audio";

/// What a pipeline produces: its segment and part durations and its renditions.
pub struct Layout {
    pub segment: Duration,
    pub part: Duration,
    pub cmaf: Vec<Rendition>,
    pub ts: Vec<Rendition>,
}

/// Where one rendition's media goes.
#[derive(Clone)]
pub struct RenditionSink {
    package: Arc<Package>,
    output: Output,
    name: String,
}

impl RenditionSink {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The init segment (ftyp+moov) and, when the caller could read it, the RFC 6381 codecs
    /// string it implies.
    pub fn init(&self, init: Bytes, codecs: Option<String>) {
        if self.output == Output::Source {
            self.package.source_init(&self.name, init);
            return;
        }
        // Sent under the state lock, as completed segments are (see `Package::completed`): an
        // observer registered meanwhile gets this init either from the package or from its
        // queue. Without it a recording drops every later segment of the rendition.
        self.package.update(|p| {
            if let Some(r) = p.rendition_in_mut(self.output, &self.name) {
                if let Some(codecs) = codecs {
                    r.codecs = codecs;
                }
                r.set_init(init.clone());
            }
            if self.package.taps.any() {
                self.package.taps.send(PackageEvent::Init {
                    output: self.output,
                    rendition: self.name.clone(),
                    init,
                });
            }
        });
    }

    /// A CMAF chunk: an LL-HLS part / LL-DASH chunk; for the source output, a whole fragment.
    pub fn part(&self, part: PartIn) {
        if self.output == Output::Source {
            self.package.source_fragment(&self.name, part);
            return;
        }
        self.package.push(self.output, &self.name, part, None);
    }

    /// A complete segment in one piece (MPEG-TS HLS), muxed in TS `generation`
    /// ([`Package::ts_opened`]): dropped when TS muxing was paused since.
    pub fn segment(&self, generation: u64, part: PartIn) {
        self.package
            .push(self.output, &self.name, part, Some(generation));
    }
}

impl Package {
    /// Installs a (re)built pipeline's renditions and returns their sinks (CMAF, then TS, in
    /// the layout's order). A rendition that existed before keeps its segments and numbering
    /// (its next segment carries EXT-X-DISCONTINUITY); a new one starts after the highest
    /// sequence number any rendition used, so numbers never go back.
    pub fn install(self: &Arc<Self>, layout: Layout) -> (Vec<RenditionSink>, Vec<RenditionSink>) {
        let sinks = |output, list: &[Rendition]| -> Vec<RenditionSink> {
            list.iter()
                .map(|r| RenditionSink {
                    package: self.clone(),
                    output,
                    name: r.name.clone(),
                })
                .collect()
        };
        let cmaf = sinks(Output::Cmaf, &layout.cmaf);
        let ts = sinks(Output::Ts, &layout.ts);
        self.update(|p| {
            p.set_durations(layout.segment, layout.part);
            let first = p.first_numbering();
            install(
                p.list_mut(Output::Cmaf).expect("a list"),
                layout.cmaf,
                first,
            );
            install(p.list_mut(Output::Ts).expect("a list"), layout.ts, first);
        });
        (cmaf, ts)
    }

    /// The sink of a rendition already installed (benches and tests build packages directly).
    pub fn sink(self: &Arc<Self>, output: Output, name: &str) -> Option<RenditionSink> {
        self.read(|p| p.rendition_in(output, name).is_some())
            .then(|| RenditionSink {
                package: self.clone(),
                output,
                name: name.to_owned(),
            })
    }

    /// The source changed at `from` (wall clock): every rendition marks the first segment
    /// that starts from then on.
    pub fn discontinuity_from(&self, from: time::OffsetDateTime) {
        self.update(|p| {
            for output in [Output::Cmaf, Output::Ts] {
                for r in p.list_mut(output).into_iter().flatten() {
                    r.mark_discontinuity_from(from);
                }
            }
        });
    }

    /// Where a source track's remux goes (observe-only, see [`Output::Source`]).
    pub fn source_sink(self: &Arc<Self>, name: &str) -> RenditionSink {
        RenditionSink {
            package: self.clone(),
            output: Output::Source,
            name: name.to_owned(),
        }
    }

    /// The source tracks' current init segments, by track name.
    pub fn current_source_inits(&self) -> Vec<(String, Bytes)> {
        let source = self.source.lock().unwrap_or_else(|p| p.into_inner());
        source
            .iter()
            .filter_map(|(name, (init, _))| Some((name.clone(), init.clone()?)))
            .collect()
    }

    fn source_init(&self, name: &str, init: Bytes) {
        self.source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_owned())
            .or_default()
            .0 = Some(init.clone());
        self.taps.send(PackageEvent::Init {
            output: Output::Source,
            rendition: name.to_owned(),
            init,
        });
    }

    fn source_fragment(&self, name: &str, part: PartIn) {
        let discontinuity = self
            .source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(name)
            .is_some_and(|(_, d)| std::mem::take(d));
        if !self.taps.any() {
            return;
        }
        self.taps.send(PackageEvent::Segment(CompletedSegment {
            key: SegmentKey {
                output: Output::Source,
                rendition: name.to_owned(),
                msn: 0,
            },
            pdt: part.pdt,
            duration: part.duration,
            discontinuity,
            chunks: vec![part.data],
        }));
    }

    /// The latest JPEG of the source.
    pub fn set_screenshot(&self, jpeg: Bytes) {
        self.update(|p| p.set_screenshot(jpeg));
    }
}

fn install(current: &mut Vec<Rendition>, fresh: Vec<Rendition>, first: super::Numbering) {
    let next = current.iter().map(|r| r.next_msn()).max().unwrap_or(0);
    let mut old = std::mem::take(current);
    for mut r in fresh {
        match old.iter().position(|o| o.name == r.name) {
            Some(i) => {
                let mut kept = old.swap_remove(i);
                kept.kind = r.kind;
                kept.nominal_bitrate = r.nominal_bitrate;
                if next > 0 {
                    kept.continue_after(next - 1);
                }
                current.push(kept);
            }
            None => {
                if next > 0 {
                    r.continue_after(next - 1);
                    r.mark_discontinuity();
                } else {
                    r.start_numbering_at(first);
                }
                current.push(r);
            }
        }
    }
}
