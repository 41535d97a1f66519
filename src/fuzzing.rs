//! Fuzz entry points: every parser and state machine that reads peer bytes, one function per
//! target, called by the libFuzzer targets under `fuzz/` and by `tests/fuzz_corpus.rs`, which
//! replays each committed corpus on every `cargo test` so a fixed crash stays fixed. A target
//! must never panic, whatever the bytes; errors are the expected answer to garbage.

use std::time::Duration;

use bytes::Bytes;

use crate::media::TrackKind;

/// (name, entry point) of every target; the names are the `fuzz/fuzz_targets` file names and
/// the `fuzz/corpus` directory names.
/// A target: takes any bytes, never panics.
pub type Target = fn(&[u8]);

pub const TARGETS: &[(&str, Target)] = &[
    ("rtmp_chunks", rtmp_chunks),
    ("amf0", amf0),
    ("flv_tags", flv_tags),
    ("rtmp_key", rtmp_key),
    ("mpegts", mpegts),
    ("srt_streamid", srt_streamid),
    ("whip_sdp", whip_sdp),
    ("whip_rtp", whip_rtp),
    ("http_media_path", http_media_path),
    ("api_stream_body", api_stream_body),
    ("api_query", api_query),
    ("pull_playlist", pull_playlist),
    ("flv_stream", flv_stream),
];

/// Reads a length-prefixed record (1 length byte) off the front of `data`.
fn record<'a>(data: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (&len, rest) = data.split_first()?;
    let len = usize::from(len).min(rest.len());
    let (head, tail) = rest.split_at(len);
    *data = tail;
    Some(head)
}

/// The RTMP chunk-stream guard, fed in arbitrary splits (each record is one socket read).
pub fn rtmp_chunks(mut data: &[u8]) {
    let mut guard = crate::ingest::rtmp::vet::ChunkGuard::new();
    while let Some(read) = record(&mut data) {
        if guard.check(read).is_err() {
            return;
        }
    }
}

pub fn amf0(data: &[u8]) {
    let _ = crate::ingest::rtmp::vet::check_amf0(
        data,
        0,
        crate::ingest::rtmp::vet::DEFAULT_MAX_AMF_DEPTH,
    );
}

/// FLV audio/video tag bodies as RTMP delivers them: a kind byte, a timestamp, a body.
pub fn flv_tags(mut data: &[u8]) {
    let mut flv = crate::ingest::rtmp::to_media::FlvToMedia::new();
    let mut ts = 0u32;
    while let (Some(head), Some(body)) = (record(&mut data), record(&mut data)) {
        let kind = head.first().copied().unwrap_or(0);
        ts = ts.wrapping_add(u32::from(head.get(1).copied().unwrap_or(33)));
        let body = Bytes::copy_from_slice(body);
        let _ = if kind & 1 == 0 {
            flv.video(ts, &body)
        } else {
            flv.audio(ts, &body)
        };
    }
}

/// An FLV byte stream as an RTMP server plays it to a PULL, in arbitrary splits: the stream
/// reader, then every tag (script data included) through the FLV → media adapter.
pub fn flv_stream(mut data: &[u8]) {
    let mut reader = crate::ingest::rtmp::flv::FlvReader::new();
    let mut flv = crate::ingest::rtmp::to_media::FlvToMedia::new();
    let mut tags = Vec::new();
    while let Some(read) = record(&mut data) {
        if reader.push(read, &mut tags).is_err() {
            return;
        }
        for tag in tags.drain(..) {
            use crate::ingest::rtmp::flv::FlvTag;
            let _ = match tag {
                FlvTag::Audio { timestamp, body } => flv.audio(timestamp, &body),
                FlvTag::Video { timestamp, body } => flv.video(timestamp, &body),
                FlvTag::Script { body } => flv.script(&body),
            };
        }
    }
}

/// The RTMP publish name (`app` NUL `key`).
pub fn rtmp_key(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (app, key) = text.split_once('\0').unwrap_or(("in", &text));
    let _ = crate::ingest::rtmp::key::parse(app, key);
}

/// MPEG-TS as SRT (and PULL) deliver it, in arbitrary splits, into media messages.
pub fn mpegts(mut data: &[u8]) {
    let mut ts = crate::ingest::mpegts::to_media::TsToMedia::new();
    let mut out = Vec::new();
    while let Some(read) = record(&mut data) {
        if ts.push(read, &mut out).is_err() {
            return;
        }
        out.clear();
    }
    let _ = ts.finish(&mut out);
}

pub fn srt_streamid(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::ingest::srt::streamid::parse(Some(&text));
}

/// WHIP's offer and answer checks, and WHEP's offer check (the same reader).
pub fn whip_sdp(data: &[u8]) {
    let _ = crate::ingest::whip::sdp::check_offer(data);
    let _ = crate::realtime::whep::check_offer(data);
    let _ = crate::ingest::whip::sdp::check_answer(data);
}

/// A PULL source's playlist (HLS or DASH, as the gateway sniffs it) through the gateway's
/// reference rewriting; one host is refused, as the URL policy would.
pub fn pull_playlist(data: &[u8]) {
    use crate::ingest::pull::rewrite::{rewrite_m3u8, rewrite_mpd, sniff};
    let base = url::Url::parse("https://cdn.example/live/index.m3u8").expect("valid URL");
    let text = String::from_utf8_lossy(data);
    let mut map = |u: &url::Url| match u.host_str() {
        Some("169.254.169.254") => Err("refused".into()),
        _ => Ok(format!("http://127.0.0.1:1{}", u.path())),
    };
    let _ = sniff("", data);
    let _ = rewrite_m3u8(&text, &base, &mut map);
    let _ = rewrite_mpd(&text, &base, &mut map);
}

/// RTP packets of both tracks (sequence, timestamp, marker, arrival, payload) through the
/// reorder buffers, the H.264 depacketizer and the Opus framing.
pub fn whip_rtp(mut data: &[u8]) {
    use crate::ingest::whip::to_media::{RtpPacket, RtpToMedia};
    let mut rtp = RtpToMedia::new(2);
    let mut out = Vec::new();
    let mut now = Duration::ZERO;
    while let (Some(head), Some(payload)) = (record(&mut data), record(&mut data)) {
        let mut h = [0u8; 8];
        h[..head.len().min(8)].copy_from_slice(&head[..head.len().min(8)]);
        now += Duration::from_millis(u64::from(h[7]));
        let packet = RtpPacket {
            seq: u16::from_be_bytes([h[0], h[1]]),
            ts: u32::from_be_bytes([h[2], h[3], h[4], h[5]]),
            marker: h[6] & 1 == 1,
            payload: Bytes::copy_from_slice(payload),
        };
        let track = if h[6] & 2 == 0 {
            TrackKind::Video
        } else {
            TrackKind::Audio
        };
        let _ = rtp.push(track, packet, now, &mut out);
        out.clear();
    }
    let _ = rtp.poll(now + Duration::from_secs(1), &mut out);
}

/// A media request's path and query (`/cmaf/…`, `/mpegts/…`, `/screenshots/…`, LL-HLS
/// directives).
pub fn http_media_path(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (path, query) = text.split_once('?').unwrap_or((&text, ""));
    let _ = crate::http::delivery::parse_path(path);
    let _ = crate::package::hls::parse_query(Some(query));
}

/// A stream create/update body: JSON, then the field rules.
pub fn api_stream_body(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = crate::http::api::streams::settings_from_body(value);
    }
}

/// Query strings of the listings (pairs, integers, the FastEdge filters and ordering).
pub fn api_query(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::http::api::query_pairs(Some(&text));
    let _ = crate::http::api::fastedge::parse_filter(Some(&text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_clamped_to_what_is_there() {
        let mut d: &[u8] = &[3, 1, 2, 3, 200, 9];
        assert_eq!(record(&mut d), Some(&[1u8, 2, 3][..]));
        assert_eq!(record(&mut d), Some(&[9u8][..]));
        assert_eq!(record(&mut d), None);
    }

    #[test]
    fn every_target_takes_empty_and_junk_input() {
        for (_, target) in TARGETS {
            for input in [&b""[..], &[0xff; 64][..], &[0; 300][..]] {
                target(input);
            }
        }
    }
}
