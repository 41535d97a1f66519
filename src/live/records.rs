//! What a publish reads of the stream's record: the record itself, the quality set its ladder
//! comes from (the record's, else the stored default), the renderers' options its settings ask
//! for.

use std::time::Duration;

use super::{PublishError, Registry};
use crate::db::{StoreError, StreamRow, StreamSettings};
use crate::package::SessionOptions;
use crate::quality::QualitySet;

impl Registry {
    pub(super) async fn load(&self, id: i64) -> Result<Option<StreamRow>, PublishError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.get_stream(id))
            .await
            .map_err(|_| PublishError::Store)?
            .map_err(|e: StoreError| {
                tracing::error!(stream = id, error = %e, "store failure during publish");
                PublishError::Store
            })
    }

    pub(super) async fn quality_set(&self, row: &StreamRow) -> QualitySet {
        let requested = row
            .settings
            .quality_set_id
            .filter(|&id| self.quality_sets.get(id).is_some());
        let stored = match requested {
            Some(_) => None,
            None => {
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || {
                    store.get_setting(crate::quality::DEFAULT_QUALITY_SET_KEY)
                })
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
            }
        };
        self.quality_sets
            .resolve(requested, stored.as_deref())
            .clone()
    }
}

/// The renderers' options a stream's settings ask for.
pub(super) fn session_options(settings: &StreamSettings) -> SessionOptions {
    SessionOptions {
        dvr_window: settings
            .dvr_enabled
            .then(|| Duration::from_secs(u64::from(settings.dvr_duration))),
        endlist_tag: settings.hls_mpegts_endlist_tag,
    }
}
