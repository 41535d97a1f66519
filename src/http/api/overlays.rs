//! `/streaming/streams/{id}/overlays[/{overlay_id}]`: a stream's HTML overlays. POST takes an
//! array and creates them all or none; PATCH on the collection takes an array of `{id, …}` and
//! updates them all or none; a box is in the 1920×1080 overlay space (`crate::overlay`).

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::Value;

use super::fields::{outbound_url, Fields};
use super::format::iso8601;
use super::ApiError;
use super::{json_response, Api, Body};
use crate::db::OverlayRow;
use crate::overlay::{OverlaySpec, MAX_PER_STREAM, MAX_URL};
use crate::url_policy::Purpose;

/// Overlays one request may create or update (the per-stream maximum bounds it anyway).
const MAX_BATCH: usize = MAX_PER_STREAM;

#[derive(Debug, Serialize)]
pub struct OverlayView {
    id: i64,
    stream_id: i64,
    url: String,
    width: u32,
    height: u32,
    x: u32,
    y: u32,
    stretch: bool,
    created_at: String,
    updated_at: String,
}

pub fn view(r: &OverlayRow) -> OverlayView {
    OverlayView {
        id: r.id,
        stream_id: r.stream_id,
        url: r.spec.url.clone(),
        width: r.spec.width,
        height: r.spec.height,
        x: r.spec.x,
        y: r.spec.y,
        stretch: r.spec.stretch,
        created_at: iso8601(r.created_at),
        updated_at: iso8601(r.updated_at),
    }
}

fn views(rows: &[OverlayRow]) -> Vec<OverlayView> {
    rows.iter().map(view).collect()
}

/// The stream must exist (404 otherwise).
async fn stream_exists(api: &Arc<Api>, id: i64) -> Result<(), ApiError> {
    api.db(move |s| s.get_stream(id))
        .await?
        .map(|_| ())
        .ok_or_else(|| ApiError::not_found("stream"))
}

async fn load(api: &Arc<Api>, stream: i64, id: i64) -> Result<OverlayRow, ApiError> {
    api.db(move |s| s.list_overlays(stream))
        .await?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| ApiError::not_found("overlay"))
}

/// Reads an overlay's fields over `base` (all required when there is none), then checks it:
/// the URL by the outbound-URL policy, the box by the overlay rules; `stretch: true` takes
/// no box.
fn read(mut f: Fields, base: Option<&OverlaySpec>) -> Result<OverlaySpec, ApiError> {
    let url = f.string("url")?;
    let width = f.int("width")?;
    let height = f.int("height")?;
    let x = f.int("x")?;
    let y = f.int("y")?;
    let stretch = f.bool("stretch")?;
    f.finish(&["id", "stream_id", "created_at", "updated_at"])?;
    let stretch = stretch.or(base.map(|b| b.stretch)).unwrap_or(false);
    if stretch {
        for (name, given) in [("width", width), ("height", height), ("x", x), ("y", y)] {
            if given.is_some() {
                return Err(ApiError::invalid_value(
                    name,
                    format!("`{name}` does not apply to a full-frame overlay (`stretch: true`)"),
                ));
            }
        }
    }
    let number = |name: &'static str, v: Option<i64>, was: Option<u32>| -> Result<u32, ApiError> {
        match v {
            Some(v) => u32::try_from(v)
                .map_err(|_| ApiError::invalid_value(name, format!("`{name}` must be 0 or more"))),
            None => match was {
                Some(w) => Ok(w),
                None if stretch => Ok(0),
                None => Err(ApiError::required(name, "")),
            },
        }
    };
    let current = base.map(|b| b.url.as_str());
    let url = outbound_url("url", url, current, MAX_URL, Purpose::WebPage)?;
    let keep = |was: Option<u32>| if stretch { None } else { was };
    let spec = OverlaySpec {
        url,
        width: number("width", width, keep(base.map(|b| b.width)))?,
        height: number("height", height, keep(base.map(|b| b.height)))?,
        x: number("x", x, keep(base.map(|b| b.x)))?,
        y: number("y", y, keep(base.map(|b| b.y)))?,
        stretch,
    };
    let spec = if stretch {
        OverlaySpec {
            width: 0,
            height: 0,
            x: 0,
            y: 0,
            ..spec
        }
    } else {
        spec
    };
    spec.check_box()
        .map_err(|e| ApiError::invalid_value(e.field, e.message))?;
    Ok(spec)
}

/// The body as a JSON array of objects, bounded.
fn array(body: Value) -> Result<Vec<Value>, ApiError> {
    let Value::Array(items) = body else {
        return Err(ApiError::invalid_type("body", "a JSON array of overlays"));
    };
    if items.is_empty() {
        return Err(ApiError::invalid_value("body", "the array is empty"));
    }
    if items.len() > MAX_BATCH {
        return Err(ApiError::invalid_value(
            "body",
            format!("at most {MAX_BATCH} overlays per request"),
        ));
    }
    Ok(items)
}

/// Applies a change to what is rendered (in the background: starting a page takes a moment).
pub fn changed(api: &Arc<Api>, stream: i64) {
    if let Some(hub) = &api.overlays {
        hub.change(stream);
    }
}

pub async fn list(api: &Arc<Api>, stream: i64) -> Result<Response<Body>, ApiError> {
    stream_exists(api, stream).await?;
    let rows = api.db(move |s| s.list_overlays(stream)).await?;
    Ok(json_response(StatusCode::OK, &views(&rows)))
}

pub async fn create(api: &Arc<Api>, stream: i64, body: Value) -> Result<Response<Body>, ApiError> {
    stream_exists(api, stream).await?;
    let specs = array(body)?
        .into_iter()
        .map(|item| read(Fields::new(item, "overlay")?, None))
        .collect::<Result<Vec<_>, _>>()?;
    let now = time::OffsetDateTime::now_utc();
    let created = api
        .db(move |s| s.create_overlays(stream, &specs, MAX_PER_STREAM, now))
        .await?
        .ok_or_else(|| {
            ApiError::invalid_value(
                "body",
                format!("a stream has at most {MAX_PER_STREAM} overlays"),
            )
        })?;
    tracing::info!(stream, count = created.len(), "overlays created");
    changed(api, stream);
    Ok(json_response(StatusCode::CREATED, &views(&created)))
}

/// PATCH on the collection: `[{id, …}, …]`, each merged over its current fields.
pub async fn update_many(
    api: &Arc<Api>,
    stream: i64,
    body: Value,
) -> Result<Response<Body>, ApiError> {
    stream_exists(api, stream).await?;
    let items = array(body)?;
    let current = api.db(move |s| s.list_overlays(stream)).await?;
    let mut updates = Vec::with_capacity(items.len());
    for item in items {
        let mut f = Fields::new(item, "overlay")?;
        let id = f
            .int("id")?
            .ok_or_else(|| ApiError::required("id", ": each item names the overlay it updates"))?;
        // The collection exists; an id in the body that names none of its overlays is a
        // bad body (422), not a missing resource.
        let row = current
            .iter()
            .find(|r| r.id == id)
            .ok_or_else(|| unknown_overlay(stream, id))?;
        updates.push((id, read(f, Some(&row.spec))?));
    }
    let first = updates.first().map_or(0, |(id, _)| *id);
    let saved = save(api, stream, updates, || unknown_overlay(stream, first)).await?;
    Ok(json_response(StatusCode::OK, &views(&saved)))
}

pub async fn get(api: &Arc<Api>, stream: i64, id: i64) -> Result<Response<Body>, ApiError> {
    Ok(json_response(
        StatusCode::OK,
        &view(&load(api, stream, id).await?),
    ))
}

pub async fn update(
    api: &Arc<Api>,
    stream: i64,
    id: i64,
    body: Value,
) -> Result<Response<Body>, ApiError> {
    let row = load(api, stream, id).await?;
    let spec = read(Fields::new(body, "overlay")?, Some(&row.spec))?;
    let saved = save(api, stream, vec![(id, spec)], || {
        ApiError::not_found("overlay")
    })
    .await?;
    let row = saved
        .first()
        .ok_or_else(|| ApiError::not_found("overlay"))?;
    Ok(json_response(StatusCode::OK, &view(row)))
}

fn unknown_overlay(stream: i64, id: i64) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "unknown_overlay",
        format!("{id} is not an overlay of stream {stream}"),
    )
    .at("id")
}

/// Stores updated specs, all or none (`missing` when an overlay went away meanwhile).
async fn save(
    api: &Arc<Api>,
    stream: i64,
    updates: Vec<(i64, OverlaySpec)>,
    missing: impl FnOnce() -> ApiError,
) -> Result<Vec<OverlayRow>, ApiError> {
    let now = time::OffsetDateTime::now_utc();
    let saved = api
        .db(move |s| s.update_overlays(stream, &updates, now))
        .await?
        .ok_or_else(missing)?;
    tracing::info!(stream, count = saved.len(), "overlays updated");
    changed(api, stream);
    Ok(saved)
}

pub async fn delete(api: &Arc<Api>, stream: i64, id: i64) -> Result<Response<Body>, ApiError> {
    if !api.db(move |s| s.delete_overlay(stream, id)).await? {
        return Err(ApiError::not_found("overlay"));
    }
    tracing::info!(stream, overlay = id, "overlay deleted");
    changed(api, stream);
    Ok(super::no_content())
}
