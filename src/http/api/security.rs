//! `/security/iaas/profile-templates`: DDoS-protection profile templates, seeded from the shipped
//! data file on first start and from an operator's file on every start.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use hyper::{Response, StatusCode};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::{Api, ApiError};
use crate::db::{ProfileTemplate, Store, StoreError};
use crate::http::listener::{json_response, Body};

pub const BUILTIN_PROFILE_TEMPLATES: &str = include_str!("profile_templates.json");
const SEEDED_KEY: &str = "profile_templates_seeded";
pub const MAX_TEMPLATE_NAME_CHARS: usize = 100;
const FIELD_TYPES: &[&str] = &["int", "bool", "str", "float", "ip", "port"];

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot read profile templates file {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("profile templates: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("profile template {id}: {reason}")]
    Invalid { id: i64, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Parses and checks a templates file: the rules the API documents hold for every entry.
pub fn parse_templates(text: &str) -> Result<Vec<ProfileTemplate>, TemplateError> {
    let templates: Vec<ProfileTemplate> = serde_json::from_str(text)?;
    let ids: HashSet<i64> = templates.iter().map(|t| t.id).collect();
    if ids.len() != templates.len() {
        return Err(TemplateError::Invalid {
            id: 0,
            reason: "duplicate template ids".into(),
        });
    }
    for t in &templates {
        let invalid = |reason: String| TemplateError::Invalid { id: t.id, reason };
        if t.id < 1 {
            return Err(invalid("id must be positive".into()));
        }
        if t.name.is_empty() || t.name.chars().count() > MAX_TEMPLATE_NAME_CHARS {
            return Err(invalid(format!(
                "name must be 1..={MAX_TEMPLATE_NAME_CHARS} characters"
            )));
        }
        if !is_uuid(&t.version) {
            return Err(invalid(format!("version {:?} is not a UUID", t.version)));
        }
        if OffsetDateTime::parse(&t.created, &Rfc3339).is_err() {
            return Err(invalid(format!("created {:?} is not RFC 3339", t.created)));
        }
        if let Some(base) = t.base_template {
            if base == t.id {
                return Err(invalid("base_template names itself".into()));
            }
        }
        for f in &t.fields {
            if !FIELD_TYPES.contains(&f.field_type.as_str()) {
                return Err(invalid(format!(
                    "field {} has field_type {:?} (one of {})",
                    f.id,
                    f.field_type,
                    FIELD_TYPES.join(", ")
                )));
            }
            if !f.validation_schema.is_object() && !f.validation_schema.is_null() {
                return Err(invalid(format!(
                    "field {}: validation_schema must be an object",
                    f.id
                )));
            }
        }
    }
    Ok(templates)
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Loads the shipped templates once (an operator may edit them afterwards in the store), then
/// the operator's file, if configured, on every start.
pub fn seed_templates(
    store: &dyn Store,
    operator_file: Option<&Path>,
) -> Result<(), TemplateError> {
    if store.get_setting(SEEDED_KEY)?.is_none() {
        let builtin = parse_templates(BUILTIN_PROFILE_TEMPLATES)?;
        store.upsert_profile_templates(&builtin)?;
        store.set_setting(SEEDED_KEY, "1")?;
        tracing::info!(count = builtin.len(), "profile templates seeded");
    }
    if let Some(path) = operator_file {
        let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Read {
            path: path.to_owned(),
            source,
        })?;
        let extra = parse_templates(&text)?;
        store.upsert_profile_templates(&extra)?;
        tracing::info!(count = extra.len(), file = %path.display(), "operator profile templates loaded");
    }
    // A base_template must name a template that exists once everything is loaded.
    let all = store.list_profile_templates()?;
    let ids: HashSet<i64> = all.iter().map(|t| t.id).collect();
    if let Some(t) = all
        .iter()
        .find(|t| t.base_template.is_some_and(|b| !ids.contains(&b)))
    {
        return Err(TemplateError::Invalid {
            id: t.id,
            reason: format!("base_template {:?} does not exist", t.base_template),
        });
    }
    Ok(())
}

pub async fn list(api: &Arc<Api>) -> Result<Response<Body>, ApiError> {
    let templates = api.db(|s| s.list_profile_templates()).await?;
    Ok(json_response(StatusCode::OK, &templates))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_templates_are_valid() {
        let t = parse_templates(BUILTIN_PROFILE_TEMPLATES).unwrap();
        assert!(!t.is_empty());
    }

    #[test]
    fn rejects_bad_entries() {
        let good = r#"[{"id":1,"name":"a","fields":[],"version":"3c90c3cc-0d44-4b50-8888-8dd25736052a","created":"2026-01-01T00:00:00Z"}]"#;
        assert!(parse_templates(good).is_ok());
        for (from, to) in [
            (
                "\"name\":\"a\"",
                &*format!("\"name\":\"{}\"", "x".repeat(101)),
            ),
            ("3c90c3cc-0d44", "3c90c3cc0d44-"),
            ("2026-01-01T00:00:00Z", "yesterday"),
            ("\"id\":1", "\"id\":0"),
            ("\"fields\":[]", "\"fields\":[],\"extra\":1"),
        ] {
            assert!(parse_templates(&good.replace(from, to)).is_err(), "{to}");
        }
    }
}
