//! One RTMP(S) connection: handshake, session (rml_rtmp behind the [`ChunkGuard`]), publish
//! authorisation through the registry, FLV → media forwarding, and the server's stop (a new
//! publish refused, a publisher told before its connection closes). The I/O shell around the
//! sans-IO parts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use rml_rtmp::sessions::{
    ServerSession, ServerSessionConfig, ServerSessionEvent as Event, ServerSessionResult as Res,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::key;
use super::status;
use super::to_media::FlvToMedia;
use super::vet::ChunkGuard;
use super::RtmpConfig;
use crate::live::{Caller, Protocol, Publisher, Registry};
use crate::shutdown::Stopping;
use crate::url_policy::redact;

/// A peer that has not started publishing within this time is closed (slow handshakes, idle
/// connections that only hold a slot).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A publisher that sends nothing for this long is gone.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
const READ_BUFFER: usize = 64 * 1024;
/// Per-frame adapter errors tolerated before the publisher is cut off as broken.
const MAX_MEDIA_ERRORS: u64 = 1000;
/// The chunk size we send at, announced to the peer when the session starts: the peer reads
/// every chunk we send at this size, the shutdown notice's too.
const CHUNK_SIZE: u32 = 4096;
/// What a publish refused, or a publisher cut, by the server's stop is told: publishing again
/// is the remedy (behind a load balancer, to another node).
const SHUTTING_DOWN: &str = "the server is shutting down: publish again";
/// A publisher that does not take the shutdown notice within this long is closed without it.
const NOTICE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("handshake: {0:?}")]
    Handshake(rml_rtmp::handshake::HandshakeError),
    #[error("session: {0:?}")]
    Session(rml_rtmp::sessions::ServerSessionError),
    #[error("protocol: {0}")]
    Guard(#[from] super::vet::GuardError),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("publish refused: {0}")]
    Refused(String),
    #[error("too many bad media messages")]
    BadMedia,
}

/// Drives one connection to its end; every error is logged by the caller with the peer. Once
/// `stopping` refuses, a publisher is told and closed; a connection still to publish is
/// refused when it asks, and closed when the listeners close.
pub async fn run<S>(
    mut sock: S,
    peer: SocketAddr,
    registry: Arc<Registry>,
    config: &RtmpConfig,
    (started, stopping): (tokio::time::Instant, &Stopping),
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; READ_BUFFER];
    let deadline = started + config.handshake_timeout;
    let no_publish = || format!("no publish within {:?}", config.handshake_timeout);

    let Some(rest) = handshake(&mut sock, &mut buf, deadline, no_publish).await? else {
        return Ok(());
    };

    let mut session_config = ServerSessionConfig::new();
    session_config.chunk_size = CHUNK_SIZE;
    let (mut session, initial) = ServerSession::new(session_config).map_err(ConnError::Session)?;
    let mut guard = ChunkGuard::with_limits(config.guard);
    let mut state = State {
        publisher: None,
        adapter: FlvToMedia::new(),
        media_errors: 0,
        close: false,
    };
    let mut pending = initial;
    let mut input = rest;
    let (mut refusing, mut closed) = (stopping.clone(), stopping.clone());
    loop {
        if !input.is_empty() {
            guard.check(&input)?;
            pending.extend(session.handle_input(&input).map_err(ConnError::Session)?);
        }
        while !pending.is_empty() {
            for result in std::mem::take(&mut pending) {
                match result {
                    Res::OutboundResponse(packet) => sock.write_all(&packet.bytes).await?,
                    Res::RaisedEvent(event) => {
                        let on = (&registry, stopping.refusing());
                        match handle_event(event, &mut session, &mut state, on, peer).await {
                            // The stop ended the stream before this connection saw it begin.
                            Err(ConnError::Refused(_)) if stopping.refusing() => {
                                return tell_shutting_down(sock, &mut state, peer, &mut buf).await
                            }
                            handled => pending.extend(handled?),
                        }
                    }
                    Res::UnhandleableMessageReceived(_) => {}
                }
            }
        }
        if state.close {
            sock.flush().await?;
            let _ = sock.shutdown().await;
            return Ok(());
        }
        let (wait_until, why) = if state.publisher.is_some() {
            (
                tokio::time::Instant::now() + config.idle_timeout,
                format!("no data for {:?}", config.idle_timeout),
            )
        } else {
            (deadline, no_publish())
        };
        let woke = tokio::select! {
            // The stop first: a publisher sending without pause must still be told.
            biased;
            _ = refusing.until_refusing(), if state.publisher.is_some() => Woke::Refusing,
            _ = closed.until_closed() => Woke::Closed,
            read = read_until(&mut sock, &mut buf, wait_until) => Woke::Read(read?),
        };
        let n = match woke {
            Woke::Read(n) => n.ok_or(ConnError::Timeout(why))?,
            Woke::Refusing => return tell_shutting_down(sock, &mut state, peer, &mut buf).await,
            Woke::Closed => {
                let _ = tokio::time::timeout(NOTICE_TIMEOUT, sock.shutdown()).await;
                return Ok(());
            }
        };
        if n == 0 {
            return Ok(());
        }
        input = buf[..n].to_vec();
    }
}

/// The RTMP handshake (C0/C1/C2 ↔ S0/S1/S2), by `deadline`; the bytes read past it, or `None`
/// when the peer hung up.
async fn handshake<S>(
    sock: &mut S,
    buf: &mut [u8],
    deadline: tokio::time::Instant,
    no_publish: impl Fn() -> String,
) -> Result<Option<Vec<u8>>, ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut handshake = Handshake::new(PeerType::Server);
    loop {
        let n = read_until(sock, buf, deadline)
            .await?
            .ok_or_else(|| ConnError::Timeout(no_publish()))?;
        if n == 0 {
            return Ok(None);
        }
        match handshake
            .process_bytes(&buf[..n])
            .map_err(ConnError::Handshake)?
        {
            HandshakeProcessResult::InProgress { response_bytes } => {
                sock.write_all(&response_bytes).await?
            }
            HandshakeProcessResult::Completed {
                response_bytes,
                remaining_bytes,
            } => {
                sock.write_all(&response_bytes).await?;
                return Ok(Some(remaining_bytes));
            }
        }
    }
}

/// What ended a connection's wait for its peer.
enum Woke {
    /// Bytes read (`None`: the deadline passed).
    Read(Option<usize>),
    /// The server stops: a publisher is to be told and closed.
    Refusing,
    /// The listeners close: whatever still waits goes.
    Closed,
}

/// The server stops: the publisher is told (an `error` status its client reports) and its
/// connection closed, so its encoder publishes again — to another node behind a load balancer.
/// Its publisher handle goes first: the stream's slot is free at once. The socket is read (and
/// the media dropped) until the client hangs up, for at most [`NOTICE_TIMEOUT`]: a socket closed
/// with unread media resets the connection, and the client would lose the notice with it (an
/// encoder reads what the server sent only between its writes).
async fn tell_shutting_down<S>(
    mut sock: S,
    state: &mut State,
    peer: SocketAddr,
    buf: &mut [u8],
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let stream = state.publisher.take().map(|p| p.stream_id);
    let notice = match status::error_status(CHUNK_SIZE, status::APP_SHUTDOWN, SHUTTING_DOWN) {
        Ok(notice) => notice,
        Err(e) => {
            tracing::warn!(%peer, ?stream, error = %e, "rtmp shutdown notice not made");
            Vec::new()
        }
    };
    let told = tokio::time::timeout(NOTICE_TIMEOUT, async {
        sock.write_all(&notice).await?;
        sock.flush().await?;
        sock.shutdown().await?;
        while sock.read(buf).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
    let hung_up = matches!(told, Ok(Ok(())));
    tracing::info!(%peer, ?stream, hung_up, "rtmp publisher told the server is shutting down");
    Ok(())
}

struct State {
    publisher: Option<Publisher>,
    adapter: FlvToMedia,
    media_errors: u64,
    close: bool,
}

/// A peer-chosen name for a log line: escaped, and cut so a peer cannot fill the log. Names
/// that may hold a token (publish names) pass through [`redact`] first.
fn shown(name: &str) -> String {
    const MAX_SHOWN: usize = 80;
    let escaped: String = name.escape_debug().take(MAX_SHOWN).collect();
    if name.chars().count() > MAX_SHOWN {
        format!("{escaped}… ({} bytes)", name.len())
    } else {
        escaped
    }
}

async fn read_until<S: AsyncRead + Unpin>(
    sock: &mut S,
    buf: &mut [u8],
    deadline: tokio::time::Instant,
) -> Result<Option<usize>, std::io::Error> {
    match tokio::time::timeout_at(deadline, sock.read(buf)).await {
        Ok(read) => Ok(Some(read?)),
        Err(_) => Ok(None),
    }
}

/// `on`: the registry, and whether the server's stop refuses new publishes.
async fn handle_event(
    event: Event,
    session: &mut ServerSession,
    state: &mut State,
    on: (&Arc<Registry>, bool),
    peer: SocketAddr,
) -> Result<Vec<Res>, ConnError> {
    let (registry, refusing) = on;
    let session_err = ConnError::Session;
    match event {
        Event::ConnectionRequested {
            request_id,
            app_name,
        } => connect(session, state, request_id, &app_name, peer),
        Event::PublishStreamRequested {
            request_id,
            app_name,
            stream_key,
            ..
        } => {
            if refusing {
                tracing::info!(%peer, "rtmp publish refused: the server is shutting down");
                state.close = true;
                return session
                    .reject_request(request_id, "NetStream.Publish.Rejected", SHUTTING_DOWN)
                    .map_err(session_err);
            }
            let names = (app_name.as_str(), stream_key.as_str());
            publish(session, state, registry, request_id, names, peer).await
        }
        Event::VideoDataReceived {
            data, timestamp, ..
        } => {
            let msg = state.adapter.video(timestamp.value, &data);
            forward(state, msg, peer)?;
            Ok(Vec::new())
        }
        Event::StreamMetadataChanged { metadata, .. } => {
            let msg = state.adapter.metadata(&metadata);
            forward(state, Ok(msg), peer)?;
            Ok(Vec::new())
        }
        Event::AudioDataReceived {
            data, timestamp, ..
        } => {
            let msg = state.adapter.audio(timestamp.value, &data);
            forward(state, msg, peer)?;
            Ok(Vec::new())
        }
        Event::PublishStreamFinished { .. } => {
            state.close = true;
            Ok(Vec::new())
        }
        Event::PlayStreamRequested { request_id, .. } => {
            // This is an ingest: playback is HLS/DASH over HTTP.
            state.close = true;
            session
                .reject_request(
                    request_id,
                    "NetStream.Play.Failed",
                    "playback is not served over RTMP",
                )
                .map_err(session_err)
        }
        // releaseStream, FCPublish, FCUnpublish, _checkbw and friends need no answer.
        _ => Ok(Vec::new()),
    }
}

/// A `connect`: accepted for the one application we serve, else refused and closed.
fn connect(
    session: &mut ServerSession,
    state: &mut State,
    request_id: u32,
    app_name: &str,
    peer: SocketAddr,
) -> Result<Vec<Res>, ConnError> {
    if app_name.trim_end_matches('/') == key::APP {
        return session
            .accept_request(request_id)
            .map_err(ConnError::Session);
    }
    state.close = true;
    tracing::warn!(%peer, app = %shown(&redact(app_name)), "rtmp connect refused: unknown application");
    session
        .reject_request(
            request_id,
            "NetConnection.Connect.Rejected",
            "unknown application",
        )
        .map_err(ConnError::Session)
}

/// A `publish`: the stream key (`names`: the application and the key) is checked by the
/// registry; accepted, the connection publishes; refused (or a second publish on it), closed.
async fn publish(
    session: &mut ServerSession,
    state: &mut State,
    registry: &Arc<Registry>,
    request_id: u32,
    names: (&str, &str),
    peer: SocketAddr,
) -> Result<Vec<Res>, ConnError> {
    let (app_name, stream_key) = names;
    if state.publisher.is_some() {
        state.close = true;
        return session
            .reject_request(
                request_id,
                "NetStream.Publish.BadName",
                "already publishing",
            )
            .map_err(ConnError::Session);
    }
    let verdict = match key::parse(app_name, stream_key) {
        Ok(k) => {
            let caller = Caller {
                remote: Some(peer),
                query: k.query.clone(),
            };
            registry
                .publish(k.stream_id, k.slot, &k.token, (Protocol::Rtmp, &caller))
                .await
                .map_err(|e| (rejection_code(&e), e.to_string()))
        }
        Err(e) => Err(("NetStream.Publish.BadName", e.to_string())),
    };
    match verdict {
        Ok(publisher) => {
            tracing::info!(%peer, stream = publisher.stream_id, "rtmp publish accepted");
            state.publisher = Some(publisher);
            session
                .accept_request(request_id)
                .map_err(ConnError::Session)
        }
        Err((code, reason)) => {
            tracing::warn!(%peer, key = %shown(&redact(stream_key)), %reason, "rtmp publish refused");
            state.close = true;
            session
                .reject_request(request_id, code, &reason)
                .map_err(ConnError::Session)
        }
    }
}

/// The status code a refused publish gets: `BadName` for what is wrong with the stream or its
/// key (as before), `Rejected` for a server that cannot take it now.
fn rejection_code(e: &crate::live::PublishError) -> &'static str {
    match e {
        crate::live::PublishError::AtCapacity { .. } => "NetStream.Publish.Rejected",
        _ => "NetStream.Publish.BadName",
    }
}

fn forward(
    state: &mut State,
    msg: Result<Option<crate::media::MediaMessage>, super::to_media::FlvError>,
    peer: SocketAddr,
) -> Result<(), ConnError> {
    let Some(publisher) = state.publisher.as_mut() else {
        return Ok(());
    };
    match msg {
        Ok(Some(m)) => {
            if !publisher.send(m) {
                // The pipeline ended (failed): nothing more to do for this publisher.
                return Err(ConnError::Refused("the stream's pipeline stopped".into()));
            }
        }
        Ok(None) => {}
        Err(e) => {
            state.media_errors += 1;
            if state.media_errors == 1 || state.media_errors.is_multiple_of(100) {
                tracing::warn!(%peer, stream = publisher.stream_id, error = %e, count = state.media_errors, "rtmp media message dropped");
            }
            if state.media_errors > MAX_MEDIA_ERRORS {
                return Err(ConnError::BadMedia);
            }
        }
    }
    Ok(())
}
