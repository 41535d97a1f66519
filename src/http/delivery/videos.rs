//! Delivery of recorded videos at `/videos/{id}_{slug}/…`: the VOD master and media playlists
//! (HLS, byte ranges into each track's fragmented MP4) and the MP4 files themselves, streamed
//! from disk with byte ranges. The slug makes the URLs unguessable (ids are sequential); a
//! wrong slug is the same 404 as an unknown id.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::ranges::{ranged, IMMUTABLE};
use super::{with_common, PLAYLIST_TYPE};
use crate::db::Store;
use crate::http::listener::{channel_body, empty, full, Body};
use crate::record::fragments;
use crate::record::vod;

/// Bytes per read when streaming a file.
const CHUNK: usize = 256 * 1024;
const MAX_NAME: usize = 32;

pub fn owns(path: &str) -> bool {
    path.starts_with("/videos/")
}

#[derive(Debug, PartialEq, Eq)]
enum File {
    Master,
    Mpd,
    Screenshot,
    Playlist(String),
    Media(String),
}

impl File {
    /// The file's name in the video's directory (and in the object store).
    fn name(&self) -> String {
        match self {
            File::Master => "master.m3u8".into(),
            File::Mpd => "index.mpd".into(),
            File::Screenshot => crate::record::manager::SCREENSHOT.into(),
            File::Playlist(n) => format!("{n}.m3u8"),
            File::Media(n) => format!("{n}.mp4"),
        }
    }
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
        "index.mpd" => File::Mpd,
        "screenshot.jpg" => File::Screenshot,
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

/// The media type of one of a video's files.
fn content_type(file: &File) -> &'static str {
    match file {
        File::Master | File::Playlist(_) => PLAYLIST_TYPE,
        File::Mpd => super::MPD_TYPE,
        File::Screenshot => "image/jpeg",
        File::Media(_) => "video/mp4",
    }
}

/// `relay`: a video recorded on another node is fetched from that node's disk through it;
/// `storage`: a video in the object store is served from there by any node.
pub async fn handle(
    store: Arc<dyn Store>,
    root: PathBuf,
    storage: Option<Arc<crate::storage::Storage>>,
    relay: &crate::http::relay::Relay,
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
    // Already read by the signed-playback gate when the request brought no grant.
    let loaded = req
        .extensions()
        .get::<crate::http::playback_gate::LoadedVideo>()
        .map(|v| v.0.clone());
    let found = match loaded {
        Some(video) => Some(video),
        None => tokio::task::spawn_blocking(move || store.get_video(id))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten(),
    };
    let Some(video) = found.filter(|v| {
        crate::secret::constant_time_eq(v.slug.as_bytes(), slug.as_bytes())
            && v.state.status.playable()
    }) else {
        return not_found();
    };
    let range = req.headers().get(header::RANGE).cloned();
    let head = req.method() == hyper::Method::HEAD;
    if let (true, Some(storage)) = (video.state.stored, storage) {
        return super::stored::serve(
            &storage,
            video.id,
            &file.name(),
            content_type(&file),
            range.as_ref(),
            head,
        )
        .await;
    }
    if let Some(node) = relay.node_url(video.state.node.as_deref(), &req).await {
        return relay.forward(req, &node).await;
    }
    let dir = root.join(video.id.to_string());
    let resp = match file {
        File::Media(name) => {
            let path = fragments::media_path(&dir, &name);
            file_body(&path, "video/mp4", range.as_ref(), head).await
        }
        File::Screenshot => {
            let path = dir.join(crate::record::manager::SCREENSHOT);
            file_body(&path, "image/jpeg", range.as_ref(), head).await
        }
        File::Master | File::Mpd | File::Playlist(_) => {
            let kind = if file == File::Mpd {
                super::MPD_TYPE
            } else {
                PLAYLIST_TYPE
            };
            let name = file.name();
            let text = tokio::task::spawn_blocking(move || vod::render(&dir, &name))
                .await
                .ok()
                .flatten();
            match text {
                Some(text) => with_common(
                    Response::builder()
                        .header(header::CONTENT_TYPE, kind)
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

/// A file from disk with an optional single byte range (RFC 9110 §14), streamed in chunks.
async fn file_body(
    path: &Path,
    content_type: &'static str,
    range: Option<&HeaderValue>,
    head: bool,
) -> Response<Body> {
    let Ok(mut file) = tokio::fs::File::open(path).await else {
        return not_found();
    };
    let Ok(len) = file.metadata().await.map(|m| m.len()) else {
        return not_found();
    };
    let (builder, start, count) = match ranged(len, content_type, range, head) {
        Ok(r) => r,
        Err(done) => return *done,
    };
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
