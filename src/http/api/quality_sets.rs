//! `/streaming/quality_sets`: the live ABR ladders and the choice of the default one, which is
//! persisted as a store setting.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use super::fields::Fields;
use super::{Api, ApiError};
use crate::http::listener::{json_response, Body};

use crate::quality::DEFAULT_QUALITY_SET_KEY;

impl Api {
    pub async fn default_quality_set_id(&self) -> Result<i64, ApiError> {
        let stored = self.db(|s| s.get_setting(DEFAULT_QUALITY_SET_KEY)).await?;
        Ok(self.quality_sets.default_id(stored.as_deref()))
    }
}

async fn listing(api: &Api) -> Result<Response<Body>, ApiError> {
    let default = api.default_quality_set_id().await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"live": api.quality_sets.listing(default), "vod": []}),
    ))
}

pub async fn list(api: &Arc<Api>) -> Result<Response<Body>, ApiError> {
    listing(api).await
}

pub async fn set_default(api: &Arc<Api>, body: Value) -> Result<Response<Body>, ApiError> {
    let mut outer = Fields::new(body, "body")?;
    let Some(live) = outer.take_value("live") else {
        return Err(ApiError::required(
            "live",
            ": the body is {\"live\": {\"id\": N}}",
        ));
    };
    outer.finish(&[])?;
    let mut live = Fields::new(live, "live")?;
    let id = live
        .int("id")
        .map_err(|_| ApiError::invalid_type("live.id", "an integer"))?
        .ok_or_else(|| ApiError::required("live.id", ""))?;
    live.finish(&[]).map_err(|e| {
        let field = format!("live.{}", e.field.unwrap_or_default());
        ApiError::unknown_field(&field)
    })?;
    if api.quality_sets.get(id).is_none() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_quality_set",
            format!("quality set {id} does not exist"),
        )
        .at("live.id"));
    }
    api.db(move |s| s.set_setting(DEFAULT_QUALITY_SET_KEY, &id.to_string()))
        .await?;
    tracing::info!(quality_set = id, "default quality set changed");
    listing(api).await
}
