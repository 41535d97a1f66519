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
/// How often videos past `video_retention_days` are looked for.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);
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
        })
    }

    /// Uploads video `id` (its state `uploading`), retrying until the store has it or the
    /// video is gone; nothing if its upload runs already.
    pub fn spawn(self: &Arc<Self>, id: i64) {
        if !self.running().insert(id) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut wait = FIRST_RETRY;
            loop {
                match me.attempt(id).await {
                    // Uploaded, or deleted meanwhile.
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(video = id, error = %e, retry_in = ?wait, "video upload failed");
                        if !me.set_upload_failed(id, e).await {
                            break;
                        }
                    }
                }
                tokio::time::sleep(wait).await;
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
        let rendered = dir.clone();
        tokio::task::spawn_blocking(move || render_playlists(&rendered))
            .await
            .map_err(|_| "rendering the playlists failed".to_owned())?
            .map_err(|e| format!("rendering the playlists: {e}"))?;
        let done = read_journal(&dir);
        for (name, size) in files(&dir).map_err(|e| format!("listing the files: {e}"))? {
            if done.get(&name) == Some(&size) {
                continue;
            }
            if !self.exists(id).await {
                return Ok(false);
            }
            let sent = self
                .storage
                .upload(id, &name, &dir.join(&name))
                .await
                .map_err(|e| e.to_string())?;
            journal(&dir, &name, sent).map_err(|e| format!("writing the upload journal: {e}"))?;
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
        let store = self.store.clone();
        let marked = tokio::task::spawn_blocking(move || {
            let Some(v) = store.get_video(id)? else {
                return Ok(false);
            };
            let mut state = v.state;
            state.status = VideoStatus::Ready;
            state.stored = true;
            state.upload_error = None;
            store.set_video_state(id, &state, OffsetDateTime::now_utc())
        })
        .await;
        matches!(marked, Ok(Ok(true)))
    }

    /// Video `id` is `upload_failed` for `error`; false when it is gone.
    async fn set_upload_failed(&self, id: i64, error: String) -> bool {
        let store = self.store.clone();
        let set = tokio::task::spawn_blocking(move || {
            let Some(v) = store.get_video(id)? else {
                return Ok(false);
            };
            let mut state = v.state;
            state.status = VideoStatus::UploadFailed;
            state.upload_error = Some(error);
            store.set_video_state(id, &state, OffsetDateTime::now_utc())
        })
        .await;
        matches!(set, Ok(Ok(true)))
    }

    fn remove_local_later(&self, id: i64) {
        let (dir, budget, keep) = (
            self.root.join(id.to_string()),
            self.budget.clone(),
            self.keep_local,
        );
        tokio::spawn(async move {
            tokio::time::sleep(keep).await;
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

impl super::manager::Recordings {
    /// Deletes video `id`: its record, then its files here and its objects in the store (a
    /// failed removal leaves files no record names, which is logged, never a record whose
    /// media is gone). `None`: there was no such video.
    pub async fn delete_video(
        self: &Arc<Self>,
        id: i64,
    ) -> Result<Option<crate::db::VideoRow>, crate::db::StoreError> {
        let store = self.store.clone();
        let row = tokio::task::spawn_blocking(move || store.delete_video(id))
            .await
            .map_err(|_| crate::db::StoreError::Interrupted)??;
        let Some(row) = row else {
            return Ok(None);
        };
        let me = self.clone();
        let removed = tokio::task::spawn_blocking(move || me.remove_files(id)).await;
        if let Ok(Err(e)) = removed {
            tracing::error!(video = id, error = %e, "cannot remove the video's files");
        }
        // Its objects too, any that a started upload left (any node can: the store is shared).
        if let Some(storage) = self.storage() {
            match storage.delete_video(id).await {
                Ok(n) => tracing::debug!(video = id, objects = n, "video's objects deleted"),
                Err(e) => {
                    tracing::error!(video = id, error = %e, "cannot delete the video's objects")
                }
            }
        }
        tracing::info!(video = id, "video deleted");
        self.events.emit(crate::events::Event::VideoDeleted {
            stream_id: row.stream_id,
            video_id: id,
        });
        Ok(Some(row))
    }

    /// Deletes, every hour, the videos older than `video_retention_days` ([`Self::expire`]).
    pub fn spawn_retention(self: &Arc<Self>, keep: Duration, node_id: String) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RETENTION_EVERY);
            loop {
                tick.tick().await;
                let Some(me) = me.upgrade() else { return };
                me.expire(keep, &node_id).await;
            }
        });
    }

    /// Deletes the finished videos created more than `keep` ago: those recorded here, and
    /// those in the object store whatever node recorded them (a dead node's too; a record is
    /// deleted once across the nodes). Returns how many went.
    pub async fn expire(self: &Arc<Self>, keep: Duration, node_id: &str) -> usize {
        let before = OffsetDateTime::now_utc() - keep;
        let store = self.store.clone();
        let listed = tokio::task::spawn_blocking(move || {
            store.list_videos(&VideoFilter {
                created_before: Some(before),
                limit: u32::MAX,
                ..VideoFilter::default()
            })
        })
        .await;
        let Ok(Ok((videos, _))) = listed else {
            tracing::error!("cannot list the videos past their retention");
            return 0;
        };
        let mut gone = 0;
        for v in videos {
            let ours = v.state.node.as_deref().is_none_or(|n| n == node_id);
            if !(ours || v.state.stored) || v.state.status == VideoStatus::Pending {
                continue;
            }
            tracing::info!(video = v.id, "video past its retention");
            match self.delete_video(v.id).await {
                Ok(Some(_)) => gone += 1,
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(video = v.id, error = %e, "cannot delete an expired video")
                }
            }
        }
        gone
    }
}
