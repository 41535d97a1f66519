//! Packaging: the per-stream segment store fed by the pipeline, and the renderers that turn it
//! into LL-HLS and MPEG-TS HLS playlists and the LL-DASH MPD. Never imports ingest.

pub mod dash;
pub mod hls;
pub mod state;
pub mod ts;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

pub use state::{
    PackageState, PackagingConfig, PartIn, PushOutcome, Rendition, RenditionKind, Retention,
};

use std::path::{Path, PathBuf};

use bytes::Bytes;

/// Which output a rendition belongs to: its list in the package and its file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Cmaf,
    Ts,
}

impl Output {
    pub fn extension(self) -> &'static str {
        match self {
            Output::Cmaf => "m4s",
            Output::Ts => "ts",
        }
    }

    fn dir(self) -> &'static str {
        match self {
            Output::Cmaf => "cmaf",
            Output::Ts => "mpegts",
        }
    }
}

/// While segments cannot be written, at most this many complete ones per rendition are held in
/// memory only (a minute of 2 s segments): the window is cut from the front beyond it.
pub const MAX_UNWRITTEN_SEGMENTS: usize = 30;

/// Where a stream's complete segments live on disk: `DATA_DIR/media/{id}/{cmaf|mpegts}/{rung}/`.
/// Names come from the package (rung names, sequence numbers), never from a request.
#[derive(Debug, Clone)]
pub struct MediaDir {
    root: PathBuf,
}

impl MediaDir {
    pub fn new(root: PathBuf) -> MediaDir {
        MediaDir { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn segment_path(&self, output: Output, rendition: &str, msn: u64) -> PathBuf {
        self.root
            .join(output.dir())
            .join(rendition)
            .join(format!("seg_{msn}.{}", output.extension()))
    }

    /// Writes the chunks in order, atomically (temp file + rename): a reader never sees half a
    /// segment, and no concatenated copy is made.
    fn write(&self, path: &Path, chunks: &[bytes::Bytes]) -> std::io::Result<()> {
        use std::io::Write as _;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("part");
        let mut file = std::fs::File::create(&tmp)?;
        for c in chunks {
            file.write_all(c)?;
        }
        drop(file);
        std::fs::rename(&tmp, path)
    }
}
/// The per-session choices of the stream record that the renderers apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionOptions {
    /// Rewind window kept (DVR); `None`: the live window only.
    pub dvr_window: Option<Duration>,
    /// Whether an ended stream's playlists carry EXT-X-ENDLIST.
    pub endlist_tag: bool,
}

/// A [`PackageState`] shared between the pipeline's streaming threads (writers) and HTTP
/// handlers (readers), with a change counter that blocking requests wait on.
pub struct Package {
    state: Mutex<PackageState>,
    /// Fires on every change; the change count itself is [`PackageState::version`].
    changed: watch::Sender<()>,
}

impl Package {
    pub fn new(package: PackageState) -> Package {
        Package {
            state: Mutex::new(package),
            changed: watch::Sender::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PackageState> {
        // Writers only append to in-memory structures; a panic mid-update leaves a usable store.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn read<R>(&self, f: impl FnOnce(&PackageState) -> R) -> R {
        f(&self.lock())
    }

    /// Applies a change and wakes every waiting request.
    pub fn update<R>(&self, f: impl FnOnce(&mut PackageState) -> R) -> R {
        let out = {
            let mut p = self.lock();
            p.version = p.version.wrapping_add(1);
            f(&mut p)
        };
        self.changed.send_replace(());
        out
    }

    /// Appends a part to rendition `index` of `output` (`whole`: the part is a complete segment,
    /// as TS segments are), then mirrors the change on disk outside the lock: the completed
    /// segment is written, evicted ones are deleted. A failed write (disk full) keeps the
    /// segment in memory, sets [`PackageState::storage_error`] (shown in the record) and cuts
    /// the window to [`MAX_UNWRITTEN_SEGMENTS`] held in memory only; live output goes on, and
    /// the next segment written clears the error.
    pub fn push(&self, output: Output, index: usize, part: PartIn, whole: bool) {
        let (name, outcome, dir) = self.update(|p| {
            let retention = p.retention();
            let dir = p.media_dir.clone();
            let list = match output {
                Output::Cmaf => &mut p.renditions,
                Output::Ts => &mut p.ts_renditions,
            };
            match list.get_mut(index) {
                Some(r) => {
                    let mut outcome = r.push_part(part, retention);
                    if whole {
                        r.close_open_segment();
                        outcome.completed = r.segments().back().map(|s| s.chunks());
                    }
                    (r.name.clone(), outcome, dir)
                }
                None => (String::new(), PushOutcome::default(), None),
            }
        });
        let Some(dir) = dir else { return };
        for msn in &outcome.evicted {
            let _ = std::fs::remove_file(dir.segment_path(output, &name, *msn));
        }
        if let Some((msn, chunks)) = outcome.completed {
            let len = chunks.iter().map(Bytes::len).sum();
            let written = dir.write(&dir.segment_path(output, &name, msn), &chunks);
            let (recovered, failed_first, evicted) = self.update(|p| {
                let recovered = match &written {
                    Ok(()) => p.storage_error.take(),
                    Err(_) => None,
                };
                let failed_first = match &written {
                    Err(e) if p.storage_error.is_none() => {
                        p.storage_error = Some((time::OffsetDateTime::now_utc(), e.to_string()));
                        true
                    }
                    _ => false,
                };
                let list = match output {
                    Output::Cmaf => &mut p.renditions,
                    Output::Ts => &mut p.ts_renditions,
                };
                let Some(r) = list.get_mut(index) else {
                    return (recovered, failed_first, Vec::new());
                };
                let evicted = match &written {
                    Ok(()) => {
                        r.mark_on_disk(msn, len);
                        Vec::new()
                    }
                    Err(_) => r.cap_unwritten(MAX_UNWRITTEN_SEGMENTS),
                };
                (recovered, failed_first, evicted)
            });
            if let (true, Err(e)) = (failed_first, &written) {
                tracing::error!(rendition = %name, msn, error = %e, "cannot write segments; live output continues from memory");
            }
            if let Some((since, _)) = recovered {
                let secs = (time::OffsetDateTime::now_utc() - since).whole_seconds();
                tracing::info!(rendition = %name, msn, failing_secs = secs, "segments are written again");
            }
            for msn in evicted {
                let _ = std::fs::remove_file(dir.segment_path(output, &name, msn));
            }
        }
    }

    /// A (re)started session's options and where its complete segments go on disk.
    pub fn start_session(&self, options: SessionOptions, media_dir: MediaDir) {
        self.update(|p| {
            p.ended = false;
            p.endlist_tag = options.endlist_tag;
            p.dvr_window = options.dvr_window;
            p.media_dir = Some(media_dir);
        });
    }

    /// Changed settings of a live (or lingering) stream: effective with the next part.
    pub fn set_options(&self, options: SessionOptions) {
        self.update(|p| {
            p.endlist_tag = options.endlist_tag;
            p.dvr_window = options.dvr_window;
        });
    }

    /// The inputs are gone (grace period) or the pipeline is rebuilt: whatever comes next
    /// continues every playlist after a discontinuity.
    pub fn mark_discontinuity(&self) {
        self.update(|p| {
            for r in p.renditions.iter_mut().chain(p.ts_renditions.iter_mut()) {
                r.mark_discontinuity();
            }
        });
    }

    /// The grace period passed without a new publish: playlists end (EXT-X-ENDLIST).
    pub fn set_ended(&self) {
        self.update(|p| p.ended = true);
    }

    /// Empties the rewind window (memory and disk); the open segment stays.
    pub fn clear_dvr(&self) {
        let (removed, dir) = self.update(|p| {
            let mut removed = Vec::new();
            for (output, list) in [
                (Output::Cmaf, &mut p.renditions),
                (Output::Ts, &mut p.ts_renditions),
            ] {
                for r in list.iter_mut() {
                    removed.extend(
                        r.clear_complete()
                            .into_iter()
                            .map(|msn| (output, r.name.clone(), msn)),
                    );
                }
            }
            (removed, p.media_dir.clone())
        });
        if let Some(dir) = dir {
            for (output, name, msn) in removed {
                let _ = std::fs::remove_file(dir.segment_path(output, &name, msn));
            }
        }
    }

    /// Why segments are not being written, for the stream record; `None` while they are.
    pub fn storage_error(&self) -> Option<String> {
        self.read(|p| {
            p.storage_error.as_ref().map(|(since, why)| {
                format!("cannot write segments since {}: {why}", utc_ms(*since))
            })
        })
    }

    /// Evaluates `f` now and after every change until it yields a value or `timeout` passes.
    pub async fn wait_for<R>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&PackageState) -> Option<R>,
    ) -> Option<R> {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            if let Some(r) = self.read(&mut f) {
                return Some(r);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                // Sender gone (cannot happen while `self` lives) or deadline passed.
                _ => return self.read(&mut f),
            }
        }
    }
}

/// A UTC time as ISO 8601 with milliseconds and `Z`: EXT-X-PROGRAM-DATE-TIME (RFC 8216bis
/// §4.4.4.6) and the MPD's xs:dateTime attributes both take this form.
pub fn utc_ms(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A media dir that cannot be written (a file stands where its directory should be): the
    /// error shows, memory holds at most MAX_UNWRITTEN_SEGMENTS, and it clears once writable.
    #[test]
    fn a_failing_disk_is_reported_bounded_and_recovered_from() {
        use state::tests::{part, video_720p};
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("media");
        std::fs::write(&root, b"in the way").unwrap();
        let mut sp = PackageState::new(PackagingConfig::default(), vec![video_720p(1_000_000)]);
        sp.media_dir = Some(MediaDir::new(root.clone()));
        sp.dvr_window = Some(Duration::from_secs(3600));
        let pkg = Package::new(sp);
        let t0 = time::OffsetDateTime::now_utc();
        let mut msn_parts = 0u64;
        let mut segment = |pkg: &Package| {
            for i in 0..4 {
                let t = t0 + Duration::from_millis(500 * msn_parts);
                pkg.push(Output::Cmaf, 0, part(i == 0, 500, t), false);
                msn_parts += 1;
            }
        };
        for _ in 0..(MAX_UNWRITTEN_SEGMENTS + 10) {
            segment(&pkg);
        }
        let (error, held) = pkg.read(|p| {
            let r = &p.renditions[0];
            let held = r.segments().iter().filter(|s| s.complete).count();
            (p.storage_error.clone(), held)
        });
        let (_, why) = error.expect("the error is recorded");
        assert!(
            why.contains("Not a directory") || why.contains("exists"),
            "{why}"
        );
        assert_eq!(held, MAX_UNWRITTEN_SEGMENTS);
        // Space is back: the next completed segment is written and the error clears.
        std::fs::remove_file(&root).unwrap();
        segment(&pkg);
        segment(&pkg);
        assert!(pkg.read(|p| p.storage_error.is_none()));
        let on_disk = std::fs::read_dir(root.join("cmaf/720p")).unwrap().count();
        assert!(on_disk >= 1);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_wake_on_update_and_time_out() {
        let pkg = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![],
        )));
        let waiter = {
            let pkg = pkg.clone();
            tokio::spawn(async move {
                pkg.wait_for(Duration::from_secs(6), |p| p.ended.then_some(1))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        pkg.update(|p| p.ended = true);
        assert_eq!(waiter.await.unwrap(), Some(1));
        let none = pkg.wait_for(Duration::from_secs(6), |_| None::<u8>).await;
        assert_eq!(none, None);
    }
}
