//! What a stream's pipeline is to be, decided before anything is built (pure): the rungs the
//! source's size and rate allow, the part and segment durations, the renditions the package
//! installs, the encoder settings.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

pub use super::ladder::faster_preset;
use super::ladder::{output_fps, part_duration, Ladder};
use crate::media::{AudioConfig, VideoConfig};
use crate::package::{PackagingConfig, Rendition, RenditionKind};

/// Rungs up to this pixel rate (720p at 60 fps) are encoded on one thread. `tune=zerolatency`
/// makes x264 split each frame into one slice per thread, and a ladder already runs one encoder
/// per rung on the same cores: the slice threads only added wake-ups (N=2: 148 → 142 % CPU, 90
/// → 65 threads) and slices cost bits (720p +0.08 dB). One 720p frame takes ~10 ms on one
/// thread, well inside a 60 fps frame interval; bigger rungs keep x264's own thread count.
pub const X264_ONE_THREAD_MAX_PIXEL_RATE: u64 = 1280 * 720 * 60;
pub const AUDIO_RATE: i32 = 48_000;
pub const AUDIO_CHANNELS: i32 = 2;
pub const AUDIO_RENDITION: &str = "audio";
/// The one video rendition of a stream passed through: the source's own video.
pub const PASSTHROUGH_RENDITION: &str = "source";
pub use crate::capacity::PASSTHROUGH_PRESET;
/// The codecs string of the rungs x264 makes (High profile, level 4.0).
const X264_CODECS: &str = "avc1.640028";
/// Screenshots: one every 10 s, at most 1080 px wide (aspect kept).
pub const SCREENSHOT_INTERVAL: Duration = Duration::from_secs(10);
pub const SCREENSHOT_MAX_WIDTH: u32 = 1080;
pub const JPEG_QUALITY: i32 = 85;

#[derive(Debug, Clone)]
pub struct VideoRung {
    pub name: String,
    pub width: u32,
    pub height: u32,
    pub kbps: u32,
    /// The RFC 6381 codecs string of what this rung carries.
    pub codecs: String,
}

/// Everything needed to build one epoch's pipeline.
#[derive(Debug, Clone)]
pub struct Plan {
    pub stream_id: i64,
    pub fps: u32,
    pub segment: Duration,
    /// cmafmux's chunk duration.
    pub part: Duration,
    /// The longest part (PART-TARGET): `part` rounded up to whole frames.
    pub part_target: Duration,
    pub video: Option<VideoConfig>,
    pub audio: Option<AudioConfig>,
    pub video_rungs: Vec<VideoRung>,
    /// The rungs the source allowed and the load did not ([`Ladder::shed`]), highest first.
    pub shed: Vec<String>,
    /// x264's preset ([`Ladder::preset`]), or [`PASSTHROUGH_PRESET`].
    pub x264_preset: &'static str,
    /// The source's video is packaged as it came, the one video rung ([`Ladder::passthrough`]).
    pub passthrough: bool,
    pub audio_kbps: u32,
    /// Wall-clock time of running time 0 (EXT-X-PROGRAM-DATE-TIME base).
    pub wall_base: OffsetDateTime,
    /// Remux the source (see [`Ladder::source`]).
    pub source: bool,
    /// HTML overlays blended into the decoded picture before the ladder (so every rung, the
    /// screenshots and transcoded recordings carry them; the source remux does not).
    pub overlays: Option<Arc<super::overlay::OverlaySet>>,
}

impl Plan {
    pub fn new(
        stream_id: i64,
        ladder: &Ladder,
        video: Option<&VideoConfig>,
        audio: Option<&AudioConfig>,
        measured_fps: Option<f64>,
        packaging: PackagingConfig,
        wall_base: OffsetDateTime,
    ) -> Plan {
        let fps = output_fps(measured_fps);
        let mut video_rungs: Vec<VideoRung> = video
            .map(|v| {
                ladder
                    .capped(v.height)
                    .into_iter()
                    .map(|r| {
                        // Keep the source's display shape; even sizes for 4:2:0.
                        let width =
                            (f64::from(r.height) * f64::from(v.width) / f64::from(v.height) / 2.0)
                                .round() as u32
                                * 2;
                        VideoRung {
                            name: r.name,
                            width: width.max(2),
                            height: r.height,
                            kbps: r.video_kbps,
                            codecs: X264_CODECS.to_owned(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        // Only H.264 is passed through (what every player of every output decodes); another
        // codec is shed instead.
        let source = video
            .filter(|_| ladder.passthrough)
            .and_then(passthrough_rung);
        let passthrough = source.is_some();
        let shed = if let Some(mut source) = source {
            // Nominal: the source's real rate is the encoder's; the top rung it reaches is
            // what a player's first guess needs.
            source.kbps = video_rungs.first().map_or(source.kbps, |r| r.kbps);
            std::mem::replace(&mut video_rungs, vec![source])
                .into_iter()
                .map(|r| r.name)
                .collect()
        } else if (ladder.shed || ladder.passthrough) && video_rungs.len() > 1 {
            let lowest = video_rungs.split_off(video_rungs.len() - 1);
            std::mem::replace(&mut video_rungs, lowest)
                .into_iter()
                .map(|r| r.name)
                .collect()
        } else {
            Vec::new()
        };
        let parts = if video.is_some() {
            part_duration(fps, packaging.segment, packaging.part)
        } else {
            crate::pipeline::ladder::Parts {
                chunk: packaging.part,
                target: packaging.part,
            }
        };
        Plan {
            stream_id,
            fps,
            segment: packaging.segment,
            part: parts.chunk,
            part_target: parts.target,
            video: video.cloned(),
            audio: audio.cloned(),
            video_rungs,
            shed,
            x264_preset: if passthrough {
                PASSTHROUGH_PRESET
            } else {
                ladder.preset
            },
            passthrough,
            audio_kbps: ladder.audio_kbps(),
            wall_base,
            source: ladder.source,
            overlays: None,
        }
    }

    pub fn rendition_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.video_rungs.iter().map(|r| r.name.clone()).collect();
        if self.audio.is_some() {
            names.push(AUDIO_RENDITION.into());
        }
        names
    }

    /// The MPEG-TS variants: one per video rung with the audio muxed in, or audio alone.
    pub fn ts_renditions(&self) -> Vec<Rendition> {
        let audio_bps = if self.audio.is_some() {
            u64::from(self.audio_kbps) * 1000
        } else {
            0
        };
        let all = self.renditions();
        let (videos, audio): (Vec<Rendition>, Vec<Rendition>) = all
            .into_iter()
            .partition(|r| matches!(r.kind, RenditionKind::Video { .. }));
        if videos.is_empty() {
            return audio;
        }
        videos
            .into_iter()
            .map(|mut r| {
                r.nominal_bitrate += audio_bps;
                r
            })
            .collect()
    }

    /// The package renditions this plan produces, in order (video rungs, then audio).
    pub fn renditions(&self) -> Vec<Rendition> {
        let mut out: Vec<Rendition> = self
            .video_rungs
            .iter()
            .map(|r| {
                Rendition::new(
                    &r.name,
                    RenditionKind::Video {
                        width: r.width,
                        height: r.height,
                        frame_rate: f64::from(self.fps),
                    },
                    &r.codecs,
                    u64::from(r.kbps) * 1000,
                )
            })
            .collect();
        if self.audio.is_some() {
            out.push(Rendition::new(
                AUDIO_RENDITION,
                RenditionKind::Audio {
                    channels: AUDIO_CHANNELS as u8,
                    sample_rate: AUDIO_RATE as u32,
                },
                "mp4a.40.2",
                u64::from(self.audio_kbps) * 1000,
            ));
        }
        out
    }
}

/// The source's video as the one rung of a passthrough: H.264 with its decoder configuration
/// (profile and level name its codecs string), at its own size.
fn passthrough_rung(v: &VideoConfig) -> Option<VideoRung> {
    if v.codec != crate::media::VideoCodec::H264 {
        return None;
    }
    // AVCDecoderConfigurationRecord: version, profile, compatibility, level.
    let [1, profile, compatibility, level, ..] = v.record[..] else {
        return None;
    };
    Some(VideoRung {
        name: PASSTHROUGH_RENDITION.to_owned(),
        width: v.width,
        height: v.height,
        kbps: 0,
        codecs: format!("avc1.{profile:02x}{compatibility:02x}{level:02x}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::{VideoCodec, VideoConfig};
    use crate::quality::QualitySets;

    fn plan(ladder: &Ladder, height: u32) -> Plan {
        let video = VideoConfig {
            codec: VideoCodec::H264,
            record: bytes::Bytes::new(),
            width: height * 16 / 9,
            height,
        };
        let at = OffsetDateTime::UNIX_EPOCH;
        Plan::new(
            1,
            ladder,
            Some(&video),
            None,
            Some(30.0),
            PackagingConfig::default(),
            at,
        )
    }

    #[test]
    fn a_shed_ladder_keeps_the_lowest_rung_the_source_allows() {
        let set = QualitySets::builtin();
        let full = Ladder::from_set(set.get(1).unwrap());
        let shed = Ladder {
            shed: true,
            ..full.clone()
        };
        let names = |p: &Plan| {
            p.video_rungs
                .iter()
                .map(|r| r.name.clone())
                .collect::<Vec<_>>()
        };
        let p = plan(&full, 720);
        assert_eq!(names(&p), ["720p", "480p", "360p"]);
        assert!(p.shed.is_empty());
        // 1080p was never in reach of a 720p source: it is not counted as shed.
        let p = plan(&shed, 720);
        assert_eq!(names(&p), ["360p"]);
        assert_eq!(p.shed, ["720p", "480p"]);
        assert_eq!(p.renditions().len(), 1);
        // A source with one rung in reach has nothing to shed.
        let p = plan(&shed, 241);
        assert_eq!(names(&p), ["240p"]);
        assert!(p.shed.is_empty());
    }

    #[test]
    fn a_passthrough_ladder_packages_an_h264_source_as_it_came() {
        let set = QualitySets::builtin();
        let ladder = Ladder {
            passthrough: true,
            ..Ladder::from_set(set.get(1).unwrap())
        };
        let source = |codec, record: &[u8]| VideoConfig {
            codec,
            record: bytes::Bytes::copy_from_slice(record),
            width: 1280,
            height: 720,
        };
        let plan_of = |v: &VideoConfig| {
            Plan::new(
                1,
                &ladder,
                Some(v),
                None,
                Some(25.0),
                PackagingConfig::default(),
                OffsetDateTime::UNIX_EPOCH,
            )
        };
        let p = plan_of(&source(VideoCodec::H264, &[1, 0x64, 0, 0x1f, 0xff]));
        assert!(p.passthrough);
        assert_eq!(p.x264_preset, PASSTHROUGH_PRESET);
        assert_eq!(p.video_rungs.len(), 1);
        let r = &p.video_rungs[0];
        assert_eq!(
            (r.name.as_str(), r.width, r.height, r.codecs.as_str()),
            (PASSTHROUGH_RENDITION, 1280, 720, "avc1.64001f")
        );
        assert_eq!(r.kbps, 3000, "the top rung in reach's nominal rate");
        assert_eq!(
            p.shed,
            ["720p", "480p", "360p"],
            "none of the ladder is made"
        );
        // HEVC is not passed through: shed to the lowest rung instead.
        let p = plan_of(&source(VideoCodec::H265, &[1, 2, 3, 4]));
        assert!(!p.passthrough);
        assert_eq!(p.video_rungs.len(), 1);
        assert_eq!(p.video_rungs[0].name, "360p");
        assert_eq!(p.video_rungs[0].codecs, "avc1.640028");
    }
}
