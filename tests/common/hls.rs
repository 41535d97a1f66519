//! Playlists read by an independent parser (m3u8-rs), and the few LL-HLS reads it cannot do.

use m3u8_rs::{MasterPlaylist, MediaPlaylist, Playlist};

pub fn master(text: &str) -> MasterPlaylist {
    match m3u8_rs::parse_playlist_res(text.as_bytes()) {
        Ok(Playlist::MasterPlaylist(m)) => m,
        other => panic!("not a master playlist: {other:?}\n{text}"),
    }
}

pub fn media(text: &str) -> MediaPlaylist {
    match m3u8_rs::parse_playlist_res(text.as_bytes()) {
        Ok(Playlist::MediaPlaylist(p)) => p,
        other => panic!("not a media playlist: {other:?}\n{text}"),
    }
}

/// For polling a URL that may not serve a playlist yet (a 404 body is not one).
pub fn try_master(text: &str) -> Option<MasterPlaylist> {
    match m3u8_rs::parse_playlist_res(text.as_bytes()) {
        Ok(Playlist::MasterPlaylist(m)) => Some(m),
        _ => None,
    }
}

/// See [`try_master`].
pub fn try_media(text: &str) -> Option<MediaPlaylist> {
    match m3u8_rs::parse_playlist_res(text.as_bytes()) {
        Ok(Playlist::MediaPlaylist(p)) => Some(p),
        _ => None,
    }
}

/// EXT-X-MEDIA-SEQUENCE: the number of the first segment listed.
pub fn first_msn(p: &MediaPlaylist) -> u64 {
    p.media_sequence
}

/// The number of the segment after the last complete one listed: the one being produced.
pub fn next_msn(p: &MediaPlaylist) -> u64 {
    p.media_sequence + p.segments.len() as u64
}

/// The number of the last complete segment listed; panics when none is.
pub fn last_msn(p: &MediaPlaylist) -> u64 {
    assert!(!p.segments.is_empty(), "no segment listed: {p:?}");
    next_msn(p) - 1
}

// m3u8-rs 6 knows none of the LL-HLS tags (EXT-X-PART, -PRELOAD-HINT, -SERVER-CONTROL,
// -RENDITION-REPORT, -SKIP): it files them as unknown tags of the next segment, and drops
// whatever follows the last complete segment — the parts and the discontinuity of the segment
// in progress. Reads of those are done on the text, here.

/// The newest EXT-X-PART line: it changes whenever a part is published.
pub fn last_part(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .find(|l| l.starts_with("#EXT-X-PART:"))
        .map(str::to_owned)
}

/// Discontinuities ever marked: EXT-X-DISCONTINUITY-SEQUENCE plus the tags listed, including
/// one before the parts of the segment in progress.
pub fn discontinuities(text: &str) -> u64 {
    let seq = text
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-DISCONTINUITY-SEQUENCE:"))
        .map_or(0, |v| v.parse().unwrap());
    seq + text.matches("#EXT-X-DISCONTINUITY\n").count() as u64
}
