//! SRT ingest (srt-tokio): a listener that authorises each caller from its stream id at the
//! handshake (with the stream's passphrase enforced by SRT encryption), and a connection shell
//! that feeds the MPEG-TS payload through the TS → media adapter to the registry. Readers on
//! the same port (`play:{id}`) are handed to a [`Readers`] (the real-time side's SRT readers),
//! so ingest does not depend on its consumers.

pub mod conn;
pub mod listener;
pub mod streamid;

use std::time::Duration;

use futures::future::BoxFuture;
use srt_tokio::ConnectionRequest;

/// Serves SRT callers that read (`play:{id}`, `m=request`): answers their handshake and sends
/// them the stream. Implemented by `realtime::srt_read`.
pub trait Readers: Send + Sync {
    /// Serves the reader until it leaves, its stream ends or `stopping` refuses.
    fn read(
        &self,
        request: ConnectionRequest,
        target: streamid::PlayTarget,
        stopping: crate::shutdown::Stopping,
    ) -> BoxFuture<'static, ()>;
}

/// What the SRT listener allows its callers (from the configuration).
#[derive(Debug, Clone, Copy)]
pub struct SrtConfig {
    /// Concurrent callers; the excess is rejected at the handshake (`SRT_REJX_OVERLOAD`).
    pub max_connections: usize,
    /// Concurrent callers from one address (trusted proxies exempt).
    pub max_connections_per_ip: usize,
    /// A publisher that sends no payload for this long is gone (keepalives do not count).
    pub idle_timeout: Duration,
}

impl Default for SrtConfig {
    fn default() -> Self {
        SrtConfig {
            max_connections: listener::DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: listener::DEFAULT_MAX_CONNECTIONS_PER_IP,
            idle_timeout: conn::DEFAULT_IDLE_TIMEOUT,
        }
    }
}
