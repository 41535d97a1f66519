//! VOD playlists of a recording, rendered from its index: one HLS media playlist per track that
//! addresses the track's single fragmented MP4 by byte ranges (`EXT-X-MAP` for the init,
//! `EXT-X-BYTERANGE` per fragment; RFC 8216bis §4.4.4.2, §4.4.4.5), so the files a crash may
//! have interrupted are served as they are, without a remux.

use std::fmt::Write as _;

use super::fragments::Track;

/// `EXT-X-TARGETDURATION`: the longest fragment rounded to the nearest second (§4.4.3.1:
/// every EXTINF rounded to the nearest integer must be ≤ it).
fn target_duration(track: &Track) -> u64 {
    track
        .fragments
        .iter()
        .map(|f| f.duration.as_secs_f64().round() as u64)
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The media playlist of one track; `uri` is how the playlist names the track's file.
pub fn media_playlist(track: &Track, uri: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:{}\n#EXT-X-PLAYLIST-TYPE:VOD\n\
         #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n\
         #EXT-X-MAP:URI=\"{uri}\",BYTERANGE=\"{}@0\"\n",
        target_duration(track),
        track.init_len
    );
    for f in &track.fragments {
        if f.discontinuity {
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
    out.push_str("#EXT-X-ENDLIST\n");
    out
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
        let text = media_playlist(&track(), "720p.mp4");
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
}
