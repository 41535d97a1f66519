//! WHIP ingest (RFC 9725): HTTP signalling on the daemon's HTTP listener — `POST /whip/{id}`
//! with an SDP offer → `201` with the answer and the session's `Location`; `DELETE` on that
//! ends it; `OPTIONS` for CORS; `PATCH` is `405` (no trickle ICE: the answer carries every
//! candidate). Every refusal happens before anything is allocated.

pub mod ice_server;
pub mod mux;
pub mod rtp;
pub mod sdp;
pub mod session;
pub mod signalling;
pub mod stun;
pub mod tcp_mux;
pub mod to_media;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::watch;

use crate::admission::Admission;
use crate::http::listener::PeerAddr;
use crate::http::listener::{empty, Body};
use crate::live::{Caller, HookRefusal, Protocol, PublishError, Registry, DRAIN_WAIT};
use signalling::{
    cors, created, method_not_allowed, no_trickle, options, read_offer, refuse, refused,
    require_sdp, session_id, Refusal,
};

/// One UDP port for every session's ICE (open one firewall port, not a range).
pub const DEFAULT_UDP_MUX_ADDR: &str = "0.0.0.0:8189";
/// ICE-TCP on the same port number: one firewall rule (8189, UDP and TCP) covers both, and a
/// fallback only helps where UDP is blocked if it is on by default.
pub const DEFAULT_TCP_MUX_ADDR: &str = "0.0.0.0:8189";

/// Concurrent WHIP sessions (each holds a peer connection and its UDP sockets); the excess is
/// refused with 503.
pub const DEFAULT_MAX_SESSIONS: usize = 256;

#[derive(Debug, Clone)]
pub struct WhipConfig {
    /// The UDP port every session shares (a wildcard: that port on each interface, loopback
    /// excluded); `None`: each session binds its own sockets on `udp_addrs`.
    pub udp_mux_addr: Option<SocketAddr>,
    /// The TCP port for ICE-TCP (passive), shared the same way; `None`: no ICE-TCP.
    pub tcp_mux_addr: Option<SocketAddr>,
    /// Without the UDP mux: where each session binds its UDP socket (port 0: ephemeral). A
    /// wildcard address gathers a host candidate per interface (loopback excluded); name
    /// `127.0.0.1:0` to offer loopback.
    pub udp_addrs: Vec<SocketAddr>,
    /// Public addresses to announce instead of the interfaces' own (a host behind 1:1 NAT).
    pub nat_ips: Vec<IpAddr>,
    /// STUN/TURN servers offered to clients in `Link` headers (RFC 9725 §4.6).
    pub ice_servers: Vec<ice_server::IceServer>,
    pub max_sessions: usize,
    /// ICE-TCP connections one address may hold (pending and routed; trusted proxies exempt).
    pub tcp_max_connections_per_ip: usize,
    /// Largest offer accepted (413 beyond).
    pub max_sdp_bytes: usize,
    /// A session whose ICE/DTLS has not connected by then is dropped (the client never came).
    pub connect_timeout: Duration,
    /// A connected session that sends no RTP for this long is gone.
    pub idle_timeout: Duration,
}

impl Default for WhipConfig {
    fn default() -> Self {
        WhipConfig {
            udp_mux_addr: Some(DEFAULT_UDP_MUX_ADDR.parse().expect("valid default")),
            tcp_mux_addr: Some(DEFAULT_TCP_MUX_ADDR.parse().expect("valid default")),
            ice_servers: Vec::new(),
            udp_addrs: vec![SocketAddr::from(([0, 0, 0, 0], 0))],
            nat_ips: Vec::new(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            tcp_max_connections_per_ip: tcp_mux::DEFAULT_MAX_CONNECTIONS_PER_IP,
            max_sdp_bytes: sdp::DEFAULT_MAX_SDP_BYTES,
            connect_timeout: session::DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: session::DEFAULT_IDLE_TIMEOUT,
        }
    }
}

struct SessionRef {
    stream_id: i64,
    stop: watch::Sender<bool>,
}

/// The shared ICE sockets, bound once at start-up.
/// The WHIP ICE muxes' boundary error (both bind through [`Muxes::bind`]).
#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    #[error("binding the WHIP ICE {what} mux on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Default)]
pub struct Muxes {
    pub udp: Option<Arc<mux::UdpMux>>,
    pub tcp: Option<Arc<tcp_mux::TcpMux>>,
}

impl Muxes {
    /// `tcp_admission` gates ICE-TCP connections (per address, and the file budget).
    pub async fn bind(config: &WhipConfig, tcp_admission: Admission) -> Result<Muxes, MuxError> {
        let udp = match config.udp_mux_addr {
            Some(addr) => Some(mux::UdpMux::bind(addr).await?),
            None => None,
        };
        let tcp = match config.tcp_mux_addr {
            Some(addr) => Some(tcp_mux::TcpMux::bind(addr, tcp_admission).await?),
            None => None,
        };
        Ok(Muxes { udp, tcp })
    }
}

pub struct Whip {
    registry: Arc<Registry>,
    config: WhipConfig,
    muxes: Muxes,
    sessions: Mutex<HashMap<String, SessionRef>>,
}

/// Paths this module answers.
pub fn owns(path: &str) -> bool {
    path.starts_with("/whip/")
}

/// `path_and_query`: the refused request's, for a redirect to the node serving the stream.
fn publish_refusal(e: &PublishError, path_and_query: &str) -> Response<Body> {
    let (status, code) = match e {
        // RFC 9725 §4.5: a WHIP endpoint may redirect with 307; the client repeats the POST
        // (offer and token) at the node that serves the stream.
        PublishError::LiveElsewhere { url, .. } if !url.is_empty() => {
            let location = format!("{}{path_and_query}", url.trim_end_matches('/'));
            if let Ok(value) = HeaderValue::from_str(&location) {
                let mut r = refuse(
                    StatusCode::TEMPORARY_REDIRECT,
                    "live_elsewhere",
                    e.to_string(),
                );
                r.headers_mut().insert(header::LOCATION, value);
                return r;
            }
            (StatusCode::CONFLICT, "live_elsewhere")
        }
        PublishError::LiveElsewhere { .. } => (StatusCode::CONFLICT, "live_elsewhere"),
        PublishError::AtCapacity { .. } | PublishError::BetterPlaced { .. } => {
            let mut r = refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "at_capacity",
                e.to_string(),
            );
            r.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(crate::capacity::RETRY_AFTER_SECS),
            );
            return r;
        }
        PublishError::UnknownStream(_) => (StatusCode::NOT_FOUND, "not_found"),
        PublishError::WrongToken(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
        PublishError::Inactive(_) => (StatusCode::FORBIDDEN, "stream_inactive"),
        PublishError::PullStream(_) => (StatusCode::FORBIDDEN, "pull_stream"),
        PublishError::AlreadyLive(_) => (StatusCode::CONFLICT, "already_live"),
        PublishError::Store => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
        PublishError::Hook {
            refusal: HookRefusal::Refused(_),
            ..
        } => (StatusCode::FORBIDDEN, "publish_refused"),
        PublishError::Hook { .. } => (StatusCode::SERVICE_UNAVAILABLE, "authorization_unavailable"),
    };
    refuse(status, code, e.to_string())
}

/// The stream token: `Authorization: Bearer …` (OBS, RFC 9725 §4.4) or `?token=` (the
/// `push_url_whip` form, for clients that cannot set headers).
fn token(req: &Request<hyper::body::Incoming>) -> Option<String> {
    if let Some(v) = req.headers().get(header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        let (scheme, t) = v.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| t.trim().to_owned());
    }
    form_urlencoded::parse(req.uri().query()?.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

impl Whip {
    pub fn new(registry: Arc<Registry>, config: WhipConfig, muxes: Muxes) -> Arc<Whip> {
        Arc::new(Whip {
            registry,
            config,
            muxes,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionRef>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends every session (shutdown).
    pub fn stop_all(&self) {
        for s in self.sessions().values() {
            let _ = s.stop.send(true);
        }
    }

    pub async fn handle(self: &Arc<Self>, req: Request<hyper::body::Incoming>) -> Response<Body> {
        let path = req.uri().path().to_owned();
        let mut parts = path["/whip/".len()..].split('/');
        let name = parts.next().unwrap_or_default().to_owned();
        let session = parts.next().map(str::to_owned);
        if parts.next().is_some() || name.is_empty() || session.as_deref() == Some("") {
            return refuse(StatusCode::NOT_FOUND, "not_found", "no such WHIP resource");
        }
        match (req.method().clone(), session) {
            (Method::OPTIONS, session) => options(session.is_some()),
            (Method::POST, None) => self.post(&name, req).await,
            (Method::DELETE, Some(sid)) => self.delete(&name, &sid),
            (Method::PATCH, Some(sid)) if self.find(&name, &sid) => no_trickle(),
            (Method::PATCH, Some(_)) => {
                refuse(StatusCode::NOT_FOUND, "not_found", "no such WHIP session")
            }
            (_, session) => method_not_allowed(session.is_some(), "WHIP"),
        }
    }

    /// The stream of a session resource (`/whip/{id}/{session}`) this node does not hold: the
    /// node that accepted the offer does, and behind a load balancer the client's DELETE may
    /// reach another one, which passes it on.
    pub fn session_elsewhere(&self, path: &str) -> Option<i64> {
        let (name, sid) = path.strip_prefix("/whip/")?.split_once('/')?;
        if sid.is_empty() || sid.contains('/') || self.find(name, sid) {
            return None;
        }
        crate::ingest::parse_target(name, "x").map(|t| t.stream_id)
    }

    fn find(&self, name: &str, sid: &str) -> bool {
        let Some(target) = crate::ingest::parse_target(name, "x") else {
            return false;
        };
        self.sessions()
            .get(sid)
            .is_some_and(|s| s.stream_id == target.stream_id)
    }

    fn delete(&self, name: &str, sid: &str) -> Response<Body> {
        if !self.find(name, sid) {
            return refuse(StatusCode::NOT_FOUND, "not_found", "no such WHIP session");
        }
        if let Some(s) = self.sessions().remove(sid) {
            let _ = s.stop.send(true);
            tracing::info!(
                stream = s.stream_id,
                session = sid,
                "WHIP session deleted by the client"
            );
        }
        let mut r = Response::new(empty());
        cors(&mut r);
        r
    }

    async fn post(
        self: &Arc<Self>,
        name: &str,
        req: Request<hyper::body::Incoming>,
    ) -> Response<Body> {
        let target = match publish_target(name, &req) {
            Ok(target) => target,
            Err(refusal) => return *refusal,
        };
        // Where the node serving the stream takes the same request (another node's refusal).
        let path_and_query = req
            .uri()
            .path_and_query()
            .map_or_else(String::new, |p| p.as_str().to_owned());
        let remote = req.extensions().get::<PeerAddr>().copied();
        let offer = match read_offer(req, self.config.max_sdp_bytes, |o| {
            sdp::check_offer(o).map(drop)
        })
        .await
        {
            Ok(offer) => offer,
            Err(refusal) => return *refusal,
        };
        if self.sessions().len() >= self.config.max_sessions {
            let mut r = refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_sessions",
                format!("{} WHIP sessions are running", self.config.max_sessions),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return r;
        }
        let id = target.stream_id;
        let caller = Caller {
            remote: remote.map(|r| r.0),
            query: target.query.clone(),
        };
        let permit = match self
            .registry
            .check_publish(
                id,
                target.slot,
                &target.token,
                (Protocol::Whip, &caller),
                DRAIN_WAIT,
            )
            .await
        {
            Ok(permit) => permit,
            Err(e) => {
                tracing::info!(stream = id, slot = ?target.slot, error = %e, "WHIP publish refused");
                return publish_refusal(&e, &path_and_query);
            }
        };
        let negotiated = match self.negotiate(id, offer).await {
            Ok(n) => n,
            Err(refusal) => return *refusal,
        };
        let publisher = match self.registry.start(permit).await {
            Ok(p) => p,
            Err(e) => {
                negotiated.close().await;
                return publish_refusal(&e, &path_and_query);
            }
        };
        let answer = negotiated.answer.clone();
        let sid = self.run_session(&target, negotiated, publisher);
        self.created(name, &sid, answer)
    }

    /// The peer connection for `offer` (UTF-8, checked), with an answer this daemon can take.
    async fn negotiate(&self, id: i64, offer: String) -> Result<session::Negotiated, Refusal> {
        let negotiated = match session::negotiate(offer, &self.config, &self.muxes).await {
            Ok(n) => n,
            Err(e @ session::SessionError::Offer(_)) => {
                return Err(refused(
                    StatusCode::BAD_REQUEST,
                    "invalid_sdp",
                    e.to_string(),
                ))
            }
            Err(session::SessionError::Unsupported(e)) => {
                return Err(refused(
                    StatusCode::NOT_ACCEPTABLE,
                    "unsupported_codecs",
                    e.to_string(),
                ))
            }
            Err(e) => {
                tracing::error!(stream = id, error = %e, "WHIP session set-up failed");
                return Err(refused(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    e.to_string(),
                ));
            }
        };
        if let Err(e) = sdp::check_answer(negotiated.answer.as_bytes()) {
            negotiated.close().await;
            return Err(refused(
                StatusCode::NOT_ACCEPTABLE,
                "unsupported_codecs",
                e.to_string(),
            ));
        }
        Ok(negotiated)
    }

    /// Registers the session (its id is what a DELETE names) and runs it until it ends; the id.
    fn run_session(
        self: &Arc<Self>,
        target: &crate::ingest::PublishTarget,
        negotiated: session::Negotiated,
        publisher: crate::live::Publisher,
    ) -> String {
        let (id, slot) = (target.stream_id, target.slot);
        let sid = session_id();
        let (stop, stop_rx) = watch::channel(false);
        self.sessions().insert(
            sid.clone(),
            SessionRef {
                stream_id: id,
                stop,
            },
        );
        let whip = self.clone();
        let sid_task = sid.clone();
        let timeouts = (self.config.connect_timeout, self.config.idle_timeout);
        tokio::spawn(async move {
            let reason = session::run(negotiated, publisher, 2, timeouts, stop_rx).await;
            whip.sessions().remove(&sid_task);
            tracing::info!(stream = id, ?slot, session = %sid_task, reason, "WHIP publisher left");
        });
        tracing::info!(stream = id, ?slot, session = %sid, "WHIP session created");
        sid
    }

    /// `201 Created`: the answer, and the session's URL.
    fn created(&self, name: &str, sid: &str, answer: String) -> Response<Body> {
        created(
            &format!("/whip/{name}/{sid}"),
            sid,
            answer,
            &self.config.ice_servers,
        )
    }
}

/// The stream and token a `POST /whip/{name}` names, or its refusal: a known path, an SDP
/// body, a token.
fn publish_target(
    name: &str,
    req: &Request<hyper::body::Incoming>,
) -> Result<crate::ingest::PublishTarget, Refusal> {
    if crate::ingest::parse_target(name, "x").is_none() {
        return Err(refused(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such stream: the path is /whip/{id}",
        ));
    }
    require_sdp(req)?;
    let Some(token) = token(req) else {
        let mut r = refuse(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send the stream token as `Authorization: Bearer <token>` or `?token=<token>`",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Err(r.into());
    };
    let mut target = crate::ingest::parse_target(name, &token)
        .ok_or_else(|| refused(StatusCode::UNAUTHORIZED, "unauthorized", "malformed token"))?;
    // The publisher's own parameters (all but the token), for the authorization hook.
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        if k != "token" {
            query.append_pair(&k, &v);
        }
    }
    target.query = query.finish();
    Ok(target)
}
