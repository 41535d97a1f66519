//! ICE-TCP (RFC 6544, passive candidates) on one TCP port shared by every WHIP session, the
//! fallback for networks that block UDP. Inputs: accepted connections; outputs: each one handed
//! to the session named by its first frame, through that session's virtual listener.
//!
//! rtc-ice speaks ICE-TCP itself (RFC 4571 framing), but the listener is per connection: here one
//! listener accepts, reads the first RFC 4571 frame (a STUN Binding Request whose USERNAME names
//! our ufrag, RFC 8445 §7.2.2) and hands the stream, that frame replayed first, to the session.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use webrtc::runtime::{AsyncTcpListener, AsyncTcpStream};

use super::stun::stun_request_ufrag;
use super::MuxError;
use crate::admission::{Admission, Ticket};

/// The first frame must come this quickly: a connection that says nothing holds a permit.
const FIRST_FRAME_TIMEOUT: Duration = Duration::from_secs(5);
/// The first frame is a STUN Binding Request: RFC 8489 §6.1 keeps STUN over UDP under the path
/// MTU (≈1500 bytes) and ICE-TCP checks are the same messages; at least the 20-byte header.
const MAX_FIRST_FRAME: usize = 1500;
const MIN_FIRST_FRAME: usize = 20;
/// Connections accepted but not yet routed; more are closed at once (a connection flood costs
/// at most this many tasks and buffers).
const MAX_PENDING: usize = 64;
/// ICE-TCP connections one address may hold: a browser opens one per session candidate pair.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 16;
/// Connections waiting for one session's driver to accept them.
const HANDOFF_QUEUE: usize = 4;

type Accepted = (Arc<dyn AsyncTcpStream>, SocketAddr);

#[derive(Debug)]
struct Route {
    /// The addresses the session's driver knows its listeners by (one per interface IP).
    keys: Vec<SocketAddr>,
    tx: mpsc::Sender<Accepted>,
    /// Taken by the session's first listener.
    rx: Option<mpsc::Receiver<Accepted>>,
}

#[derive(Debug)]
pub struct TcpMux {
    local: SocketAddr,
    routes: Mutex<HashMap<String, Route>>,
    /// The accept loop: it ends with the mux (each connection it hands on has its own 5 s
    /// bound to be routed).
    accepting: crate::tasks::Owned,
}

impl TcpMux {
    /// One listener: a wildcard address accepts on every interface, and the accepted stream's
    /// own local address says which candidate the peer dialled.
    pub async fn bind(addr: SocketAddr, admission: Admission) -> Result<Arc<TcpMux>, MuxError> {
        let err = |source| MuxError::Bind {
            what: "TCP",
            addr,
            source,
        };
        let listener = TcpListener::bind(addr).await.map_err(err)?;
        let mux = Arc::new(TcpMux {
            local: listener.local_addr().map_err(err)?,
            routes: Mutex::default(),
            accepting: crate::tasks::Owned::default(),
        });
        mux.accepting
            .spawn(accept_loop(Arc::downgrade(&mux), listener, admission));
        Ok(mux)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Route>> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A session's virtual listener for the driver's `key`, and the shared address to advertise
    /// in its place.
    pub(crate) fn attach(
        self: &Arc<Self>,
        ufrag: &str,
        key: SocketAddr,
    ) -> (Arc<dyn AsyncTcpListener>, SocketAddr) {
        let mut routes = self.routes();
        let route = routes.entry(ufrag.to_owned()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(HANDOFF_QUEUE);
            Route {
                keys: Vec::new(),
                tx,
                rx: Some(rx),
            }
        });
        route.keys.push(key);
        // One queue per session, held by its first listener: the driver re-arms `accept` on
        // each of its listeners, and the stream reports the right key itself.
        let rx = route.rx.take();
        drop(routes);
        let shared = SocketAddr::new(key.ip(), self.local.port());
        (
            Arc::new(MuxListener {
                key,
                ufrag: ufrag.to_owned(),
                rx: tokio::sync::Mutex::new(rx),
                mux: Arc::downgrade(self),
            }),
            shared,
        )
    }

    #[cfg(test)]
    pub fn sessions(&self) -> usize {
        self.routes().len()
    }
}

async fn accept_loop(mux: Weak<TcpMux>, listener: TcpListener, admission: Admission) {
    let pending = Arc::new(Semaphore::new(MAX_PENDING));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            // Out of descriptors and the like: wait rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Refused before anything is read; the refusal is logged by the gate, rate-limited.
        let Ok(ticket) = admission.admit(peer.ip()) else {
            continue;
        };
        let Ok(permit) = pending.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "WHIP ICE-TCP connection refused: too many pending");
            continue;
        };
        let mux = mux.clone();
        tokio::spawn(async move {
            let routed =
                tokio::time::timeout(FIRST_FRAME_TIMEOUT, route(mux, stream, peer, ticket)).await;
            if !matches!(routed, Ok(Some(()))) {
                tracing::debug!(%peer, "WHIP ICE-TCP connection dropped: no known session");
            }
            drop(permit);
        });
    }
}

/// Reads the first RFC 4571 frame, finds its session by the Binding Request's ufrag and hands
/// the connection over with that frame put back in front.
async fn route(
    mux: Weak<TcpMux>,
    mut stream: TcpStream,
    peer: SocketAddr,
    ticket: Ticket,
) -> Option<()> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await.ok()?;
    let n = usize::from(u16::from_be_bytes(len));
    if !(MIN_FIRST_FRAME..=MAX_FIRST_FRAME).contains(&n) {
        return None;
    }
    let mut prefix = vec![0u8; 2 + n];
    prefix[..2].copy_from_slice(&len);
    stream.read_exact(&mut prefix[2..]).await.ok()?;
    let ufrag = stun_request_ufrag(&prefix[2..])?.to_owned();
    let local = stream.local_addr().ok()?;
    let (key, tx) = {
        let mux = mux.upgrade()?;
        let routes = mux.routes();
        let route = routes.get(&ufrag)?;
        let key = route
            .keys
            .iter()
            .find(|k| k.ip() == local.ip())
            .or(route.keys.first())
            .copied()?;
        (key, route.tx.clone())
    };
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let s: Arc<dyn AsyncTcpStream> = Arc::new(MuxStream {
        key,
        peer,
        prefix: Mutex::new(prefix),
        rd: tokio::sync::Mutex::new(rd),
        wr: tokio::sync::Mutex::new(wr),
        _ticket: ticket,
    });
    tx.try_send((s, peer)).ok()
}

#[derive(Debug)]
struct MuxListener {
    key: SocketAddr,
    ufrag: String,
    /// Only the session's first listener holds the queue.
    rx: tokio::sync::Mutex<Option<mpsc::Receiver<Accepted>>>,
    mux: Weak<TcpMux>,
}

impl AsyncTcpListener for MuxListener {
    fn accept<'a>(&'a self) -> Pin<Box<dyn Future<Output = io::Result<Accepted>> + Send + 'a>> {
        Box::pin(async move {
            let mut rx = self.rx.lock().await;
            match rx.as_mut() {
                Some(rx) => match rx.recv().await {
                    Some(x) => Ok(x),
                    // The driver re-arms accept after an error and would spin: stay pending.
                    None => futures::future::pending().await,
                },
                None => futures::future::pending().await,
            }
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.key)
    }
}

impl Drop for MuxListener {
    fn drop(&mut self) {
        let Some(mux) = self.mux.upgrade() else {
            return;
        };
        let mut routes = mux.routes();
        let empty = routes.get_mut(&self.ufrag).is_some_and(|r| {
            r.keys.retain(|k| *k != self.key);
            r.keys.is_empty()
        });
        if empty {
            routes.remove(&self.ufrag);
        }
    }
}

/// An accepted connection as the session sees it: the first frame replayed, then the socket.
/// It reports the session listener's key as its local address: the ICE agent matches the
/// passive candidate by that address exactly.
#[derive(Debug)]
struct MuxStream {
    key: SocketAddr,
    peer: SocketAddr,
    prefix: Mutex<Vec<u8>>,
    rd: tokio::sync::Mutex<OwnedReadHalf>,
    wr: tokio::sync::Mutex<OwnedWriteHalf>,
    /// The connection's place under the per-address cap, given back when the session drops it.
    _ticket: Ticket,
}

impl AsyncTcpStream for MuxStream {
    fn read<'a, 'b>(
        &'a self,
        buf: &'b mut [u8],
    ) -> Pin<Box<dyn Future<Output = io::Result<usize>> + Send + 'b>>
    where
        'a: 'b,
    {
        Box::pin(async move {
            {
                let mut p = self.prefix.lock().unwrap_or_else(|p| p.into_inner());
                if !p.is_empty() {
                    let n = p.len().min(buf.len());
                    buf[..n].copy_from_slice(&p[..n]);
                    p.drain(..n);
                    return Ok(n);
                }
            }
            self.rd.lock().await.read(buf).await
        })
    }

    fn write_all<'a, 'b>(
        &'a self,
        buf: &'b [u8],
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'b>>
    where
        'a: 'b,
    {
        Box::pin(async move { self.wr.lock().await.write_all(buf).await })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.key)
    }

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::whip::stun::tests::binding_request;

    #[tokio::test]
    async fn a_connection_goes_to_the_session_its_first_frame_names() {
        let gate = Admission::new("test", 8, 8, None, Arc::default());
        let mux = TcpMux::bind("127.0.0.1:0".parse().unwrap(), gate)
            .await
            .unwrap();
        let key: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let (listener, shared) = mux.attach("ufragT", key);
        assert_eq!(shared, mux.local_addr());
        assert_eq!(mux.sessions(), 1);

        // Junk (a frame too short for STUN) and an unknown ufrag are closed, not handed over.
        let mut junk = TcpStream::connect(shared).await.unwrap();
        junk.write_all(&[0, 5, 1, 2, 3, 4, 5]).await.unwrap();
        let mut stranger = TcpStream::connect(shared).await.unwrap();
        let request = binding_request(b"nobody:x");
        stranger
            .write_all(&(request.len() as u16).to_be_bytes())
            .await
            .unwrap();
        stranger.write_all(&request).await.unwrap();
        for s in [&mut junk, &mut stranger] {
            let mut b = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut b))
                .await
                .expect("closed by the mux")
                .unwrap_or(0);
            assert_eq!(n, 0);
        }

        let mut client = TcpStream::connect(shared).await.unwrap();
        let request = binding_request(b"ufragT:remote");
        let mut sent = (request.len() as u16).to_be_bytes().to_vec();
        sent.extend_from_slice(&request);
        sent.extend_from_slice(b"more");
        client.write_all(&sent).await.unwrap();
        let (stream, peer) = tokio::time::timeout(Duration::from_secs(2), listener.accept())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // The ICE agent matches the passive candidate by the listener's key.
        assert_eq!(stream.local_addr().unwrap(), key);
        let mut got = Vec::new();
        while got.len() < sent.len() {
            let mut buf = [0u8; 64];
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, sent, "the first frame replayed, then the socket");
        stream.write_all(b"back").await.unwrap();
        let mut back = [0u8; 4];
        client.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");

        drop(listener);
        assert_eq!(mux.sessions(), 0);
    }
}
