//! Delivery of recorded videos at `/videos/{id}_{slug}/…`: the VOD master and media playlists
//! (HLS, byte ranges into each track's fragmented MP4) and the MP4 files themselves, streamed
//! from disk with byte ranges. The slug makes the URLs unguessable (ids are sequential); a
//! wrong slug is the same 404 as an unknown id.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::{parse_range, with_common, RangeSpec, PLAYLIST_TYPE};
use crate::db::{Store, VideoRow, VideoStatus};
use crate::http::listener::{channel_body, empty, full, Body};
use crate::record::fragments::{self, Summary};
use crate::record::{mp4, vod};

/// A finished video never changes.
const IMMUTABLE: &str = "public, max-age=86400, immutable";
/// Bytes per read when streaming a file.
const CHUNK: usize = 256 * 1024;
const MAX_NAME: usize = 32;

pub fn owns(path: &str) -> bool {
    path.starts_with("/videos/")
}

#[derive(Debug, PartialEq, Eq)]
enum File {
    Master,
    Playlist(String),
    Media(String),
}

/// `/videos/{id}_{slug}/{file}` → (id, slug, file). Names are plain (`[A-Za-z0-9_-]`), so a
/// path never leaves the video's directory.
fn parse(path: &str) -> Option<(i64, &str, File)> {
    let rest = path.strip_prefix("/videos/")?;
    let (key, file) = rest.split_once('/')?;
    let (id, slug) = key.split_once('_')?;
    let id: i64 = id.parse().ok().filter(|i| *i > 0)?;
    let plain = |n: &str| {
        !n.is_empty()
            && n.len() <= MAX_NAME
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    let file = match file {
        "master.m3u8" => File::Master,
        f => match f.rsplit_once('.') {
            Some((name, "m3u8")) if plain(name) => File::Playlist(name.to_owned()),
            Some((name, "mp4")) if plain(name) => File::Media(name.to_owned()),
            _ => return None,
        },
    };
    Some((id, slug, file))
}

fn not_found() -> Response<Body> {
    with_common(
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(full("not found\n"))
            .expect("static response"),
    )
}

pub async fn handle(
    store: Arc<dyn Store>,
    root: PathBuf,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        let mut resp = not_found();
        *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    let Some((id, slug, file)) = parse(req.uri().path()) else {
        return not_found();
    };
    let slug = slug.to_owned();
    let found = tokio::task::spawn_blocking(move || store.get_video(id)).await;
    let Some(video) = found.ok().and_then(Result::ok).flatten().filter(|v| {
        crate::secret::constant_time_eq(v.slug.as_bytes(), slug.as_bytes())
            && v.state.status == VideoStatus::Ready
    }) else {
        return not_found();
    };
    let dir = root.join(video.id.to_string());
    let range = req.headers().get(header::RANGE).cloned();
    let head = req.method() == hyper::Method::HEAD;
    let resp = match file {
        File::Media(name) => {
            file_body(&fragments::media_path(&dir, &name), range.as_ref(), head).await
        }
        File::Master | File::Playlist(_) => {
            let text = tokio::task::spawn_blocking(move || playlist(&video, &dir, &file))
                .await
                .ok()
                .flatten();
            match text {
                Some(text) => with_common(
                    Response::builder()
                        .header(header::CONTENT_TYPE, PLAYLIST_TYPE)
                        .header(header::CACHE_CONTROL, IMMUTABLE)
                        .body(if head { empty() } else { full(text) })
                        .expect("valid response"),
                ),
                None => not_found(),
            }
        }
    };
    resp
}

/// The master or a media playlist of a ready video, from its index (read-only).
fn playlist(video: &VideoRow, dir: &Path, file: &File) -> Option<String> {
    let (summary, _) = fragments::read_index(dir).ok()?;
    match file {
        File::Playlist(name) => {
            let track = summary.tracks.get(name)?;
            Some(vod::media_playlist(track, &format!("{name}.mp4")))
        }
        File::Master => master(video, dir, &summary),
        File::Media(_) => None,
    }
}

/// Video tracks as variants, audio as the one `EXT-X-MEDIA` audio rendition they refer to
/// (RFC 8216bis §4.4.6.1); BANDWIDTH is the track's peak over its fragments (§4.4.6.2 asks
/// for the peak segment bit rate).
fn master(_video: &VideoRow, dir: &Path, summary: &Summary) -> Option<String> {
    let mut audio = None;
    let mut variants = Vec::new();
    for track in summary.tracks.values().filter(|t| !t.fragments.is_empty()) {
        let mut init = vec![0u8; track.init_len as usize];
        let mut f = std::fs::File::open(fragments::media_path(dir, &track.name)).ok()?;
        std::io::Read::read_exact(&mut f, &mut init).ok()?;
        let info = mp4::describe(&init).ok()?;
        let peak = track
            .fragments
            .iter()
            .map(|f| (f.len as f64 * 8.0 / f.duration.as_secs_f64().max(0.001)) as u64)
            .max()
            .unwrap_or(0);
        if info.audio {
            audio.get_or_insert((track.name.clone(), info, peak));
        } else {
            variants.push((track.name.clone(), info, peak));
        }
    }
    let mut out = String::from("#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-INDEPENDENT-SEGMENTS\n");
    if let Some((name, _, _)) = &audio {
        let _ = writeln!(
            out,
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\",NAME=\"{name}\",DEFAULT=YES,AUTOSELECT=YES,URI=\"{name}.m3u8\""
        );
    }
    variants.sort_by_key(|v| std::cmp::Reverse(v.2));
    for (name, info, peak) in &variants {
        let (codecs, bandwidth, group) = match &audio {
            Some((_, a, audio_peak)) => (
                format!("{},{}", info.codecs, a.codecs),
                peak + audio_peak,
                ",AUDIO=\"audio\"",
            ),
            None => (info.codecs.clone(), *peak, ""),
        };
        let _ = writeln!(
            out,
            "#EXT-X-STREAM-INF:BANDWIDTH={bandwidth},CODECS=\"{codecs}\",RESOLUTION={}x{}{group}\n{name}.m3u8",
            info.width, info.height
        );
    }
    if variants.is_empty() {
        let (name, info, peak) = audio?;
        let _ = writeln!(
            out,
            "#EXT-X-STREAM-INF:BANDWIDTH={peak},CODECS=\"{}\"\n{name}.m3u8",
            info.codecs
        );
    }
    Some(out)
}

/// A file from disk with an optional single byte range (RFC 9110 §14), streamed in chunks.
async fn file_body(path: &Path, range: Option<&HeaderValue>, head: bool) -> Response<Body> {
    let Ok(mut file) = tokio::fs::File::open(path).await else {
        return not_found();
    };
    let Ok(len) = file.metadata().await.map(|m| m.len()) else {
        return not_found();
    };
    let builder = Response::builder()
        .header(header::CONTENT_TYPE, "video/mp4")
        .header(header::CACHE_CONTROL, IMMUTABLE)
        .header(header::ACCEPT_RANGES, "bytes");
    let (builder, start, end) = match range
        .and_then(|r| r.to_str().ok())
        .map(|r| parse_range(r, len))
    {
        Some(RangeSpec::Satisfiable(start, end)) => (
            builder
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{len}")),
            start,
            end,
        ),
        Some(RangeSpec::Unsatisfiable) => {
            return with_common(
                builder
                    .status(StatusCode::RANGE_NOT_SATISFIABLE)
                    .header(header::CONTENT_RANGE, format!("bytes */{len}"))
                    .body(empty())
                    .expect("valid response"),
            )
        }
        Some(RangeSpec::Ignore) | None if len == 0 => (builder, 0, 0),
        Some(RangeSpec::Ignore) | None => (builder, 0, len - 1),
    };
    let count = if len == 0 { 0 } else { end - start + 1 };
    let builder = builder.header(header::CONTENT_LENGTH, count);
    if head || count == 0 {
        return with_common(builder.body(empty()).expect("valid response"));
    }
    if file.seek(std::io::SeekFrom::Start(start)).await.is_err() {
        return not_found();
    }
    let (tx, body) = channel_body(4);
    tokio::spawn(async move {
        let mut left = count;
        while left > 0 {
            let mut buf = vec![0u8; CHUNK.min(left as usize)];
            match file.read_exact(&mut buf).await {
                Ok(_) => {
                    left -= buf.len() as u64;
                    if tx.send(Ok(Bytes::from(buf))).await.is_err() {
                        return; // the client went away
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
    });
    with_common(builder.body(body).expect("valid response"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_plain_files_of_one_video() {
        assert_eq!(
            parse("/videos/12_abc/master.m3u8"),
            Some((12, "abc", File::Master))
        );
        assert_eq!(
            parse("/videos/12_abc/720p.m3u8"),
            Some((12, "abc", File::Playlist("720p".into())))
        );
        assert_eq!(
            parse("/videos/12_abc/audio.mp4"),
            Some((12, "abc", File::Media("audio".into())))
        );
        for bad in [
            "/videos/12abc/master.m3u8",
            "/videos/0_abc/master.m3u8",
            "/videos/12_abc/../x.mp4",
            "/videos/12_abc/a.b.mp4",
            "/videos/12_abc/index.log",
            "/videos/12_abc/%2e%2e.mp4",
            "/videos/12_abc/",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
