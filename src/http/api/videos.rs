//! Videos (`/streaming/videos`): the recordings of live streams as the cloud API shows them.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::Value;

use super::fields::{char_len, Fields};
use super::format::iso8601;
use super::{query_int, query_pairs, update_with_retry, Api, ApiError};
use crate::db::{
    RecordType, StreamSettings, Update, VideoFilter, VideoRow, VideoSettings, VideoStatus,
};
use crate::http::listener::{json_response, Body};
use crate::playback_auth::Resource;

#[derive(Serialize)]
pub struct ConvertedVideo {
    name: String,
    width: u32,
    height: u32,
    size: u64,
    status: VideoStatus,
    mp4_url: String,
}

#[derive(Serialize)]
pub struct VideoView {
    id: i64,
    name: String,
    description: String,
    stream_id: i64,
    record_type: RecordType,
    status: VideoStatus,
    error: Option<String>,
    /// Milliseconds.
    duration: u64,
    recording_started_at: String,
    created_at: String,
    updated_at: String,
    origin_size: u64,
    /// The single audio+video MP4 of an origin recording; `null` until it is assembled (at
    /// the end of the recording) or when it could not be (a codec change mid-recording).
    origin_url: Option<String>,
    hls_url: String,
    dash_url: String,
    /// `null` when the recording ended before the stream had a screenshot.
    screenshot: Option<String>,
    iframe_url: String,
    client_user_id: Option<Value>,
    converted_videos: Vec<ConvertedVideo>,
}

/// Views of videos, their URLs on their stream's playback base (its CDN resource, if any).
pub async fn views(api: &Arc<Api>, rows: &[VideoRow]) -> Result<Vec<VideoView>, ApiError> {
    let mut streams: Vec<i64> = rows.iter().map(|v| v.stream_id).collect();
    streams.sort_unstable();
    streams.dedup();
    let settings: std::collections::HashMap<i64, StreamSettings> = api
        .db(move |s| {
            streams
                .into_iter()
                .filter_map(|id| {
                    s.get_stream(id)
                        .map(|r| r.map(|r| (id, r.settings)))
                        .transpose()
                })
                .collect()
        })
        .await?;
    Ok(rows
        .iter()
        .map(|v| {
            // A deleted stream's video keeps what its stream had when it was recorded.
            let stream = settings.get(&v.stream_id).cloned().unwrap_or_default();
            let stream = StreamSettings {
                secure_playback: stream.secure_playback || v.state.secure_playback,
                ..stream
            };
            let play = api.endpoints.playback_base(stream.cdn_id);
            let g = api.endpoints.grant(Resource::Video(v.id), &stream);
            view(v, play, &g)
        })
        .collect())
}

pub async fn view_one(api: &Arc<Api>, v: VideoRow) -> Result<VideoView, ApiError> {
    let mut one = views(api, std::slice::from_ref(&v)).await?;
    one.pop().ok_or_else(ApiError::internal)
}

/// `g`: the grant segments when the video's playback is signed (empty otherwise).
fn view(v: &VideoRow, play: &str, g: &str) -> VideoView {
    let base = format!("{play}/videos/{}_{}{g}", v.id, v.slug);
    let origin = v.state.record_type == RecordType::Origin;
    VideoView {
        id: v.id,
        name: v.settings.name.clone(),
        description: v.settings.description.clone(),
        stream_id: v.stream_id,
        record_type: v.state.record_type,
        status: v.state.status,
        // An upload's failure first (the video plays meanwhile), else the recording's note.
        error: v
            .state
            .upload_error
            .clone()
            .or_else(|| v.state.error.clone()),
        duration: v.state.duration_ms,
        recording_started_at: iso8601(v.recording_started_at),
        created_at: iso8601(v.created_at),
        updated_at: iso8601(v.updated_at),
        origin_size: if origin { v.state.size } else { 0 },
        origin_url: v
            .state
            .download
            .then(|| format!("{base}/{}", crate::record::download::FILE)),
        hls_url: format!("{base}/master.m3u8"),
        dash_url: format!("{base}/index.mpd"),
        screenshot: v
            .state
            .screenshot
            .then(|| format!("{base}/{}", crate::record::manager::SCREENSHOT)),
        iframe_url: format!("{play}/player/videos/{}_{}{g}", v.id, v.slug),
        client_user_id: v.settings.client_user_id.clone().map(Value::Number),
        converted_videos: v
            .state
            .renditions
            .iter()
            .map(|r| ConvertedVideo {
                name: r.name.clone(),
                width: r.width,
                height: r.height,
                size: r.size,
                status: v.state.status,
                mp4_url: format!("{base}/{}.mp4", r.name),
            })
            .collect(),
    }
}

/// Videos per page unless `per_page` says otherwise, and its bound.
const DEFAULT_PER_PAGE: u32 = 25;
const MAX_PER_PAGE: u32 = 100;
/// Longest `name` and `description` a client may set (characters).
const MAX_NAME: usize = 255;
const MAX_DESCRIPTION: usize = 4096;

async fn load(api: &Arc<Api>, id: i64) -> Result<VideoRow, ApiError> {
    api.db(move |s| s.get_video(id))
        .await?
        .ok_or_else(|| ApiError::not_found("video"))
}

pub async fn get(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    Ok(json_response(
        StatusCode::OK,
        &view_one(api, load(api, id).await?).await?,
    ))
}

pub async fn list(api: &Arc<Api>, query: Option<&str>) -> Result<Response<Body>, ApiError> {
    let (mut page, mut per_page) = (1u64, DEFAULT_PER_PAGE);
    let mut filter = VideoFilter::default();
    for (k, v) in query_pairs(query)? {
        match k.as_str() {
            "page" => page = query_int("page", &v, 1..=1_000_000_000)?,
            "per_page" => per_page = query_int("per_page", &v, 1..=MAX_PER_PAGE)?,
            "stream_id" => filter.stream_id = Some(query_int("stream_id", &v, 1..=i64::MAX)?),
            "status" => {
                filter.status = Some(VideoStatus::parse(&v).ok_or_else(|| {
                    ApiError::invalid_query(
                        "status",
                        "`status` must be pending, ready, error, uploading or upload_failed",
                    )
                })?)
            }
            "search" => filter.search = Some(v),
            "client_user_id" => {
                let n: i64 = query_int("client_user_id", &v, i64::MIN..=i64::MAX)?;
                filter.client_user_id = Some(n.into());
            }
            _ => {}
        }
    }
    filter.limit = per_page;
    filter.offset = (page - 1) * u64::from(per_page);
    let (rows, total) = api.db(move |s| s.list_videos(&filter)).await?;
    let mut resp = json_response(StatusCode::OK, &views(api, &rows).await?);
    resp.headers_mut()
        .insert("x-total-count", hyper::header::HeaderValue::from(total));
    Ok(resp)
}

fn apply(mut f: Fields, s: &mut VideoSettings) -> Result<(), ApiError> {
    if let Some(v) = f.string("name")? {
        if v.trim().is_empty() || char_len(&v) > MAX_NAME {
            return Err(ApiError::invalid_value(
                "name",
                format!("`name` must be 1..={MAX_NAME} characters, not blank"),
            ));
        }
        s.name = v;
    }
    if let Some(v) = f.string("description")? {
        if char_len(&v) > MAX_DESCRIPTION {
            return Err(ApiError::invalid_value(
                "description",
                format!("`description` must be at most {MAX_DESCRIPTION} characters"),
            ));
        }
        s.description = v;
    }
    if let Some(v) = f.nullable_integer_number("client_user_id")? {
        s.client_user_id = v;
    }
    f.finish(READ_ONLY)
}

/// Fields of the video object a client may send back unchanged: accepted and ignored.
const READ_ONLY: &[&str] = &[
    "id",
    "stream_id",
    "record_type",
    "status",
    "error",
    "duration",
    "recording_started_at",
    "created_at",
    "updated_at",
    "origin_size",
    "origin_url",
    "hls_url",
    "dash_url",
    "screenshot",
    "iframe_url",
    "converted_videos",
];

pub async fn update(api: &Arc<Api>, id: i64, body: Value) -> Result<Response<Body>, ApiError> {
    Fields::new(body.clone(), "body")?;
    let row = update_with_retry(
        || load(api, id),
        |mut row| {
            apply(Fields::new(body.clone(), "body")?, &mut row.settings)?;
            Ok(row)
        },
        |row| async move {
            let now = time::OffsetDateTime::now_utc();
            match api
                .db(move |s| s.update_video(id, row.revision, &row.settings, now))
                .await?
            {
                Update::Done(saved) => Ok(Some(saved)),
                Update::Stale => Ok(None),
                Update::NotFound | Update::NameTaken => Err(ApiError::not_found("video")),
            }
        },
    )
    .await?;
    Ok(json_response(StatusCode::OK, &view_one(api, row).await?))
}

/// Removes the record, then its media ([`crate::record::manager::Recordings::delete_video`]).
pub async fn delete(api: &Arc<Api>, id: i64) -> Result<Response<Body>, ApiError> {
    api.recordings
        .delete_video(id)
        .await?
        .ok_or_else(|| ApiError::not_found("video"))?;
    Ok(super::no_content())
}
