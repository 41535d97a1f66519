//! The ABR ladder of one stream: the quality set's rungs capped at the source height, and the
//! output frame rate and part length that let CMAF parts tile segments exactly.

use std::time::Duration;

use crate::quality::QualitySet;

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

/// The part length for `fps`: a whole number of frames that divides the segment exactly (cmafmux
/// closes a fragment only on a chunk boundary) and lies in 0.5–1.0 s, nearest the target.
pub fn part_duration(fps: u32, segment: Duration, target: Duration) -> Duration {
    let seg_frames = (segment.as_secs_f64() * f64::from(fps)).round() as u32;
    let lo = fps.div_ceil(2);
    let target_frames = target.as_secs_f64() * f64::from(fps);
    let frames = (lo..=fps)
        .filter(|p| seg_frames % p == 0)
        .min_by(|a, b| {
            (f64::from(*a) - target_frames)
                .abs()
                .total_cmp(&(f64::from(*b) - target_frames).abs())
        })
        .unwrap_or(fps);
    Duration::from_nanos(u64::from(frames) * 1_000_000_000 / u64::from(fps))
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
        assert_eq!(part_duration(30, seg, half), half);
        assert_eq!(part_duration(24, seg, half), half);
        assert_eq!(part_duration(60, seg, half), half);
        assert_eq!(part_duration(25, seg, half), Duration::from_secs(1));
        assert_eq!(
            part_duration(30, Duration::from_secs(3), Duration::from_secs(1)),
            Duration::from_secs(1)
        );
    }
}
