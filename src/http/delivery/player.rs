//! The embeddable player page (`iframe_url` = `/player/{id}`): LL-HLS through hls.js (native
//! HLS where only that exists), LL-DASH through dash.js with `?format=dash`, a poster and an
//! "offline" state that recovers by itself, and a WebGL sphere for 360° projections. The same
//! page serves a broadcast (`/player/broadcasts/{id}`): it polls the broadcast's state and shows
//! its pending message and poster, its live stream(s), a paused notice, or after the finish its
//! DVR or recording. The page's own controls (`player-controls.js`, inlined) choose a rung,
//! scrub the DVR window, return to live and show the latency. The player libraries come from the
//! npm packages the set-up scripts install; no CDN.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use crate::broadcast::{Spectators, POLL_INTERVAL};
use crate::db::{BroadcastStatus, Store, StoreError, VideoFilter, VideoStatus};
use crate::http::listener::{full, json_response, Body};
use crate::live::Registry;

/// The page, with its controls' script (a file of its own, inlined: no second request, and no
/// cached script of another version beside a fresh page).
static PAGE: LazyLock<String> = LazyLock::new(|| {
    include_str!("player.html").replace("{{CONTROLS_JS}}", include_str!("player-controls.js"))
});
const JS: &str = "text/javascript; charset=utf-8";
/// The only files served from the assets directory (name, path, type): request names never
/// become paths. The player's libraries, and Swagger UI for the API reference at `/docs/api`.
const ASSETS: [(&str, &str, &str); 4] = [
    ("hls.min.js", "hls.js/dist/hls.min.js", JS),
    ("dash.all.min.js", "dashjs/dist/dash.all.min.js", JS),
    (
        "swagger-ui-bundle.js",
        "swagger-ui-dist/swagger-ui-bundle.js",
        JS,
    ),
    (
        "swagger-ui.css",
        "swagger-ui-dist/swagger-ui.css",
        "text/css; charset=utf-8",
    ),
];
/// Player libraries change only with a new install; the page itself is small and re-fetched.
const ASSET_CACHE: &str = "public, max-age=3600";
/// Every open broadcast page polls its state: within this age a computed state is reused, so
/// the store sees at most one computation per broadcast per second however many viewers poll.
const STATE_CACHE_TTL: Duration = Duration::from_secs(1);
/// Broadcast states cached at once; past it the cache starts over (ids are client-chosen).
const MAX_CACHED_STATES: usize = 4096;

pub fn owns(path: &str) -> bool {
    path.starts_with("/player/")
}

pub struct Player {
    registry: Arc<Registry>,
    /// Whose live state a stream shows (the node serving it may be another).
    cluster: Arc<crate::cluster::Cluster>,
    store: Arc<dyn Store>,
    /// Where `hls.js/` and `dashjs/` are (`node_modules`, filled by `npm ci`).
    assets: PathBuf,
    spectators: Arc<Spectators>,
    /// Broadcast id → (when computed, its state).
    states: Mutex<HashMap<i64, (Instant, serde_json::Value)>>,
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .body(full(Bytes::from_static(body.as_bytes())))
        .expect("static response")
}

/// `/player/{id}[/{sub}]` → the id and whether `sub` is asked for.
fn parse(path: &str, sub: &str) -> Option<(i64, bool)> {
    let rest = path.strip_prefix("/player/")?;
    let (id, status) = match rest.split_once('/') {
        Some((id, s)) if s == sub => (id, true),
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
    pub fn new(
        registry: Arc<Registry>,
        cluster: Arc<crate::cluster::Cluster>,
        store: Arc<dyn Store>,
        assets: PathBuf,
        spectators: Arc<Spectators>,
    ) -> Arc<Player> {
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
        let missing: Vec<&str> = ASSETS
            .iter()
            .filter(|(_, path, _)| !assets.join(path).is_file())
            .map(|(_, path, _)| *path)
            .collect();
        if !missing.is_empty() {
            tracing::warn!(dir = %assets.display(), ?missing, "web libraries not found (run `npm ci` in the checkout, or set player_assets_dir)");
        }
        Arc::new(Player {
            registry,
            cluster,
            store,
            assets,
            spectators,
            states: Mutex::new(HashMap::new()),
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
        // The grant this page was asked with (signed playback), for the URLs it hands out.
        let g = crate::http::playback_gate::segments(&req);
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
            .filter(|f| f == "dash" || f == "webrtc")
            .unwrap_or_else(|| "hls".into());
        if let Some(key) = path.strip_prefix("/player/videos/") {
            return self.video_page(key, format, &g).await;
        }
        if let Some(rest) = path.strip_prefix("/player/broadcasts/") {
            let Some((id, state)) = parse(&format!("/player/{rest}"), "state") else {
                return text(StatusCode::NOT_FOUND, "not found\n");
            };
            if !state {
                return self.broadcast_page(id, format).await;
            }
            let viewer = req.uri().query().and_then(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .find(|(k, _)| k == "viewer")
                    .map(|(_, v)| v.into_owned())
            });
            return self.broadcast_state(id, viewer.as_deref()).await;
        }
        let Some((id, status)) = parse(path, "status.json") else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        // Anyone may ask, for any id: second-old answers (positive and negative), so a flood
        // of them costs the store little (`cluster::lookup`).
        let lookups = self.cluster.lookups();
        let row = match lookups.stream(id).await {
            Ok(Some(row)) => row,
            Ok(None) => return text(StatusCode::NOT_FOUND, "no such stream\n"),
            Err(_) => return text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n"),
        };
        let Ok(leases) = lookups.live_leases().await else {
            return text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n");
        };
        let live = self
            .cluster
            .status(|| self.registry.status(id), id, &leases.held)
            .live();
        if status {
            let mut r = json_response(StatusCode::OK, &json!({ "live": live }));
            crate::http::cors::any_origin(&mut r);
            return r;
        }
        page(&json!({
            "id": id,
            "vod": false,
            "hls": format!("/cmaf/{id}{g}/master.m3u8"),
            "dash": format!("/cmaf/{id}{g}/index.mpd"),
            "status": format!("/player/{id}{g}/status.json"),
            // Real-time mode (`?format=webrtc`, or the page's menu): WHEP on this server.
            "whep": format!("/whep/{id}{g}"),
            "poster": format!("/screenshots/{id}{g}/last.jpg"),
            "projection": row.settings.projection,
            "format": format,
            // The timeline shows the rewind window only where there is one.
            "dvr": row.settings.dvr_enabled,
        }))
    }

    /// `/player/videos/{id}_{slug}`: the same page playing a ready video (VOD, with controls),
    /// its screenshot as the poster. A wrong slug is the same 404 as an unknown id.
    async fn video_page(&self, key: &str, format: String, g: &str) -> Response<Body> {
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
                && v.state.status.playable()
        }) else {
            return text(StatusCode::NOT_FOUND, "no such video\n");
        };
        let base = format!("/videos/{}_{}{g}", video.id, video.slug);
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

impl Player {
    /// `/player/broadcasts/{id}`: the page in broadcast mode; what it shows comes from its
    /// polls of [`Player::broadcast_state`].
    async fn broadcast_page(&self, id: i64, format: String) -> Response<Body> {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || store.get_broadcast(id)).await {
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => return text(StatusCode::NOT_FOUND, "no such broadcast\n"),
            _ => return text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n"),
        }
        let mut resp = page(&json!({
            "id": id,
            "broadcast": true,
            "vod": false,
            "hls": "",
            "dash": "",
            "state": format!("/player/broadcasts/{id}/state"),
            "poll_ms": POLL_INTERVAL.as_millis() as u64,
            "poster": "",
            "projection": crate::db::Projection::Regular,
            "format": format,
        }));
        // The poster is the client's URL, on any host: images (only) may come from anywhere.
        resp.headers_mut().insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'self'; script-src 'self' 'unsafe-inline'; \
                 img-src 'self' data: http: https:; media-src 'self' blob:; connect-src 'self'; \
                 worker-src 'self' blob:; style-src 'unsafe-inline'",
            ),
        );
        resp
    }

    /// `/player/broadcasts/{id}/state?viewer=…`: what the page should show. A valid `viewer`
    /// (the page's random id) counts the page as a spectator; no cookie is read or set.
    async fn broadcast_state(&self, id: i64, viewer: Option<&str>) -> Response<Body> {
        let now = Instant::now();
        let cached = {
            let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
            states
                .get(&id)
                .filter(|(at, _)| now.saturating_duration_since(*at) < STATE_CACHE_TTL)
                .map(|(_, v)| v.clone())
        };
        let state = match cached {
            Some(state) => state,
            None => {
                let (store, registry, cluster) = (
                    self.store.clone(),
                    self.registry.clone(),
                    self.cluster.clone(),
                );
                let computed = tokio::task::spawn_blocking(move || {
                    compute_state(&*store, &registry, &cluster, id)
                })
                .await;
                let state = match computed {
                    Ok(Ok(Some(state))) => state,
                    Ok(Ok(None)) => {
                        // A deleted broadcast's pages stop counting at once.
                        self.spectators.forget(id);
                        return text(StatusCode::NOT_FOUND, "no such broadcast\n");
                    }
                    Ok(Err(e)) => {
                        tracing::error!(broadcast = id, error = %e, "broadcast state");
                        return text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n");
                    }
                    Err(_) => return text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n"),
                };
                let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
                if states.len() >= MAX_CACHED_STATES {
                    states.clear();
                }
                states.insert(id, (now, state.clone()));
                state
            }
        };
        if let Some(v) = viewer.filter(|v| crate::broadcast::valid_viewer_id(v)) {
            self.spectators.seen(id, v, now);
        }
        json_response(StatusCode::OK, &state)
    }
}

/// A broadcast's state for its page: status, message, poster, its streams with their live
/// flags and URLs, and after the finish (with `show_dvr_after_finish`) what to replay: a DVR
/// window that still exists, else the newest ready recording of its streams.
/// Live flags and DVR windows are those of the node serving each stream (`cluster`).
fn compute_state(
    store: &dyn Store,
    registry: &Registry,
    cluster: &crate::cluster::Cluster,
    id: i64,
) -> Result<Option<serde_json::Value>, StoreError> {
    let Some(b) = store.get_broadcast(id)? else {
        return Ok(None);
    };
    let s = &b.settings;
    let leases = store.live_leases(None, cluster.dead_after())?;
    let mut streams = Vec::with_capacity(s.stream_ids.len());
    let mut dvr = None;
    for &sid in &s.stream_ids {
        let Some(row) = store.get_stream(sid)? else {
            continue;
        };
        streams.push(json!({
            "id": sid,
            "name": row.settings.name,
            "live": cluster.status(|| registry.status(sid), sid, &leases).live(),
            "hls": format!("/cmaf/{sid}/master.m3u8"),
            "dash": format!("/cmaf/{sid}/index.mpd"),
            "dvr": row.settings.dvr_enabled,
        }));
        // Its outputs exist here, or on the node serving it (whose media requests are relayed).
        let served = if cluster.holds(sid) {
            registry.package(sid).is_some()
        } else {
            leases.iter().any(|l| l.stream_id == sid)
        };
        if dvr.is_none() && row.settings.dvr_enabled && served {
            dvr = Some(sid);
        }
    }
    let replay = if s.status == BroadcastStatus::Finished && s.show_dvr_after_finish {
        match dvr {
            Some(sid) => Some(json!({
                "kind": "dvr",
                "stream_id": sid,
                "hls": format!("/cmaf/{sid}/master.m3u8"),
                "dash": format!("/cmaf/{sid}/index.mpd"),
            })),
            None => {
                let mut newest: Option<crate::db::VideoRow> = None;
                for &sid in &s.stream_ids {
                    let filter = VideoFilter {
                        stream_id: Some(sid),
                        status: Some(VideoStatus::Ready),
                        limit: 1,
                        ..VideoFilter::default()
                    };
                    if let Some(v) = store.list_videos(&filter)?.0.into_iter().next() {
                        if newest.as_ref().is_none_or(|n| v.id > n.id) {
                            newest = Some(v);
                        }
                    }
                }
                newest.map(|v| {
                    let base = format!("/videos/{}_{}", v.id, v.slug);
                    json!({
                        "kind": "video",
                        "video_id": v.id,
                        "hls": format!("{base}/master.m3u8"),
                        "dash": format!("{base}/index.mpd"),
                    })
                })
            }
        }
    } else {
        None
    };
    Ok(Some(json!({
        "id": b.id,
        "name": s.name,
        "status": s.status,
        "message": s.pending_message,
        "poster": s.poster,
        "streams": streams,
        "replay": replay,
    })))
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
        let Some((_, rel, content_type)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        let path = self.assets.join(rel);
        match tokio::fs::read(&path).await {
            Ok(bytes) => Response::builder()
                .header(header::CONTENT_TYPE, *content_type)
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
    fn the_page_carries_its_controls() {
        assert!(!PAGE.contains("{{CONTROLS_JS}}"));
        assert!(PAGE.contains("function playerControls("));
        let served = page(&json!({"id": 1}));
        assert_eq!(served.status(), StatusCode::OK);
    }

    #[test]
    fn paths() {
        assert_eq!(parse("/player/12", "status.json"), Some((12, false)));
        assert_eq!(
            parse("/player/12/status.json", "status.json"),
            Some((12, true))
        );
        assert_eq!(parse("/player/12/state", "state"), Some((12, true)));
        assert_eq!(parse("/player/12/status.json", "state"), None);
        for bad in [
            "/player/",
            "/player/012",
            "/player/1/x",
            "/player/..%2f",
            "/player/-1",
        ] {
            assert_eq!(parse(bad, "status.json"), None, "{bad}");
        }
    }
}
