//! The single audio+video MP4 download of an origin recording (`origin_url`): the recorded
//! source tracks (one crash-safe fragmented MP4 each) remuxed into one progressive MP4 with its
//! index first (`mp4mux faststart`), no re-encoding. Written to a temporary name and renamed,
//! so a crash leaves either no download or a whole one — never a half-written file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gstreamer as gst;
use gstreamer::prelude::*;

use super::fragments;

/// The download's file name in a video's directory (served as `{id}_{slug}/origin.mp4`).
pub const FILE: &str = "origin.mp4";

#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("no source track to remux")]
    Nothing,
    #[error("remux pipeline: {0}")]
    Pipeline(String),
    #[error("remux did not finish within {0:?}")]
    Timeout(Duration),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Remuxes `tracks` (track names of `dir`, e.g. `source-video`, `source-audio`) into
/// `dir/origin.mp4`.
pub fn assemble(dir: &Path, tracks: &[&str]) -> Result<PathBuf, DownloadError> {
    if tracks.is_empty() {
        return Err(DownloadError::Nothing);
    }
    crate::pipeline::init().map_err(|e| DownloadError::Pipeline(e.to_string()))?;
    let out = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.part"));
    let size: u64 = tracks
        .iter()
        .filter_map(|t| std::fs::metadata(fragments::media_path(dir, t)).ok())
        .map(|m| m.len())
        .sum();
    // A remux reads and writes each byte once: allow a slow disk (20 MB/s) plus a margin.
    let limit = Duration::from_secs(60 + size / 20_000_000);
    let (summary, _) =
        fragments::read_index(dir).map_err(|e| DownloadError::Pipeline(e.to_string()))?;
    let result = run(dir, &summary, tracks, &tmp, limit);
    let result = result.and_then(|()| {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| DownloadError::Io { path, source }
        };
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io(&tmp))?;
        std::fs::rename(&tmp, &out).map_err(io(&out))?;
        fragments::sync_dir(dir).map_err(|e| DownloadError::Pipeline(e.to_string()))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| out)
}

/// Whether a recorded track file holds audio (its init's handler; the init is the file's
/// first `init_len` bytes).
fn is_audio(path: &Path, init_len: u64) -> bool {
    let mut init = vec![0u8; usize::try_from(init_len).unwrap_or(0)];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut init))
        .ok()
        .and_then(|()| super::mp4::describe(&init).ok())
        .is_some_and(|i| i.audio)
}

fn run(
    dir: &Path,
    summary: &fragments::Summary,
    tracks: &[&str],
    tmp: &Path,
    limit: Duration,
) -> Result<(), DownloadError> {
    let err = |e: &dyn std::fmt::Display| DownloadError::Pipeline(e.to_string());
    let pipeline = gst::Pipeline::new();
    let make = |name: &str| {
        gst::ElementFactory::make(name)
            .build()
            .map_err(|e| err(&format!("{name}: {e}")))
    };
    let mux = make("mp4mux")?;
    mux.set_property("faststart", true);
    let sink = make("filesink")?;
    sink.set_property("location", tmp.to_string_lossy().to_string());
    pipeline.add_many([&mux, &sink]).map_err(|e| err(&e))?;
    mux.link(&sink).map_err(|e| err(&e))?;
    for track in tracks {
        let path = fragments::media_path(dir, track);
        let src = make("filesrc")?;
        src.set_property("location", path.to_string_lossy().to_string());
        let demux = make("qtdemux")?;
        let queue = make("queue")?;
        pipeline
            .add_many([&src, &demux, &queue])
            .map_err(|e| err(&e))?;
        src.link(&demux).map_err(|e| err(&e))?;
        // The muxer's pad is requested now, of the track's kind (from its init), so the
        // running aggregator never gains pads; only the demuxer's pad appears later.
        let init_len = summary.tracks.get(*track).map_or(0, |t| t.init_len);
        let template = if is_audio(&path, init_len) {
            "audio_%u"
        } else {
            "video_%u"
        };
        let mux_pad = mux
            .request_pad_simple(template)
            .ok_or_else(|| err(&format!("mp4mux: no {template} pad")))?;
        let queue_src = queue.static_pad("src").ok_or_else(|| err(&"queue pad"))?;
        queue_src.link(&mux_pad).map_err(|e| err(&e))?;
        let queue_weak = queue.downgrade();
        demux.connect_pad_added(move |_, pad| {
            let Some(sinkpad) = queue_weak
                .upgrade()
                .and_then(|q| q.static_pad("sink"))
                .filter(|p| !p.is_linked())
            else {
                return;
            };
            if let Err(e) = pad.link(&sinkpad) {
                tracing::warn!(error = ?e, "remux: cannot link a recorded track");
            }
        });
    }
    let bus = pipeline.bus().ok_or_else(|| err(&"no bus"))?;
    if let Err(e) = pipeline.set_state(gst::State::Playing) {
        // A failed start may have left elements running: NULL before the last reference goes.
        let _ = pipeline.set_state(gst::State::Null);
        return Err(err(&e));
    }
    let deadline = Instant::now() + limit;
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err(DownloadError::Timeout(limit));
        }
        let msg = bus.timed_pop_filtered(
            gst::ClockTime::from_mseconds(left.as_millis() as u64),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        );
        match msg.as_ref().map(|m| m.view()) {
            Some(gst::MessageView::Eos(_)) => break Ok(()),
            Some(gst::MessageView::Error(e)) => {
                break Err(err(&format!("{} ({:?})", e.error(), e.debug())))
            }
            _ => {}
        }
    };
    let _ = pipeline.set_state(gst::State::Null);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two recorded single-track files (H.264 and AAC, as the recorder writes them) become one
    /// progressive MP4 with both, its `moov` before the media, that ffprobe reads with the
    /// recorded duration.
    #[test]
    fn two_source_tracks_become_one_progressive_mp4() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (vinit, vfrags) = fragments::tests::cmaf(6);
        let (ainit, afrags) = fragments::tests::cmaf_audio(6);
        let mut w = fragments::Writer::create(dir).unwrap();
        w.init("source-video", &vinit).unwrap();
        w.init("source-audio", &ainit).unwrap();
        let t0 = time::OffsetDateTime::now_utc();
        for (chunks, d) in &vfrags {
            w.fragment("source-video", chunks, *d, t0, false).unwrap();
        }
        for (chunks, d) in &afrags {
            w.fragment("source-audio", chunks, *d, t0, false).unwrap();
        }
        let summary = w.summary().clone();
        fragments::finalize(dir, &summary).unwrap();
        let out = assemble(dir, &["source-video", "source-audio"]).unwrap();
        assert!(!dir.join(format!("{FILE}.part")).exists());
        let bytes = std::fs::read(&out).unwrap();
        let moov = bytes.windows(4).position(|w| w == b"moov").unwrap();
        let mdat = bytes.windows(4).position(|w| w == b"mdat").unwrap();
        assert!(moov < mdat, "faststart: moov first");
        let v = fragments::tests::ffprobe(&out, "stream=codec_name:format=duration");
        let mut codecs: Vec<&str> = v["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["codec_name"].as_str().unwrap())
            .collect();
        codecs.sort_unstable();
        assert_eq!(codecs, ["aac", "h264"], "{v}");
        let secs: f64 = v["format"]["duration"].as_str().unwrap().parse().unwrap();
        assert!((secs - 6.0).abs() < 0.3, "{secs}");
    }
}
