//! A finished recording's trip to object storage (`storage_url`). The files stay written
//! locally as always (crash-safe) and the video plays from them meanwhile (`uploading`); then
//! each file is uploaded and checked, and the playlists the node renders from the index are
//! uploaded as files too, so any node serves the video from the store alone. A journal in the
//! video's directory names every object the store confirmed: after `kill -9` the upload
//! resumes past them. Only once every object is confirmed does the record say `stored`, and
//! only then are the local files removed (after `storage_local_retention_secs`). A store that
//! fails leaves the video `upload_failed`, playing from the local copy, tried again with
//! backoff.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use super::budget::Budget;
use crate::db::{Store, VideoFilter, VideoStatus};
use crate::storage::Storage;

/// The journal of confirmed objects: `{name} {size}` per line, synced after each.
const JOURNAL: &str = "upload.journal";
/// Files rendered for the store: what a node serving a local video computes per request.
const RENDERED: [&str; 2] = ["master.m3u8", "index.mpd"];
const FIRST_RETRY: Duration = Duration::from_secs(10);
const MAX_RETRY: Duration = Duration::from_secs(600);

pub struct Uploader {
    pub storage: Arc<Storage>,
    store: Arc<dyn Store>,
    root: PathBuf,
    budget: Arc<Budget>,
    node_id: String,
    /// How long the local files stay once the store has them.
    keep_local: Duration,
    /// The videos whose upload runs now.
    running: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// The uploads and the later removals of local copies.
    tasks: crate::tasks::Owned,
    /// Set at shutdown: no upload starts, none is retried, no removal waits on.
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Uploader {
    pub(super) fn new(
        storage: Arc<Storage>,
        store: Arc<dyn Store>,
        root: PathBuf,
        budget: Arc<Budget>,
        node_id: String,
        keep_local: Duration,
    ) -> Arc<Uploader> {
        Arc::new(Uploader {
            storage,
            store,
            root,
            budget,
            node_id,
            keep_local,
            running: Default::default(),
            tasks: Default::default(),
            stopping: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Resolves once shutdown has begun.
    async fn stopping(&self) {
        let _ = self.stopping.subscribe().wait_for(|s| *s).await;
    }

    /// Shutdown: the uploads under way stop (a multipart upload is aborted; the journal lets
    /// the next run resume past the files the store confirmed, the video stays `uploading`),
    /// the removals of local copies wait for the next run; all within `within`.
    pub async fn shutdown(&self, within: Duration) {
        self.stopping.send_replace(true);
        self.storage.stop_uploads();
        let left = crate::tasks::drain(self.tasks.take(), within).await;
        if left > 0 {
            tracing::warn!(left, "uploads still running at shutdown; cut");
        }
    }

    /// Uploads video `id` (its state `uploading`), retrying until the store has it or the
    /// video is gone; nothing if its upload runs already.
    pub fn spawn(self: &Arc<Self>, id: i64) {
        if !self.running().insert(id) {
            return;
        }
        let me = self.clone();
        self.tasks.spawn(async move {
            let mut wait = FIRST_RETRY;
            while !*me.stopping.borrow() {
                match me.attempt(id).await {
                    // Uploaded, or deleted meanwhile.
                    Ok(_) => break,
                    // Resumed by the next run: the video stays `uploading`.
                    Err(_) if *me.stopping.borrow() => break,
                    Err(e) => {
                        tracing::warn!(video = id, error = %e, retry_in = ?wait, "video upload failed");
                        if !me.set_upload_failed(id, e).await {
                            break;
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = me.stopping() => break,
                }
                wait = (wait * 2).min(MAX_RETRY);
            }
            me.running().remove(&id);
        });
    }

    fn running(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<i64>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The uploads a previous run left unfinished on this node, started again, and the local
    /// copies of uploaded videos it had not removed yet, removed after their retention (at
    /// start).
    pub fn resume_unfinished(self: &Arc<Self>) {
        for status in [
            VideoStatus::Uploading,
            VideoStatus::UploadFailed,
            VideoStatus::Ready,
        ] {
            let filter = VideoFilter {
                status: Some(status),
                limit: u32::MAX,
                ..VideoFilter::default()
            };
            let Ok((videos, _)) = self.store.list_videos(&filter) else {
                tracing::error!("cannot list the videos to upload");
                return;
            };
            for v in videos {
                if v.state.node.as_deref().is_some_and(|n| n != self.node_id) {
                    continue;
                }
                if status != VideoStatus::Ready {
                    tracing::info!(video = v.id, "resuming the video's upload");
                    self.spawn(v.id);
                } else if v.state.stored && self.root.join(v.id.to_string()).exists() {
                    self.remove_local_later(v.id);
                }
            }
        }
    }

    /// One try: every file not yet confirmed, then the record. `Ok(false)`: the video is gone.
    async fn attempt(&self, id: i64) -> Result<bool, String> {
        let dir = self.root.join(id.to_string());
        let at = dir.clone();
        // What is left to send: the files (the playlists rendered first) the journal lacks.
        let left = tokio::task::spawn_blocking(move || {
            render_playlists(&at).map_err(|e| format!("rendering the playlists: {e}"))?;
            let done = read_journal(&at);
            let files = files(&at).map_err(|e| format!("listing the files: {e}"))?;
            Ok::<_, String>(
                files
                    .into_iter()
                    .filter(|(name, size)| done.get(name) != Some(size))
                    .map(|(name, _)| name)
                    .collect::<Vec<_>>(),
            )
        })
        .await
        .map_err(|_| "listing the files to upload failed".to_owned())??;
        for name in left {
            if !self.exists(id).await {
                return Ok(false);
            }
            let sent = self
                .storage
                .upload(id, &name, &dir.join(&name))
                .await
                .map_err(|e| e.to_string())?;
            let at = dir.clone();
            tokio::task::spawn_blocking(move || journal(&at, &name, sent))
                .await
                .map_err(|_| "writing the upload journal failed".to_owned())?
                .map_err(|e| format!("writing the upload journal: {e}"))?;
        }
        if !self.mark_stored(id).await {
            return Ok(false);
        }
        tracing::info!(video = id, store = ?self.storage, "video uploaded");
        self.remove_local_later(id);
        Ok(true)
    }

    async fn exists(&self, id: i64) -> bool {
        let store = self.store.clone();
        matches!(
            tokio::task::spawn_blocking(move || store.get_video(id)).await,
            Ok(Ok(Some(_)))
        )
    }

    /// The record says `ready` and `stored`: from now on every node serves it from the store.
    async fn mark_stored(&self, id: i64) -> bool {
        self.update_state(id, |state| {
            state.status = VideoStatus::Ready;
            state.stored = true;
            state.upload_error = None;
        })
        .await
    }

    /// Video `id` is `upload_failed` for `error`; false when it is gone.
    async fn set_upload_failed(&self, id: i64, error: String) -> bool {
        self.update_state(id, |state| {
            state.status = VideoStatus::UploadFailed;
            state.upload_error = Some(error);
        })
        .await
    }

    /// Changes video `id`'s state by `f`; false when it is gone.
    async fn update_state(
        &self,
        id: i64,
        f: impl FnOnce(&mut crate::db::VideoState) + Send + 'static,
    ) -> bool {
        let store = self.store.clone();
        let set = tokio::task::spawn_blocking(move || {
            let Some(v) = store.get_video(id)? else {
                return Ok(false);
            };
            let mut state = v.state;
            f(&mut state);
            store.set_video_state(id, &state, OffsetDateTime::now_utc())
        })
        .await;
        matches!(set, Ok(Ok(true)))
    }

    /// Removes the uploaded video's local copy after `storage_local_retention_secs`; one that
    /// shutdown interrupts is removed by the next run ([`Uploader::resume_unfinished`]).
    fn remove_local_later(&self, id: i64) {
        let (dir, budget, keep) = (
            self.root.join(id.to_string()),
            self.budget.clone(),
            self.keep_local,
        );
        let mut stopping = self.stopping.subscribe();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(keep) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            let removed =
                tokio::task::spawn_blocking(move || super::budget::remove_dir(&budget, &dir)).await;
            if !matches!(removed, Ok(Ok(()))) {
                tracing::warn!(video = id, "cannot remove the uploaded video's local files");
            }
        });
    }
}

/// The files of a finished recording that go to the store, with their sizes, smallest first
/// (the playlists and the index before the media): everything but the journal and temporary
/// files.
fn files(dir: &Path) -> std::io::Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == JOURNAL || name.ends_with(".part") || name.ends_with(".tmp") {
            continue;
        }
        let meta = entry.metadata()?;
        if meta.is_file() {
            out.push((name, meta.len()));
        }
    }
    out.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    Ok(out)
}

fn read_journal(dir: &Path) -> std::collections::HashMap<String, u64> {
    std::fs::read_to_string(dir.join(JOURNAL))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, size) = l.rsplit_once(' ')?;
            Some((name.to_owned(), size.parse().ok()?))
        })
        .collect()
}

fn journal(dir: &Path, name: &str, size: u64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(JOURNAL))?;
    writeln!(f, "{name} {size}")?;
    f.sync_data()
}

/// The master playlist, each rendition's playlist and the MPD, written next to the media
/// (each to a temporary name, then renamed) as the node would render them per request.
fn render_playlists(dir: &Path) -> std::io::Result<()> {
    let mut names: Vec<String> = RENDERED.iter().map(|n| n.to_string()).collect();
    let (summary, _) = super::fragments::read_index(dir).map_err(std::io::Error::other)?;
    names.extend(
        summary
            .renditions()
            .iter()
            .map(|(r, _)| format!("{r}.m3u8")),
    );
    for name in names {
        let text = super::vod::render(dir, &name)
            .ok_or_else(|| std::io::Error::other(format!("{name} cannot be rendered")))?;
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, dir.join(&name))?;
    }
    Ok(())
}
