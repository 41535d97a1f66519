//! Videos (`/streaming/videos`): the recordings of live streams as the cloud API shows them.
//! (Work in progress: the view; listing, editing, deletion and media delivery come next.)

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::streams::iso8601;
use super::Api;
use crate::db::{RecordType, VideoRow, VideoStatus};

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
    origin_url: Option<String>,
    hls_url: String,
    dash_url: String,
    screenshot: String,
    iframe_url: String,
    client_user_id: Option<Value>,
    converted_videos: Vec<ConvertedVideo>,
}

pub fn view(api: &Arc<Api>, v: &VideoRow) -> VideoView {
    let base = format!("{}/videos/{}_{}", api.endpoints.public_url, v.id, v.slug);
    let origin = v.state.record_type == RecordType::Origin;
    VideoView {
        id: v.id,
        name: v.settings.name.clone(),
        description: v.settings.description.clone(),
        stream_id: v.stream_id,
        record_type: v.state.record_type,
        status: v.state.status,
        error: v.state.error.clone(),
        duration: v.state.duration_ms,
        recording_started_at: iso8601(v.recording_started_at),
        created_at: iso8601(v.created_at),
        updated_at: iso8601(v.updated_at),
        origin_size: if origin { v.state.size } else { 0 },
        origin_url: origin.then(|| format!("{base}/origin.mp4")),
        hls_url: format!("{base}/master.m3u8"),
        dash_url: format!("{base}/index.mpd"),
        screenshot: format!("{base}/screenshot.jpg"),
        iframe_url: format!("{}/player/videos/{}", api.endpoints.public_url, v.id),
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
