//! A stream record as the API returns it: its settings, its ingest and playback URLs (signed
//! where the record asks), and its live state — this node's, or the serving node's from the
//! lease — plus the fields a client may send back and that are ignored.

use hyper::{Response, StatusCode};
use serde::Serialize;

use super::format::iso8601;
use super::{Api, ApiError};
use crate::db::{StreamRow, StreamSettings};
use crate::http::listener::{json_response, Body};
use crate::live::LiveStatus;
use crate::playback_auth::Resource;

/// Fields the server computes: accepted in a body (clients send back what they read) and ignored.
pub(super) const READ_ONLY: &[&str] = &[
    "id",
    "token",
    "live",
    "backup_live",
    "input_protocol",
    "backup_input_protocol",
    "push_url",
    "backup_push_url",
    "push_url_srt",
    "backup_push_url_srt",
    "push_url_whip",
    "srt_play_url",
    "created_at",
    "started_at_primary",
    "started_at_backup",
    "finished_at_primary",
    "iframe_url",
    "dash_url",
    "hls_cmaf_url",
    "hls_mpegts_url",
    "screenshot",
    "transcoded_qualities",
    "shed_qualities",
    "transcoding_preset",
    "recording",
    "recording_duration",
    "transcoding_speed",
    "frame_rate",
    "video_height",
    "video_width",
    "video_codec",
    "audio_codec",
    "video_bitrate",
    "keyframe_interval",
    "frames_dropped",
    "viewers",
    "html_overlays",
    "storage_error",
    "multi_region_push_urls",
    "whep_url",
    "whep_viewers",
    "srt_readers",
];

/// The record as the API returns it; field order is the documented one.
#[derive(Debug, Serialize)]
pub struct StreamView {
    id: i64,
    #[serde(flatten)]
    settings: StreamSettings,
    low_latency_enabled: bool,
    token: String,
    live: bool,
    backup_live: bool,
    /// How the receiving inputs arrive (`rtmp`, `srt`, `whip`, `pull`); null while off air.
    input_protocol: Option<String>,
    backup_input_protocol: Option<String>,
    push_url: Option<String>,
    backup_push_url: Option<String>,
    push_url_srt: Option<String>,
    backup_push_url_srt: Option<String>,
    push_url_whip: Option<String>,
    srt_play_url: String,
    created_at: String,
    started_at_primary: Option<String>,
    started_at_backup: Option<String>,
    finished_at_primary: Option<String>,
    iframe_url: String,
    dash_url: String,
    hls_cmaf_url: String,
    pub(super) hls_mpegts_url: String,
    screenshot: String,
    #[serde(flatten)]
    measures: LiveView,
    html_overlays: Vec<super::overlays::OverlayView>,
    storage_error: Option<String>,
    /// Real-time playback (WHEP, draft-ietf-wish-whep): POST an SDP offer here.
    whep_url: String,
    /// WHEP viewers receiving the stream now (on the node serving it).
    whep_viewers: usize,
    /// SRT readers (`srt_play_url`) receiving the stream now (on the node serving it).
    srt_readers: usize,
    /// One entry per configured ingest region; absent when none is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    multi_region_push_urls: Option<Vec<RegionPushUrls>>,
}

/// A stream's measured live state, in the record and in the events feed's health samples: what
/// it transcodes, how fast, what it receives, who watches.
#[derive(Debug, Clone, Serialize)]
pub struct LiveView {
    transcoded_qualities: Vec<String>,
    /// The set's qualities not transcoded because the node was full (`overload_policy`).
    shed_qualities: Vec<String>,
    /// x264's preset in use: a faster one than `veryfast` says the transcode fell behind.
    transcoding_preset: Option<String>,
    recording: bool,
    recording_duration: f64,
    transcoding_speed: Option<f64>,
    frame_rate: Option<f64>,
    video_height: Option<u32>,
    video_width: Option<u32>,
    /// The source's codecs as received.
    video_codec: Option<String>,
    audio_codec: Option<String>,
    /// The source's video bitrate (kbit/s) and longest keyframe interval (s), last 2 s.
    video_bitrate: Option<u64>,
    keyframe_interval: Option<f64>,
    /// Frames lost because the transcode fell behind, since the stream began on its node.
    frames_dropped: u64,
    /// Who watches now, by output.
    viewers: Viewers,
}

/// A stream's viewers by output, on the node serving it: HLS and DASH players counted by their
/// manifest requests (`package::audience`), WHEP and SRT readers by their sessions.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Viewers {
    hls: usize,
    dash: usize,
    hls_mpegts: usize,
    whep: usize,
    srt: usize,
    total: usize,
}

/// A stream's push endpoints on one ingest region's host.
#[derive(Debug, Serialize)]
pub struct RegionPushUrls {
    region: String,
    push_url: Option<String>,
    backup_push_url: Option<String>,
    push_url_srt: Option<String>,
    backup_push_url_srt: Option<String>,
    push_url_whip: Option<String>,
}

impl Api {
    pub fn stream_view(
        &self,
        row: StreamRow,
        live: LiveStatus,
        overlays: &[crate::db::OverlayRow],
    ) -> StreamView {
        let e = &self.endpoints;
        let (id, token) = (row.id, &row.token);
        let play = e.playback_base(row.settings.cdn_id);
        // `/t/{expires}/{token}` after the id when playback is signed (empty otherwise).
        let g = e.grant(Resource::Stream(id), &row.settings);
        let push = !row.settings.pull;
        // Times this node stated and the store has not taken yet.
        let unwritten = self.registry.unwritten_times(id);
        let when_push = |url: String| push.then_some(url);
        // The push endpoints on one host (this server's, or an ingest region's).
        let pushes = |host: &str, http_base: &str| RegionPushUrls {
            region: String::new(),
            push_url: when_push(format!("rtmp://{host}:{}/in/{id}?{token}", e.rtmp_port)),
            backup_push_url: when_push(format!("rtmp://{host}:{}/in/{id}b?{token}", e.rtmp_port)),
            push_url_srt: when_push(format!("srt://{host}:{}?streamid={id}#{token}", e.srt_port)),
            backup_push_url_srt: when_push(format!(
                "srt://{host}:{}?streamid={id}b#{token}",
                e.srt_port
            )),
            push_url_whip: when_push(format!("{http_base}/whip/{id}?token={token}")),
        };
        let here = pushes(&e.ingest_host, &e.public_url);
        let regions = (!e.regions.is_empty()).then(|| {
            e.regions
                .iter()
                .map(|(name, host, http_base)| RegionPushUrls {
                    region: name.clone(),
                    ..pushes(host, http_base)
                })
                .collect()
        });
        let viewers = Api::viewers(&live);
        let (input_protocol, backup_input_protocol) = live.protocols();
        StreamView {
            id,
            low_latency_enabled: true,
            token: token.clone(),
            live: live.live(),
            backup_live: live.backup_live(),
            input_protocol: input_protocol.map(str::to_owned),
            backup_input_protocol: backup_input_protocol.map(str::to_owned),
            push_url: here.push_url,
            backup_push_url: here.backup_push_url,
            push_url_srt: here.push_url_srt,
            backup_push_url_srt: here.backup_push_url_srt,
            push_url_whip: here.push_url_whip,
            // The grant where the HTTP paths carry it (`realtime::srt_read` checks it).
            srt_play_url: format!(
                "srt://{}:{}?streamid=play:{id}{g}",
                e.ingest_host, e.srt_port
            ),
            created_at: iso8601(row.created_at),
            started_at_primary: unwritten
                .started_primary
                .or(row.started_at_primary)
                .map(iso8601),
            started_at_backup: unwritten
                .started_backup
                .or(row.started_at_backup)
                .map(iso8601),
            finished_at_primary: unwritten
                .finished_primary
                .or(row.finished_at_primary)
                .map(iso8601),
            iframe_url: format!("{play}/player/{id}{g}"),
            dash_url: format!("{play}/cmaf/{id}{g}/index.mpd"),
            hls_cmaf_url: format!("{play}/cmaf/{id}{g}/master.m3u8"),
            hls_mpegts_url: format!("{play}/mpegts/{id}{g}/master_mpegts.m3u8"),
            screenshot: format!("{play}/screenshots/{id}{g}/last.jpg"),
            measures: self.live_view(id, &live),
            html_overlays: overlays.iter().map(super::overlays::view).collect(),
            storage_error: live.storage_error().map(str::to_owned),
            // Signalling is a POST: never through a CDN, always to this server's own URL.
            whep_url: format!("{}/whep/{id}{g}", e.public_url),
            whep_viewers: viewers.whep,
            srt_readers: viewers.srt,
            multi_region_push_urls: regions,
            settings: row.settings,
        }
    }

    /// The measured part of a stream's live state (`live`: this node's or the serving one's).
    pub(crate) fn live_view(&self, id: i64, live: &LiveStatus) -> LiveView {
        let recorded = self.recordings.recording_duration(id);
        LiveView {
            transcoded_qualities: live.transcoded_qualities().to_vec(),
            shed_qualities: live.shed_qualities().to_vec(),
            transcoding_preset: live.transcoding_preset().map(str::to_owned),
            recording: recorded.is_some(),
            recording_duration: recorded
                .map_or(live.recording_duration(), |s| (s * 1000.0).round() / 1000.0),
            transcoding_speed: live.transcoding_speed(),
            frame_rate: live.frame_rate(),
            video_height: live.video_height(),
            video_width: live.video_width(),
            video_codec: live.video_codec().map(str::to_owned),
            audio_codec: live.audio_codec().map(str::to_owned),
            video_bitrate: live.video_bitrate(),
            keyframe_interval: live.keyframe_interval(),
            frames_dropped: live.frames_dropped(),
            viewers: Api::viewers(live),
        }
    }

    /// Who watches a stream now, as the node serving it counted.
    fn viewers(live: &LiveStatus) -> Viewers {
        let p = live.players();
        let (whep, srt) = live.realtime_readers();
        Viewers {
            total: live.viewers_total(),
            hls: p.hls,
            dash: p.dash,
            hls_mpegts: p.hls_mpegts,
            whep,
            srt,
        }
    }

    /// The record with its live state and overlays.
    pub(super) async fn render(
        &self,
        status: StatusCode,
        row: StreamRow,
    ) -> Result<Response<Body>, ApiError> {
        let id = row.id;
        let dead_after = self.cluster.dead_after();
        let (overlays, leases) = self
            .db(move |s| Ok((s.list_overlays(id)?, s.live_leases(Some(id), dead_after)?)))
            .await?;
        let live = self.live_status(id, &leases);
        Ok(json_response(
            status,
            &self.stream_view(row, live, &overlays),
        ))
    }

    pub(crate) fn live_status(&self, id: i64, leases: &[crate::db::LeaseRow]) -> LiveStatus {
        let here = || {
            self.registry
                .status(id)
                .with_restreams(self.restreams.states(id))
        };
        self.cluster.status(here, id, leases)
    }
}
