//! The ABR ladder of one stream: the quality set's rungs capped at the source height, and the
//! output frame rate and part length that let CMAF parts tile segments exactly.

use std::time::Duration;

use crate::quality::QualitySet;

/// x264 speed/quality trade-off: `veryfast` keeps a 3-rung 720p ladder in real time on two cores.
pub const X264_PRESET: &str = "veryfast";
/// The presets a transcode that falls behind real time moves to, one step at a time: each
/// about halves x264's work, at some quality for the same bitrate.
const FASTER_PRESETS: [&str; 3] = [X264_PRESET, "superfast", "ultrafast"];

/// The preset after `preset` when a transcode cannot keep up; `None` at the fastest.
pub fn faster_preset(preset: &str) -> Option<&'static str> {
    let at = FASTER_PRESETS.iter().position(|p| *p == preset)?;
    FASTER_PRESETS.get(at + 1).copied()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rung {
    pub name: String,
    pub height: u32,
    pub video_kbps: u32,
    pub audio_kbps: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ladder {
    /// Highest first.
    pub rungs: Vec<Rung>,
    /// Also remux the source without re-encoding (for `origin` recordings).
    pub source: bool,
    /// Only the lowest rung the source allows is built: the node was full (the others are
    /// "shed", and reported).
    pub shed: bool,
    /// No video rung is built: an H.264 source's video is packaged as it came (the node was
    /// full, `overload_policy = "passthrough"`).
    pub passthrough: bool,
    /// x264's preset: [`X264_PRESET`], or a faster one once the stream's
    /// transcode fell behind real time.
    pub preset: &'static str,
}

impl Ladder {
    pub fn from_set(set: &QualitySet) -> Ladder {
        let mut rungs: Vec<Rung> = set
            .qualities
            .iter()
            .map(|q| Rung {
                name: q.name.clone(),
                height: q.height,
                video_kbps: q.video_bitrate_kbps,
                audio_kbps: q.audio_bitrate_kbps,
            })
            .collect();
        rungs.sort_by_key(|r| std::cmp::Reverse(r.height));
        Ladder {
            rungs,
            source: false,
            shed: false,
            passthrough: false,
            preset: X264_PRESET,
        }
    }

    /// Rungs no taller than the source (upscaling wastes bits); a source smaller than every rung
    /// gets one rung at its own height with the smallest rung's bitrates.
    pub fn capped(&self, source_height: u32) -> Vec<Rung> {
        let fitting: Vec<Rung> = self
            .rungs
            .iter()
            .filter(|r| r.height <= source_height)
            .cloned()
            .collect();
        if !fitting.is_empty() {
            return fitting;
        }
        let height = (source_height.max(2) / 2) * 2;
        let smallest = self.rungs.last().cloned().unwrap_or(Rung {
            name: String::new(),
            height,
            video_kbps: 800,
            audio_kbps: 96,
        });
        vec![Rung {
            name: format!("{height}p"),
            height,
            ..smallest
        }]
    }

    /// Audio bitrate of the one audio rendition: the top rung's.
    pub fn audio_kbps(&self) -> u32 {
        self.rungs.first().map_or(128, |r| r.audio_kbps)
    }
}

/// Output frame rates we normalise to: constant-rate output lets parts be whole frames.
const OUTPUT_FPS: [u32; 6] = [24, 25, 30, 48, 50, 60];
pub const DEFAULT_FPS: u32 = 30;

/// The standard rate nearest the measured source rate (≤ 60).
pub fn output_fps(measured: Option<f64>) -> u32 {
    let Some(m) = measured.filter(|m| m.is_finite() && *m > 1.0) else {
        return DEFAULT_FPS;
    };
    *OUTPUT_FPS
        .iter()
        .min_by(|a, b| {
            let da = (f64::from(**a) - m).abs();
            let db = (f64::from(**b) - m).abs();
            da.total_cmp(&db)
        })
        .expect("non-empty")
}

/// How a rendition is cut into parts: the `chunk` duration cmafmux is given and the
/// `target` the playlists announce (PART-TARGET, and what the MPD's latency figures build on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub chunk: Duration,
    pub target: Duration,
}

/// The parts for `fps`. cmafmux starts each chunk where the last one ended and closes it at the
/// first frame at or after its start plus the chunk duration, so a part is ⌈n⌉ frames for
/// n = chunk × fps — 13 at 25 fps for 0.5 s (0.52 s), exactly 15 at 30 — and the fragment,
/// closed at the segment duration, ends with a shorter one (0.44 s at 25 fps). The announced
/// target is ⌈n⌉ frames: RFC 8216bis §4.4.4.9 wants every part at most PART-TARGET and, but for
/// a segment's last, at least 85 % of it.
pub fn part_duration(fps: u32, segment: Duration, chunk: Duration) -> Parts {
    let fps = u64::from(fps.max(1));
    let frame_ns = |frames: u64| Duration::from_nanos(frames * 1_000_000_000 / fps);
    let n = chunk.as_nanos() as u64 * fps;
    let whole = n.div_ceil(1_000_000_000);
    debug_assert!(segment.as_nanos().is_multiple_of(chunk.as_nanos().max(1)));
    Parts {
        chunk,
        target: if n.is_multiple_of(1_000_000_000) {
            chunk
        } else {
            frame_ns(whole)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::QualitySets;

    #[test]
    fn caps_at_source_height() {
        let sets = QualitySets::builtin();
        let ladder = Ladder::from_set(sets.get(1).unwrap());
        let names = |h| {
            ladder
                .capped(h)
                .into_iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(720), ["720p", "480p", "360p"]);
        assert_eq!(names(1080), ["1080p", "720p", "480p", "360p"]);
        assert_eq!(names(2160), ["1080p", "720p", "480p", "360p"]);
        assert_eq!(names(241), ["240p"]);
        assert_eq!(ladder.capped(241)[0].video_kbps, 800);
    }

    #[test]
    fn frame_rates_and_parts() {
        assert_eq!(output_fps(Some(30.3)), 30);
        assert_eq!(output_fps(Some(29.97)), 30);
        assert_eq!(output_fps(Some(25.0)), 25);
        assert_eq!(output_fps(Some(59.94)), 60);
        assert_eq!(output_fps(Some(120.0)), 60);
        assert_eq!(output_fps(None), 30);
        let seg = Duration::from_secs(2);
        let half = Duration::from_millis(500);
        let exact = |d| Parts {
            chunk: d,
            target: d,
        };
        for fps in [24, 30, 48, 50, 60] {
            assert_eq!(part_duration(fps, seg, half), exact(half), "{fps} fps");
        }
        // 25 fps: parts of 13 and 12 frames, announced as 13 (0.52 s), not 1 s parts.
        let p25 = part_duration(25, seg, half);
        assert_eq!(p25.chunk, half);
        assert_eq!(p25.target, Duration::from_millis(520));
        assert_eq!(
            part_duration(30, Duration::from_secs(3), Duration::from_secs(1)),
            exact(Duration::from_secs(1))
        );
        assert_eq!(
            part_duration(24, Duration::from_secs(3), Duration::from_millis(750)).target,
            Duration::from_millis(750)
        );
        // 48 fps, 0.75 s: 36 frames exactly; 25 fps, 0.75 s: 18.75 → 19 frames = 0.76 s.
        assert_eq!(
            part_duration(25, Duration::from_secs(3), Duration::from_millis(750)).target,
            Duration::from_millis(760)
        );
    }
}
