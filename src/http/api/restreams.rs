//! `/streaming/restreams[/{id}]`: a live stream sent on to other servers. The target `uri`
//! holds the target's secret (a stream key, an SRT passphrase): it is written, never read back
//! whole — the API shows it without the secret. The live fields are what the serving node's
//! restream is doing now.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::fields::Fields;
use super::format::iso8601;
use super::{json_response, Api, ApiError, Body};
use crate::db::{RestreamRow, RestreamSpec};
use crate::egress::target::{shown, Target};
use crate::live::RestreamStatus;

/// Longest `uri` and `name` accepted.
const MAX_URI: usize = 2048;
const MAX_NAME: usize = 255;

#[derive(Debug, Serialize)]
struct RestreamView {
    id: i64,
    name: String,
    stream_id: i64,
    /// The target without its secret.
    uri: String,
    source: String,
    active: bool,
    live: bool,
    started_at: Option<String>,
    bytes_sent: u64,
    last_error: Option<String>,
    reconnects: u32,
    created_at: String,
    updated_at: String,
}

/// `rows` as shown, their live fields from the node serving each one's stream (`stream`: the
/// one stream they all belong to, when known).
async fn views(
    api: &Arc<Api>,
    rows: &[RestreamRow],
    stream: Option<i64>,
) -> Result<Vec<RestreamView>, ApiError> {
    let dead_after = api.cluster.dead_after();
    let leases = api.db(move |s| s.live_leases(stream, dead_after)).await?;
    // One status per stream, however many of its restreams are listed.
    let mut statuses = std::collections::HashMap::new();
    Ok(rows
        .iter()
        .map(|r| {
            let status = statuses
                .entry(r.spec.stream_id)
                .or_insert_with(|| api.live_status(r.spec.stream_id, &leases));
            view(r, status.restream(r.id).cloned().unwrap_or_default())
        })
        .collect())
}

async fn one(
    api: &Arc<Api>,
    status: StatusCode,
    row: RestreamRow,
) -> Result<Response<Body>, ApiError> {
    let stream = row.spec.stream_id;
    let mut shown = views(api, std::slice::from_ref(&row), Some(stream)).await?;
    Ok(json_response(status, &shown.remove(0)))
}

fn view(r: &RestreamRow, state: RestreamStatus) -> RestreamView {
    let started_at = state
        .started_at_ms
        .and_then(|ms| OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).ok());
    RestreamView {
        id: r.id,
        name: r.spec.name.clone(),
        stream_id: r.spec.stream_id,
        uri: shown(&r.spec.uri),
        source: r.spec.source.clone(),
        active: r.spec.active,
        live: state.live,
        started_at: started_at.map(iso8601),
        bytes_sent: state.bytes_sent,
        last_error: state.last_error,
        reconnects: state.reconnects,
        created_at: iso8601(r.created_at),
        updated_at: iso8601(r.updated_at),
    }
}

/// Reads the owner's fields over `base` (`name`, `stream_id` and `uri` required without one).
fn read(body: Value, base: Option<&RestreamSpec>) -> Result<RestreamSpec, ApiError> {
    let mut f = Fields::new(body, "body")?;
    let name = f.string("name")?;
    let stream_id = f.int("stream_id")?;
    let uri = f.string("uri")?;
    let source = f.string("source")?;
    let active = f.bool("active")?;
    f.finish(&[
        "id",
        "live",
        "started_at",
        "bytes_sent",
        "last_error",
        "reconnects",
        "created_at",
        "updated_at",
    ])?;
    let name = name
        .or(base.map(|b| b.name.clone()))
        .ok_or_else(|| ApiError::required("name", ""))?;
    if name.trim().is_empty() || name.chars().count() > MAX_NAME {
        return Err(ApiError::invalid_value(
            "name",
            format!("1..={MAX_NAME} characters"),
        ));
    }
    let stream_id = match (stream_id, base) {
        (Some(id), Some(b)) if id != b.stream_id => {
            return Err(ApiError::invalid_value(
                "stream_id",
                "a restream's stream cannot change",
            ))
        }
        (Some(id), _) => id,
        (None, Some(b)) => b.stream_id,
        (None, None) => return Err(ApiError::required("stream_id", "")),
    };
    let uri = match (uri, base) {
        // What the API showed, sent back: the stored target stands (its secret was not shown).
        (Some(u), Some(b)) if u == shown(&b.uri) => b.uri.clone(),
        (Some(u), _) => {
            if u.chars().count() > MAX_URI {
                return Err(ApiError::invalid_value(
                    "uri",
                    format!("at most {MAX_URI} characters"),
                ));
            }
            // The refusal says why without echoing the URI (it holds the target's secret).
            Target::parse(&u).map_err(|e| ApiError::invalid_value("uri", e.to_string()))?;
            u
        }
        (None, Some(b)) => b.uri.clone(),
        (None, None) => return Err(ApiError::required("uri", "")),
    };
    let source = source
        .or(base.map(|b| b.source.clone()))
        .unwrap_or_else(|| "origin".into());
    let rung_like = source.len() <= 32 && source.bytes().all(|b| b.is_ascii_alphanumeric());
    if source.is_empty() || !rung_like {
        return Err(ApiError::invalid_value(
            "source",
            "`origin` or a rung's name (transcoded_qualities)",
        ));
    }
    Ok(RestreamSpec {
        stream_id,
        name,
        uri,
        source,
        active: active.or(base.map(|b| b.active)).unwrap_or(true),
    })
}

async fn load(api: &Arc<Api>, id: i64) -> Result<RestreamRow, ApiError> {
    api.db(move |s| s.get_restream(id))
        .await?
        .ok_or_else(|| ApiError::not_found("restream"))
}

pub async fn list(api: &Arc<Api>) -> Result<Response<Body>, ApiError> {
    let rows = api.db(|s| s.list_restreams(None)).await?;
    Ok(json_response(
        StatusCode::OK,
        &views(api, &rows, None).await?,
    ))
}

/// The stream exists, and a rung `source` is one of its quality set's.
async fn check_stream(api: &Arc<Api>, spec: &RestreamSpec) -> Result<(), ApiError> {
    let stream_id = spec.stream_id;
    let Some(stream) = api.db(move |s| s.get_stream(stream_id)).await? else {
        return Err(ApiError::invalid_value("stream_id", "no such stream"));
    };
    if spec.source == "origin" {
        return Ok(());
    }
    let known = |&id: &i64| api.quality_sets.get(id).is_some();
    let set = match stream.settings.quality_set_id.filter(known) {
        Some(id) => id,
        None => api.default_quality_set_id().await?,
    };
    let names: Vec<&str> = api
        .quality_sets
        .get(set)
        .map(|q| q.qualities.iter().map(|q| q.name.as_str()).collect())
        .unwrap_or_default();
    if names.contains(&spec.source.as_str()) {
        return Ok(());
    }
    Err(ApiError::invalid_value(
        "source",
        format!(
            "`origin` or one of the stream's rungs: {}",
            names.join(", ")
        ),
    ))
}

pub async fn create(api: &Arc<Api>, body: Value) -> Result<Response<Body>, ApiError> {
    let spec = read(body, None)?;
    let stream_id = spec.stream_id;
    check_stream(api, &spec).await?;
    let max = api.restreams.max_per_stream();
    let row = api
        .db(move |s| s.create_restream(&spec, max, OffsetDateTime::now_utc()))
        .await?
        .ok_or_else(|| ApiError::conflict(format!("a stream has at most {max} restreams")))?;
    tracing::info!(restream = row.id, stream = stream_id, destination = %shown(&row.spec.uri), "restream created");
    api.restreams.reconcile_stream(stream_id).await;
    one(api, StatusCode::CREATED, row).await
}

pub async fn get(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    one(api, StatusCode::OK, load(api, id).await?).await
}

pub async fn update(api: &Arc<Api>, id: i64, body: Value) -> Result<Response<Body>, ApiError> {
    let current = load(api, id).await?;
    let spec = read(body, Some(&current.spec))?;
    check_stream(api, &spec).await?;
    let row = api
        .db(move |s| s.update_restream(id, &spec, OffsetDateTime::now_utc()))
        .await?
        .ok_or_else(|| ApiError::not_found("restream"))?;
    api.restreams.reconcile_stream(row.spec.stream_id).await;
    one(api, StatusCode::OK, row).await
}

pub async fn delete(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    let current = load(api, id).await?;
    if !api.db(move |s| s.delete_restream(id)).await? {
        return Err(ApiError::not_found("restream"));
    }
    tracing::info!(restream = id, "restream deleted");
    api.restreams.reconcile_stream(current.spec.stream_id).await;
    Ok(super::no_content())
}
