//! The SRT listener: binds the UDP socket (so `:0` works and the bound port is known), runs
//! srt-tokio's multiplexing listener on it, caps concurrent callers, and hands each handshake
//! to [`conn::run`] in its own task so a slow caller never stalls the others. Publishers and
//! readers share the port and its caps. Once the server stops, every new caller is rejected as
//! unavailable; the connections it owns end with their streams, waited for (bounded) when the
//! listener closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use srt_tokio::access::{RejectReason, ServerRejectReason};
use srt_tokio::options::{ByteCount, SocketAddress, SocketOptions};
use srt_tokio::SrtListener;
use tokio::net::UdpSocket;
use tokio::task::JoinSet;

use super::conn;
use crate::admission::Admission;
use crate::live::Registry;
use crate::shutdown::Stopping;

/// As for RTMP: one caller per stream an encoder pushes.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 32;
/// Concurrent SRT callers (handshaking or publishing); the excess is rejected as overload.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Kernel receive buffer asked for: SRT bursts retransmissions, and the 64 KiB default drops
/// packets above a few Mbit/s (the kernel caps it at net.core.rmem_max).
const UDP_RECV_BUFFER: u64 = 8 * 1024 * 1024;
/// After srt-tokio's listener task ends unexpectedly, wait this long before binding again.
const REBIND_PAUSE: Duration = Duration::from_secs(1);
/// How long the connections left when the listener closes get to end (a publisher's closing
/// handshake takes at most a second) before they are cut.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

fn options(local: SocketAddr) -> SocketOptions {
    let mut o = SocketOptions::default();
    o.connect.local = local;
    o.connect.udp_recv_buffer_size = ByteCount(UDP_RECV_BUFFER);
    o
}

/// Binds the SRT UDP socket with the receive buffer set; returns it and the bound address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(UdpSocket, SocketAddr)> {
    let socket = srt_tokio::bind_socket(&options(addr)).await?;
    let local = socket.local_addr()?;
    Ok((socket, local))
}

/// Serves SRT callers until the server's stop closes the listeners (rejecting every new one as
/// unavailable from the moment it refuses). If srt-tokio's listener task ever ends on its own
/// (its connections end with it), the socket is bound again on the same address.
pub async fn serve(
    socket: UdpSocket,
    local: SocketAddr,
    registry: Arc<Registry>,
    config: super::SrtConfig,
    admission: Admission,
    readers: Arc<dyn super::Readers>,
    stopping: Stopping,
) {
    let mut socket = Some(socket);
    let mut conns = JoinSet::new();
    let mut closed = stopping.clone();
    loop {
        let sock = match socket.take() {
            Some(s) => s,
            None => match bind(local).await {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::error!(addr = %local, error = %e, "cannot bind SRT again");
                    tokio::time::sleep(REBIND_PAUSE).await;
                    continue;
                }
            },
        };
        let built = SrtListener::builder()
            .set(|o| *o = options(local))
            .socket(sock)
            .bind(SocketAddress::from(local))
            .await;
        let (mut listener, mut incoming) = match built {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(addr = %local, error = %e, "SRT listener failed to start");
                tokio::time::sleep(REBIND_PAUSE).await;
                continue;
            }
        };
        loop {
            let request = tokio::select! {
                r = incoming.incoming().next() => r,
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
                _ = closed.until_closed() => {
                    close(conns).await;
                    listener.close().await;
                    return;
                }
            };
            let Some(request) = request else {
                tracing::error!(addr = %local, "SRT listener task ended; binding again");
                break;
            };
            // SRT_REJX_DOWN, "service unavailable": the caller tries again, elsewhere.
            if stopping.refusing() {
                let reason = RejectReason::Server(ServerRejectReason::Down);
                conns.spawn(async move { drop(request.reject(reason).await) });
                continue;
            }
            let Ok(ticket) = admission.admit(request.remote().ip()) else {
                let reason = RejectReason::Server(ServerRejectReason::Overload);
                conns.spawn(async move { drop(request.reject(reason).await) });
                continue;
            };
            let (registry, readers, stopping) =
                (registry.clone(), readers.clone(), stopping.clone());
            conns.spawn(async move {
                conn::run(request, registry, (config.idle_timeout, stopping), readers).await;
                drop(ticket);
            });
        }
        tokio::time::sleep(REBIND_PAUSE).await;
    }
}

/// Waits (bounded) for the listener's connections to end, then cuts the rest.
async fn close(conns: JoinSet<()>) {
    let left = crate::tasks::drain(conns, CLOSE_WAIT).await;
    if left > 0 {
        tracing::warn!(left, "SRT connections still open at shutdown; cut");
    }
}
