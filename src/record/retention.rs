//! Videos leaving: one deletion (the record, then the files here and the objects in the
//! store) for the API and for `video_retention_days`, which runs it hourly on the videos past
//! their retention.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use super::manager::Recordings;
use crate::db::{VideoFilter, VideoStatus};

/// How often videos past `video_retention_days` are looked for.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);

impl Recordings {
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

    /// Deletes, every hour, the videos older than `video_retention_days` ([`Self::expire`]),
    /// until [`Self::shutdown`], which lets a pass under way finish (a video is never left
    /// half deleted).
    pub fn spawn_retention(self: &Arc<Self>, keep: Duration, node_id: String) {
        let me = Arc::downgrade(self);
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(RETENTION_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.wait_for(|s| *s) => return,
                }
                let Some(me) = me.upgrade() else { return };
                me.expire(keep, &node_id).await;
            }
        });
        *super::manager::lock(&self.retention) = Some((stop, task));
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
