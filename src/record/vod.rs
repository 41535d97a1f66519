//! VOD renderings of a recording, from its index: HLS media playlists that address each
//! track's fragmented MP4 by byte ranges (`EXT-X-MAP` for the init, `EXT-X-BYTERANGE` per
//! fragment; RFC 8216bis §4.4.4.2, §4.4.4.5), the HLS master, and a static DASH MPD of the
//! on-demand profile (`SegmentBase` pointing at each file's init and `sidx`). The files a crash
//! may have interrupted are served as they are, without a remux. A rendition whose pipeline
//! was rebuilt with a different init has several tracks (`720p`, `720p-2`): one playlist
//! chains them with `EXT-X-DISCONTINUITY` and a new `EXT-X-MAP`; the MPD gives each its Period.

use std::fmt::Write as _;
use std::time::Duration;

use super::fragments::{self, Track};
use super::mp4::TrackInfo;

/// A file's `sidx`, for DASH: its length (it starts right after the init), timescale and
/// earliest presentation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sidx {
    pub len: u64,
    pub timescale: u32,
    pub earliest: u64,
}

impl Sidx {
    /// Reads the `sidx` (version 0 or 1) at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Option<Sidx> {
        let be32 = |at: usize| Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let be64 = |at: usize| Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        if bytes.get(4..8)? != b"sidx" {
            return None;
        }
        let earliest = match bytes.get(8)? {
            0 => u64::from(be32(20)?),
            1 => be64(20)?,
            _ => return None,
        };
        Some(Sidx {
            len: u64::from(be32(0)?),
            timescale: be32(16)?.max(1),
            earliest,
        })
    }
}

/// One rendition of a recording as the renderings need it.
pub struct Rendition<'a> {
    pub name: &'a str,
    /// What its first track's init declares.
    pub info: TrackInfo,
    /// Peak bit rate over its fragments (RFC 8216bis §4.4.6.2 asks for the peak).
    pub peak: u64,
    /// Its tracks in order, each with its `sidx` (absent: not served by the MPD).
    pub tracks: Vec<(&'a Track, Option<Sidx>)>,
}

/// The peak bit rate of `tracks`' fragments.
pub fn peak(tracks: &[&Track]) -> u64 {
    tracks
        .iter()
        .flat_map(|t| &t.fragments)
        .map(|f| (f.len as f64 * 8.0 / f.duration.as_secs_f64().max(0.001)) as u64)
        .max()
        .unwrap_or(0)
}

/// `EXT-X-TARGETDURATION`: the longest fragment rounded to the nearest second (§4.4.3.1:
/// every EXTINF rounded to the nearest integer must be ≤ it).
fn target_duration(tracks: &[&Track]) -> u64 {
    tracks
        .iter()
        .flat_map(|t| &t.fragments)
        .map(|f| f.duration.as_secs_f64().round() as u64)
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The media playlist of one rendition: its tracks one after the other, each file named
/// `{track}.mp4`.
pub fn media_playlist(tracks: &[&Track]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:{}\n#EXT-X-PLAYLIST-TYPE:VOD\n\
         #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n",
        target_duration(tracks),
    );
    for (i, track) in tracks.iter().enumerate() {
        let uri = format!("{}.mp4", track.name);
        if i > 0 {
            out.push_str("#EXT-X-DISCONTINUITY\n");
        }
        let _ = writeln!(
            out,
            "#EXT-X-MAP:URI=\"{uri}\",BYTERANGE=\"{}@0\"",
            track.init_len
        );
        for (n, f) in track.fragments.iter().enumerate() {
            if f.discontinuity && !(i > 0 && n == 0) {
                out.push_str("#EXT-X-DISCONTINUITY\n");
            }
            let _ = write!(
                out,
                "#EXTINF:{:.3},\n#EXT-X-BYTERANGE:{}@{}\n{uri}\n",
                f.duration.as_secs_f64(),
                f.len,
                f.offset
            );
        }
    }
    out.push_str("#EXT-X-ENDLIST\n");
    out
}

/// The master playlist: video renditions as variants (highest first), audio as the one
/// `EXT-X-MEDIA` rendition they refer to (§4.4.6.1); an audio-only recording is one variant.
pub fn master(renditions: &[Rendition]) -> Option<String> {
    let audio = renditions.iter().find(|r| r.info.audio);
    let mut video: Vec<&Rendition> = renditions.iter().filter(|r| !r.info.audio).collect();
    video.sort_by_key(|r| std::cmp::Reverse(r.peak));
    let mut out = String::from("#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-INDEPENDENT-SEGMENTS\n");
    if let Some(a) = audio {
        let _ = writeln!(
            out,
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\",NAME=\"{}\",DEFAULT=YES,AUTOSELECT=YES,URI=\"{}.m3u8\"",
            a.name, a.name
        );
    }
    for v in &video {
        let (codecs, bandwidth, group) = match audio {
            Some(a) => (
                format!("{},{}", v.info.codecs, a.info.codecs),
                v.peak + a.peak,
                ",AUDIO=\"audio\"",
            ),
            None => (v.info.codecs.clone(), v.peak, ""),
        };
        let _ = writeln!(
            out,
            "#EXT-X-STREAM-INF:BANDWIDTH={bandwidth},CODECS=\"{codecs}\",RESOLUTION={}x{}{group}\n{}.m3u8",
            v.info.width, v.info.height, v.name
        );
    }
    if video.is_empty() {
        let a = audio?;
        let _ = writeln!(
            out,
            "#EXT-X-STREAM-INF:BANDWIDTH={},CODECS=\"{}\"\n{}.m3u8",
            a.peak, a.info.codecs, a.name
        );
    }
    Some(out)
}

/// A Period's length in whole milliseconds, rounded up, never to the nearest: a Period must not
/// end before its media. dash.js, stalled a little before a Period's end (a track that ends
/// before the others), seeks to that end; short of the media's end, the element stays there,
/// paused and never `ended`. At or past it, the seek lands on the end and playback ends.
fn period_ms(d: Duration) -> u128 {
    d.as_nanos().div_ceil(1_000_000)
}

fn xs_duration(ms: u128) -> String {
    format!("PT{}.{:03}S", ms / 1000, ms % 1000)
}

/// The static MPD (ISO/IEC 23009-1 on-demand profile): one Period per track generation, each
/// Representation one file with `SegmentBase` (its `sidx` as the index, its init as the
/// initialization; `presentationTimeOffset` the file's first time).
pub fn mpd(renditions: &[Rendition]) -> Option<String> {
    let generations = renditions.iter().map(|r| r.tracks.len()).max()?;
    let mut periods = String::new();
    // In the milliseconds written, so each Period starts where the one before it ends.
    let mut start = 0;
    for g in 0..generations {
        let length = renditions
            .iter()
            .filter_map(|r| r.tracks.get(g))
            .map(|(t, _)| period_ms(t.duration()))
            .max()
            .unwrap_or_default();
        let _ = writeln!(
            periods,
            "  <Period id=\"{}\" start=\"{}\" duration=\"{}\">",
            g + 1,
            xs_duration(start),
            xs_duration(length)
        );
        for (content, audio) in [("video", false), ("audio", true)] {
            let members: Vec<(&Rendition, &Track, Sidx)> = renditions
                .iter()
                .filter(|r| r.info.audio == audio)
                .filter_map(|r| {
                    let (t, sidx) = r.tracks.get(g)?;
                    Some((r, *t, (*sidx)?))
                })
                .collect();
            if members.is_empty() {
                continue;
            }
            let _ = writeln!(
                periods,
                "    <AdaptationSet contentType=\"{content}\" mimeType=\"{content}/mp4\" segmentAlignment=\"true\" subsegmentAlignment=\"true\" subsegmentStartsWithSAP=\"1\">"
            );
            for (r, t, sidx) in members {
                let size = if audio {
                    String::new()
                } else {
                    format!(" width=\"{}\" height=\"{}\"", r.info.width, r.info.height)
                };
                let _ = writeln!(
                    periods,
                    "      <Representation id=\"{}\" codecs=\"{}\" bandwidth=\"{}\"{size}>\n        <BaseURL>{}.mp4</BaseURL>\n        <SegmentBase timescale=\"{}\" presentationTimeOffset=\"{}\" indexRange=\"{}-{}\">\n          <Initialization range=\"0-{}\"/>\n        </SegmentBase>\n      </Representation>",
                    r.name,
                    r.info.codecs,
                    r.peak.max(1),
                    t.name,
                    sidx.timescale,
                    sidx.earliest,
                    t.init_len,
                    t.init_len + sidx.len - 1,
                    t.init_len.saturating_sub(1),
                );
            }
            periods.push_str("    </AdaptationSet>\n");
        }
        periods.push_str("  </Period>\n");
        start += length;
    }
    Some(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<MPD xmlns=\"urn:mpeg:dash:schema:mpd:2011\" type=\"static\" \
profiles=\"urn:mpeg:dash:profile:isoff-on-demand:2011\" mediaPresentationDuration=\"{}\" minBufferTime=\"PT2S\">\n{periods}</MPD>\n",
        xs_duration(start)
    ))
}

/// A video's playlist or MPD by its file name (`master.m3u8`, `index.mpd`, `{rendition}.m3u8`),
/// from its index and its files' headers (read-only).
pub fn render(dir: &std::path::Path, name: &str) -> Option<String> {
    let (summary, _) = fragments::read_index(dir).ok()?;
    let renditions = summary.renditions();
    match name {
        "master.m3u8" => master(&described(dir, &renditions)?),
        "index.mpd" => mpd(&described(dir, &renditions)?),
        other => {
            let rendition = other.strip_suffix(".m3u8")?;
            let (_, tracks) = renditions.iter().find(|(r, _)| *r == rendition)?;
            Some(media_playlist(tracks))
        }
    }
}

/// Each rendition with what its first init declares and each file's `sidx`.
fn described<'a>(
    dir: &std::path::Path,
    renditions: &[(&'a str, Vec<&'a Track>)],
) -> Option<Vec<Rendition<'a>>> {
    let mut out = Vec::new();
    for (name, tracks) in renditions {
        let tracks: Vec<&Track> = tracks
            .iter()
            .copied()
            .filter(|t| !t.fragments.is_empty())
            .collect();
        let Some(first) = tracks.first() else {
            continue;
        };
        let head = |t: &Track, len: u64| -> Option<Vec<u8>> {
            let mut f = std::fs::File::open(fragments::media_path(dir, &t.name)).ok()?;
            let mut buf = vec![0u8; usize::try_from(len).ok()?];
            std::io::Read::read_exact(&mut f, &mut buf).ok()?;
            Some(buf)
        };
        let info = super::mp4::describe(&head(first, first.init_len)?).ok()?;
        // The sidx header and the fields the MPD needs: 28 bytes after the init.
        let with_sidx = tracks
            .iter()
            .map(|t| {
                let sidx =
                    head(t, t.init_len + 28).and_then(|b| Sidx::parse(&b[t.init_len as usize..]));
                (*t, sidx)
            })
            .collect();
        out.push(Rendition {
            name,
            info,
            peak: peak(&tracks),
            tracks: with_sidx,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fragments::Fragment;
    use std::time::Duration;
    use time::OffsetDateTime;

    fn track() -> Track {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let mut offset = 800;
        let fragments = (0..3u64)
            .map(|n| {
                let f = Fragment {
                    offset,
                    len: 1000 + n,
                    duration: Duration::from_millis(if n == 2 { 1480 } else { 2000 }),
                    pdt: t0 + Duration::from_secs(2 * n),
                    discontinuity: n == 1,
                };
                offset += f.len;
                f
            })
            .collect();
        Track {
            name: "720p".into(),
            init_len: 800,
            media_start: 800,
            fragments,
        }
    }

    #[test]
    fn a_vod_playlist_addresses_the_one_file_by_byte_ranges() {
        let text = media_playlist(&[&track()]);
        let playlist = match m3u8_rs::parse_playlist_res(text.as_bytes()).unwrap() {
            m3u8_rs::Playlist::MediaPlaylist(p) => p,
            m3u8_rs::Playlist::MasterPlaylist(_) => panic!("a media playlist"),
        };
        assert_eq!(
            playlist.playlist_type,
            Some(m3u8_rs::MediaPlaylistType::Vod)
        );
        assert!(playlist.end_list);
        assert_eq!(playlist.target_duration, 2);
        let ranges: Vec<(u64, Option<u64>)> = playlist
            .segments
            .iter()
            .map(|s| {
                let r = s.byte_range.as_ref().unwrap();
                (r.length, r.offset)
            })
            .collect();
        assert_eq!(
            ranges,
            [(1000, Some(800)), (1001, Some(1800)), (1002, Some(2801))]
        );
        assert!(playlist.segments[1].discontinuity && !playlist.segments[0].discontinuity);
        let map = playlist.segments[0].map.as_ref().unwrap();
        assert_eq!(map.uri, "720p.mp4");
        assert_eq!(
            map.byte_range.as_ref().map(|r| (r.length, r.offset)),
            Some((800, Some(0)))
        );
        let total: f32 = playlist.segments.iter().map(|s| s.duration).sum();
        assert!((total - 5.48).abs() < 0.001);
    }

    /// Seconds of an `xs:duration` as the MPD writes them (`PT…S`).
    fn secs(xs: &str) -> f64 {
        let s = xs.strip_prefix("PT").and_then(|s| s.strip_suffix('S'));
        s.and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{xs}"))
    }

    /// (mediaPresentationDuration, each Period's (start, end)) of an MPD, in seconds.
    fn mpd_periods(text: &str) -> (f64, Vec<(f64, f64)>) {
        let doc = roxmltree::Document::parse(text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
        let root = doc.root_element();
        let total = secs(root.attribute("mediaPresentationDuration").unwrap());
        let periods = root
            .children()
            .filter(|n| n.has_tag_name("Period"))
            .map(|p| {
                let start = secs(p.attribute("start").unwrap());
                (start, start + secs(p.attribute("duration").unwrap()))
            })
            .collect();
        (total, periods)
    }

    /// Sound that ends a third of a millisecond past a whole one (469 AAC frames at 48 kHz),
    /// in each of two Periods (a rebuilt pipeline): rounded to the nearest millisecond, each
    /// Period ended before it.
    #[test]
    fn each_period_ends_no_earlier_than_its_longest_track() {
        let frame_ns = 1024 * 1_000_000_000 / 48_000;
        let mut audio = track();
        audio.name = "audio".into();
        for f in &mut audio.fragments {
            f.duration = Duration::from_nanos(frame_ns * 94);
        }
        audio.fragments[2].duration = Duration::from_nanos(frame_ns * 281);
        let length = audio.duration();
        assert!(length.subsec_nanos() % 1_000_000 < 500_000, "{length:?}");
        let audio_2 = Track {
            name: "audio-2".into(),
            ..audio.clone()
        };
        let video = track();
        let video_2 = Track {
            name: "720p-2".into(),
            ..track()
        };
        let sidx = |timescale| {
            Some(Sidx {
                len: 64,
                timescale,
                earliest: 0,
            })
        };
        let renditions = [
            Rendition {
                name: "720p",
                info: TrackInfo {
                    audio: false,
                    codecs: "avc1.64001f".into(),
                    width: 1280,
                    height: 720,
                },
                peak: 1,
                tracks: vec![(&video, sidx(90_000)), (&video_2, sidx(90_000))],
            },
            Rendition {
                name: "audio",
                info: TrackInfo {
                    audio: true,
                    codecs: "mp4a.40.2".into(),
                    width: 0,
                    height: 0,
                },
                peak: 1,
                tracks: vec![(&audio, sidx(48_000)), (&audio_2, sidx(48_000))],
            },
        ];
        let (total, periods) = mpd_periods(&mpd(&renditions).unwrap());
        let length = length.as_secs_f64();
        let [(s1, e1), (s2, e2)] = periods[..] else {
            panic!("two Periods: {periods:?}")
        };
        assert_eq!(s1, 0.0);
        assert!(e1 - s1 >= length && e1 - s1 - length < 0.001, "{periods:?}");
        assert_eq!(s2, e1, "the second Period starts where the first ends");
        assert!(e2 - s2 >= length && e2 - s2 - length < 0.001, "{periods:?}");
        assert_eq!(total, e2);
    }

    /// The end of a file's media as ffprobe reads its packets (decode times and durations
    /// from each fragment), in its time base's ticks, and that time base.
    fn probed_end(path: &std::path::Path) -> (u64, u64) {
        let probed = fragments::tests::ffprobe(path, "stream=time_base:packet=pts,duration");
        let base = probed["streams"][0]["time_base"].as_str().unwrap();
        let ticks = base.strip_prefix("1/").unwrap().parse().unwrap();
        let num = |v: &serde_json::Value| v.as_i64().unwrap_or(0);
        let end = probed["packets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| num(&p["pts"]) + num(&p["duration"]))
            .max()
            .unwrap();
        (u64::try_from(end).unwrap(), ticks)
    }

    /// Real cmafmux output recorded as the daemon records it — ten seconds of picture, and
    /// sound that ends a third of a millisecond after its last whole one, past the picture —
    /// then rendered: every Representation's media, read by ffprobe, ends within the Period,
    /// and the Period ends with the longest of them.
    #[test]
    fn a_recorded_mpd_ends_where_its_media_ends() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (vinit, video) = fragments::tests::cmaf(10);
        // The encoder adds a frame at the end: 469 of them.
        let (ainit, audio) = fragments::tests::cmaf_audio_frames(468);
        let t0 = OffsetDateTime::now_utc();
        let mut w = fragments::Writer::create(dir).unwrap();
        w.init("480p", &vinit).unwrap();
        w.init("audio", &ainit).unwrap();
        for n in 0..video.len().max(audio.len()) {
            for (track, frags) in [("480p", &video), ("audio", &audio)] {
                if let Some((chunks, d)) = frags.get(n) {
                    w.fragment(track, chunks, *d, t0, false).unwrap();
                }
            }
        }
        fragments::finalize(dir, w.summary()).unwrap();
        let text = render(dir, "index.mpd").unwrap();
        let (total, periods) = mpd_periods(&text);
        let period_end = periods[0].1;
        let doc = roxmltree::Document::parse(&text).unwrap();
        let mut ends = Vec::new();
        for r in doc
            .descendants()
            .filter(|n| n.has_tag_name("Representation"))
        {
            let child = |tag: &str| r.descendants().find(|n| n.has_tag_name(tag)).unwrap();
            let file = child("BaseURL").text().unwrap();
            let base = child("SegmentBase");
            let attr = |k: &str| -> u64 { base.attribute(k).unwrap().parse().unwrap() };
            let (end, ticks) = probed_end(&dir.join(file));
            assert_eq!(ticks, attr("timescale"), "{file}");
            let end = (end - attr("presentationTimeOffset")) as f64 / ticks as f64;
            assert!(
                period_end >= end,
                "{file} ends at {end} s, after its Period: {text}"
            );
            ends.push(end);
        }
        let longest = ends.iter().copied().fold(0.0, f64::max);
        assert!(longest > 10.0, "the sound ends after the picture: {ends:?}");
        let past_whole_ms = (longest * 1000.0).fract();
        assert!(past_whole_ms > 0.0 && past_whole_ms < 0.5, "{ends:?}");
        assert!(
            period_end - longest < 0.001 && total >= longest,
            "{ends:?}: {text}"
        );
    }
}
