//! RTMP and RTMPS ingest (rml_rtmp): listener, connection shell, chunk guard, publish keys, the
//! server's own status messages and the FLV → media adapter.

pub mod conn;
pub mod flv;
pub mod key;
pub mod listener;
pub mod status;
pub mod to_media;
pub mod vet;

use std::time::Duration;

/// What one RTMP or RTMPS listener allows its peers (from the configuration).
#[derive(Debug, Clone, Copy)]
pub struct RtmpConfig {
    /// Concurrent connections per listener; the excess is closed at accept.
    pub max_connections: usize,
    /// Concurrent connections from one address per listener (trusted proxies exempt).
    pub max_connections_per_ip: usize,
    /// A peer that has not finished TLS and started publishing by then is closed.
    pub handshake_timeout: Duration,
    /// A publisher that sends nothing for this long is gone.
    pub idle_timeout: Duration,
    pub guard: vet::GuardLimits,
}

impl Default for RtmpConfig {
    fn default() -> Self {
        RtmpConfig {
            max_connections: listener::DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: listener::DEFAULT_MAX_CONNECTIONS_PER_IP,
            handshake_timeout: conn::DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: conn::DEFAULT_IDLE_TIMEOUT,
            guard: vet::GuardLimits::default(),
        }
    }
}
