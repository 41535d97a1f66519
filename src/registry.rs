//! Live streams: who publishes which stream, the package its outputs are served from, its live
//! metrics, and the grace period after a publisher leaves. Ingest talks to it with
//! [`Registry::publish`]; HTTP delivery and the API read from it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::mpsc;

use crate::media::MediaMessage;
use crate::package::{Package, PackagingConfig, StreamPackage};
use crate::pipeline::{self, Ladder};
use crate::quality::QualitySets;
use crate::store::{Store, StoreError, StreamRow};

/// Media messages buffered between an ingest connection and its pipeline. A full queue means
/// the pipeline is not keeping up: the connection drops and counts, it never blocks.
pub const PUBLISH_QUEUE: usize = 1024;
/// How long outputs stay after the publisher leaves; a reconnect within it continues them.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);
/// How long an ended stream's playlists (with EXT-X-ENDLIST) stay fetchable.
pub const ENDED_LINGER: Duration = Duration::from_secs(30);

/// The receiving/transcoding state of a stream; all off while nothing is received.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveStatus {
    pub live: bool,
    pub backup_live: bool,
    pub transcoded_qualities: Vec<String>,
    pub recording_duration: f64,
    pub transcoding_speed: Option<f64>,
    pub frame_rate: Option<f64>,
    pub video_height: Option<u32>,
    pub video_width: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Main,
    Backup,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PublishError {
    #[error("stream {0} does not exist")]
    UnknownStream(i64),
    #[error("wrong token for stream {0}")]
    WrongToken(i64),
    #[error("stream {0} is not active")]
    Inactive(i64),
    #[error("stream {0} is a PULL stream")]
    PullStream(i64),
    #[error("stream {0} is already live")]
    AlreadyLive(i64),
    #[error("backup ingest for stream {0} is not supported yet")]
    BackupUnsupported(i64),
    #[error("store unavailable")]
    Store,
}

/// Shared, updated by the pipeline's threads, read by the API.
pub type SharedStatus = Arc<Mutex<LiveStatus>>;

struct Entry {
    package: Arc<Package>,
    status: SharedStatus,
    /// Publishing session number; `None` while in the grace period or ended.
    session: Option<u64>,
    /// Bumped on every publish, so a stale timer or pipeline end cannot touch a newer session.
    epoch: u64,
    /// Tells the current pipeline to drain and stop (deactivation, deletion, shutdown).
    stop: tokio::sync::watch::Sender<bool>,
}

pub struct Registry {
    streams: Mutex<HashMap<i64, Entry>>,
    store: Arc<dyn Store>,
    quality_sets: Arc<QualitySets>,
    packaging: PackagingConfig,
    grace: Duration,
    /// `DATA_DIR/media`: each live stream's segments under `{id}/`.
    media_root: std::path::PathBuf,
    next_session: Mutex<u64>,
    pipelines: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// A publisher's handle: media goes in through [`Publisher::send`]; dropping it ends the
/// publish (the pipeline drains and the grace period starts).
pub struct Publisher {
    pub stream_id: i64,
    tx: mpsc::Sender<MediaMessage>,
    pub dropped: u64,
}

impl Publisher {
    /// Never blocks the connection: a full queue drops the message and counts it.
    pub fn send(&mut self, msg: MediaMessage) -> bool {
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped += 1;
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if self.dropped > 0 {
            tracing::warn!(
                stream = self.stream_id,
                dropped = self.dropped,
                "media messages dropped: the pipeline fell behind"
            );
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    pub fn new(
        store: Arc<dyn Store>,
        quality_sets: Arc<QualitySets>,
        packaging: PackagingConfig,
        grace: Duration,
        media_root: std::path::PathBuf,
    ) -> Arc<Registry> {
        Arc::new(Registry {
            streams: Mutex::new(HashMap::new()),
            store,
            quality_sets,
            packaging,
            grace,
            media_root,
            next_session: Mutex::new(1),
            pipelines: Mutex::new(Vec::new()),
        })
    }

    /// Stops every pipeline (each flushes its last parts and goes to NULL), bounded in time.
    pub async fn shutdown(&self, within: Duration) {
        for e in lock(&self.streams).values() {
            e.stop.send_replace(true);
        }
        let handles = std::mem::take(&mut *lock(&self.pipelines));
        let all = futures_join(handles);
        if tokio::time::timeout(within, all).await.is_err() {
            tracing::warn!("pipelines still running after {within:?}; exiting anyway");
        }
    }

    pub fn packaging(&self) -> PackagingConfig {
        self.packaging
    }

    pub fn status(&self, id: i64) -> LiveStatus {
        lock(&self.streams)
            .get(&id)
            .map(|e| lock(&e.status).clone())
            .unwrap_or_default()
    }

    /// Ends a live publish (the stream was deactivated or deleted): its pipeline drains, the
    /// publisher's connection is closed, and the usual grace period follows.
    pub fn kick(&self, id: i64) {
        if let Some(e) = lock(&self.streams).get(&id).filter(|e| e.session.is_some()) {
            tracing::info!(stream = id, "stopping the live publish");
            e.stop.send_replace(true);
        }
    }

    /// Applies changed settings to a live (or lingering) stream: the DVR window and the ENDLIST
    /// choice take effect with the next part, without a restart.
    pub fn apply_settings(&self, id: i64, settings: &crate::store::StreamSettings) {
        let Some(package) = self.package(id) else {
            return;
        };
        let (window, endlist) = (dvr_window(settings), settings.hls_mpegts_endlist_tag);
        package.update(|p| {
            p.dvr_window = window;
            p.endlist_tag = endlist;
        });
    }

    /// Empties a stream's rewind window (memory and disk); `false` if it has no outputs.
    pub fn dvr_cleanup(&self, id: i64) -> bool {
        let Some(package) = self.package(id) else {
            return false;
        };
        let (removed, dir) = package.update(|p| {
            let dir = p.media_dir.clone();
            let mut removed = Vec::new();
            for (output, list) in [
                (crate::package::Output::Cmaf, &mut p.renditions),
                (crate::package::Output::Ts, &mut p.ts_renditions),
            ] {
                for r in list.iter_mut() {
                    removed.extend(
                        r.clear_complete()
                            .into_iter()
                            .map(|msn| (output, r.name.clone(), msn)),
                    );
                }
            }
            (removed, dir)
        });
        if let Some(dir) = dir {
            for (output, name, msn) in removed {
                let _ = std::fs::remove_file(dir.segment_path(output, &name, msn));
            }
        }
        tracing::info!(stream = id, "DVR window emptied");
        true
    }

    /// The package serving a stream's outputs, while it is live or in its grace/linger time.
    pub fn package(&self, id: i64) -> Option<Arc<Package>> {
        lock(&self.streams).get(&id).map(|e| e.package.clone())
    }

    async fn load(&self, id: i64) -> Result<Option<StreamRow>, PublishError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.get_stream(id))
            .await
            .map_err(|_| PublishError::Store)?
            .map_err(|e: StoreError| {
                tracing::error!(stream = id, error = %e, "store failure during publish");
                PublishError::Store
            })
    }

    async fn default_quality_set(&self) -> i64 {
        let store = self.store.clone();
        let stored = tokio::task::spawn_blocking(move || {
            store.get_setting(crate::quality::DEFAULT_QUALITY_SET_KEY)
        })
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
        self.quality_sets.default_id(stored.as_deref())
    }

    /// Authorises a publish and starts (or resumes) the stream's pipeline. Every refusal happens
    /// before anything is allocated.
    pub async fn publish(
        self: &Arc<Self>,
        id: i64,
        slot: Slot,
        token: &str,
        protocol: &'static str,
    ) -> Result<Publisher, PublishError> {
        let row = self
            .load(id)
            .await?
            .ok_or(PublishError::UnknownStream(id))?;
        if !crate::api::auth::constant_time_eq(row.token.as_bytes(), token.as_bytes()) {
            return Err(PublishError::WrongToken(id));
        }
        if !row.settings.active {
            return Err(PublishError::Inactive(id));
        }
        if row.settings.pull {
            return Err(PublishError::PullStream(id));
        }
        if slot == Slot::Backup {
            return Err(PublishError::BackupUnsupported(id));
        }
        let set_id = match row.settings.quality_set_id {
            Some(q) if self.quality_sets.get(q).is_some() => q,
            _ => self.default_quality_set().await,
        };
        let ladder = Ladder::from_set(self.quality_sets.get(set_id).expect("resolved above"));

        let endlist_tag = row.settings.hls_mpegts_endlist_tag;
        let dvr_window = dvr_window(&row.settings);
        let media_dir = crate::package::MediaDir::new(self.media_root.join(id.to_string()));
        let (tx, rx) = mpsc::channel(PUBLISH_QUEUE);
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let (package, status, epoch) = {
            let mut streams = lock(&self.streams);
            let session = {
                let mut n = lock(&self.next_session);
                *n += 1;
                *n
            };
            match streams.get_mut(&id) {
                Some(e) if e.session.is_some() => return Err(PublishError::AlreadyLive(id)),
                Some(e) => {
                    // A reconnect within the grace period: same package, new epoch.
                    e.session = Some(session);
                    e.epoch += 1;
                    e.stop = stop_tx;
                    e.package.update(|p| p.ended = false);
                    (e.package.clone(), e.status.clone(), e.epoch)
                }
                None => {
                    let package =
                        Arc::new(Package::new(StreamPackage::new(self.packaging, vec![])));
                    let status = SharedStatus::default();
                    streams.insert(
                        id,
                        Entry {
                            package: package.clone(),
                            status: status.clone(),
                            session: Some(session),
                            epoch: 1,
                            stop: stop_tx,
                        },
                    );
                    (package, status, 1)
                }
            }
        };
        package.update(|p| {
            p.endlist_tag = endlist_tag;
            p.dvr_window = dvr_window;
            p.media_dir = Some(media_dir);
        });
        lock(&status).live = true;
        self.record_times(id, Some(OffsetDateTime::now_utc()), None);
        tracing::info!(stream = id, protocol, epoch, "publish started");

        let registry = self.clone();
        let task = tokio::spawn(async move {
            let result = pipeline::run(id, ladder, package, status.clone(), rx, stop).await;
            if let Err(e) = &result {
                tracing::error!(stream = id, error = %e, "pipeline failed; stream ended");
            }
            registry.publisher_left(id, epoch);
        });
        let mut tasks = lock(&self.pipelines);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
        Ok(Publisher {
            stream_id: id,
            tx,
            dropped: 0,
        })
    }

    fn record_times(
        &self,
        id: i64,
        started: Option<OffsetDateTime>,
        finished: Option<OffsetDateTime>,
    ) {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.set_stream_times(id, started, None, finished) {
                tracing::error!(stream = id, error = %e, "cannot record stream times");
            }
        });
    }

    /// The pipeline of `epoch` has drained: start the grace period.
    fn publisher_left(self: &Arc<Self>, id: i64, epoch: u64) {
        {
            let mut streams = lock(&self.streams);
            let Some(e) = streams.get_mut(&id).filter(|e| e.epoch == epoch) else {
                return;
            };
            e.session = None;
            *lock(&e.status) = LiveStatus::default();
            e.package.update(|p| {
                for r in &mut p.renditions {
                    r.mark_discontinuity();
                }
            });
        }
        self.record_times(id, None, Some(OffsetDateTime::now_utc()));
        tracing::info!(
            stream = id,
            grace_secs = self.grace.as_secs(),
            "publisher left; grace period"
        );
        let registry = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(registry.grace).await;
            let package = {
                let streams = lock(&registry.streams);
                match streams.get(&id) {
                    Some(e) if e.epoch == epoch && e.session.is_none() => e.package.clone(),
                    _ => return,
                }
            };
            package.update(|p| p.ended = true);
            tracing::info!(stream = id, "stream ended");
            tokio::time::sleep(ENDED_LINGER).await;
            let mut streams = lock(&registry.streams);
            if streams
                .get(&id)
                .is_some_and(|e| e.epoch == epoch && e.session.is_none())
            {
                streams.remove(&id);
            }
        });
    }
}

/// Awaits every handle (a panicked or cancelled task counts as done).
async fn futures_join(handles: Vec<tokio::task::JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

/// The rewind window a stream's settings ask for.
fn dvr_window(settings: &crate::store::StreamSettings) -> Option<Duration> {
    settings
        .dvr_enabled
        .then(|| Duration::from_secs(u64::from(settings.dvr_duration)))
}
