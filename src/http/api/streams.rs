//! `/streaming/streams`: create, read, list, patch and delete stream records; validation of the
//! writable fields and rendering of the full record (settings + ingest/playback URLs + live state).

use std::sync::Arc;

use hyper::{Response, StatusCode};
use rand::RngCore;
use serde_json::Value;
use time::OffsetDateTime;

use super::fields::{char_len, Fields, Nullable};
pub use super::stream_view::StreamView;
use super::stream_view::READ_ONLY;
use super::{query_int, query_pairs, update_with_retry, Api, ApiError};
use crate::db::{Projection, RecordType, StreamRow, StreamSettings, Update};
use crate::events::Event;
use crate::http::listener::{json_response, Body};
use crate::live::LiveStatus;
use crate::url_policy::{self, Purpose};

/// Fixed page size of `GET /streaming/streams?page=N`.
pub const STREAMS_PAGE_SIZE: u32 = 25;
/// A name is at most 255 characters: a longer search finds nothing anyway.
const MAX_SEARCH_BYTES: usize = 1024;
pub const MAX_NAME_CHARS: usize = 255;
pub const MAX_ENTITY_DATA_CHARS: usize = 4096;
/// A PULL stream cycles through its URIs; more than a handful is a configuration mistake.
pub const MAX_PULL_URIS: usize = 8;
pub const MAX_URI_FIELD_CHARS: usize = 4096;
pub const MAX_BROADCAST_IDS: usize = 100;
pub const DVR_DURATION_RANGE: std::ops::RangeInclusive<i64> = 30..=14_400;
/// SRT passphrase length in bytes (libsrt: 10..=80).
pub const SRT_PASSPHRASE_CHARS: std::ops::RangeInclusive<usize> = 10..=80;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Create,
    Update,
}

/// A create body's settings by the field rules alone (the checks that need the store, such as
/// quality set ids, come after).
pub(crate) fn settings_from_body(body: Value) -> Result<StreamSettings, ApiError> {
    let mut settings = StreamSettings::default();
    apply(Fields::new(body, "body")?, &mut settings, Mode::Create)?;
    Ok(settings)
}

/// Applies the writable fields present in `f` onto `s`, type-checking each.
fn apply(mut f: Fields, s: &mut StreamSettings, mode: Mode) -> Result<(), ApiError> {
    fn set<T>(target: &mut T, value: Option<T>) {
        if let Some(v) = value {
            *target = v;
        }
    }
    fn set_nullable<T>(target: &mut Option<T>, value: Nullable<T>) {
        if let Some(v) = value {
            *target = v;
        }
    }
    set(&mut s.name, f.string("name")?);
    set(&mut s.active, f.bool("active")?);
    set(&mut s.pull, f.bool("pull")?);
    set_nullable(&mut s.uri, f.nullable_string("uri")?);
    set(&mut s.auto_record, f.bool("auto_record")?);
    set(&mut s.dvr_enabled, f.bool("dvr_enabled")?);
    if let Some(v) = f.string("record_type")? {
        s.record_type = match v.as_str() {
            "origin" => RecordType::Origin,
            "transcoded" => RecordType::Transcoded,
            _ => {
                return Err(ApiError::invalid_value(
                    "record_type",
                    "`record_type` must be \"origin\" or \"transcoded\"",
                ))
            }
        }
    }
    set(
        &mut s.hls_mpegts_endlist_tag,
        f.bool("hls_mpegts_endlist_tag")?,
    );
    if let Some(v) = f.int("dvr_duration")? {
        if !DVR_DURATION_RANGE.contains(&v) {
            return Err(ApiError::invalid_value(
                "dvr_duration",
                format!(
                    "`dvr_duration` must be within {}..={} seconds",
                    DVR_DURATION_RANGE.start(),
                    DVR_DURATION_RANGE.end()
                ),
            ));
        }
        s.dvr_duration = v as u32;
    }
    set_nullable(&mut s.cdn_id, f.nullable_int("cdn_id")?);
    set_nullable(
        &mut s.client_user_id,
        f.nullable_integer_number("client_user_id")?,
    );
    set_nullable(
        &mut s.client_entity_data,
        f.nullable_string("client_entity_data")?,
    );
    set(&mut s.html_overlay, f.bool("html_overlay")?);
    set_nullable(&mut s.quality_set_id, f.nullable_int("quality_set_id")?);
    set(&mut s.broadcast_ids, f.int_array("broadcast_ids")?);
    if let Some(v) = f.string("projection")? {
        s.projection = match v.as_str() {
            "regular" => Projection::Regular,
            "vr360" => Projection::Vr360,
            "vr180" => Projection::Vr180,
            "vr360tb" => Projection::Vr360tb,
            _ => {
                return Err(ApiError::invalid_value(
                    "projection",
                    "`projection` must be one of regular, vr360, vr180, vr360tb",
                ))
            }
        }
    }
    set_nullable(&mut s.srt_passphrase, f.nullable_string("srt_passphrase")?);
    set(&mut s.secure_playback, f.bool("secure_playback")?);
    match mode {
        Mode::Update => {
            // Deprecated: low latency is always on. Type-checked, then ignored.
            f.bool("low_latency_enabled")?;
        }
        Mode::Create if f.contains("low_latency_enabled") => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "deprecated_field",
                "`low_latency_enabled` is deprecated (low latency is always on) and is accepted on update only",
            )
            .at("low_latency_enabled"));
        }
        Mode::Create => {}
    }
    f.finish(READ_ONLY)
}

/// Rules over the merged record (after a PATCH the combination must still hold).
fn validate(api: &Api, s: &StreamSettings) -> Result<(), ApiError> {
    if s.html_overlay && api.overlays.is_none() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "overlays_unavailable",
            "HTML overlays need GStreamer's WPE plugin (wpevideosrc), not installed on this server",
        )
        .at("html_overlay"));
    }
    let name_len = char_len(s.name.trim());
    if name_len == 0 {
        return Err(ApiError::required("name", " and must not be blank"));
    }
    if char_len(&s.name) > MAX_NAME_CHARS {
        return Err(ApiError::invalid_value(
            "name",
            format!("`name` must be at most {MAX_NAME_CHARS} characters"),
        ));
    }
    match s.uri.as_deref().map(str::trim) {
        None | Some("") if s.pull => {
            return Err(ApiError::required("uri", " when `pull` is true"));
        }
        None | Some("") => {}
        Some(uri) => validate_uris(uri)?,
    }
    if let Some(p) = &s.srt_passphrase {
        // libsrt's SRTO_PASSPHRASE bounds (HAICRYPT_SECRET_MIN_SZ..=MAX_SZ).
        if !SRT_PASSPHRASE_CHARS.contains(&p.len())
            || !p.bytes().all(|b| (0x20..=0x7e).contains(&b))
        {
            return Err(ApiError::invalid_value(
                "srt_passphrase",
                "`srt_passphrase` must be 10 to 80 printable ASCII characters",
            ));
        }
    }
    if let Some(data) = &s.client_entity_data {
        if char_len(data) > MAX_ENTITY_DATA_CHARS {
            return Err(ApiError::invalid_value(
                "client_entity_data",
                format!("`client_entity_data` must be at most {MAX_ENTITY_DATA_CHARS} characters"),
            ));
        }
    }
    if s.broadcast_ids.len() > MAX_BROADCAST_IDS || s.broadcast_ids.iter().any(|&b| b < 1) {
        return Err(ApiError::invalid_value(
            "broadcast_ids",
            format!("`broadcast_ids` must hold at most {MAX_BROADCAST_IDS} positive integers"),
        ));
    }
    if s.secure_playback && api.endpoints.signing.is_none() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "no_playback_key",
            "`secure_playback` needs the daemon's `playback_signing_key` (not configured)",
        )
        .at("secure_playback"));
    }
    if let Some(c) = s.cdn_id.filter(|c| !api.endpoints.cdn.contains_key(c)) {
        let mut known: Vec<i64> = api.endpoints.cdn.keys().copied().collect();
        known.sort_unstable();
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_cdn_resource",
            format!("CDN resource {c} is not configured (cdn_resources: {known:?})"),
        )
        .at("cdn_id"));
    }
    if let Some(q) = s.quality_set_id {
        if api.quality_sets.get(q).is_none() {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown_quality_set",
                format!("quality set {q} does not exist (see GET /streaming/quality_sets)"),
            )
            .at("quality_set_id"));
        }
    }
    Ok(())
}

/// Space-separated source URLs, each passing the URL policy for PULL sources.
pub fn validate_uris(field: &str) -> Result<(), ApiError> {
    if char_len(field) > MAX_URI_FIELD_CHARS {
        return Err(ApiError::invalid_value(
            "uri",
            format!("`uri` must be at most {MAX_URI_FIELD_CHARS} characters"),
        ));
    }
    let uris: Vec<&str> = field.split_whitespace().collect();
    if uris.len() > MAX_PULL_URIS {
        return Err(ApiError::invalid_value(
            "uri",
            format!("`uri` holds at most {MAX_PULL_URIS} URLs"),
        ));
    }
    for uri in uris {
        url_policy::parse(uri, Purpose::PullSource)
            .map_err(|e| ApiError::url_policy("uri", uri, &e))?;
    }
    Ok(())
}

/// 128 random bits, hex: safe in every URL form we hand out (RTMP key, SRT stream id, query).
fn new_token() -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub async fn create(api: &Arc<Api>, body: Value) -> Result<Response<Body>, ApiError> {
    let fields = Fields::new(body, "body")?;
    if !fields.contains("name") {
        return Err(ApiError::required("name", ""));
    }
    let mut settings = StreamSettings::default();
    apply(fields, &mut settings, Mode::Create)?;
    validate(api, &settings)?;
    let token = new_token();
    let now = OffsetDateTime::now_utc();
    let row = api
        .db(move |s| s.create_stream(&settings, &token, now))
        .await?;
    tracing::info!(stream = row.id, name = %row.settings.name, "stream created");
    api.registry
        .events()
        .emit(Event::StreamCreated { stream_id: row.id });
    api.render(StatusCode::CREATED, row).await
}

pub(super) async fn load(api: &Api, id: i64) -> Result<StreamRow, ApiError> {
    api.db(move |s| s.get_stream(id))
        .await?
        .ok_or_else(|| ApiError::not_found("stream"))
}

pub async fn get(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    api.render(StatusCode::OK, load(api, id).await?).await
}

pub async fn list(api: &Arc<Api>, query: Option<&str>) -> Result<Response<Body>, ApiError> {
    let (mut page, mut search) = (1u64, None);
    for (k, v) in query_pairs(query)? {
        match k.as_str() {
            "page" => page = query_int("page", &v, 1..=1_000_000_000)?,
            "search" if v.len() > MAX_SEARCH_BYTES => {
                return Err(ApiError::invalid_query(
                    "search",
                    format!("at most {MAX_SEARCH_BYTES} bytes"),
                ))
            }
            "search" if !v.is_empty() => search = Some(v),
            _ => {}
        }
    }
    let offset = (page - 1) * u64::from(STREAMS_PAGE_SIZE);
    let dead_after = api.cluster.dead_after();
    let (rows, total, overlays, leases) = api
        .db(move |s| {
            let (rows, total) = s.list_streams(search.as_deref(), offset, STREAMS_PAGE_SIZE)?;
            let overlays = rows
                .iter()
                .map(|r| s.list_overlays(r.id))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((rows, total, overlays, s.live_leases(None, dead_after)?))
        })
        .await?;
    let views: Vec<StreamView> = rows
        .into_iter()
        .zip(&overlays)
        .map(|(r, o)| {
            let live = api.live_status(r.id, &leases);
            api.stream_view(r, live, o)
        })
        .collect();
    let mut resp = json_response(StatusCode::OK, &views);
    resp.headers_mut()
        .insert("x-total-count", hyper::header::HeaderValue::from(total));
    Ok(resp)
}

pub async fn update(api: &Arc<Api>, id: i64, body: Value) -> Result<Response<Body>, ApiError> {
    let mut outer = Fields::new(body, "body")?;
    let Some(patch) = outer.take_value("stream") else {
        return Err(ApiError::required(
            "stream",
            ": the body is {\"stream\": {...}}",
        ));
    };
    outer.finish(&[])?;
    let row = update_with_retry(
        || load(api, id),
        |mut row| {
            apply(
                Fields::new(patch.clone(), "stream")?,
                &mut row.settings,
                Mode::Update,
            )?;
            validate(api, &row.settings)?;
            Ok(row)
        },
        |row| async move {
            let revision = row.revision;
            match api
                .db(move |s| s.update_stream(id, revision, &row.settings))
                .await?
            {
                Update::Done(saved) => Ok(Some(saved)),
                Update::Stale => Ok(None),
                Update::NotFound | Update::NameTaken => Err(ApiError::not_found("stream")),
            }
        },
    )
    .await?;
    tracing::info!(stream = id, "stream updated");
    api.registry
        .events()
        .emit(Event::StreamUpdated { stream_id: id });
    // `html_overlay` may have changed: render (or stop rendering) the overlays.
    super::overlays::changed(api, id);
    api.registry.apply_settings(id, &row.settings);
    if !row.settings.active || row.settings.pull {
        // A deactivated stream (or one turned into a PULL) stops receiving pushes at once.
        api.registry.kick(id);
    }
    api.render(StatusCode::OK, row).await
}

pub async fn delete(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    if !api.db(move |s| s.delete_stream(id)).await? {
        return Err(ApiError::not_found("stream"));
    }
    api.registry.kick(id);
    tracing::info!(stream = id, "stream deleted");
    api.registry
        .events()
        .emit(Event::StreamDeleted { stream_id: id });
    Ok(super::no_content())
}

/// Deprecated path kept for old clients: a permanent redirect to the MPEG-TS HLS playlist.
pub async fn legacy_playlist(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    let row = load(api, id).await?;
    super::redirect(
        &api.stream_view(row, LiveStatus::default(), &[])
            .hls_mpegts_url,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_rules() {
        assert!(validate_uris("rtmp://a/live/x srt://b:9000 https://c/x.m3u8").is_ok());
        for bad in [
            "file:///etc/passwd",
            "ftp://a/x",
            "rtmp://",
            "not a url",
            "http:///x",
            "http:x.example/a",
            &"rtmp://a/x ".repeat(MAX_PULL_URIS + 1),
        ] {
            assert!(validate_uris(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn create_rejects_deprecated_field_but_update_ignores_it() {
        let body = serde_json::json!({"name": "x", "low_latency_enabled": false});
        let mut s = StreamSettings::default();
        let e = apply(
            Fields::new(body.clone(), "body").unwrap(),
            &mut s,
            Mode::Create,
        )
        .unwrap_err();
        assert_eq!(e.code, "deprecated_field");
        apply(Fields::new(body, "body").unwrap(), &mut s, Mode::Update).unwrap();
    }
}
