//! The embeddable player page (`iframe_url` = `/player/{id}`): LL-HLS through hls.js (native
//! HLS where only that exists), LL-DASH through dash.js with `?format=dash`, a poster and an
//! "offline" state that recovers by itself, and a WebGL sphere for 360° projections. The
//! player libraries come from the npm packages the set-up scripts install; no CDN.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use crate::db::Store;
use crate::http::listener::{full, json_response, Body};
use crate::live::Registry;

const PAGE: &str = include_str!("player.html");
/// The only files served from the assets directory: request names never become paths.
const ASSETS: [(&str, &str); 2] = [
    ("hls.min.js", "hls.js/dist/hls.min.js"),
    ("dash.all.min.js", "dashjs/dist/dash.all.min.js"),
];
/// Player libraries change only with a new install; the page itself is small and re-fetched.
const ASSET_CACHE: &str = "public, max-age=3600";

pub fn owns(path: &str) -> bool {
    path.starts_with("/player/")
}

pub struct Player {
    registry: Arc<Registry>,
    store: Arc<dyn Store>,
    /// Where `hls.js/` and `dashjs/` are (`node_modules`, filled by `npm ci`).
    assets: PathBuf,
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .body(full(Bytes::from_static(body.as_bytes())))
        .expect("static response")
}

/// `/player/{id}[/status.json]` → the id and whether the status is asked for.
fn parse(path: &str) -> Option<(i64, bool)> {
    let rest = path.strip_prefix("/player/")?;
    let (id, status) = match rest.split_once('/') {
        Some((id, "status.json")) => (id, true),
        Some(_) => return None,
        None => (rest, false),
    };
    let valid = !id.is_empty()
        && id.len() <= 18
        && !id.starts_with('0')
        && id.bytes().all(|b| b.is_ascii_digit());
    if !valid {
        return None;
    }
    Some((id.parse().ok()?, status))
}

impl Player {
    /// A relative `assets` directory that does not hold the libraries is also looked for in the
    /// checkout the binary was built in (`target/{profile}/livepack` → `../../`), so the daemon
    /// finds them whatever its working directory.
    pub fn new(registry: Arc<Registry>, store: Arc<dyn Store>, assets: PathBuf) -> Arc<Player> {
        let has_libs = |dir: &std::path::Path| dir.join(ASSETS[0].1).is_file();
        let assets = if assets.is_relative() && !has_libs(&assets) {
            // The checkout the binary was built from: next to its target dir, or where cargo
            // built it (a CARGO_TARGET_DIR elsewhere).
            let beside_target = std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join(&assets)));
            let built_from = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join(&assets));
            [beside_target, built_from]
                .into_iter()
                .flatten()
                .find(|dir| has_libs(dir))
                .unwrap_or(assets)
        } else {
            assets
        };
        if !has_libs(&assets) {
            tracing::warn!(dir = %assets.display(), "player libraries not found (run `npm ci` in the checkout, or set player_assets_dir)");
        }
        Arc::new(Player {
            registry,
            store,
            assets,
        })
    }

    pub async fn handle(&self, req: Request<hyper::body::Incoming>) -> Response<Body> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        let path = req.uri().path();
        if let Some(name) = path.strip_prefix("/player/assets/") {
            return self.asset(name).await;
        }
        let format = req
            .uri()
            .query()
            .and_then(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .find(|(k, _)| k == "format")
                    .map(|(_, v)| v.into_owned())
            })
            .filter(|f| f == "dash")
            .unwrap_or_else(|| "hls".into());
        if let Some(key) = path.strip_prefix("/player/videos/") {
            return self.video_page(key, format).await;
        }
        let Some((id, status)) = parse(path) else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        let store = self.store.clone();
        let row = match tokio::task::spawn_blocking(move || store.get_stream(id)).await {
            Ok(Ok(Some(row))) => row,
            Ok(Ok(None)) => return text(StatusCode::NOT_FOUND, "no such stream\n"),
            _ => return text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n"),
        };
        let live = self.registry.status(id).live;
        if status {
            let mut r = json_response(StatusCode::OK, &json!({ "live": live }));
            r.headers_mut().insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
            return r;
        }
        page(&json!({
            "id": id,
            "vod": false,
            "hls": format!("/cmaf/{id}/master.m3u8"),
            "dash": format!("/cmaf/{id}/index.mpd"),
            "status": format!("/player/{id}/status.json"),
            "poster": format!("/screenshots/{id}/last.jpg"),
            "projection": row.settings.projection,
            "format": format,
        }))
    }

    /// `/player/videos/{id}_{slug}`: the same page playing a ready video (VOD, with controls),
    /// its screenshot as the poster. A wrong slug is the same 404 as an unknown id.
    async fn video_page(&self, key: &str, format: String) -> Response<Body> {
        let Some((id, slug)) = key
            .split_once('_')
            .and_then(|(id, slug)| Some((id.parse::<i64>().ok().filter(|i| *i > 0)?, slug)))
        else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        let store = self.store.clone();
        let found = tokio::task::spawn_blocking(move || {
            let video = store.get_video(id)?;
            let stream = match &video {
                Some(v) => store.get_stream(v.stream_id)?,
                None => None,
            };
            Ok::<_, crate::db::StoreError>((video, stream))
        })
        .await;
        let (video, stream) = match found {
            Ok(Ok(found)) => found,
            _ => return text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n"),
        };
        let Some(video) = video.filter(|v| {
            crate::secret::constant_time_eq(v.slug.as_bytes(), slug.as_bytes())
                && v.state.status == crate::db::VideoStatus::Ready
        }) else {
            return text(StatusCode::NOT_FOUND, "no such video\n");
        };
        let base = format!("/videos/{}_{}", video.id, video.slug);
        page(&json!({
            "id": video.id,
            "vod": true,
            "hls": format!("{base}/master.m3u8"),
            "dash": format!("{base}/index.mpd"),
            "poster": if video.state.screenshot {
                format!("{base}/{}", crate::record::manager::SCREENSHOT)
            } else {
                String::new()
            },
            "projection": stream.map_or(crate::db::Projection::Regular, |s| s.settings.projection),
            "format": format,
        }))
    }
}

/// The page with its configuration.
fn page(config: &serde_json::Value) -> Response<Body> {
    // Inside <script>: no `</` may appear (the values are ours, but stay safe anyway).
    let config = config.to_string().replace("</", "<\\/");
    Response::builder()
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        // Embeddable anywhere (it is an iframe player); scripts only from this origin.
        .header(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; script-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                 media-src 'self' blob:; connect-src 'self'; worker-src 'self' blob:; \
                 style-src 'unsafe-inline'",
        )
        .body(full(PAGE.replace("{{CONFIG}}", &config)))
        .expect("valid response")
}

impl Player {
    async fn asset(&self, name: &str) -> Response<Body> {
        let Some((_, rel)) = ASSETS.iter().find(|(n, _)| *n == name) else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        let path = self.assets.join(rel);
        match tokio::fs::read(&path).await {
            Ok(bytes) => Response::builder()
                .header(header::CONTENT_TYPE, "text/javascript; charset=utf-8")
                .header(header::CACHE_CONTROL, ASSET_CACHE)
                .body(full(bytes))
                .expect("valid response"),
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "player library missing (run `npm ci`, or set player_assets_dir)");
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "player library not installed on the server\n",
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(parse("/player/12"), Some((12, false)));
        assert_eq!(parse("/player/12/status.json"), Some((12, true)));
        for bad in [
            "/player/",
            "/player/012",
            "/player/1/x",
            "/player/..%2f",
            "/player/-1",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
