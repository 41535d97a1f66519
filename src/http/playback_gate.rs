//! The signed-playback gate in front of media delivery, the player pages and videos: takes the
//! grant (`/t/{expires}/{token}`, [`crate::playback_auth`]) out of the path, checks it, and
//! hands the handlers the plain path. A grant that is wrong or expired, or none for a stream
//! that needs one, is a bare 403. Pages learn the grant they were asked with from
//! [`PlaybackGrant`], to hand out URLs that carry it.

use hyper::body::Incoming;
use hyper::{header, Request, Response, StatusCode};

use super::api::Api;
use super::listener::{empty, Body};
use crate::db::VideoRow;
use crate::playback_auth::{split, Resource};

/// Put in a request's extensions by the gate: the request brought a valid grant (`segments`,
/// `/t/{expires}/{token}`, for the URLs a page hands out), or was relayed by a node that
/// checked it (`segments` empty).
#[derive(Debug, Clone)]
pub struct PlaybackGrant {
    pub segments: String,
}

/// The bare refusal: no detail about why.
pub fn forbidden() -> Response<Body> {
    let mut r = Response::builder()
        .status(StatusCode::FORBIDDEN)
        .header(header::CACHE_CONTROL, "no-store")
        .body(empty())
        .expect("static response");
    crate::http::cors::any_origin(&mut r);
    r
}

fn unavailable() -> Response<Body> {
    Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .header(header::CACHE_CONTROL, "no-store")
        .header(header::RETRY_AFTER, "1")
        .body(empty())
        .expect("static response")
}

/// The request with its grant taken out of the path, or the refusal.
pub async fn admit(api: &Api, req: Request<Incoming>) -> Result<Request<Incoming>, Response<Body>> {
    let (canonical, grant) = split(req.uri().path());
    let canonical = canonical.into_owned();
    let Some(resource) = Resource::of(&canonical) else {
        return Ok(req);
    };
    let relayed = crate::http::relay::is_relayed(&req);
    let (mut parts, body) = req.into_parts();
    if relayed {
        parts.extensions.insert(PlaybackGrant {
            segments: String::new(),
        });
    } else if let Some(grant) = grant {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let valid = api
            .endpoints
            .signing
            .as_ref()
            .is_some_and(|s| s.verify(&resource.name(), &grant, now));
        if !valid {
            return Err(forbidden());
        }
        parts.extensions.insert(PlaybackGrant {
            segments: format!("/t/{}/{}", grant.expires, grant.token),
        });
    } else {
        let media = !canonical.starts_with("/player/");
        let needed = match resource {
            // Media of a stream served nowhere is a 404 anyway: no store query for an id
            // nobody serves (a flood of made-up ids costs the store nothing).
            Resource::Stream(id) if media && !served(api, id).await => Ok(false),
            Resource::Stream(id) => stream_needs_grant(api, id).await,
            Resource::Video(id) => match load_video(api, id).await {
                Ok(video) => {
                    let needed = video_needs_grant(api, video.as_ref()).await;
                    // The handler reads the record from here: one store query per request.
                    if let Some(video) = video {
                        parts.extensions.insert(LoadedVideo(video));
                    }
                    needed
                }
                Err(()) => Err(()),
            },
        };
        match needed {
            Ok(false) => {}
            Ok(true) => return Err(forbidden()),
            Err(()) => return Err(unavailable()),
        }
    }
    if canonical != parts.uri.path() {
        let path_and_query = match parts.uri.query() {
            Some(q) => format!("{canonical}?{q}"),
            None => canonical,
        };
        let mut uri = parts.uri.clone().into_parts();
        uri.path_and_query = Some(path_and_query.parse().map_err(|_| forbidden())?);
        parts.uri = hyper::Uri::from_parts(uri).map_err(|_| forbidden())?;
    }
    Ok(Request::from_parts(parts, body))
}

/// Whether some node serves the stream's media now: this one (its package), or another (the
/// cluster's second-old snapshot of live leases).
async fn served(api: &Api, id: i64) -> bool {
    api.registry.package(id).is_some() || api.cluster.serving_node(id, false).await.is_some()
}

/// Whether the stream's playback is signed (its own setting or its CDN resource's); an
/// unknown stream needs nothing (its handler answers 404). Second-old answers
/// (`cluster::lookup`): a flood of plain requests costs the store little.
async fn stream_needs_grant(api: &Api, id: i64) -> Result<bool, ()> {
    match api.cluster.lookups().stream(id).await {
        Ok(row) => Ok(row.is_some_and(|row| api.endpoints.secure(&row.settings))),
        Err(_) => Err(()),
    }
}

async fn load_video(api: &Api, id: i64) -> Result<Option<VideoRow>, ()> {
    let store = api.store.clone();
    match tokio::task::spawn_blocking(move || store.get_video(id)).await {
        Ok(Ok(video)) => Ok(video),
        _ => Err(()),
    }
}

/// Whether a video's files need a grant: its stream's playback was signed when it was
/// recorded, or is now. An unknown video needs nothing (its handler answers 404).
async fn video_needs_grant(api: &Api, video: Option<&VideoRow>) -> Result<bool, ()> {
    match video {
        None => Ok(false),
        Some(v) if v.state.secure_playback => Ok(true),
        Some(v) => stream_needs_grant(api, v.stream_id).await,
    }
}

/// A video's record the gate read (a request without a grant), for its handler.
#[derive(Debug, Clone)]
pub struct LoadedVideo(pub VideoRow);

/// The grant segments a request brought (empty when none), for URLs a page hands out.
pub fn segments<B>(req: &Request<B>) -> String {
    req.extensions()
        .get::<PlaybackGrant>()
        .map(|g| g.segments.clone())
        .unwrap_or_default()
}
