//! The one JSON error shape of every JSON error we answer (the control API, WHIP, the relay;
//! media delivery answers plain text):
//! `{"error":{"code":"…","message":"…","field":"…"|null}}` with a stable `code`, and the
//! responses that carry it.

use hyper::header::{HeaderValue, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use serde_json::json;

use crate::db::StoreError;
use crate::http::listener::{json_response, Body};
use crate::url_policy::UrlPolicyError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable machine-readable code; clients branch on it, so never rename one.
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn at(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid credentials: send `Authorization: apikey <token>`",
        )
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "method not allowed on this resource",
        )
    }

    pub fn malformed_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_json", message)
    }

    pub fn invalid_type(field: &str, expected: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_type",
            format!("`{field}` must be {expected}"),
        )
        .at(field)
    }

    pub fn invalid_query(param: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_query", message).at(param)
    }

    pub fn unknown_field(field: &str) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_field",
            format!("unknown field `{field}`"),
        )
        .at(field)
    }

    pub fn required(field: &str, why: &str) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "required",
            format!("`{field}` is required{why}"),
        )
        .at(field)
    }

    pub fn invalid_value(field: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_value", message).at(field)
    }

    /// A URL in `field` the outbound-URL policy refuses; the message quotes what the client
    /// sent (its own input, credentials and all) so it can find the bad one in a list.
    pub fn url_policy(field: &str, uri: &str, e: &UrlPolicyError) -> Self {
        let message = match e {
            UrlPolicyError::NotUrl(e) => format!("`{uri}` is not a URL: {e}"),
            UrlPolicyError::Scheme { scheme, purpose } => format!(
                "`{uri}`: scheme `{scheme}` is not allowed (use one of {})",
                purpose.schemes().join(", ")
            ),
            UrlPolicyError::NoHost => format!("`{uri}` has no host"),
            other => format!("`{uri}`: {other}"),
        };
        Self::invalid_value(field, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the request was not applied",
        )
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code, "message": self.message, "field": self.field}})
    }

    /// The error as a JSON response, without a credentials challenge: WHIP and the relay's
    /// gateway errors answer with this (WHIP's `401` names its own scheme, `Bearer`).
    pub fn response(&self) -> Response<Body> {
        json_response(self.status, &self.body())
    }
}

/// The control API's answer to `e`: a `401` tells the client which scheme the API takes.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = e.response();
    if e.status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("apikey"));
    }
    resp
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        if let StoreError::UnknownReference { field, kind, id } = e {
            // The client's mistake, found inside the write's transaction.
            let code = match kind {
                "broadcast" => "unknown_broadcast",
                _ => "unknown_stream",
            };
            return ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code,
                format!("`{field}`: {kind} {id} does not exist"),
            )
            .at(field);
        }
        // The details go to the log, not to the client: they can name files and SQL.
        tracing::error!(error = %e, "store failure");
        ApiError::internal()
    }
}
