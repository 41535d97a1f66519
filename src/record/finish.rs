//! What a recording becomes once its files are final: the video's state (ready with its
//! length, sizes and renditions, or an error), the origin download, the screenshot file, and
//! the event the outcome tells.

use std::collections::BTreeMap;

use super::fragments::{self, Summary};
use crate::db::{VideoRendition, VideoState, VideoStatus};
use crate::events::Event;

/// A JPEG of the recorded stream, in the video's directory.
pub const SCREENSHOT: &str = "screenshot.jpg";

/// Writes `jpeg` as the video's screenshot (temporary file, then rename: whole or absent).
pub(super) fn save_screenshot(dir: &std::path::Path, jpeg: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join("screenshot.jpg.part");
    std::fs::write(&tmp, jpeg)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(SCREENSHOT))
}

/// The source tracks of an origin recording that make its download: the first generation
/// of each (a source whose codec changed mid-recording has no single download).
pub(super) fn download_tracks(summary: &Summary) -> Option<Vec<String>> {
    let renditions = summary.renditions();
    if renditions.iter().any(|(_, tracks)| tracks.len() > 1) {
        return None;
    }
    let names: Vec<String> = renditions
        .iter()
        .flat_map(|(_, tracks)| tracks.iter())
        .filter(|t| !t.fragments.is_empty())
        .map(|t| t.name.clone())
        .collect();
    (!names.is_empty()).then_some(names)
}

/// Assembles an origin recording's download; whether it is there.
pub(super) fn assemble_download(video: i64, dir: &std::path::Path, summary: &Summary) -> bool {
    let Some(tracks) = download_tracks(summary) else {
        return false;
    };
    let names: Vec<&str> = tracks.iter().map(String::as_str).collect();
    match super::download::assemble(dir, &names) {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(video, error = %e, "cannot assemble the origin download");
            false
        }
    }
}

/// A video's state once its files are final.
pub(super) fn finished_state(
    dir: &std::path::Path,
    was: &VideoState,
    summary: Summary,
    error: Option<String>,
) -> VideoState {
    // The picture size each track's init segment declares (0 for audio).
    let size_of = |track: &super::fragments::Track| -> (u32, u32) {
        let mut init = vec![0u8; track.init_len as usize];
        std::fs::File::open(fragments::media_path(dir, &track.name))
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut init))
            .ok()
            .and_then(|()| super::mp4::describe(&init).ok())
            .map_or((0, 0), |i| (i.width, i.height))
    };
    let sizes: BTreeMap<&str, (u32, u32)> = summary
        .tracks
        .values()
        .map(|t| (t.name.as_str(), size_of(t)))
        .collect();
    // The picture's length, as the HLS variants (video) and players show it: the audio's own
    // fragment boundaries may end it a few frames later. Audio-only: the audio's.
    let is_video =
        |t: &super::fragments::Track| sizes.get(t.name.as_str()).is_some_and(|s| s.1 > 0);
    let duration = match summary.duration_of(is_video) {
        d if d.is_zero() => summary.duration(),
        d => d,
    };
    let written = summary.tracks.values().any(|t| !t.fragments.is_empty());
    VideoState {
        record_type: was.record_type,
        status: if written {
            VideoStatus::Ready
        } else {
            VideoStatus::Error
        },
        error: error.or_else(|| (!written).then(|| "nothing was recorded".to_owned())),
        duration_ms: duration.as_millis() as u64,
        size: summary.size(),
        screenshot: dir.join(SCREENSHOT).is_file(),
        download: dir.join(super::download::FILE).is_file(),
        node: was.node.clone(),
        secure_playback: was.secure_playback,
        stored: was.stored,
        upload_error: None,
        renditions: summary
            .tracks
            .values()
            .map(|t| {
                let (width, height) = sizes[t.name.as_str()];
                VideoRendition {
                    name: t.name.clone(),
                    width,
                    height,
                    size: t.size(),
                }
            })
            .collect(),
    }
}

/// The event a finalised video's state tells: ready, or failed with why.
pub(super) fn video_outcome(stream_id: i64, video_id: i64, state: &VideoState) -> Event {
    match state.status {
        s if s.playable() => Event::VideoReady {
            stream_id,
            video_id,
            duration_ms: state.duration_ms,
        },
        _ => Event::VideoFailed {
            stream_id,
            video_id,
            error: state.error.clone().unwrap_or_default(),
        },
    }
}
