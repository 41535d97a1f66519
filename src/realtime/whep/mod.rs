//! WHEP playback (draft-ietf-wish-whep): `POST /whep/{id}` with a viewer's SDP offer → `201`
//! with the answer and the session's `Location`; `DELETE` on that ends it; `OPTIONS` for CORS;
//! `PATCH` is `405` (no trickle ICE: the answer carries every candidate), as for WHIP, whose
//! ICE ports (UDP and TCP) every viewer shares. `?quality={rung}` picks a rung; the default is
//! the highest at most 720p ([`crate::hub::default_rung`]). Nothing is encoded per viewer: each
//! session reads the rung's H.264 as encoded for the other outputs and the stream's Opus
//! (encoded only while a WebRTC viewer is attached) from the hub.

pub mod h264;
pub mod peer;
pub mod send;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::watch;

use crate::events::{Event, Events, Next};
use crate::http::error::ApiError;
use crate::http::listener::{empty, Body};
use crate::hub::{Feed, RungInfo};
use crate::ingest::whip::signalling::{
    cors, created, method_not_allowed, no_trickle, options, read_offer, refuse, require_sdp,
    session_id, Refusal,
};
use crate::ingest::whip::{sdp, session::SessionError, Muxes, WhipConfig};
use crate::live::Registry;

/// Concurrent WHEP viewers on this node (each a peer connection and its SRTP); the excess is
/// refused with 503.
pub const DEFAULT_MAX_SESSIONS: usize = 1000;
/// Concurrent WHEP viewers of one stream.
pub const DEFAULT_MAX_SESSIONS_PER_STREAM: usize = 500;
/// How long a POST for a stream that just went live waits for its rungs' first configs.
const RUNG_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct WhepConfig {
    pub max_sessions: usize,
    pub max_sessions_per_stream: usize,
}

impl Default for WhepConfig {
    fn default() -> Self {
        WhepConfig {
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_stream: DEFAULT_MAX_SESSIONS_PER_STREAM,
        }
    }
}

/// A viewer's place in [`Whep::sessions`], taken by [`Whep::reserve`] before its offer is
/// negotiated; given back when dropped unless kept (the session then runs and gives it back
/// when it ends).
struct Reservation {
    whep: Arc<Whep>,
    sid: String,
    kept: bool,
    stop: watch::Receiver<bool>,
    ended: watch::Receiver<bool>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.kept {
            self.whep.sessions().remove(&self.sid);
        }
    }
}

struct SessionRef {
    stream_id: i64,
    stop: watch::Sender<bool>,
    ended: watch::Sender<bool>,
}

pub struct Whep {
    registry: Arc<Registry>,
    config: WhepConfig,
    ice: WhipConfig,
    muxes: Muxes,
    sessions: Mutex<HashMap<String, SessionRef>>,
}

/// Paths this module answers.
pub fn owns(path: &str) -> bool {
    path.starts_with("/whep/")
}

/// The stream a WHEP endpoint path names (`/whep/{id}`), not a session's.
pub fn endpoint_stream(path: &str) -> Option<i64> {
    let id = path.strip_prefix("/whep/")?;
    id.parse::<i64>().ok().filter(|i| *i > 0)
}

/// `307` to the node serving the stream: the viewer repeats the POST there (as a WHIP
/// publisher does, RFC 9725 §4.5, which WHEP's draft follows).
pub fn redirect(node_url: &str, path_and_query: &str) -> Response<Body> {
    let location = format!("{}{path_and_query}", node_url.trim_end_matches('/'));
    let mut r = refuse(
        StatusCode::TEMPORARY_REDIRECT,
        "live_elsewhere",
        "the stream is served by another node",
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// The rung a viewer asked for (`?quality=`), or the default.
fn chosen_rung(rungs: &[RungInfo], asked: Option<&str>) -> Result<RungInfo, Refusal> {
    match asked {
        Some(name) => rungs
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = rungs.iter().map(|r| r.name.as_str()).collect();
                let mut e = ApiError::new(
                    StatusCode::NOT_FOUND,
                    "unknown_quality",
                    format!("no rung `{name}`; this stream has {}", names.join(", ")),
                );
                e.field = Some("quality".into());
                let mut r = e.response();
                cors(&mut r);
                Box::new(r)
            }),
        None => crate::hub::default_rung(rungs).cloned().ok_or_else(|| {
            Box::new(refuse(
                StatusCode::CONFLICT,
                "not_live",
                "the stream has no picture yet",
            ))
        }),
    }
}

impl Whep {
    pub fn new(
        registry: Arc<Registry>,
        config: WhepConfig,
        ice: WhipConfig,
        muxes: Muxes,
    ) -> Arc<Whep> {
        let whep = Arc::new(Whep {
            registry,
            config,
            ice,
            muxes,
            sessions: Mutex::new(HashMap::new()),
        });
        whep.follow(whep.registry.events().clone());
        whep
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionRef>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the sessions of a stream whose outputs ended (a rebuilt pipeline does not end
    /// them: they wait for the rung to come back).
    fn follow(self: &Arc<Self>, events: Events) {
        let whep = Arc::downgrade(self);
        let mut sub = events.subscribe();
        tokio::spawn(async move {
            while let Some(next) = sub.next().await {
                let Some(whep) = whep.upgrade() else { return };
                // Missed events: the sessions of streams that have no outputs now have ended.
                let ended = |stream_id: i64| match &next {
                    Next::Event(e) => e.event == Event::LiveEnded { stream_id },
                    Next::Lost(_) => whep.registry.package(stream_id).is_none(),
                };
                for s in whep.sessions().values().filter(|s| ended(s.stream_id)) {
                    let _ = s.ended.send(true);
                }
            }
        });
    }

    /// Ends every session (shutdown).
    pub fn stop_all(&self) {
        for s in self.sessions().values() {
            let _ = s.stop.send(true);
        }
    }

    /// A session resource (`/whep/{id}/{session}`) this node does not hold: its stream, so the
    /// request goes to the node serving it.
    pub fn session_elsewhere(&self, path: &str) -> Option<i64> {
        let (id, sid) = path.strip_prefix("/whep/")?.split_once('/')?;
        let id = id.parse::<i64>().ok()?;
        if sid.is_empty() || sid.contains('/') || self.find(id, sid) {
            return None;
        }
        Some(id)
    }

    fn find(&self, id: i64, sid: &str) -> bool {
        self.sessions().get(sid).is_some_and(|s| s.stream_id == id)
    }

    pub async fn handle(self: &Arc<Self>, req: Request<hyper::body::Incoming>) -> Response<Body> {
        let path = req.uri().path().to_owned();
        let mut parts = path["/whep/".len()..].split('/');
        let id = parts
            .next()
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|i| *i > 0);
        let session = parts.next().map(str::to_owned);
        let (Some(id), None) = (id, parts.next()) else {
            return refuse(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such WHEP resource: the path is /whep/{id}",
            );
        };
        if session.as_deref() == Some("") {
            return refuse(StatusCode::NOT_FOUND, "not_found", "no such WHEP resource");
        }
        match (req.method().clone(), session) {
            (Method::OPTIONS, session) => options(session.is_some()),
            (Method::POST, None) => self.post(id, req).await,
            (Method::DELETE, Some(sid)) => self.delete(id, &sid),
            (Method::PATCH, Some(sid)) if self.find(id, &sid) => no_trickle(),
            (Method::PATCH, Some(_)) => {
                refuse(StatusCode::NOT_FOUND, "not_found", "no such WHEP session")
            }
            (_, session) => method_not_allowed(session.is_some(), "WHEP"),
        }
    }

    fn delete(&self, id: i64, sid: &str) -> Response<Body> {
        if !self.find(id, sid) {
            return refuse(StatusCode::NOT_FOUND, "not_found", "no such WHEP session");
        }
        if let Some(s) = self.sessions().remove(sid) {
            let _ = s.stop.send(true);
            tracing::info!(
                stream = id,
                session = sid,
                "WHEP session deleted by the viewer"
            );
        }
        let mut r = Response::new(empty());
        cors(&mut r);
        r
    }

    /// A place for one more viewer of stream `id`, taken at once (the check and the insert
    /// under one lock), so concurrent offers count against the caps while they negotiate — a
    /// flood of offers cannot allocate a peer connection each past them; or the refusal.
    fn reserve(self: &Arc<Self>, id: i64) -> Result<Reservation, Refusal> {
        let mut sessions = self.sessions();
        let here = sessions.values().filter(|s| s.stream_id == id).count();
        let full = if sessions.len() >= self.config.max_sessions {
            Some(format!(
                "{} WHEP sessions are running",
                self.config.max_sessions
            ))
        } else if here >= self.config.max_sessions_per_stream {
            Some(format!(
                "this stream has {} WHEP viewers, its limit",
                self.config.max_sessions_per_stream
            ))
        } else {
            None
        };
        if let Some(message) = full {
            let mut r = refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_sessions",
                message,
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return Err(Box::new(r));
        }
        let sid = session_id();
        let (stop, stop_rx) = watch::channel(false);
        let (ended, ended_rx) = watch::channel(false);
        sessions.insert(
            sid.clone(),
            SessionRef {
                stream_id: id,
                stop,
                ended,
            },
        );
        Ok(Reservation {
            whep: self.clone(),
            sid,
            kept: false,
            stop: stop_rx,
            ended: ended_rx,
        })
    }

    async fn post(
        self: &Arc<Self>,
        id: i64,
        req: Request<hyper::body::Incoming>,
    ) -> Response<Body> {
        if let Err(r) = require_sdp(&req) {
            return *r;
        }
        let asked = req.uri().query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "quality")
                .map(|(_, v)| v.into_owned())
        });
        let offer = match read_offer(req, self.ice.max_sdp_bytes, check_offer).await {
            Ok(o) => o,
            Err(r) => return *r,
        };
        let mut place = match self.reserve(id) {
            Ok(p) => p,
            Err(r) => return *r,
        };
        let Some(hub) = self.registry.hub(id) else {
            return refuse(StatusCode::NOT_FOUND, "not_live", "the stream is not live");
        };
        let rungs = hub.settled_video_rungs(RUNG_WAIT).await;
        let rung = match chosen_rung(&rungs, asked.as_deref()) {
            Ok(r) => r,
            Err(r) => return *r,
        };
        let Some(avcc) = hub
            .video_config(&Feed::Video(rung.name.clone()))
            .map(|c| c.record)
        else {
            return refuse(
                StatusCode::CONFLICT,
                "not_live",
                "the stream has no picture yet",
            );
        };
        let audio = offer_has_audio(&offer);
        let (negotiated, keyframes) =
            match peer::negotiate(offer, &avcc, audio, &self.ice, &self.muxes).await {
                Ok(n) => n,
                Err(e) => return negotiation_refusal(id, e),
            };
        let answer = negotiated.answer.clone();
        place.kept = true;
        let sid = place.sid.clone();
        let source = send::Source {
            hub,
            name: format!("{} {}", crate::hub::WHEP_READER, &sid[..8]),
            rung: rung.name.clone(),
            ended: place.ended.clone(),
            stop: place.stop.clone(),
        };
        let whep = self.clone();
        let (task_sid, connect) = (sid.clone(), self.ice.connect_timeout);
        tokio::spawn(async move {
            let (reason, stats) = send::run(negotiated, keyframes, source, connect).await;
            whep.sessions().remove(&task_sid);
            tracing::info!(
                stream = id, session = %task_sid, reason, frames = stats.frames,
                packets = stats.packets, bytes = stats.bytes, skipped = stats.skipped,
                keyframe_requests = stats.keyframe_requests, "WHEP viewer left"
            );
        });
        tracing::info!(stream = id, session = %sid, rung = %rung.name, "WHEP session created");
        self.created(id, &sid, answer)
    }

    /// `201 Created`: the answer, and the session's URL.
    fn created(&self, id: i64, sid: &str, answer: String) -> Response<Body> {
        created(
            &format!("/whep/{id}/{sid}"),
            sid,
            answer,
            &self.ice.ice_servers,
        )
    }
}

fn negotiation_refusal(id: i64, e: SessionError) -> Response<Body> {
    match e {
        SessionError::Offer(m) => refuse(StatusCode::BAD_REQUEST, "invalid_sdp", m),
        SessionError::Unsupported(e) => refuse(
            StatusCode::NOT_ACCEPTABLE,
            "unsupported_codecs",
            e.to_string(),
        ),
        SessionError::Setup(m) => {
            tracing::error!(stream = id, error = %m, "WHEP session set-up failed");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal", m)
        }
    }
}

/// Whether the viewer asked for audio (an Opus section); a video-only viewer gets no Opus
/// encoded for it.
fn offer_has_audio(offer: &str) -> bool {
    sdp::sections(offer.as_bytes()).is_ok_and(|s| s.iter().any(|s| s.has_opus()))
}

/// Checks a viewer's offer before any WebRTC state exists (sans-IO): parsable and bounded
/// like a WHIP offer, with an H.264 video section (packetization-mode 1) the stream can be sent
/// in; audio is optional.
pub fn check_offer(offer: &[u8]) -> Result<(), sdp::SdpError> {
    let sections = sdp::sections(offer)?;
    if !sections.iter().any(|s| s.has_h264()) {
        return Err(sdp::SdpError::Unsupported("H.264 video"));
    }
    Ok(())
}
