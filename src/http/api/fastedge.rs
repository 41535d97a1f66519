//! `/fastedge/v1/apps`: the FastEdge apps listing (filters, ordering, paging) and its
//! create/read/patch/delete, validated like the streams.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::fields::{char_len, Fields};
use super::format::iso8601;
use super::{query_int, query_pairs, update_with_retry, Api, ApiError};
use crate::db::{ApiType, AppFilter, AppOrderKey, AppRow, AppSettings, Update};
use crate::http::listener::{json_response, Body};

pub const DEFAULT_APPS_LIMIT: u32 = 25;
pub const MAX_APPS_LIMIT: u32 = 1000;
/// Status codes: 0 draft, 1 enabled, 2 disabled, 3 hourly limit, 4 daily limit, 5 suspended.
pub const MAX_APP_STATUS: u8 = 5;
pub const MAX_APP_NAME_CHARS: usize = 63;
pub const MAX_COMMENT_CHARS: usize = 1024;
pub const MAX_NETWORKS: usize = 32;
pub const MAX_SHORT_TEXT_CHARS: usize = 255;
pub const DEFAULT_PLAN_ID: i64 = 1;
pub const DEFAULT_PLAN: &str = "basic";

#[derive(Debug, Serialize)]
struct AppView {
    id: i64,
    name: String,
    url: String,
    status: u8,
    binary: Option<i64>,
    comment: String,
    api_type: ApiType,
    debug_until: Option<String>,
    template: Option<i64>,
    template_name: Option<String>,
    networks: Vec<String>,
    upgradeable_to: Option<i64>,
    plan_id: i64,
    plan: String,
}

impl Api {
    fn app_view(&self, row: AppRow) -> AppView {
        let s = row.settings;
        AppView {
            id: row.id,
            url: format!("https://{}.{}", s.name, self.fastedge_app_domain),
            name: s.name,
            status: s.status,
            binary: s.binary,
            comment: s.comment,
            api_type: s.api_type,
            debug_until: s.debug_until,
            template: s.template,
            template_name: s.template_name,
            networks: s.networks,
            upgradeable_to: s.upgradeable_to,
            plan_id: s.plan_id,
            plan: s.plan,
        }
    }
}

fn parse_api_type(v: &str) -> Option<ApiType> {
    match v {
        "wasi-http" => Some(ApiType::WasiHttp),
        "proxy-wasm" => Some(ApiType::ProxyWasm),
        _ => None,
    }
}

/// The app name becomes a DNS label in its URL, so it follows RFC 1123 label rules.
fn is_dns_label(name: &str) -> bool {
    (1..=MAX_APP_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn apply(mut f: Fields, s: &mut AppSettings) -> Result<(), ApiError> {
    if let Some(v) = f.string("name")? {
        s.name = v;
    }
    if let Some(v) = f.int("status")? {
        s.status = u8::try_from(v)
            .ok()
            .filter(|v| *v <= MAX_APP_STATUS)
            .ok_or_else(|| {
                ApiError::invalid_value("status", format!("`status` must be 0..={MAX_APP_STATUS}"))
            })?;
    }
    if let Some(v) = f.nullable_int("binary")? {
        s.binary = v;
    }
    if let Some(v) = f.string("comment")? {
        s.comment = v;
    }
    if let Some(v) = f.string("api_type")? {
        s.api_type = parse_api_type(&v).ok_or_else(|| {
            ApiError::invalid_value(
                "api_type",
                "`api_type` must be \"wasi-http\" or \"proxy-wasm\"",
            )
        })?;
    }
    if let Some(v) = f.nullable_string("debug_until")? {
        s.debug_until = v
            .map(|t| {
                OffsetDateTime::parse(&t, &Rfc3339)
                    .map(|t| iso8601(t.to_offset(time::UtcOffset::UTC)))
                    .map_err(|_| {
                        ApiError::invalid_value(
                            "debug_until",
                            "`debug_until` must be an RFC 3339 date-time",
                        )
                    })
            })
            .transpose()?;
    }
    if let Some(v) = f.nullable_int("template")? {
        s.template = v;
    }
    if let Some(v) = f.nullable_string("template_name")? {
        s.template_name = v;
    }
    if let Some(v) = f.string_array("networks")? {
        s.networks = v;
    }
    if let Some(v) = f.nullable_int("upgradeable_to")? {
        s.upgradeable_to = v;
    }
    if let Some(v) = f.int("plan_id")? {
        s.plan_id = v;
    }
    if let Some(v) = f.string("plan")? {
        s.plan = v;
    }
    f.finish(&["id", "url"])
}

fn validate(s: &AppSettings) -> Result<(), ApiError> {
    if !is_dns_label(&s.name) {
        return Err(ApiError::invalid_value(
            "name",
            format!(
                "`name` must be 1..={MAX_APP_NAME_CHARS} of a-z, 0-9 and '-', not starting or ending with '-'"
            ),
        ));
    }
    if s.binary.is_none() && s.template.is_none() {
        return Err(ApiError::required("binary", " unless `template` is given"));
    }
    for (field, v) in [
        ("binary", s.binary),
        ("template", s.template),
        ("upgradeable_to", s.upgradeable_to),
        ("plan_id", Some(s.plan_id)),
    ] {
        if v.is_some_and(|v| v < 1) {
            return Err(ApiError::invalid_value(
                field,
                format!("`{field}` must be positive"),
            ));
        }
    }
    if char_len(&s.comment) > MAX_COMMENT_CHARS {
        return Err(ApiError::invalid_value(
            "comment",
            format!("`comment` must be at most {MAX_COMMENT_CHARS} characters"),
        ));
    }
    if s.template_name
        .as_deref()
        .is_some_and(|t| char_len(t) > MAX_SHORT_TEXT_CHARS)
    {
        return Err(ApiError::invalid_value(
            "template_name",
            format!("`template_name` must be at most {MAX_SHORT_TEXT_CHARS} characters"),
        ));
    }
    if s.plan.is_empty() || char_len(&s.plan) > MAX_SHORT_TEXT_CHARS {
        return Err(ApiError::invalid_value(
            "plan",
            format!("`plan` must be 1..={MAX_SHORT_TEXT_CHARS} characters"),
        ));
    }
    if s.networks.len() > MAX_NETWORKS
        || s.networks
            .iter()
            .any(|n| n.is_empty() || char_len(n) > MAX_SHORT_TEXT_CHARS)
    {
        return Err(ApiError::invalid_value(
            "networks",
            format!("`networks` holds at most {MAX_NETWORKS} non-empty names"),
        ));
    }
    Ok(())
}

fn name_taken(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "name_taken",
        format!("an app named `{name}` already exists"),
    )
    .at("name")
}

pub(crate) fn parse_filter(query: Option<&str>) -> Result<AppFilter, ApiError> {
    let mut f = AppFilter {
        limit: DEFAULT_APPS_LIMIT,
        ..AppFilter::default()
    };
    for (k, v) in query_pairs(query)? {
        match k.as_str() {
            "name" => f.name = Some(v),
            "api_type" => {
                f.api_type = Some(parse_api_type(&v).ok_or_else(|| {
                    ApiError::invalid_query(
                        "api_type",
                        "`api_type` must be wasi-http or proxy-wasm",
                    )
                })?)
            }
            "status" => f.status = Some(query_int("status", &v, 0..=MAX_APP_STATUS)?),
            "template" => f.template = Some(query_int("template", &v, 1..=i64::MAX)?),
            "binary" => f.binary = Some(query_int("binary", &v, 1..=i64::MAX)?),
            "plan" => f.plan = Some(query_int("plan", &v, 1..=i64::MAX)?),
            "limit" => f.limit = query_int("limit", &v, 1..=MAX_APPS_LIMIT)?,
            "offset" => f.offset = query_int("offset", &v, 0..=i64::MAX as u64)?,
            "ordering" => {
                let (desc, key) = match v.strip_prefix('-') {
                    Some(rest) => (true, rest),
                    None => (false, v.as_str()),
                };
                let key = match key {
                    "name" => AppOrderKey::Name,
                    "status" => AppOrderKey::Status,
                    "id" => AppOrderKey::Id,
                    "template" => AppOrderKey::Template,
                    "binary" => AppOrderKey::Binary,
                    "plan" => AppOrderKey::Plan,
                    _ => {
                        return Err(ApiError::invalid_query(
                            "ordering",
                            "`ordering` must be one of name, status, id, template, binary, plan, optionally with a leading '-'",
                        ))
                    }
                };
                f.order = Some((key, desc));
            }
            // Unknown parameters (cache busters, tracing ids) are not ours to refuse.
            _ => {}
        }
    }
    Ok(f)
}

pub async fn list(api: &Arc<Api>, query: Option<&str>) -> Result<Response<Body>, ApiError> {
    let filter = parse_filter(query)?;
    let (rows, count) = api.db(move |s| s.list_apps(&filter)).await?;
    let apps: Vec<AppView> = rows.into_iter().map(|r| api.app_view(r)).collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({"apps": apps, "count": count}),
    ))
}

pub async fn create(api: &Arc<Api>, body: Value) -> Result<Response<Body>, ApiError> {
    let fields = Fields::new(body, "body")?;
    if !fields.contains("name") {
        return Err(ApiError::required("name", ""));
    }
    let mut settings = AppSettings {
        name: String::new(),
        status: 0,
        binary: None,
        comment: String::new(),
        api_type: ApiType::WasiHttp,
        debug_until: None,
        template: None,
        template_name: None,
        networks: Vec::new(),
        upgradeable_to: None,
        plan_id: DEFAULT_PLAN_ID,
        plan: DEFAULT_PLAN.to_owned(),
    };
    apply(fields, &mut settings)?;
    validate(&settings)?;
    let name = settings.name.clone();
    match api.db(move |s| s.create_app(&settings)).await? {
        Update::Done(row) => {
            tracing::info!(app = row.id, name = %row.settings.name, "fastedge app created");
            Ok(json_response(StatusCode::CREATED, &api.app_view(row)))
        }
        Update::NameTaken => Err(name_taken(&name)),
        Update::NotFound | Update::Stale => Err(ApiError::internal()),
    }
}

async fn load(api: &Api, id: i64) -> Result<AppRow, ApiError> {
    api.db(move |s| s.get_app(id))
        .await?
        .ok_or_else(|| ApiError::not_found("app"))
}

pub async fn get(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    Ok(json_response(
        StatusCode::OK,
        &api.app_view(load(api, id).await?),
    ))
}

pub async fn update(api: &Arc<Api>, id: i64, body: Value) -> Result<Response<Body>, ApiError> {
    Fields::new(body.clone(), "body")?;
    let row = update_with_retry(
        || load(api, id),
        |mut row| {
            apply(Fields::new(body.clone(), "body")?, &mut row.settings)?;
            validate(&row.settings)?;
            Ok(row)
        },
        |row| async move {
            let name = row.settings.name.clone();
            match api
                .db(move |s| s.update_app(id, row.revision, &row.settings))
                .await?
            {
                Update::Done(saved) => Ok(Some(saved)),
                Update::Stale => Ok(None),
                Update::NotFound => Err(ApiError::not_found("app")),
                Update::NameTaken => Err(name_taken(&name)),
            }
        },
    )
    .await?;
    tracing::info!(app = id, "fastedge app updated");
    Ok(json_response(StatusCode::OK, &api.app_view(row)))
}

pub async fn delete(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    if !api.db(move |s| s.delete_app(id)).await? {
        return Err(ApiError::not_found("app"));
    }
    tracing::info!(app = id, "fastedge app deleted");
    Ok(super::no_content())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for ok in ["a", "my-app", "a1-b2", &"x".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "My-App",
            "a_b",
            "a.b",
            &"x".repeat(64),
            "ünï",
        ] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn filter_parsing_names_the_bad_parameter() {
        for (q, param) in [
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("limit=abc", "limit"),
            ("offset=-1", "offset"),
            ("status=6", "status"),
            ("api_type=wasm", "api_type"),
            ("ordering=-foo", "ordering"),
            ("ordering=--name", "ordering"),
            ("template=x", "template"),
            ("binary=0", "binary"),
            ("plan=1.5", "plan"),
        ] {
            let e = parse_filter(Some(q)).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(param), "{q}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
        let f = parse_filter(Some("ordering=-plan&limit=1000&name=X&cb=1")).unwrap();
        assert_eq!(f.order, Some((AppOrderKey::Plan, true)));
        assert_eq!(f.limit, 1000);
    }
}
