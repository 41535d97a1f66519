//! The control API (hyper): authenticates, routes and answers `/streaming/*`, `/fastedge/v1/*`
//! and `/security/iaas/*` over a [`Store`]; every response is JSON, every error an [`ApiError`].

pub mod auth;
pub mod broadcasts;
pub mod fastedge;
pub mod feed;
pub mod fields;
pub mod format;
mod nodes;
mod outbound_routes;
pub mod overlays;
pub mod quality_sets;
pub mod restreams;
use outbound_routes::outbound;
pub mod security;
pub mod statistics;
pub mod stream_actions;
mod stream_view;
pub mod streams;
pub mod videos;
pub mod webhooks;

use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use url::Url;

use crate::db::{Store, StoreError};
pub use crate::http::error::{error_response, ApiError};
use crate::http::listener::{full, json_response, Body};
use crate::quality::QualitySets;
pub use auth::ApiKeys;

/// The OpenAPI document, kept in the repository and served as is.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");
/// The API reference for a browser (`/docs/api`): Swagger UI over [`OPENAPI_JSON`], its library
/// served with the player's (`player_assets_dir`), so the page needs no other origin.
pub const DOCS_HTML: &str = include_str!("docs.html");

/// How many times a PATCH re-reads and re-applies after losing a race to another writer.
const UPDATE_RETRIES: usize = 5;

/// Where clients reach us: the base of every URL returned in a record.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Without a trailing slash, e.g. `https://live.example.com` or `http://127.0.0.1:8080/base`.
    pub public_url: String,
    /// `{public_url}/time`, the MPDs' clock.
    pub time_url: String,
    /// Host part of `public_url` (IPv6 in brackets), used for rtmp:// and srt:// URLs.
    pub ingest_host: String,
    pub rtmp_port: u16,
    pub srt_port: u16,
    /// CDN base URLs by `cdn_id` (no trailing slash).
    pub cdn: std::collections::HashMap<i64, String>,
    /// Ingest regions: (name, host, `public_url` on that host for WHIP).
    pub regions: Vec<(String, String, String)>,
    /// Signed playback's key and URL lifetime; `None`: no `playback_signing_key`.
    pub signing: Option<crate::playback_auth::Signing>,
    /// CDN resources whose streams all need signed playback.
    pub secure_cdns: std::collections::HashSet<i64>,
}

impl Endpoints {
    pub fn new(public_url: &Url, rtmp_port: u16, srt_port: u16) -> Endpoints {
        let base = public_url.as_str().trim_end_matches('/');
        Endpoints {
            time_url: format!("{base}/time"),
            public_url: base.to_owned(),
            ingest_host: public_url.host_str().unwrap_or("127.0.0.1").to_owned(),
            rtmp_port,
            srt_port,
            cdn: Default::default(),
            regions: Vec::new(),
            signing: None,
            secure_cdns: Default::default(),
        }
    }

    /// Signs the playback URLs records return.
    pub fn signed_with(mut self, signing: Option<crate::playback_auth::Signing>) -> Endpoints {
        self.signing = signing;
        self
    }

    /// Whether a stream's playback needs a token: its own `secure_playback`, or its CDN
    /// resource's.
    pub fn secure(&self, settings: &crate::db::StreamSettings) -> bool {
        settings.secure_playback
            || settings
                .cdn_id
                .is_some_and(|c| self.secure_cdns.contains(&c))
    }

    /// The path segments granting `resource` for the configured lifetime from now
    /// (`/t/{expires}/{token}`), when `settings` asks for signed playback; empty otherwise.
    pub fn grant(
        &self,
        resource: crate::playback_auth::Resource,
        settings: &crate::db::StreamSettings,
    ) -> String {
        match &self.signing {
            Some(signing) if self.secure(settings) => {
                let now = time::OffsetDateTime::now_utc().unix_timestamp();
                format!("/{}", signing.grant_for(&resource.name(), now))
            }
            _ => String::new(),
        }
    }

    /// With the operator's CDN resources and ingest regions.
    pub fn with(
        mut self,
        public_url: &Url,
        cdn: &[crate::config::CdnResource],
        regions: &[crate::config::IngestRegion],
    ) -> Endpoints {
        self.cdn = cdn.iter().map(|r| (r.id, r.base_url.clone())).collect();
        self.secure_cdns = cdn
            .iter()
            .filter(|r| r.secure_playback)
            .map(|r| r.id)
            .collect();
        self.regions = regions
            .iter()
            .map(|r| {
                let mut url = public_url.clone();
                // Checked at start: a DNS name or an address, which a URL host accepts.
                let _ = url.set_host(Some(&r.host));
                let whip = url.as_str().trim_end_matches('/').to_owned();
                (r.name.clone(), r.host.clone(), whip)
            })
            .collect();
        self
    }

    /// Where a stream's media is fetched: its CDN resource, or this server.
    pub fn playback_base(&self, cdn_id: Option<i64>) -> &str {
        cdn_id
            .and_then(|id| self.cdn.get(&id))
            .map_or(&self.public_url, |b| b)
    }
}

/// Shared state of the control API.
pub struct Api {
    pub store: Arc<dyn Store>,
    pub keys: ApiKeys,
    pub quality_sets: Arc<QualitySets>,
    pub endpoints: Endpoints,
    pub fastedge_app_domain: String,
    pub registry: Arc<crate::live::Registry>,
    /// This node among the daemons sharing the store: whose live state a stream shows.
    pub cluster: Arc<crate::cluster::Cluster>,
    /// Media requests for streams and videos another node serves go there.
    pub relay: Arc<crate::http::relay::Relay>,
    pub recordings: Arc<crate::record::manager::Recordings>,
    /// `None` without the WPE plugin: `html_overlay: true` is refused.
    pub overlays: Option<Arc<crate::pipeline::overlay::OverlayHub>>,
    /// Viewers of broadcasts' player pages (counted by the player, reported here).
    pub spectators: Arc<crate::broadcast::Spectators>,
    /// The restreams this node runs (their live state), told when a record changes.
    pub restreams: Arc<crate::egress::manager::Restreams>,
    /// The open events feeds (`/streaming/events`) and the health sample they share.
    pub feeds: feed::Feeds,
    /// Turns when the node starts shutting down: the feeds end then.
    pub stopping: crate::shutdown::Stopping,
}

impl Route {
    /// Routes about one stream (`{id}` is a stream id).
    fn is_one_stream(self) -> bool {
        matches!(
            self,
            Route::Stream
                | Route::StreamPlaylist
                | Route::StreamDvrCleanup
                | Route::StreamStartRecording
                | Route::StreamStopRecording
                | Route::StreamKick
                | Route::StreamOverlays
                | Route::StreamOverlay
        )
    }
}

/// What a path names; dispatch matches on it and the method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    Streams,
    Stream,
    StreamPlaylist,
    StreamDvrCleanup,
    StreamStartRecording,
    StreamStopRecording,
    StreamKick,
    StreamOverlays,
    StreamOverlay,
    Videos,
    Video,
    Broadcasts,
    Broadcast,
    BroadcastSpectators,
    QualitySets,
    QualitySetDefault,
    Apps,
    App,
    ProfileTemplates,
    StatisticsFfprobe,
    Restreams,
    Restream,
    Webhooks,
    Webhook,
    WebhookRotateSecret,
    WebhookDeliveries,
    Events,
    Nodes,
}

/// The route table: (path pattern, route, methods). `{id}` is a positive integer. The OpenAPI
/// document lists exactly these (checked by a test).
const ROUTES: &[(&str, Route, &[Method])] = &[
    (
        "/streaming/streams",
        Route::Streams,
        &[Method::GET, Method::POST],
    ),
    (
        "/streaming/streams/{id}",
        Route::Stream,
        &[Method::GET, Method::PATCH, Method::DELETE],
    ),
    (
        "/streaming/streams/{id}/dvr_cleanup",
        Route::StreamDvrCleanup,
        &[Method::PUT],
    ),
    (
        "/streaming/streams/{id}/start_recording",
        Route::StreamStartRecording,
        &[Method::PUT],
    ),
    (
        "/streaming/streams/{id}/stop_recording",
        Route::StreamStopRecording,
        &[Method::PUT],
    ),
    (
        "/streaming/streams/{id}/kick",
        Route::StreamKick,
        &[Method::PUT],
    ),
    (
        "/streaming/streams/{id}/playlist.m3u8",
        Route::StreamPlaylist,
        &[Method::GET],
    ),
    (
        "/streaming/streams/{id}/overlays",
        Route::StreamOverlays,
        &[Method::GET, Method::POST, Method::PATCH],
    ),
    (
        "/streaming/streams/{id}/overlays/{overlay_id}",
        Route::StreamOverlay,
        &[Method::GET, Method::PATCH, Method::DELETE],
    ),
    ("/streaming/videos", Route::Videos, &[Method::GET]),
    (
        "/streaming/statistics/ffprobe",
        Route::StatisticsFfprobe,
        &[Method::GET],
    ),
    (
        "/streaming/videos/{id}",
        Route::Video,
        &[Method::GET, Method::PATCH, Method::DELETE],
    ),
    (
        "/streaming/broadcasts",
        Route::Broadcasts,
        &[Method::GET, Method::POST],
    ),
    (
        "/streaming/broadcasts/{id}",
        Route::Broadcast,
        &[Method::GET, Method::PATCH, Method::DELETE],
    ),
    (
        "/streaming/broadcasts/{id}/spectators",
        Route::BroadcastSpectators,
        &[Method::GET],
    ),
    (
        "/streaming/quality_sets",
        Route::QualitySets,
        &[Method::GET],
    ),
    (
        "/streaming/quality_sets/default",
        Route::QualitySetDefault,
        &[Method::PUT],
    ),
    (
        "/fastedge/v1/apps",
        Route::Apps,
        &[Method::GET, Method::POST],
    ),
    (
        "/fastedge/v1/apps/{id}",
        Route::App,
        &[Method::GET, Method::PATCH, Method::DELETE],
    ),
    (
        "/security/iaas/profile-templates",
        Route::ProfileTemplates,
        &[Method::GET],
    ),
    (
        "/streaming/restreams",
        Route::Restreams,
        &[Method::GET, Method::POST],
    ),
    (
        "/streaming/restreams/{id}",
        Route::Restream,
        &[Method::GET, Method::PATCH, Method::DELETE],
    ),
    (
        "/streaming/webhooks",
        Route::Webhooks,
        &[Method::GET, Method::POST],
    ),
    (
        "/streaming/webhooks/{id}",
        Route::Webhook,
        &[Method::GET, Method::PATCH, Method::DELETE],
    ),
    (
        "/streaming/webhooks/{id}/rotate_secret",
        Route::WebhookRotateSecret,
        &[Method::PUT],
    ),
    (
        "/streaming/webhooks/{id}/deliveries",
        Route::WebhookDeliveries,
        &[Method::GET],
    ),
    ("/streaming/events", Route::Events, &[Method::GET]),
    ("/streaming/nodes", Route::Nodes, &[Method::GET]),
];

/// (pattern, methods) of every authenticated route, for the OpenAPI consistency check.
#[cfg(test)]
pub fn route_table() -> impl Iterator<Item = (&'static str, &'static [Method])> {
    ROUTES.iter().map(|(p, _, m)| (*p, *m))
}

/// Path prefixes the API owns: everything below them needs a key, even a path that does not
/// exist, so an unauthenticated caller cannot map the routes.
pub const API_PREFIXES: &[&str] = &["/streaming/", "/fastedge/", "/security/"];

pub fn owns(path: &str) -> bool {
    API_PREFIXES.iter().any(|p| path.starts_with(p))
        || API_PREFIXES.iter().any(|p| path == &p[..p.len() - 1])
}

/// Matches `path` against a route pattern, returning its `{…}` ids in order (`{id}`, then
/// a sub-resource's, e.g. `{overlay_id}`).
fn match_route(pattern: &str, path: &str) -> Option<[Option<i64>; 2]> {
    let mut ids = [None; 2];
    let mut n = 0;
    let mut pat = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (pat.next(), got.next()) {
            (None, None) => return Some(ids),
            (Some(p), Some(seg)) if p.starts_with('{') => {
                *ids.get_mut(n)? = Some(parse_id(seg)?);
                n += 1;
            }
            (Some(p), Some(seg)) if p == seg => {}
            _ => return None,
        }
    }
}

/// Ids are positive decimal integers without sign or leading zeros: `007` or `+7` is not `7`.
fn parse_id(seg: &str) -> Option<i64> {
    if seg.is_empty() || seg.len() > 18 || seg.starts_with('0') {
        return None;
    }
    if !seg.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seg.parse().ok()
}

impl Api {
    /// Answers one request to a path under [`API_PREFIXES`].
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        // A request another node relayed was authenticated there; its signature stands for
        // the key (`Relay::admit` checked it).
        let vouched = crate::http::relay::is_relayed(&req);
        let result = if !vouched && !self.keys.allows(req.headers()) {
            Err(ApiError::unauthorized())
        } else {
            self.route(req).await
        };
        match result {
            Ok(resp) => resp,
            Err(e) => {
                if e.status.is_server_error() {
                    tracing::error!(%method, %path, error = %e, "api request failed");
                } else {
                    tracing::debug!(%method, %path, error = %e, "api request refused");
                }
                error_response(&e)
            }
        }
    }

    async fn route(self: &Arc<Self>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
        let path = req.uri().path().to_owned();
        for (pattern, route, methods) in ROUTES {
            let Some([id, sub]) = match_route(pattern, &path) else {
                continue;
            };
            if !methods.contains(req.method()) {
                let mut resp = error_response(&ApiError::method_not_allowed());
                let allow = methods
                    .iter()
                    .map(Method::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                resp.headers_mut().insert(
                    ALLOW,
                    HeaderValue::from_str(&allow).expect("method names are valid"),
                );
                return Ok(resp);
            }
            let id = id.unwrap_or_default();
            let sub = sub.unwrap_or_default();
            let method = req.method().clone();
            // A stream another node serves: that node answers (its live state, its recordings,
            // and the live effects of a change — a kick, a new DVR window, overlays — happen
            // where the stream runs).
            if route.is_one_stream() {
                if let Some(node) = self.relay.stream_owner(id, &req).await {
                    return Ok(self.relay.forward(req, &node).await);
                }
            }
            // A video's files are on the disk of the node that recorded it: deleted there.
            if *route == Route::Video && method == Method::DELETE {
                let video = self.db(move |s| s.get_video(id)).await?;
                let node = video.and_then(|v| v.state.node);
                if let Some(url) = self.relay.node_url(node.as_deref(), &req).await {
                    return Ok(self.relay.forward(req, &url).await);
                }
            }
            return match (route, method) {
                (Route::Streams, Method::GET) => streams::list(self, req.uri().query()).await,
                (Route::Streams, _) => streams::create(self, read_json(req).await?).await,
                (Route::Stream, Method::GET) => streams::get(self, id).await,
                (Route::Stream, Method::PATCH) => {
                    streams::update(self, id, read_json(req).await?).await
                }
                (Route::Stream, _) => streams::delete(self, id).await,
                (Route::StreamPlaylist, _) => streams::legacy_playlist(self, id).await,
                (Route::StreamDvrCleanup, _) => stream_actions::dvr_cleanup(self, id).await,
                (Route::StreamStartRecording, _) => stream_actions::start_recording(self, id).await,
                (Route::StreamStopRecording, _) => stream_actions::stop_recording(self, id).await,
                (Route::StreamKick, _) => {
                    stream_actions::kick(self, id, read_optional_json(req).await?).await
                }
                (Route::StreamOverlays, Method::GET) => overlays::list(self, id).await,
                (Route::StreamOverlays, Method::POST) => {
                    overlays::create(self, id, read_json(req).await?).await
                }
                (Route::StreamOverlays, _) => {
                    overlays::update_many(self, id, read_json(req).await?).await
                }
                (Route::StreamOverlay, Method::GET) => overlays::get(self, id, sub).await,
                (Route::StreamOverlay, Method::PATCH) => {
                    overlays::update(self, id, sub, read_json(req).await?).await
                }
                (Route::StreamOverlay, _) => overlays::delete(self, id, sub).await,
                (Route::Videos, _) => videos::list(self, req.uri().query()).await,
                (Route::Video, Method::GET) => videos::get(self, id).await,
                (Route::Video, Method::PATCH) => {
                    videos::update(self, id, read_json(req).await?).await
                }
                (Route::Video, _) => videos::delete(self, id).await,
                (Route::Broadcasts, Method::GET) => broadcasts::list(self, req.uri().query()).await,
                (Route::Broadcasts, _) => broadcasts::create(self, read_json(req).await?).await,
                (Route::Broadcast, Method::GET) => broadcasts::get(self, id).await,
                (Route::Broadcast, Method::PATCH) => {
                    broadcasts::update(self, id, read_json(req).await?).await
                }
                (Route::Broadcast, _) => broadcasts::delete(self, id).await,
                (Route::BroadcastSpectators, _) => broadcasts::spectators(self, id).await,
                (Route::QualitySets, _) => quality_sets::list(self).await,
                (Route::QualitySetDefault, _) => {
                    quality_sets::set_default(self, read_json(req).await?).await
                }
                (Route::Apps, Method::GET) => fastedge::list(self, req.uri().query()).await,
                (Route::Apps, _) => fastedge::create(self, read_json(req).await?).await,
                (Route::App, Method::GET) => fastedge::get(self, id).await,
                (Route::App, Method::PATCH) => {
                    fastedge::update(self, id, read_json(req).await?).await
                }
                (Route::App, _) => fastedge::delete(self, id).await,
                (Route::ProfileTemplates, _) => security::list(self).await,
                (Route::StatisticsFfprobe, _) => statistics::ffprobe(self, req.uri().query()).await,
                // The webhook, restream, feed and node routes (a route dispatched nowhere answers 404 there, which the
                // OpenAPI test of served routes catches).
                _ => outbound(self, *route, id, req).await,
            };
        }
        Err(ApiError::not_found("resource"))
    }

    /// Runs a store call on the blocking pool: SQLite I/O must not stall the async workers.
    pub async fn db<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&*store))
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "store task failed");
                ApiError::internal()
            })?
            .map_err(ApiError::from)
    }
}

/// Read-modify-write with compare-and-set, retried when another writer got in between.
pub(crate) async fn update_with_retry<R, Load, Apply, Save, Fut1, Fut2>(
    mut load: Load,
    mut apply: Apply,
    mut save: Save,
) -> Result<R, ApiError>
where
    Load: FnMut() -> Fut1,
    Fut1: std::future::Future<Output = Result<R, ApiError>>,
    Apply: FnMut(R) -> Result<R, ApiError>,
    Save: FnMut(R) -> Fut2,
    Fut2: std::future::Future<Output = Result<Option<R>, ApiError>>,
{
    for _ in 0..UPDATE_RETRIES {
        let current = load().await?;
        let changed = apply(current)?;
        if let Some(saved) = save(changed).await? {
            return Ok(saved);
        }
    }
    Err(ApiError::conflict(
        "the record kept changing under concurrent updates; retry",
    ))
}

/// Reads a JSON request body: 415 for a non-JSON content type, 413 over
/// [`crate::http::body::MAX_JSON_BYTES`] (after draining the rest, see [`crate::http::body`]),
/// 408 past the body deadline, 400 for bad JSON.
pub async fn read_json(req: Request<Incoming>) -> Result<serde_json::Value, ApiError> {
    read_optional_json(req)
        .await?
        .ok_or_else(|| ApiError::malformed_json("the body is empty; a JSON object is expected"))
}

/// [`read_json`] for a request whose body may be left out (`None`: empty).
pub async fn read_optional_json(
    req: Request<Incoming>,
) -> Result<Option<serde_json::Value>, ApiError> {
    if let Some(ct) = req.headers().get(CONTENT_TYPE) {
        let essence = ct
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be application/json",
            ));
        }
    }
    let relayed = req
        .extensions()
        .get::<crate::cluster::node_auth::Relayed>()
        .cloned();
    let bytes = crate::http::body::read(req, crate::http::body::MAX_JSON_BYTES)
        .await
        .map_err(|e| {
            use crate::http::body::BodyError;
            let (status, code) = match e {
                BodyError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
                BodyError::Timeout => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
                BodyError::Read(_) => (StatusCode::BAD_REQUEST, "malformed_body"),
            };
            ApiError::new(status, code, e.to_string())
        })?;
    // A relayed body is the one the relaying node signed.
    if let Some(relayed) = relayed {
        relayed
            .check_body(&bytes)
            .map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", e.to_string()))?;
    }
    if bytes.is_empty() {
        return Ok(None);
    }
    // serde_json refuses nesting deeper than 128 levels, so hostile depth is a 400, not a stack
    // overflow.
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| ApiError::malformed_json(format!("invalid JSON: {e}")))
}

/// Query parameters as (name, value) pairs; a parameter given twice is ambiguous → 400.
pub fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if pairs.iter().any(|(seen, _)| *seen == k) {
            return Err(ApiError::invalid_query(
                &k,
                format!("`{k}` is given more than once"),
            ));
        }
        pairs.push((k.into_owned(), v.into_owned()));
    }
    Ok(pairs)
}

/// Parses a query integer within `range`, naming the parameter on failure.
pub fn query_int<T>(
    name: &str,
    value: &str,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ApiError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    value
        .parse::<T>()
        .ok()
        .filter(|v| range.contains(v))
        .ok_or_else(|| {
            ApiError::invalid_query(
                name,
                format!(
                    "`{name}` must be an integer in {}..={}",
                    range.start(),
                    range.end()
                ),
            )
        })
}

pub fn redirect(location: &str) -> Result<Response<Body>, ApiError> {
    Response::builder()
        .status(StatusCode::MOVED_PERMANENTLY)
        .header(hyper::header::LOCATION, location)
        .body(full(Bytes::new()))
        .map_err(|_| ApiError::internal())
}

pub fn no_content() -> Response<Body> {
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(crate::http::listener::empty())
        .expect("static response is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_ids_strictly() {
        assert_eq!(
            match_route("/streaming/streams/{id}", "/streaming/streams/42"),
            Some([Some(42), None])
        );
        assert_eq!(
            match_route(
                "/streaming/streams/{id}/overlays/{overlay_id}",
                "/streaming/streams/42/overlays/7"
            ),
            Some([Some(42), Some(7)])
        );
        for bad in [
            "0",
            "007",
            "+7",
            "-1",
            "1e3",
            "",
            "99999999999999999999",
            "4%32",
        ] {
            assert_eq!(
                match_route(
                    "/streaming/streams/{id}",
                    &format!("/streaming/streams/{bad}")
                ),
                None,
                "{bad}"
            );
        }
        assert_eq!(
            match_route("/streaming/streams", "/streaming/streams/"),
            None
        );
        assert_eq!(
            match_route("/streaming/streams", "/streaming/streams"),
            Some([None, None])
        );
    }

    /// Served by the top-level router, outside the API prefixes.
    const TOP_LEVEL: [&str; 5] = [
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/docs/api",
        "/metrics",
    ];

    #[test]
    fn openapi_lists_exactly_the_route_table() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, item) in paths {
            for method in ["get", "put", "post", "delete", "patch", "head", "options"] {
                if item.get(method).is_some() && !TOP_LEVEL.contains(&path.as_str()) {
                    documented.push((path.clone(), method.to_uppercase()));
                }
            }
        }
        let mut served: Vec<(String, String)> = route_table()
            .flat_map(|(p, ms)| ms.iter().map(move |m| (p.to_owned(), m.to_string())))
            .collect();
        documented.sort();
        served.sort();
        assert_eq!(documented, served);
        for path in TOP_LEVEL {
            assert!(paths.contains_key(path), "{path}");
        }
    }

    /// The event types the document lists are the ones a webhook accepts.
    #[test]
    fn openapi_lists_exactly_the_event_types() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        let schemas = &doc["components"]["schemas"];
        for listed in [
            &schemas["Webhook"]["properties"]["events"]["items"]["enum"],
            &schemas["WebhookCreate"]["properties"]["events"]["items"]["enum"],
            &schemas["WebhookPatch"]["properties"]["events"]["items"]["enum"],
            &schemas["WebhookDelivery"]["properties"]["event_type"]["enum"],
        ] {
            assert_eq!(listed, &serde_json::json!(crate::events::Event::TYPES));
        }
    }

    #[test]
    fn api_prefixes_are_owned() {
        assert!(owns("/streaming/streams"));
        assert!(owns("/streaming"));
        assert!(owns("/fastedge/v1/apps"));
        assert!(!owns("/cmaf/1/master.m3u8"));
        assert!(!owns("/healthz"));
    }

    #[test]
    fn duplicate_query_parameters_are_refused() {
        let e = query_pairs(Some("page=1&page=2")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("page"));
        assert_eq!(query_pairs(Some("a=1&b=%20x")).unwrap()[1].1, " x");
    }
}
