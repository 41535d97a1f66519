//! `PUT /streaming/streams/{id}/…` calls that act on a live stream rather than on its record:
//! empty the DVR window, kick the publisher, start and stop recording.

use std::sync::Arc;

use hyper::{Response, StatusCode};

use super::fields::Fields;
use super::{Api, ApiError};
use crate::http::listener::{json_response, Body};
use crate::live::Slot;

/// `PUT /streaming/streams/{id}/dvr_cleanup`: empties the rewind window of a live stream.
pub async fn dvr_cleanup(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    super::streams::load(api, id).await?;
    // File deletions: off the async workers.
    let registry = api.registry.clone();
    tokio::task::spawn_blocking(move || registry.dvr_cleanup(id))
        .await
        .map_err(|_| ApiError::internal())?;
    Ok(super::no_content())
}

/// `PUT …/kick`: cuts the stream's publisher(s) at once — the one on `slot` (`main` or
/// `backup`) or every one — as if it had left: 204. The stream stays active, so a reconnect is
/// accepted (set `active: false` as well to keep it out). 409 `not_live` when nobody publishes
/// there.
pub async fn kick(
    api: &Arc<Api>,
    id: i64,
    body: Option<serde_json::Value>,
) -> Result<Response<Body>, ApiError> {
    let slot = match body {
        None => None,
        Some(body) => {
            let mut fields = Fields::new(body, "kick")?;
            let slot = fields.string("slot")?;
            fields.finish(&[])?;
            match slot.as_deref() {
                None => None,
                Some("main") => Some(Slot::Main),
                Some("backup") => Some(Slot::Backup),
                Some(_) => {
                    return Err(ApiError::invalid_value(
                        "slot",
                        "`slot` is `main` or `backup`",
                    ))
                }
            }
        }
    };
    super::streams::load(api, id).await?;
    if api.registry.cut_publishers(id, slot).is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_live",
            match slot {
                Some(Slot::Main) => "nobody publishes to the stream's main input",
                Some(Slot::Backup) => "nobody publishes to the stream's backup input",
                None => "nobody publishes to the stream",
            },
        ));
    }
    Ok(super::no_content())
}

/// `PUT …/start_recording`: 204 once the recording is opened; 409 `not_live` when the stream
/// is not receiving; 422 `no_space` over `recordings_max_bytes` or the free-space floor.
pub async fn start_recording(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    super::streams::load(api, id).await?;
    match api.recordings.start(id).await {
        Ok(()) => Ok(super::no_content()),
        Err(crate::record::manager::RecordError::NotLive(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_live",
            "the stream is not live; a recording starts on a live stream",
        )),
        Err(crate::record::manager::RecordError::NoSpace(e)) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "no_space",
            format!("no space for a recording: {e}"),
        )),
        Err(e) => {
            tracing::error!(stream = id, error = %e, "start_recording failed");
            Err(ApiError::internal())
        }
    }
}

/// `PUT …/stop_recording`: 200 with the finalised video, or 204 when nothing was recording.
pub async fn stop_recording(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    super::streams::load(api, id).await?;
    match api.recordings.stop(id).await {
        Ok(Some(video)) => Ok(json_response(
            StatusCode::OK,
            &super::videos::view_one(api, video).await?,
        )),
        Ok(None) => Ok(super::no_content()),
        Err(e) => {
            tracing::error!(stream = id, error = %e, "stop_recording failed");
            Err(ApiError::internal())
        }
    }
}
