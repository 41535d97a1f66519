//! `GET /streaming/nodes`: the daemons sharing the store, as their heartbeats tell — alive,
//! missing or gone, how long silent, their transcoding headroom and the streams each serves —
//! for the console's nodes page and an operator's script.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde::Serialize;

use super::format::iso8601;
use super::{Api, ApiError};
use crate::http::listener::{json_response, Body};

#[derive(Debug, Serialize)]
struct NodeView {
    id: String,
    /// Where the other nodes reach it.
    url: String,
    started_at: String,
    /// `alive`, `missing` (silent past `node_dead_secs`, its streams moved) or `gone`
    /// (signed off, or silent for over an hour).
    state: &'static str,
    /// Seconds since its last heartbeat reached the store, by the store's clock.
    heartbeat_age: f64,
    /// Spare transcoding capacity at that heartbeat, 0..1; `null` when not measured.
    headroom: Option<f64>,
    /// Streams whose lease it holds (served there now).
    streams: usize,
    /// The node that answered this request.
    this_node: bool,
}

pub async fn list(api: &Arc<Api>) -> Result<Response<Body>, ApiError> {
    let dead_after = api.cluster.dead_after();
    let (nodes, leases) = api
        .db(move |s| Ok((s.nodes()?, s.live_leases(None, dead_after)?)))
        .await?;
    let views: Vec<NodeView> = nodes
        .iter()
        .map(|n| NodeView {
            id: n.id.clone(),
            url: n.url.clone(),
            started_at: iso8601(n.started_at),
            state: api.cluster.node_state(n).as_str(),
            heartbeat_age: (n.silent.as_secs_f64() * 10.0).round() / 10.0,
            headroom: n.headroom.map(|permille| permille as f64 / 1000.0),
            streams: leases.iter().filter(|l| l.node_id == n.id).count(),
            this_node: n.id == api.cluster.node_id(),
        })
        .collect();
    Ok(json_response(StatusCode::OK, &views))
}
