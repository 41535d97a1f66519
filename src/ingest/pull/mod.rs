//! PULL streams: for every record with `pull=true` and `active=true` the daemon fetches the
//! stream itself from the record's `uri` (one or more space-separated source URLs), cycling
//! through them round-robin (`task`), each through GStreamer (`source`) after the outbound-URL
//! policy's check ([`crate::url_policy`]). This manager follows the records' changes on the
//! events bus: started at boot, restarted when `uri` changes, stopped when the stream is
//! deactivated, turned into a push stream or deleted.

pub mod gateway;
pub mod rewrite;
pub mod source;
pub mod task;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::db::Store;
use crate::events::{Event, Next};
use crate::live::Registry;

/// A source that has delivered nothing this long after being opened is skipped.
pub const DEFAULT_FIRST_DATA_TIMEOUT: Duration = Duration::from_secs(10);
/// A source that stops delivering for this long is left for the next.
pub const DEFAULT_NO_DATA_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a full cycle in which no source delivered.
pub const DEFAULT_CYCLE_PAUSE: Duration = Duration::from_secs(2);
/// The seed rule: a PULL stream that receives nothing for 24 hours is deactivated.
pub const DEFAULT_INACTIVITY: Duration = Duration::from_secs(24 * 3600);
pub const DEFAULT_MAX_HELD_BYTES: usize = 32 * 1024 * 1024;
/// Records are re-read this often even without a change notice: the only way a PULL record
/// created or edited through another node's API reaches this one, whose fetcher must know it
/// to take the stream over when the node pulling it dies.
const RESCAN: Duration = Duration::from_secs(5);

/// Why the PULL manager could not start.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Gateway(#[from] gateway::GatewayError),
}

#[derive(Debug, Clone, Copy)]
pub struct PullConfig {
    pub first_data_timeout: Duration,
    pub no_data_timeout: Duration,
    pub cycle_pause: Duration,
    pub inactivity: Duration,
    /// Off by default: sources resolving to link-local/metadata addresses are refused and HTTP
    /// redirects are not followed.
    pub allow_link_local: bool,
    /// What a source may deliver while it proves it is live (an HLS/DASH demuxer fetches its
    /// first segments in a burst); more ends the attempt.
    pub max_held_bytes: usize,
    /// An HLS playlist or DASH manifest larger than this fails the request (see `gateway`).
    pub max_playlist_bytes: usize,
    /// A segment larger than this is cut; the source URL itself (a progressive stream) is not.
    pub max_segment_bytes: u64,
}

impl Default for PullConfig {
    fn default() -> Self {
        PullConfig {
            first_data_timeout: DEFAULT_FIRST_DATA_TIMEOUT,
            no_data_timeout: DEFAULT_NO_DATA_TIMEOUT,
            cycle_pause: DEFAULT_CYCLE_PAUSE,
            inactivity: DEFAULT_INACTIVITY,
            allow_link_local: false,
            max_held_bytes: DEFAULT_MAX_HELD_BYTES,
            max_playlist_bytes: gateway::DEFAULT_MAX_PLAYLIST_BYTES,
            max_segment_bytes: gateway::DEFAULT_MAX_SEGMENT_BYTES,
        }
    }
}

struct Running {
    uris: String,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

pub struct Puller {
    registry: Arc<Registry>,
    config: PullConfig,
    store: Arc<dyn Store>,
    gateway: Arc<gateway::Gateway>,
    running: Mutex<HashMap<i64, Running>>,
}

impl Puller {
    /// Starts the manager: every PULL record now, then each change the registry reports.
    pub fn spawn(
        registry: Arc<Registry>,
        store: Arc<dyn Store>,
        config: PullConfig,
        mut stopping: crate::shutdown::Stopping,
    ) -> Result<tokio::task::JoinHandle<()>, PullError> {
        let gateway = gateway::Gateway::new(gateway::GatewayLimits {
            max_playlist_bytes: config.max_playlist_bytes,
            max_segment_bytes: config.max_segment_bytes,
            allow_link_local: config.allow_link_local,
        })?;
        let puller = Arc::new(Puller {
            registry: registry.clone(),
            store,
            config,
            gateway,
            running: Mutex::new(HashMap::new()),
        });
        // Subscribed before the first scan: a change made during it is seen afterwards.
        let mut changes = registry.events().subscribe();
        Ok(tokio::spawn(async move {
            puller.rescan().await;
            let mut rescan = tokio::time::interval(RESCAN);
            rescan.tick().await;
            let mut following = true;
            loop {
                tokio::select! {
                    // A stopping node pulls nothing more: another node takes its PULLs over.
                    _ = stopping.until_refusing() => break,
                    _ = rescan.tick() => puller.rescan().await,
                    next = async {
                        match following {
                            true => changes.next().await,
                            false => std::future::pending().await,
                        }
                    } => match next {
                        Some(Next::Event(e)) => match e.event {
                            Event::StreamCreated { stream_id }
                            | Event::StreamUpdated { stream_id }
                            | Event::StreamDeleted { stream_id } => puller.reconcile(stream_id).await,
                            _ => {}
                        },
                        // Changes were missed: every record is looked at again.
                        Some(Next::Lost(_)) => puller.rescan().await,
                        None => following = false,
                    },
                }
            }
            puller.stop_all().await;
        }))
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn rescan(&self) {
        let store = self.store.clone();
        let ids = tokio::task::spawn_blocking(move || {
            let mut ids = Vec::new();
            let mut offset = 0;
            loop {
                let (rows, total) = store.list_streams(None, offset, 1000)?;
                let n = rows.len() as u64;
                ids.extend(rows.into_iter().filter(|r| r.settings.pull).map(|r| r.id));
                offset += n;
                if n == 0 || offset >= total {
                    return Ok::<_, crate::db::StoreError>(ids);
                }
            }
        })
        .await;
        let mut ids = match ids {
            Ok(Ok(ids)) => ids,
            other => {
                tracing::error!(?other, "PULL rescan could not read the records");
                return;
            }
        };
        // Running pulls whose record is gone or changed are reconciled too.
        ids.extend(self.running().keys().copied());
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            self.reconcile(id).await;
        }
    }

    /// Makes the running pull of stream `id` match its record.
    async fn reconcile(&self, id: i64) {
        let store = self.store.clone();
        let row = match tokio::task::spawn_blocking(move || store.get_stream(id)).await {
            Ok(Ok(row)) => row,
            other => {
                tracing::error!(stream = id, ?other, "PULL cannot read the record");
                return;
            }
        };
        let wanted = row
            .filter(|r| r.settings.pull && r.settings.active)
            .and_then(|r| r.settings.uri.clone())
            .filter(|u| !u.trim().is_empty());
        let mut running = self.running();
        running.retain(|_, r| !r.task.is_finished());
        let current = running.get(&id).filter(|r| !r.task.is_finished());
        if current.map(|r| &r.uris) == wanted.as_ref() {
            return;
        }
        if let Some(old) = running.remove(&id) {
            let _ = old.stop.send(true);
        }
        if let Some(uris) = wanted {
            let (stop, stop_rx) = watch::channel(false);
            let list = uris.split_whitespace().map(str::to_owned).collect();
            let task = tokio::spawn(task::run(
                id,
                list,
                self.registry.clone(),
                self.store.clone(),
                self.gateway.clone(),
                self.config,
                stop_rx,
            ));
            running.insert(id, Running { uris, stop, task });
        }
    }

    async fn stop_all(&self) {
        let all: Vec<Running> = self.running().drain().map(|(_, r)| r).collect();
        for r in &all {
            let _ = r.stop.send(true);
        }
        for r in all {
            let _ = tokio::time::timeout(Duration::from_secs(3), r.task).await;
        }
    }
}
