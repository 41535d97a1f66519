//! `/streaming/broadcasts`: create, read, list, patch and delete broadcasts (`{"broadcast":
//! {...}}` bodies), validation of their fields, and `…/{id}/spectators` (the player pages open
//! on one, counted by `crate::broadcast`). Which streams belong to a broadcast is stored once
//! (`db`): a broadcast's `stream_ids` and its streams' `broadcast_ids` are the same links.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::{json, Value};
use time::OffsetDateTime;

use super::fields::{char_len, Fields, Nullable};
use super::format::iso8601;
use super::{query_int, query_pairs, update_with_retry, Api, ApiError};
use crate::db::{BroadcastRow, BroadcastSettings, BroadcastStatus, Update};
use crate::http::listener::{json_response, Body};
use crate::url_policy::{self, Purpose};

/// Broadcasts per page unless `per_page` says otherwise, and its bound (as for videos).
const DEFAULT_PER_PAGE: u32 = 25;
const MAX_PER_PAGE: u32 = 100;
pub const MAX_NAME_CHARS: usize = 255;
/// The text shown on the player page before the start.
pub const MAX_MESSAGE_CHARS: usize = 4096;
/// `poster`, `share_url`, `custom_iframe_url`: browsers and CDNs cope with URLs this long.
pub const MAX_URL_CHARS: usize = 2048;
/// Streams in one broadcast (the same bound as a stream's `broadcast_ids`).
pub const MAX_STREAM_IDS: usize = super::streams::MAX_BROADCAST_IDS;

/// Fields the server computes: accepted in a body (a client may send back what it read) and
/// ignored.
const READ_ONLY: &[&str] = &["id", "created_at", "updated_at", "iframe_url"];

#[derive(Debug, Serialize)]
pub struct BroadcastView {
    id: i64,
    #[serde(flatten)]
    settings: BroadcastSettings,
    created_at: String,
    updated_at: String,
    /// The daemon's own player page for the broadcast (`custom_iframe_url` is the client's).
    iframe_url: String,
}

pub fn view(api: &Api, row: BroadcastRow) -> BroadcastView {
    BroadcastView {
        id: row.id,
        created_at: iso8601(row.created_at),
        updated_at: iso8601(row.updated_at),
        iframe_url: format!("{}/player/broadcasts/{}", api.endpoints.public_url, row.id),
        settings: row.settings,
    }
}

/// The `{"broadcast": {...}}` envelope's inside.
fn envelope(body: Value) -> Result<Fields, ApiError> {
    let mut outer = Fields::new(body, "body")?;
    let Some(inner) = outer.take_value("broadcast") else {
        return Err(ApiError::required(
            "broadcast",
            ": the body is {\"broadcast\": {...}}",
        ));
    };
    outer.finish(&[])?;
    Fields::new(inner, "broadcast")
}

/// Applies the writable fields present in `f` onto `s`, checking each.
fn apply(mut f: Fields, s: &mut BroadcastSettings) -> Result<(), ApiError> {
    if let Some(name) = f.string("name")? {
        if char_len(name.trim()) == 0 {
            return Err(ApiError::required("name", " and must not be blank"));
        }
        if char_len(&name) > MAX_NAME_CHARS {
            return Err(ApiError::invalid_value(
                "name",
                format!("`name` must be at most {MAX_NAME_CHARS} characters"),
            ));
        }
        s.name = name;
    }
    if let Some(v) = f.string("status")? {
        s.status = match v.as_str() {
            "pending" => BroadcastStatus::Pending,
            "live" => BroadcastStatus::Live,
            "paused" => BroadcastStatus::Paused,
            "finished" => BroadcastStatus::Finished,
            _ => {
                return Err(ApiError::invalid_value(
                    "status",
                    "`status` must be one of pending, live, paused, finished",
                ))
            }
        };
    }
    if let Some(ids) = f.int_array("stream_ids")? {
        if ids.len() > MAX_STREAM_IDS || ids.iter().any(|&i| i < 1) {
            return Err(ApiError::invalid_value(
                "stream_ids",
                format!("`stream_ids` must hold at most {MAX_STREAM_IDS} positive integers"),
            ));
        }
        // Whether they exist is checked by the store, in the write's transaction.
        s.stream_ids = ids;
    }
    if let Some(v) = f.bool("show_dvr_after_finish")? {
        s.show_dvr_after_finish = v;
    }
    if let Some(v) = f.nullable_string("pending_message")? {
        if v.as_deref()
            .is_some_and(|m| char_len(m) > MAX_MESSAGE_CHARS)
        {
            return Err(ApiError::invalid_value(
                "pending_message",
                format!("`pending_message` must be at most {MAX_MESSAGE_CHARS} characters"),
            ));
        }
        s.pending_message = v;
    }
    s.poster = url_field(&mut f, "poster", s.poster.take())?;
    s.share_url = url_field(&mut f, "share_url", s.share_url.take())?;
    s.custom_iframe_url = url_field(&mut f, "custom_iframe_url", s.custom_iframe_url.take())?;
    f.finish(READ_ONLY)
}

/// A nullable http(s) URL with a host, kept as the client wrote it. The daemon never fetches
/// these (viewers' browsers do), so only the scheme and host rules apply, not the DNS guard.
fn url_field(f: &mut Fields, name: &str, was: Option<String>) -> Result<Option<String>, ApiError> {
    let value: Nullable<String> = f.nullable_string(name)?;
    let Some(value) = value else {
        return Ok(was);
    };
    if let Some(url) = &value {
        if char_len(url) > MAX_URL_CHARS {
            return Err(ApiError::invalid_value(
                name,
                format!("`{name}` must be at most {MAX_URL_CHARS} characters"),
            ));
        }
        url_policy::parse(url, Purpose::WebPage)
            .map_err(|e| ApiError::url_policy(name, url, &e))?;
    }
    Ok(value)
}

async fn load(api: &Api, id: i64) -> Result<BroadcastRow, ApiError> {
    api.db(move |s| s.get_broadcast(id))
        .await?
        .ok_or_else(|| ApiError::not_found("broadcast"))
}

pub async fn create(api: &Arc<Api>, body: Value) -> Result<Response<Body>, ApiError> {
    let fields = envelope(body)?;
    if !fields.contains("name") {
        return Err(ApiError::required("name", ""));
    }
    let mut settings = BroadcastSettings::default();
    apply(fields, &mut settings)?;
    let now = OffsetDateTime::now_utc();
    let row = api.db(move |s| s.create_broadcast(&settings, now)).await?;
    tracing::info!(broadcast = row.id, name = %row.settings.name, "broadcast created");
    Ok(json_response(StatusCode::CREATED, &view(api, row)))
}

pub async fn get(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    Ok(json_response(
        StatusCode::OK,
        &view(api, load(api, id).await?),
    ))
}

pub async fn list(api: &Arc<Api>, query: Option<&str>) -> Result<Response<Body>, ApiError> {
    let (mut page, mut per_page) = (1u64, DEFAULT_PER_PAGE);
    for (k, v) in query_pairs(query)? {
        match k.as_str() {
            "page" => page = query_int("page", &v, 1..=1_000_000_000)?,
            "per_page" => per_page = query_int("per_page", &v, 1..=MAX_PER_PAGE)?,
            _ => {}
        }
    }
    let offset = (page - 1) * u64::from(per_page);
    let (rows, total) = api.db(move |s| s.list_broadcasts(offset, per_page)).await?;
    let views: Vec<BroadcastView> = rows.into_iter().map(|r| view(api, r)).collect();
    let mut resp = json_response(StatusCode::OK, &views);
    resp.headers_mut()
        .insert("x-total-count", hyper::header::HeaderValue::from(total));
    Ok(resp)
}

pub async fn update(api: &Arc<Api>, id: i64, body: Value) -> Result<Response<Body>, ApiError> {
    // Shape errors before the record is looked up, as for streams.
    let patch = {
        let mut outer = Fields::new(body, "body")?;
        let inner = outer.take_value("broadcast").ok_or_else(|| {
            ApiError::required("broadcast", ": the body is {\"broadcast\": {...}}")
        })?;
        outer.finish(&[])?;
        Fields::new(inner.clone(), "broadcast")?;
        inner
    };
    let row = update_with_retry(
        || load(api, id),
        |mut row| {
            apply(Fields::new(patch.clone(), "broadcast")?, &mut row.settings)?;
            Ok(row)
        },
        |row| async move {
            let now = OffsetDateTime::now_utc();
            match api
                .db(move |s| s.update_broadcast(id, row.revision, &row.settings, now))
                .await?
            {
                Update::Done(saved) => Ok(Some(saved)),
                Update::Stale => Ok(None),
                Update::NotFound | Update::NameTaken => Err(ApiError::not_found("broadcast")),
            }
        },
    )
    .await?;
    tracing::info!(broadcast = id, status = ?row.settings.status, "broadcast updated");
    Ok(json_response(StatusCode::OK, &view(api, row)))
}

pub async fn delete(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    if !api.db(move |s| s.delete_broadcast(id)).await? {
        return Err(ApiError::not_found("broadcast"));
    }
    api.spectators.forget(id);
    tracing::info!(broadcast = id, "broadcast deleted");
    Ok(super::no_content())
}

/// `GET …/{id}/spectators`: the player pages that polled within `crate::broadcast::WINDOW`.
pub async fn spectators(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    load(api, id).await?;
    let n = api.spectators.count(id, std::time::Instant::now());
    Ok(json_response(
        StatusCode::OK,
        &json!({ "spectators_count": n }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(body: Value) -> Result<BroadcastSettings, ApiError> {
        let mut s = BroadcastSettings::default();
        apply(envelope(body)?, &mut s)?;
        Ok(s)
    }

    #[test]
    fn field_rules_name_the_field() {
        let ok = applied(json!({"broadcast": {"name": "x", "status": "live",
            "poster": "https://cdn.example/p.jpg", "share_url": null}}))
        .unwrap();
        assert_eq!(ok.status, BroadcastStatus::Live);
        assert_eq!(ok.poster.as_deref(), Some("https://cdn.example/p.jpg"));
        for (body, field, code) in [
            (json!({"name": "x"}), "broadcast", "required"),
            (json!({"broadcast": {"name": " "}}), "name", "required"),
            (
                json!({"broadcast": {"status": "over"}}),
                "status",
                "invalid_value",
            ),
            (
                json!({"broadcast": {"stream_ids": [0]}}),
                "stream_ids",
                "invalid_value",
            ),
            (
                json!({"broadcast": {"stream_ids": "1"}}),
                "stream_ids",
                "invalid_type",
            ),
            (
                json!({"broadcast": {"poster": "javascript:alert(1)"}}),
                "poster",
                "invalid_value",
            ),
            (
                json!({"broadcast": {"share_url": "http:///x"}}),
                "share_url",
                "invalid_value",
            ),
            (
                json!({"broadcast": {"custom_iframe_url": format!("https://a/{}", "x".repeat(MAX_URL_CHARS))}}),
                "custom_iframe_url",
                "invalid_value",
            ),
            (
                json!({"broadcast": {"pending_message": "m".repeat(MAX_MESSAGE_CHARS + 1)}}),
                "pending_message",
                "invalid_value",
            ),
            (json!({"broadcast": {"nmae": "x"}}), "nmae", "unknown_field"),
            (
                json!({"broadcast": {}, "extra": 1}),
                "extra",
                "unknown_field",
            ),
        ] {
            let e = applied(body.clone()).unwrap_err();
            assert_eq!((e.code, e.field.as_deref()), (code, Some(field)), "{body}");
        }
    }
}
