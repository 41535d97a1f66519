//! The HTTP listener shared by the control API and media delivery: accept loop behind the
//! admission gate (listener and per-address caps, the file budget), the header-read, body and
//! stall deadlines, header size limit, and graceful shutdown of in-flight requests.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::admission::Admission;
use crate::http::body::BodyDeadline;
use crate::shutdown::Stopping;

/// The TCP peer of a request (its client, or the proxy in front); put in the request's
/// extensions here, read where the address matters (WHIP's authorization hook).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);
use crate::http::peer_io::PeerIo;

/// Response body for every route; boxed so that later routes can stream (chunked DASH parts).
pub type Body = BoxBody<Bytes, std::io::Error>;

/// Request heads larger than this are answered 431 by hyper: no route needs more, and it bounds
/// what a peer can make us buffer per connection.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// How long in-flight requests get to finish after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

pub fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    let body = serde_json::to_vec(value).expect("response types always serialize");
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::CACHE_CONTROL, "no-store")
        .body(full(body))
        .expect("static headers are valid")
}

/// A response body fed chunk by chunk from a channel (HTTP/1.1 chunked transfer); an `Err`
/// aborts the response, so the client sees it incomplete rather than ended.
pub struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|r| r.map(hyper::body::Frame::data)))
    }
}

/// A streamed body and its feeding end; at most `capacity` chunks wait in between.
pub fn channel_body(
    capacity: usize,
) -> (
    tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    Body,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    (tx, ChannelBody(rx).boxed())
}

#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// For a request head, and for the next one on an idle keep-alive connection.
    pub header_timeout: Duration,
    /// From the end of the head to the end of the body (see [`crate::http::body`]).
    pub body_timeout: Duration,
    /// No byte moved either way while the connection waits on its peer.
    pub stall_timeout: Duration,
}

/// Concurrent requests one HTTP/2 connection may carry: a player's blocking playlist reloads
/// and part fetches for every rendition it follows, with room to spare.
pub const H2_MAX_STREAMS: u32 = 256;

/// The connections' protocol settings: HTTP/1.1 with the head's size and deadline, HTTP/2 (by
/// ALPN over TLS, or by prior knowledge in the clear) with the same header bound.
fn builder(limits: HttpLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .max_concurrent_streams(H2_MAX_STREAMS);
    builder
}

/// Serves `listener` (over TLS with `tls`) until the stop closes the listeners, then lets
/// in-flight requests finish (up to [`SHUTDOWN_GRACE`]) and returns. While the stop only
/// refuses, requests are still read: the router answers what a stopping node no longer serves.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: H,
    limits: HttpLimits,
    admission: Admission,
    mut stopping: Stopping,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let builder = builder(limits);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning on a full fd table.
                    tracing::warn!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopping.until_closed() => break,
        };
        // The gate logs refusals, rate-limited; a refused peer gets a 503 it need not read.
        let Ok(ticket) = admission.admit(peer.ip()) else {
            tokio::spawn(refuse_busy(stream, tls.is_none()));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let body_timeout = limits.body_timeout;
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let deadline = tokio::time::Instant::now() + body_timeout;
            req.extensions_mut().insert(BodyDeadline(deadline));
            req.extensions_mut().insert(PeerAddr(peer));
            let fut = handler(req, peer);
            async move { Ok::<_, Infallible>(fut.await) }
        });
        let io = PeerIo::new(stream, limits.stall_timeout, ticket);
        let (builder, watcher, tls) = (builder.clone(), graceful.watcher(), tls.clone());
        tokio::spawn(async move {
            let served = match tls {
                None => {
                    let conn = builder.serve_connection(TokioIo::new(io), service);
                    watcher.watch(conn).await
                }
                // The handshake has the head's deadline: a peer that opens and stalls holds
                // its connection no longer than a slow HTTP/1.1 head would.
                Some(tls) => {
                    match tokio::time::timeout(limits.header_timeout, tls.accept(io)).await {
                        Ok(Ok(io)) => {
                            let conn = builder.serve_connection(TokioIo::new(io), service);
                            watcher.watch(conn).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "https handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "https handshake not finished in time");
                            return;
                        }
                    }
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "http connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("http connections drained"),
        _ = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!("http connections still open after the grace period; closing them")
        }
    }
}

/// A refused peer's answer: a 503 in the clear, or (on the TLS port, where it could not be
/// read before a handshake) the connection closed.
async fn refuse_busy(mut stream: tokio::net::TcpStream, clear: bool) {
    if !clear {
        let _ = stream.shutdown().await;
        return;
    }
    const BUSY: &[u8] =
        b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(BUSY)).await;
    let _ = stream.shutdown().await;
}
