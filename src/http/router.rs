//! Top-level HTTP routing: which part of the daemon answers a request (health, readiness, the
//! clock, OpenAPI, metrics, the control API, media delivery, videos, WHIP, the player pages),
//! the hand-off of a request about a stream to the node serving it, and what a stopping node
//! refuses.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use crate::http::api::{self, Api};
use crate::http::delivery;
use crate::http::error::{error_response, ApiError};
use crate::http::listener::{self, json_response, Body};
use crate::http::relay::Unreachable;
use crate::realtime::whep;
use crate::shutdown::Stopping;

/// Who answers the requests the router hands out besides media delivery.
pub struct Routes {
    pub api: Arc<Api>,
    pub whip: Arc<crate::ingest::whip::Whip>,
    pub whep: Arc<crate::realtime::whep::Whep>,
    pub player: Arc<crate::http::delivery::player::Player>,
    pub stopping: Stopping,
}

/// How soon a client refused by a stopping node should ask again: behind a load balancer the
/// next attempt lands on another node, and a lone node is back after its restart.
const RETRY_AFTER_SECS: &str = "1";

/// Whether a stopping node refuses `req`: a new viewer or publisher (media, videos, a new WHIP
/// or WHEP session), which another node serves; the API, health, and the requests of sessions
/// already here are answered.
fn refused_while_stopping(req: &Request<Incoming>) -> bool {
    let path = req.uri().path();
    // The media a player already knows of are still served while they are here: refused, the
    // player would ask the next node for them in vain (it never had them) and be stuck on a
    // hole in its buffer. Playlists go elsewhere, to where the stream goes on.
    let media_object = matches!(
        delivery::parse_path(path),
        Some((
            _,
            delivery::Target::Part(..)
                | delivery::Target::Segment(..)
                | delivery::Target::Init(..)
                | delivery::Target::TsSegment(..)
        ))
    );
    (delivery::owns(path) && !media_object)
        || delivery::videos::owns(path)
        || (*req.method() == Method::POST && (crate::ingest::whip::owns(path) || whep::owns(path)))
}

/// 503 with `Retry-After`, the connection closed after it so that a load balancer's pooled
/// connections to this node go too. Media delivery answers in plain text, WHIP and WHEP in
/// the JSON error shape; each readable from any origin, as their usual answers are.
///
/// A stream's media asked by another node on a viewer's behalf is answered 404 marked as moving
/// instead: the stream's lease is given up, and that node, whose view of the leases may be a
/// second old, holds its viewer's request until the stream is served again (a 503 passed on
/// would be held against it by its load balancer).
fn stopping_refusal(req: &Request<Incoming>) -> Response<Body> {
    const WHY: &str = "this node is shutting down: ask again";
    let path = req.uri().path();
    if delivery::owns(path) && crate::http::relay::is_relayed(req) {
        let mut resp = delivery::plain(
            StatusCode::NOT_FOUND,
            "not served here: this node is shutting down\n",
        );
        resp.headers_mut().insert(
            crate::http::relay::MOVING_HEADER,
            hyper::header::HeaderValue::from_static("1"),
        );
        return resp;
    }
    let mut resp = if delivery::owns(path) || delivery::videos::owns(path) {
        delivery::plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "this node is shutting down: ask again\n",
        )
    } else {
        let code = StatusCode::SERVICE_UNAVAILABLE;
        crate::ingest::whip::signalling::refuse(code, "shutting_down", WHY)
    };
    let headers = resp.headers_mut();
    headers.insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static(RETRY_AFTER_SECS),
    );
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    resp
}

/// `/readyz`: whether this node takes new publishers (200), or is stopping or full (503), for
/// a load balancer's health check; `/healthz` answers 200 until the process exits. A full node
/// still serves its viewers: only publishers should go elsewhere.
fn readiness(stopping: &Stopping, registry: &crate::live::Registry) -> Response<Body> {
    let (body, retry) = if stopping.refusing() {
        (json!({"status": "shutting_down"}), RETRY_AFTER_SECS)
    } else if let Some(full) = registry.full() {
        let body =
            json!({"status": "at_capacity", "reason": full.kind(), "message": full.to_string()});
        (body, crate::capacity::RETRY_AFTER_SECS)
    } else {
        return json_response(StatusCode::OK, &json!({"status": "ready"}));
    };
    let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, &body);
    resp.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static(retry),
    );
    resp
}

/// `req`, about stream `id`, answered by the node serving that stream when it is another one
/// (the serving node is looked up only with an `id`), else by `here`.
async fn here_or_serving_node<F, Fut>(
    api: &Api,
    id: Option<i64>,
    req: Request<Incoming>,
    here: F,
) -> Response<Body>
where
    F: FnOnce(Request<Incoming>) -> Fut,
    Fut: std::future::Future<Output = Response<Body>>,
{
    let owner = match id {
        Some(id) => api.relay.stream_owner(id, &req).await,
        None => None,
    };
    match owner {
        Some(node) => api.relay.forward(req, &node).await,
        None => here(req).await,
    }
}

/// How long a viewer's request for a stream moving between nodes is held for the stream to be
/// served again: a publisher reconnecting takes about a second; under hls.js's 10 s wait for a
/// playlist's first byte.
const MOVE_WAIT: Duration = Duration::from_secs(6);
/// How often a held request looks again (the snapshot it reads is a second old at most).
const MOVE_LOOK: Duration = Duration::from_millis(100);

/// A stream's media: answered here when this node serves the stream, else by the node that
/// does. While the stream moves between nodes (a stopping node gave it up; its publisher is
/// reconnecting, perhaps here) the request is held until a node serves it, up to
/// [`MOVE_WAIT`]: a 404 then would end the show for the viewer (hls.js retries no 4xx).
async fn media_route(api: &Api, stopping: &Stopping, req: Request<Incoming>) -> Response<Body> {
    let time_url = &api.endpoints.time_url;
    let id = delivery::parse_path(req.uri().path()).map(|(id, _)| id);
    let relayed = crate::http::relay::is_relayed(&req);
    // Served here (the common case), asked by another node, or no stream's: answered at once.
    let served_here = |id| api.relay.holds(id) && api.registry.package(id).is_some();
    let Some(id) = id.filter(|&id| !relayed && !served_here(id)) else {
        return delivery::handle(api.registry.clone(), time_url, req, stopping).await;
    };
    // Media requests carry no body: their head is all a second try needs.
    let (head, _) = req.into_parts();
    let here = |req| delivery::handle(api.registry.clone(), time_url, req, stopping);
    let until = tokio::time::Instant::now() + MOVE_WAIT;
    loop {
        let req = media_request(&head);
        // A stop here ends the wait: the request is answered as the stream is here.
        let waiting = tokio::time::Instant::now() < until && !stopping.refusing();
        if let Some(node) = api.relay.stream_owner(id, &req).await {
            match api.relay.try_forward(req, &node).await {
                Ok(answer) if !(waiting && crate::http::relay::moving_away(&answer)) => {
                    return answer
                }
                // Gone, or going: the snapshot naming it is up to a second old.
                Err(_) if waiting => {}
                Err(Unreachable(_)) => return owner_unreachable(),
                Ok(_) => {}
            }
        } else if api.registry.package(id).is_some()
            || !(waiting && (api.relay.holds(id) || api.relay.moving(id).await))
        {
            return here(req).await;
        }
        tokio::time::sleep(MOVE_LOOK).await;
    }
}

/// How long `/metrics` waits for the store's counts and the disk's free space: well under
/// Prometheus's 10 s scrape timeout, so a sick store costs those families, not the scrape (a
/// failed scrape reads as the node being down).
const METRICS_WAIT: Duration = Duration::from_secs(2);

/// `/metrics`: the registry's families, then the node's queues and budgets. The store's
/// figures are left out (logged) when it cannot be read in time: the rest still tells what
/// runs.
async fn metrics(api: &Api) -> String {
    // Each read alone and all at once, each bounded: one the store (or the disk) cannot
    // answer costs its own families only, and the scrape waits METRICS_WAIT at most.
    let recordings = api.recordings.clone();
    let (nodes, backlog, disk) = tokio::join!(
        tokio::time::timeout(METRICS_WAIT, api.db(|s| s.nodes())),
        tokio::time::timeout(METRICS_WAIT, api.db(|s| s.backlog())),
        // statvfs may block on a network filesystem: off the async workers.
        tokio::time::timeout(
            METRICS_WAIT,
            tokio::task::spawn_blocking(move || recordings.disk())
        ),
    );
    let nodes = nodes.ok().and_then(Result::ok).map(|nodes| {
        let mut by_state = [0; crate::cluster::NodeState::ALL.len()];
        for n in &nodes {
            by_state[api.cluster.node_state(n) as usize] += 1;
        }
        by_state
    });
    let backlog = match backlog {
        Ok(Ok(b)) => Some(b),
        Ok(Err(e)) => {
            tracing::warn!(error = ?e, "metrics: cannot count the store's backlog");
            None
        }
        Err(_) => {
            tracing::warn!("metrics: the store's backlog not counted in time");
            None
        }
    };
    let disk = disk
        .ok()
        .and_then(Result::ok)
        .unwrap_or_else(|| (api.recordings.disk_used(), None, None));
    let mut text = delivery::metrics::scrape(&api.registry);
    text.push_str(&delivery::metrics::operations(
        backlog,
        disk,
        api.restreams.totals(),
    ));
    text.push_str(&delivery::metrics::cluster(nodes, api.feeds.open()));
    text
}

/// A stream's media whose serving node has not answered for [`MOVE_WAIT`]: 504, which a
/// player tries again and a load balancer does not hold against this node (a 502 would make
/// nginx's `proxy_next_upstream http_502` mark it failed, and with every node marked so,
/// answer "no live upstreams" for every stream). The relay has logged why.
fn owner_unreachable() -> Response<Body> {
    let mut resp = delivery::plain(
        StatusCode::GATEWAY_TIMEOUT,
        "the node serving this stream did not answer: ask again\n",
    );
    resp.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static(RETRY_AFTER_SECS),
    );
    resp
}

/// A bodiless request with `head`'s method, URI and headers.
fn media_request(
    head: &hyper::http::request::Parts,
) -> Request<http_body_util::Empty<bytes::Bytes>> {
    let mut req = Request::new(http_body_util::Empty::new());
    *req.method_mut() = head.method.clone();
    *req.uri_mut() = head.uri.clone();
    *req.headers_mut() = head.headers.clone();
    // Who asked: the serving node counts its players (`package::audience`).
    if let Some(peer) = head.extensions.get::<crate::http::listener::PeerAddr>() {
        req.extensions_mut().insert(*peer);
    }
    req
}

/// WHEP: a viewer's offer for a stream another node serves is redirected there (307, the
/// viewer's client repeats it); a session's DELETE is passed to the node holding it.
async fn whep_route(api: &Api, whep: &Arc<whep::Whep>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    if let Some(id) = whep::endpoint_stream(path) {
        if *req.method() == Method::POST && api.registry.hub(id).is_none() {
            if let Some(node) = api.relay.stream_owner(id, &req).await {
                // The grant the gate took out of the path goes back in for the other node.
                let grant = req
                    .extensions()
                    .get::<crate::http::playback_gate::PlaybackGrant>()
                    .map_or("", |g| g.segments.as_str());
                let query = req.uri().query().map_or(String::new(), |q| format!("?{q}"));
                return whep::redirect(&node, &format!("/whep/{id}{grant}{query}"));
            }
        }
        return whep.handle(req).await;
    }
    let id = whep.session_elsewhere(path);
    here_or_serving_node(api, id, req, |req| whep.handle(req)).await
}

/// Top-level HTTP routing: health, readiness and OpenAPI are public; the API prefixes and
/// `/metrics` need a key.
pub async fn route(routes: &Routes, req: Request<Incoming>) -> Response<Body> {
    let Routes {
        api,
        whip,
        whep,
        player,
        stopping,
    } = routes;
    // A request that claims to come from another node proves it before anything else.
    let req = match api.relay.admit(req) {
        Ok(req) => req,
        Err(e) => return crate::http::relay::refused(&e),
    };
    if stopping.refusing() && refused_while_stopping(&req) {
        return stopping_refusal(&req);
    }
    // Signed playback: the grant taken out of media, video and player paths, checked.
    let gated = crate::http::delivery::owns(req.uri().path())
        || delivery::videos::owns(req.uri().path())
        || delivery::player::owns(req.uri().path())
        || whep::owns(req.uri().path());
    let req = if gated {
        match crate::http::playback_gate::admit(api, req).await {
            Ok(req) => req,
            Err(refused) => return refused,
        }
    } else {
        req
    };
    let path = req.uri().path();
    let public = |body: Response<Body>| {
        if matches!(*req.method(), Method::GET | Method::HEAD) {
            return body;
        }
        let mut refused = error_response(&ApiError::method_not_allowed());
        refused.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        refused
    };
    match path {
        "/healthz" => public(json_response(StatusCode::OK, &json!({"status": "ok"}))),
        "/readyz" => public(readiness(stopping, &api.registry)),
        "/time" => public(delivery::time_response()),
        "/openapi.json" => public(
            Response::builder()
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(listener::full(api::OPENAPI_JSON))
                .expect("static response is valid"),
        ),
        "/docs/api" | "/docs/api/" => public(
            Response::builder()
                .header(hyper::header::CONTENT_TYPE, "text/html; charset=utf-8")
                .header(hyper::header::CACHE_CONTROL, "no-cache")
                .body(listener::full(api::DOCS_HTML))
                .expect("static response is valid"),
        ),
        p if crate::http::console::owns(p) => public(crate::http::console::handle(p)),
        "/metrics" if !api.keys.allows(req.headers()) => error_response(&ApiError::unauthorized()),
        "/metrics" => public(
            Response::builder()
                .header(hyper::header::CONTENT_TYPE, delivery::metrics::CONTENT_TYPE)
                .header(hyper::header::CACHE_CONTROL, "no-store")
                .body(listener::full(metrics(api).await))
                .expect("static response is valid"),
        ),
        p if api::owns(p) => api.clone().handle(req).await,
        p if delivery::owns(p) => media_route(api, stopping, req).await,
        p if delivery::videos::owns(p) => {
            delivery::videos::handle(
                api.store.clone(),
                api.recordings.root(),
                api.recordings.storage(),
                &api.relay,
                req,
            )
            .await
        }
        p if crate::ingest::whip::owns(p) => {
            let id = whip.session_elsewhere(p);
            here_or_serving_node(api, id, req, |req| whip.handle(req)).await
        }
        p if whep::owns(p) => whep_route(api, whep, req).await,
        p if delivery::player::owns(p) => player.handle(req).await,
        _ => error_response(&ApiError::not_found("resource")),
    }
}
