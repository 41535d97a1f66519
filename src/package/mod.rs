//! Packaging: the per-stream segment store fed by the pipeline, and the renderers that turn it
//! into LL-HLS playlists (later LL-DASH and MPEG-TS HLS). Never imports ingest.

pub mod hls;
pub mod store;
pub mod ts;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

pub use store::{PackagingConfig, PartIn, Rendition, RenditionKind, StreamPackage};

/// A [`StreamPackage`] shared between the pipeline's streaming threads (writers) and HTTP
/// handlers (readers), with a change counter that blocking requests wait on.
pub struct Package {
    state: Mutex<StreamPackage>,
    changed: watch::Sender<u64>,
}

impl Package {
    pub fn new(package: StreamPackage) -> Package {
        Package {
            state: Mutex::new(package),
            changed: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, StreamPackage> {
        // Writers only append to in-memory structures; a panic mid-update leaves a usable store.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn read<R>(&self, f: impl FnOnce(&StreamPackage) -> R) -> R {
        f(&self.lock())
    }

    /// Applies a change and wakes every waiting request.
    pub fn update<R>(&self, f: impl FnOnce(&mut StreamPackage) -> R) -> R {
        let out = f(&mut self.lock());
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
        out
    }

    /// Evaluates `f` now and after every change until it yields a value or `timeout` passes.
    pub async fn wait_for<R>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&StreamPackage) -> Option<R>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn waiters_wake_on_update_and_time_out() {
        let pkg = Arc::new(Package::new(StreamPackage::new(
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
