//! One SRT caller: stream id → authorisation before the handshake is answered (refusals carry
//! an SRT reject reason and allocate nothing), the stream's passphrase as the encryption key,
//! then MPEG-TS payloads → media → registry until the caller leaves, goes idle, is cut off or
//! the server stops (the socket closed, so the encoder calls again — another node behind a
//! load balancer). A reader's stream id (`play:…`, `m=request`) is handed to the
//! [`super::Readers`] given.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use srt_protocol::settings::KeySettings;
use srt_tokio::access::{RejectReason, ServerRejectReason};
use srt_tokio::options::Passphrase;
use srt_tokio::{ConnectionRequest, SrtSocket};

use super::streamid::{self, Request, Target};
use super::Readers;
use crate::ingest::mpegts::to_media::TsToMedia;
use crate::live::{
    Caller, HookRefusal, Protocol, PublishError, PublishPermit, Publisher, Registry,
};
use crate::shutdown::Stopping;

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
        // Only a PULL claim is left to a roomier node; as a refusal it would be this.
        PublishError::AtCapacity { .. } | PublishError::BetterPlaced { .. } => {
            ServerRejectReason::Overload
        }
        PublishError::Hook {
            refusal: HookRefusal::Refused(_),
            ..
        } => ServerRejectReason::Forbidden,
        // SRT_REJX_DOWN: the service that decides is not answering.
        PublishError::Hook { .. } => ServerRejectReason::Down,
    }
}

pub async fn reject(request: ConnectionRequest, reason: ServerRejectReason) {
    let _ = request.reject(RejectReason::Server(reason)).await;
}

/// Drives one caller to its end; everything worth knowing is logged with the peer. A
/// publisher's connection is closed once `stopping` refuses.
pub async fn run(
    request: ConnectionRequest,
    registry: Arc<Registry>,
    (idle_timeout, stopping): (Duration, Stopping),
    readers: Arc<dyn Readers>,
) {
    let peer = request.remote();
    let target = match streamid::parse(request.stream_id().map(|s| s.as_str())) {
        Ok(Request::Publish(target)) => target,
        Ok(Request::Play(target)) => return readers.read(request, target, stopping).await,
        Err(e) => {
            tracing::info!(%peer, error = %e, "SRT caller rejected");
            return reject(request, ServerRejectReason::BadRequest).await;
        }
    };
    let (permit, key) = match admit(&request, &registry, target).await {
        Ok(admitted) => admitted,
        Err(reason) => return reject(request, reason).await,
    };
    let (id, slot) = (permit.row().id, permit.slot());
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
    let receiving = Receiving {
        socket: &mut socket,
        adapter: &mut adapter,
        publisher: &mut publisher,
    };
    let (reason, bytes) = receiving.run((idle_timeout, stopping), (peer, id)).await;
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

/// Whether the caller may publish, decided before the handshake is answered: its stream id,
/// the registry's permit, and the stream's passphrase as the key (`None`: unencrypted). A
/// refusal is the reject reason to answer with (logged here).
async fn admit(
    request: &ConnectionRequest,
    registry: &Arc<Registry>,
    target: Target,
) -> Result<(PublishPermit, Option<KeySettings>), ServerRejectReason> {
    let peer = request.remote();
    let (id, slot) = (target.stream_id, target.slot);
    let caller = Caller {
        remote: Some(peer),
        query: target.query.clone(),
    };
    let permit = registry
        .check_publish(
            id,
            slot,
            &target.token,
            (Protocol::Srt, &caller),
            crate::live::DRAIN_WAIT_HANDSHAKE,
        )
        .await
        .map_err(|e| {
            tracing::info!(%peer, stream = id, ?slot, error = %e, "SRT publish refused");
            reject_reason(&e)
        })?;
    let key = key_settings(request, permit.row().settings.srt_passphrase.clone(), id)?;
    Ok((permit, key))
}

/// The encryption key for a caller of stream `id` whose record has `passphrase` (`None`:
/// unencrypted). A caller without it, or with another, fails the handshake that follows.
pub fn key_settings(
    request: &ConnectionRequest,
    passphrase: Option<String>,
    id: i64,
) -> Result<Option<KeySettings>, ServerRejectReason> {
    match passphrase.map(Passphrase::try_from) {
        None => Ok(None),
        Some(Ok(passphrase)) => Ok(Some(KeySettings {
            // The caller's key length: srt-tokio requires it to match (AES-128/192/256).
            key_size: request.key_size(),
            passphrase,
        })),
        Some(Err(e)) => {
            tracing::error!(stream = id, error = %e, "stored SRT passphrase unusable");
            Err(ServerRejectReason::InternalServerError)
        }
    }
}

/// A publishing caller's socket, its payloads' adapter and the publisher they go to.
struct Receiving<'a> {
    socket: &'a mut SrtSocket,
    adapter: &'a mut TsToMedia,
    publisher: &'a mut Publisher,
}

impl Receiving<'_> {
    /// MPEG-TS payloads → media → the publisher until the caller leaves, goes idle for
    /// `idle_timeout`, sends what is not MPEG-TS, the server ends the publish or `stopping`
    /// refuses. Returns why, and the bytes received (`who`: the peer and the stream, for the
    /// log).
    async fn run(
        self,
        (idle_timeout, mut stopping): (Duration, Stopping),
        who: (std::net::SocketAddr, i64),
    ) -> (String, u64) {
        let (peer, id) = who;
        let mut out = Vec::new();
        let mut bytes = 0u64;
        let reason = loop {
            let next = tokio::select! {
                // The stop first: a caller sending without pause must still be closed.
                biased;
                _ = stopping.until_refusing() => break "the server is shutting down".to_owned(),
                next = tokio::time::timeout(idle_timeout, self.socket.next()) => next,
            };
            let payload = match next {
                Err(_) => break format!("no data for {idle_timeout:?}"),
                Ok(None) => break "caller closed".to_owned(),
                Ok(Some(Err(e))) => break format!("receive error: {e}"),
                Ok(Some(Ok((_, payload)))) => payload,
            };
            bytes += payload.len() as u64;
            if let Err(e) = self.adapter.push(&payload, &mut out) {
                tracing::warn!(%peer, stream = id, error = %e, "SRT payload is not usable MPEG-TS; closing");
                break format!("bad payload: {e}");
            }
            if !out.drain(..).all(|m| self.publisher.send(m)) {
                break "publish ended by the server".to_owned();
            }
        };
        if self.adapter.finish(&mut out).is_ok() {
            for m in out.drain(..) {
                self.publisher.send(m);
            }
        }
        (reason, bytes)
    }
}
