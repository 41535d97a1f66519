//! `/streaming/webhooks[/{id}[/rotate_secret|/deliveries]]`: the endpoints events are POSTed
//! to. The signing secret is shown once, in the answer that creates or rotates it.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use rand::RngCore;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::fields::{outbound_url, Fields};
use super::format::iso8601;
use super::{json_response, query_int, query_pairs, Api, ApiError, Body};
use crate::db::{DeliveryRow, DeliveryStatus, WebhookRow, WebhookSpec};
use crate::events::Event;
use crate::url_policy::Purpose;

/// Longest `url` accepted.
pub const MAX_URL: usize = 2048;
/// Webhooks one daemon keeps: each event is written once per webhook that wants it.
pub const MAX_WEBHOOKS: u64 = 100;
const DEFAULT_PER_PAGE: u32 = 25;
const MAX_PER_PAGE: u32 = 100;

#[derive(Debug, Serialize)]
struct WebhookView {
    id: i64,
    url: String,
    /// `null`: every event type.
    events: Option<Vec<String>>,
    active: bool,
    created_at: String,
    updated_at: String,
    /// Only in the answers that create or rotate it.
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

fn view(r: &WebhookRow, with_secret: bool) -> WebhookView {
    WebhookView {
        id: r.id,
        url: r.spec.url.clone(),
        events: r.spec.events.clone(),
        active: r.spec.active,
        created_at: iso8601(r.created_at),
        updated_at: iso8601(r.updated_at),
        secret: with_secret.then(|| r.secret.clone()),
    }
}

#[derive(Debug, Serialize)]
struct DeliveryView {
    id: i64,
    event_id: i64,
    event_type: String,
    stream_id: i64,
    status: &'static str,
    attempts: u32,
    last_status: Option<u16>,
    last_error: Option<String>,
    next_attempt_at: Option<String>,
    created_at: String,
    finished_at: Option<String>,
}

fn delivery_view(d: &DeliveryRow) -> DeliveryView {
    DeliveryView {
        id: d.id,
        event_id: d.event_id,
        event_type: d.event_type.clone(),
        stream_id: d.stream_id,
        status: d.status.as_str(),
        attempts: d.attempts,
        last_status: d.last_status,
        last_error: d.last_error.clone(),
        next_attempt_at: d.next_attempt_at.map(iso8601),
        created_at: iso8601(d.created_at),
        finished_at: d.finished_at.map(iso8601),
    }
}

/// `whsec_` and 256 random bits, hex.
fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("whsec_{hex}")
}

/// Reads the owner's fields over `base` (`url` required when there is none).
fn read(body: Value, base: Option<&WebhookSpec>) -> Result<WebhookSpec, ApiError> {
    let mut f = Fields::new(body, "body")?;
    let url = f.string("url")?;
    let events = if f.contains("events") {
        match f.take_value("events") {
            Some(Value::Null) => Some(None),
            Some(Value::Array(items)) => Some(Some(event_types(items)?)),
            _ => {
                return Err(ApiError::invalid_type(
                    "events",
                    "an array of strings or null",
                ))
            }
        }
    } else {
        None
    };
    let active = f.bool("active")?;
    f.finish(&["id", "created_at", "updated_at", "secret"])?;
    let current = base.map(|b| b.url.as_str());
    let url = outbound_url("url", url, current, MAX_URL, Purpose::Webhook)?;
    Ok(WebhookSpec {
        url,
        events: events.unwrap_or_else(|| base.and_then(|b| b.events.clone())),
        active: active.or(base.map(|b| b.active)).unwrap_or(true),
    })
}

/// A non-empty list of known event types, each once, in the order given.
fn event_types(items: Vec<Value>) -> Result<Vec<String>, ApiError> {
    if items.is_empty() {
        return Err(ApiError::invalid_value(
            "events",
            "`events` lists at least one type (null: all of them)",
        ));
    }
    let mut types: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Value::String(kind) = item else {
            return Err(ApiError::invalid_type(
                "events",
                "an array of strings or null",
            ));
        };
        if !Event::TYPES.contains(&kind.as_str()) {
            return Err(ApiError::invalid_value(
                "events",
                format!(
                    "unknown event type {kind:?} (known: {})",
                    Event::TYPES.join(", ")
                ),
            ));
        }
        if !types.contains(&kind) {
            types.push(kind);
        }
    }
    Ok(types)
}

async fn load(api: &Arc<Api>, id: i64) -> Result<WebhookRow, ApiError> {
    api.db(move |s| s.get_webhook(id))
        .await?
        .ok_or_else(|| ApiError::not_found("webhook"))
}

/// A list's page as (offset, limit), and the query's other pairs.
struct Paging {
    offset: u64,
    limit: u32,
    rest: Vec<(String, String)>,
}

fn paging(query: Option<&str>) -> Result<Paging, ApiError> {
    let (mut page, mut per_page) = (1u64, DEFAULT_PER_PAGE);
    let mut rest = Vec::new();
    for (k, v) in query_pairs(query)? {
        match k.as_str() {
            "page" => page = query_int("page", &v, 1..=1_000_000_000)?,
            "per_page" => per_page = query_int("per_page", &v, 1..=MAX_PER_PAGE)?,
            _ => rest.push((k, v)),
        }
    }
    Ok(Paging {
        offset: (page - 1) * u64::from(per_page),
        limit: per_page,
        rest,
    })
}

fn with_total(mut resp: Response<Body>, total: u64) -> Response<Body> {
    resp.headers_mut()
        .insert("x-total-count", hyper::header::HeaderValue::from(total));
    resp
}

pub async fn list(api: &Arc<Api>, query: Option<&str>) -> Result<Response<Body>, ApiError> {
    let Paging { offset, limit, .. } = paging(query)?;
    let (rows, total) = api.db(move |s| s.list_webhooks(offset, limit)).await?;
    let views: Vec<_> = rows.iter().map(|r| view(r, false)).collect();
    Ok(with_total(json_response(StatusCode::OK, &views), total))
}

pub async fn create(api: &Arc<Api>, body: Value) -> Result<Response<Body>, ApiError> {
    let spec = read(body, None)?;
    let (_, total) = api.db(|s| s.list_webhooks(0, 1)).await?;
    if total >= MAX_WEBHOOKS {
        return Err(ApiError::conflict(format!(
            "at most {MAX_WEBHOOKS} webhooks; delete one first"
        )));
    }
    let secret = new_secret();
    let row = api
        .db(move |s| s.create_webhook(&spec, &secret, OffsetDateTime::now_utc()))
        .await?;
    tracing::info!(webhook = row.id, "webhook created");
    Ok(json_response(StatusCode::CREATED, &view(&row, true)))
}

pub async fn get(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    Ok(json_response(
        StatusCode::OK,
        &view(&load(api, id).await?, false),
    ))
}

pub async fn update(api: &Arc<Api>, id: i64, body: Value) -> Result<Response<Body>, ApiError> {
    let current = load(api, id).await?;
    let spec = read(body, Some(&current.spec))?;
    let row = api
        .db(move |s| s.update_webhook(id, &spec, OffsetDateTime::now_utc()))
        .await?
        .ok_or_else(|| ApiError::not_found("webhook"))?;
    Ok(json_response(StatusCode::OK, &view(&row, false)))
}

pub async fn delete(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    if !api.db(move |s| s.delete_webhook(id)).await? {
        return Err(ApiError::not_found("webhook"));
    }
    tracing::info!(webhook = id, "webhook deleted");
    Ok(super::no_content())
}

/// A new secret; the old one signs nothing from now on.
pub async fn rotate_secret(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    let secret = new_secret();
    let row = api
        .db(move |s| s.set_webhook_secret(id, &secret, OffsetDateTime::now_utc()))
        .await?
        .ok_or_else(|| ApiError::not_found("webhook"))?;
    tracing::info!(webhook = id, "webhook secret rotated");
    Ok(json_response(StatusCode::OK, &view(&row, true)))
}

/// Newest first; `?status=pending|delivered|failed`.
pub async fn deliveries(
    api: &Arc<Api>,
    id: i64,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let Paging {
        offset,
        limit,
        rest,
    } = paging(query)?;
    let mut status = None;
    for (k, v) in rest {
        if k == "status" {
            status = Some(match v.as_str() {
                "pending" => DeliveryStatus::Pending,
                "delivered" => DeliveryStatus::Delivered,
                "failed" => DeliveryStatus::Failed,
                _ => {
                    return Err(ApiError::invalid_query(
                        "status",
                        "`status` must be pending, delivered or failed",
                    ))
                }
            });
        }
    }
    load(api, id).await?;
    let (rows, total) = api
        .db(move |s| s.list_deliveries(id, status, offset, limit))
        .await?;
    let views: Vec<_> = rows.iter().map(delivery_view).collect();
    Ok(with_total(json_response(StatusCode::OK, &views), total))
}
