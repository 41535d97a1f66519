//! One SRT caller: stream id → authorisation before the handshake is answered (refusals carry
//! an SRT reject reason and allocate nothing), the stream's passphrase as the encryption key,
//! then MPEG-TS payloads → media → registry until the caller leaves, goes idle or is cut off.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use srt_protocol::settings::KeySettings;
use srt_tokio::access::{RejectReason, ServerRejectReason};
use srt_tokio::options::Passphrase;
use srt_tokio::ConnectionRequest;

use super::streamid;
use crate::ingest::mpegts::to_media::TsToMedia;
use crate::live::{Protocol, PublishError, Registry};

/// A publisher that sends no payload for this long is gone (SRT keepalives do not count).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a closing handshake may take before the socket is simply dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The SRT reject reason for a refused publish (`SRT_REJX_*`, carried to the caller).
fn reject_reason(e: &PublishError) -> ServerRejectReason {
    match e {
        PublishError::UnknownStream(_) => ServerRejectReason::Notfound,
        PublishError::WrongToken(_) => ServerRejectReason::Unauthorized,
        PublishError::Inactive(_) => ServerRejectReason::Forbidden,
        PublishError::PullStream(_) => ServerRejectReason::BadMode,
        PublishError::AlreadyLive(_) | PublishError::LiveElsewhere { .. } => {
            ServerRejectReason::Conflict
        }
        PublishError::Store => ServerRejectReason::InternalServerError,
    }
}

async fn reject(request: ConnectionRequest, reason: ServerRejectReason) {
    let _ = request.reject(RejectReason::Server(reason)).await;
}

/// Drives one caller to its end; everything worth knowing is logged with the peer.
pub async fn run(request: ConnectionRequest, registry: Arc<Registry>, idle_timeout: Duration) {
    let peer = request.remote();
    let target = match streamid::parse(request.stream_id().map(|s| s.as_str())) {
        Ok(t) => t,
        Err(e) => {
            tracing::info!(%peer, error = %e, "SRT caller rejected");
            return reject(request, ServerRejectReason::BadRequest).await;
        }
    };
    let (id, slot) = (target.stream_id, target.slot);
    let permit = match registry
        .check_publish(
            id,
            slot,
            &target.token,
            Protocol::Srt,
            crate::live::DRAIN_WAIT_HANDSHAKE,
        )
        .await
    {
        Ok(permit) => permit,
        Err(e) => {
            tracing::info!(%peer, stream = id, ?slot, error = %e, "SRT publish refused");
            return reject(request, reject_reason(&e)).await;
        }
    };
    let key = match permit
        .row()
        .settings
        .srt_passphrase
        .clone()
        .map(Passphrase::try_from)
    {
        None => None,
        Some(Ok(passphrase)) => Some(KeySettings {
            // The caller's key length: srt-tokio requires it to match (AES-128/192/256).
            key_size: request.key_size(),
            passphrase,
        }),
        Some(Err(e)) => {
            tracing::error!(stream = id, error = %e, "stored SRT passphrase unusable");
            return reject(request, ServerRejectReason::InternalServerError).await;
        }
    };
    let encrypted = key.is_some();
    let mut socket = match request.accept(key).await {
        Ok(s) => s,
        Err(e) => {
            // The handshake failed after our answer: a wrong or missing passphrase.
            tracing::info!(%peer, stream = id, encrypted, error = %e, "SRT handshake failed (passphrase mismatch?)");
            return;
        }
    };
    let mut publisher = match registry.start(permit).await {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(%peer, stream = id, ?slot, error = %e, "SRT publish refused after the handshake");
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, socket.close()).await;
            return;
        }
    };
    tracing::info!(%peer, stream = id, ?slot, encrypted, latency_ms = socket.settings().recv_tsbpd_latency.as_millis() as u64, "SRT publisher connected");
    let mut adapter = TsToMedia::new();
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let reason = loop {
        let payload = match tokio::time::timeout(idle_timeout, socket.next()).await {
            Err(_) => break format!("no data for {idle_timeout:?}"),
            Ok(None) => break "caller closed".to_owned(),
            Ok(Some(Err(e))) => break format!("receive error: {e}"),
            Ok(Some(Ok((_, payload)))) => payload,
        };
        bytes += payload.len() as u64;
        if let Err(e) = adapter.push(&payload, &mut out) {
            tracing::warn!(%peer, stream = id, error = %e, "SRT payload is not usable MPEG-TS; closing");
            break format!("bad payload: {e}");
        }
        if !out.drain(..).all(|m| publisher.send(m)) {
            break "publish ended by the server".to_owned();
        }
    };
    if adapter.finish(&mut out).is_ok() {
        for m in out.drain(..) {
            publisher.send(m);
        }
    }
    drop(publisher);
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, socket.close()).await;
    let stats = adapter.stats();
    tracing::info!(
        %peer,
        stream = id,
        ?slot,
        reason,
        bytes,
        ts_packets = stats.packets,
        continuity_errors = stats.continuity_errors,
        dropped_pes = stats.dropped_pes,
        "SRT publisher left"
    );
}
