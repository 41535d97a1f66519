//! After the inputs are gone: the outputs stay for the grace period (a reconnect continues
//! them after a discontinuity), then the playlists end and linger before the stream is
//! forgotten. Every step checks the epoch, so a newer session is never touched.

use std::sync::Arc;

use super::Registry;
use crate::events::Event;

impl Registry {
    /// The pipeline of `epoch` has drained: start the grace period.
    pub(super) fn inputs_gone(self: &Arc<Self>, id: i64, epoch: u64) {
        let Some(package) = self.sessions.session_ended(id, epoch) else {
            return;
        };
        package.mark_discontinuity();
        self.events.emit(Event::InputsGone { stream_id: id });
        tracing::info!(
            stream = id,
            grace_secs = self.config.grace.as_secs(),
            "inputs gone; grace period"
        );
        let registry = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(registry.config.grace).await;
            let Some(package) = registry.sessions.idle_package(id, epoch) else {
                return;
            };
            package.set_ended();
            registry.events.emit(Event::LiveEnded { stream_id: id });
            tracing::info!(stream = id, "stream ended");
            tokio::time::sleep(registry.config.linger).await;
            if registry.sessions.remove_idle(id, epoch) {
                registry.forgotten(id);
                drop(package);
                crate::heap::released();
            }
        });
    }
}
