//! ICE muxing for WHIP: one UDP port (and one TCP port, see [`super::tcp_mux`]) shared by every
//! session. Inputs: datagrams on the shared sockets; outputs: each session's packets, handed to
//! its peer connection through a per-session [`MuxRuntime`].
//!
//! webrtc 0.21.1 has no UDPMux (rtc's `with_udp_network` is commented out), but a connection
//! takes a custom `Runtime`, and its driver hands every socket it binds to
//! `Runtime::wrap_udp_socket`. So a session's runtime drops that ephemeral socket and returns a
//! virtual one fed by the shared socket: a STUN Binding Request names its session by the first
//! half of its USERNAME (our ufrag, RFC 8445 §7.2.2) and teaches the mux the sender's address;
//! everything else (STUN replies, DTLS, SRTP) is routed by that address. The driver still knows
//! the socket by the ephemeral address, from which the host candidates are made, so the answer's
//! candidates are rewritten to the shared port ([`super::sdp::advertise`]).

use std::collections::HashMap;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use webrtc::runtime::{
    AsyncInterval, AsyncTcpListener, AsyncTcpStream, AsyncUdpSocket, JoinHandle, RecvMeta, Runtime,
    Transmit,
};

use super::stun::stun_request_ufrag;
use super::tcp_mux::TcpMux;
use super::MuxError;

/// Datagrams waiting for one session's driver; a full inbox drops (counted), it never blocks
/// the shared receive loop (and so the other sessions).
const INBOX: usize = 1024;
/// The largest UDP payload (RFC 768's 16-bit length minus the headers): a smaller buffer would
/// silently truncate a datagram into garbage.
const RECV_BUFFER: usize = 65_507;
/// Remote addresses one session may be reached from. RFC 8445 §6.1.2.5 limits a checklist to
/// 100 candidate pairs; a peer sending from more addresses than that is not doing ICE.
const MAX_PEERS_PER_SESSION: usize = 100;

type Inbox = mpsc::Sender<(Bytes, SocketAddr)>;

struct Session {
    /// Mux socket address → that session's inbox for it.
    inboxes: HashMap<SocketAddr, Inbox>,
    peers: usize,
    dropped: Arc<AtomicU64>,
}

#[derive(Default)]
struct Routes {
    sessions: HashMap<String, Session>,
    /// (mux socket address, remote address) → ufrag.
    peers: HashMap<(SocketAddr, SocketAddr), String>,
}

impl Routes {
    /// Routes `(local, remote)` to `ufrag`, within the session's peer budget.
    fn learn(&mut self, local: SocketAddr, remote: SocketAddr, ufrag: &str) {
        let key = (local, remote);
        if self.peers.get(&key).is_some_and(|u| u == ufrag) {
            return;
        }
        let Some(session) = self.sessions.get_mut(ufrag) else {
            return;
        };
        if session.peers >= MAX_PEERS_PER_SESSION {
            return;
        }
        session.peers += 1;
        if let Some(old) = self.peers.insert(key, ufrag.to_owned()) {
            // The address moved to another session (a port reused by a new publisher).
            if let Some(s) = self.sessions.get_mut(&old) {
                s.peers = s.peers.saturating_sub(1);
            }
        }
    }

    fn remove(&mut self, ufrag: &str) {
        self.sessions.remove(ufrag);
        self.peers.retain(|_, u| u != ufrag);
    }
}

/// The shared UDP sockets: one per advertised IP, so replies leave from the address the peer
/// sent to.
pub struct UdpMux {
    sockets: Vec<Arc<UdpSocket>>,
    routes: Mutex<Routes>,
    /// Datagrams from an address no session knows (before any allocation, so free to drop).
    unknown: AtomicU64,
    /// Each socket's receive loop: they end with the mux (a loop waiting for a datagram would
    /// not see it go).
    loops: crate::tasks::Owned,
}

impl std::fmt::Debug for UdpMux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpMux")
            .field("addrs", &self.local_addrs())
            .finish()
    }
}

/// The IPs a wildcard address stands for: like webrtc's own expansion (driver.rs
/// `expand_wildcard`), loopback, unspecified and link-local skipped (no peer can reach them).
pub(crate) fn interface_ips(v4: bool) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for iface in rtc::shared::ifaces::ifaces().unwrap_or_default() {
        let Some(addr) = iface.addr else { continue };
        let ip = addr.ip();
        let link_local = match ip {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        };
        if ip.is_ipv4() != v4 || ip.is_unspecified() || ip.is_loopback() || link_local {
            continue;
        }
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

impl UdpMux {
    /// A wildcard address binds its port on every usable interface (Pion's MultiUDPMux); a
    /// concrete one (loopback included) binds just it. Port 0 picks one free port, then uses it
    /// on every interface. With no usable interface the wildcard itself is bound: the
    /// candidates then only work with `whip_nat_ips`.
    pub async fn bind(addr: SocketAddr) -> Result<Arc<UdpMux>, MuxError> {
        let err = |source| MuxError::Bind {
            what: "UDP",
            addr,
            source,
        };
        let mut ips = if addr.ip().is_unspecified() {
            interface_ips(addr.is_ipv4())
        } else {
            vec![addr.ip()]
        };
        if ips.is_empty() {
            tracing::warn!(%addr, "no usable interface for the WHIP UDP mux: binding the wildcard");
            ips.push(addr.ip());
        }
        let mut port = addr.port();
        let mut sockets = Vec::new();
        for ip in ips {
            let s = UdpSocket::bind(SocketAddr::new(ip, port))
                .await
                .map_err(err)?;
            port = s.local_addr().map_err(err)?.port();
            sockets.push(Arc::new(s));
        }
        let mux = Arc::new(UdpMux {
            sockets,
            routes: Mutex::default(),
            unknown: AtomicU64::new(0),
            loops: crate::tasks::Owned::default(),
        });
        for s in &mux.sockets {
            mux.loops.spawn(recv_loop(Arc::downgrade(&mux), s.clone()));
        }
        Ok(mux)
    }

    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (sessions, learnt remote addresses).
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let r = self.routes();
        (r.sessions.len(), r.peers.len())
    }
}

async fn recv_loop(mux: Weak<UdpMux>, socket: Arc<UdpSocket>) {
    let Ok(local) = socket.local_addr() else {
        return;
    };
    let mut buf = vec![0u8; RECV_BUFFER];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(x) => x,
            // ICMP port unreachable from a departed peer and the like: keep serving, without
            // spinning on a persistent error.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        let Some(mux) = mux.upgrade() else { return };
        let packet = &buf[..n];
        let mut r = mux.routes();
        // A Binding Request names its session outright (first contact, NAT rebinding, a port
        // reused by a new session); everything else goes by the remote address.
        let ufrag = match stun_request_ufrag(packet) {
            Some(u) if r.sessions.contains_key(u) => {
                r.learn(local, from, u);
                Some(u.to_owned())
            }
            _ => r.peers.get(&(local, from)).cloned(),
        };
        let Some(session) = ufrag.and_then(|u| r.sessions.get(&u)) else {
            mux.unknown.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if let Some(tx) = session.inboxes.get(&local) {
            if tx.try_send((Bytes::copy_from_slice(packet), from)).is_err() {
                session.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What one session's driver sees as its UDP socket.
#[derive(Debug)]
struct MuxSocket {
    /// The address the driver knows this socket by (its dropped ephemeral socket's).
    key: SocketAddr,
    socket: Arc<UdpSocket>,
    local: SocketAddr,
    ufrag: String,
    rx: Mutex<mpsc::Receiver<(Bytes, SocketAddr)>>,
    dropped: Arc<AtomicU64>,
    mux: Weak<UdpMux>,
}

impl AsyncUdpSocket for MuxSocket {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.key)
    }

    fn poll_send(&self, cx: &mut Context<'_>, t: &Transmit<'_>) -> Poll<io::Result<usize>> {
        // Where we send (our own checks, DTLS) is where replies come from, and those carry no
        // USERNAME: learn the route.
        if let Some(mux) = self.mux.upgrade() {
            mux.routes().learn(self.local, t.destination, &self.ufrag);
        }
        self.socket.poll_send_to(cx, t.contents, t.destination)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let (Some(buf), Some(m)) = (bufs.first_mut(), meta.first_mut()) else {
            return Poll::Ready(Ok(0));
        };
        let mut rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        match rx.poll_recv(cx) {
            Poll::Ready(Some((data, from))) => {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                *m = RecvMeta::default();
                m.len = n;
                m.stride = n.max(1);
                m.addr = from;
                m.dst_ip = Some(self.key.ip());
                Poll::Ready(Ok(1))
            }
            Poll::Ready(None) => Poll::Ready(Err(io::Error::other("WHIP UDP mux gone"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for MuxSocket {
    fn drop(&mut self) {
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(
                ufrag = %self.ufrag,
                dropped,
                "WHIP datagrams dropped: the session's inbox was full"
            );
        }
        let Some(mux) = self.mux.upgrade() else {
            return;
        };
        let mut r = mux.routes();
        let empty = r.sessions.get_mut(&self.ufrag).is_some_and(|s| {
            s.inboxes.remove(&self.local);
            s.inboxes.is_empty()
        });
        if empty {
            r.remove(&self.ufrag);
        }
    }
}

/// A session's runtime: the stock tokio runtime, except that its UDP sockets and TCP listeners
/// come from the shared muxes.
#[derive(Debug)]
pub struct MuxRuntime {
    inner: Arc<dyn Runtime>,
    udp: Option<Arc<UdpMux>>,
    tcp: Option<Arc<TcpMux>>,
    ufrag: String,
    /// (driver's key, shared address) for every socket and listener handed out: what the
    /// answer's candidates are rewritten with.
    bound: Mutex<Vec<(SocketAddr, SocketAddr)>>,
}

impl MuxRuntime {
    pub fn new(udp: Option<Arc<UdpMux>>, tcp: Option<Arc<TcpMux>>, ufrag: String) -> Self {
        MuxRuntime {
            inner: Arc::new(webrtc::runtime::TokioRuntime),
            udp,
            tcp,
            ufrag,
            bound: Mutex::default(),
        }
    }

    pub fn bound(&self) -> Vec<(SocketAddr, SocketAddr)> {
        self.bound.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn record(&self, key: SocketAddr, shared: SocketAddr) {
        self.bound
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((key, shared));
    }
}

impl Runtime for MuxRuntime {
    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) -> Box<dyn JoinHandle> {
        self.inner.spawn(future)
    }

    fn spawn_reactor(
        &self,
        n: usize,
        future: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) -> Box<dyn JoinHandle> {
        self.inner.spawn_reactor(n, future)
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        let Some(mux) = &self.udp else {
            return self.inner.wrap_udp_socket(socket);
        };
        let key = socket.local_addr()?;
        // The session binds on the mux's IPs (port 0), so each key has its mux socket; a
        // wildcard fallback mux serves every key.
        let shared = mux
            .sockets
            .iter()
            .find(|s| {
                s.local_addr()
                    .is_ok_and(|a| a.ip() == key.ip() || a.ip().is_unspecified())
            })
            .cloned()
            .ok_or_else(|| io::Error::other(format!("no WHIP UDP mux socket for {key}")))?;
        // Only its address is used, as the driver's key.
        drop(socket);
        let local = shared.local_addr()?;
        let (tx, rx) = mpsc::channel(INBOX);
        let dropped = {
            let mut r = mux.routes();
            let s = r
                .sessions
                .entry(self.ufrag.clone())
                .or_insert_with(|| Session {
                    inboxes: HashMap::new(),
                    peers: 0,
                    dropped: Arc::default(),
                });
            s.inboxes.insert(local, tx);
            s.dropped.clone()
        };
        self.record(key, local);
        Ok(Arc::new(MuxSocket {
            key,
            socket: shared,
            local,
            ufrag: self.ufrag.clone(),
            rx: Mutex::new(rx),
            dropped,
            mux: Arc::downgrade(mux),
        }))
    }

    fn wrap_tcp_listener(
        &self,
        listener: std::net::TcpListener,
    ) -> io::Result<Arc<dyn AsyncTcpListener>> {
        let Some(tcp) = &self.tcp else {
            return self.inner.wrap_tcp_listener(listener);
        };
        let key = listener.local_addr()?;
        drop(listener);
        let (l, shared) = tcp.attach(&self.ufrag, key);
        self.record(key, shared);
        Ok(l)
    }

    fn connect_tcp<'a>(
        &'a self,
        remote: SocketAddr,
    ) -> Pin<Box<dyn Future<Output = io::Result<Arc<dyn AsyncTcpStream>>> + Send + 'a>> {
        self.inner.connect_tcp(remote)
    }

    fn resolve_host<'a>(
        &'a self,
        host: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        self.inner.resolve_host(host)
    }

    fn now(&self) -> std::time::Instant {
        self.inner.now()
    }

    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        self.inner.sleep(d)
    }

    fn interval(&self, period: Duration) -> Box<dyn AsyncInterval> {
        self.inner.interval(period)
    }

    fn block_on(&self, future: Pin<Box<dyn Future<Output = ()> + '_>>) {
        self.inner.block_on(future)
    }

    fn yield_now(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        self.inner.yield_now()
    }

    fn name(&self) -> &'static str {
        "livepack-whip-mux"
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_session_learns_at_most_its_peer_budget() {
        let mut r = Routes::default();
        r.sessions.insert(
            "u".into(),
            Session {
                inboxes: HashMap::new(),
                peers: 0,
                dropped: Arc::default(),
            },
        );
        let local: SocketAddr = "127.0.0.1:8189".parse().unwrap();
        for port in 1..=500u16 {
            r.learn(local, SocketAddr::from(([10, 0, 0, 1], port)), "u");
        }
        assert_eq!(r.peers.len(), MAX_PEERS_PER_SESSION);
        r.learn(local, SocketAddr::from(([10, 0, 0, 1], 1)), "nobody");
        assert_eq!(r.peers.len(), MAX_PEERS_PER_SESSION);
        r.remove("u");
        assert!(r.peers.is_empty() && r.sessions.is_empty());
    }

    async fn recv(s: &Arc<dyn AsyncUdpSocket>) -> (Vec<u8>, SocketAddr) {
        let mut buf = [0u8; 2048];
        let mut meta = [RecvMeta::default()];
        tokio::time::timeout(
            Duration::from_secs(2),
            futures::future::poll_fn(|cx| {
                s.poll_recv(cx, &mut [IoSliceMut::new(&mut buf)], &mut meta)
            }),
        )
        .await
        .expect("a datagram")
        .unwrap();
        (buf[..meta[0].len].to_vec(), meta[0].addr)
    }

    #[tokio::test]
    async fn datagrams_reach_their_session_and_the_routes_leave_with_it() {
        let mux = UdpMux::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let shared = mux.local_addrs()[0];
        let socket = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let rt_a = MuxRuntime::new(Some(mux.clone()), None, "ufragA".into());
        let rt_b = MuxRuntime::new(Some(mux.clone()), None, "ufragB".into());
        let a = rt_a.wrap_udp_socket(socket()).unwrap();
        let b = rt_b.wrap_udp_socket(socket()).unwrap();
        // The driver keeps its key; the answer is rewritten to the shared address.
        assert_eq!(rt_b.bound(), vec![(b.local_addr().unwrap(), shared)]);
        assert_ne!(b.local_addr().unwrap(), shared);
        assert_eq!(mux.counts(), (2, 0));

        let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let me = client.local_addr().unwrap();
        // Nothing names a session yet: dropped, nothing learnt.
        client.send_to(b"\x16dtls", shared).await.unwrap();
        while mux.unknown.load(Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(mux.counts(), (2, 0));
        // The Binding Request names B; what follows from that address goes to B too.
        let request = crate::ingest::whip::stun::tests::binding_request(b"ufragB:remote");
        client.send_to(&request, shared).await.unwrap();
        assert_eq!(recv(&b).await, (request, me));
        client.send_to(b"\x16dtls", shared).await.unwrap();
        assert_eq!(recv(&b).await, (b"\x16dtls".to_vec(), me));
        // B's replies leave from the shared port.
        let transmit = Transmit {
            destination: me,
            ecn: None,
            contents: b"reply",
            segment_size: None,
            src_ip: None,
        };
        futures::future::poll_fn(|cx| b.poll_send(cx, &transmit))
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        let (n, from) = client.recv_from(&mut buf).await.unwrap();
        assert_eq!((&buf[..n], from), (&b"reply"[..], shared));
        // A heard none of it.
        let mut meta = [RecvMeta::default()];
        let mut abuf = [0u8; 16];
        let pending = futures::future::poll_fn(|cx| {
            Poll::Ready(a.poll_recv(cx, &mut [IoSliceMut::new(&mut abuf)], &mut meta))
        })
        .await;
        assert!(pending.is_pending());
        assert_eq!(mux.counts(), (2, 1));
        // The session's sockets go (its peer connection closed): so do its routes.
        drop(b);
        assert_eq!(mux.counts(), (1, 0));
        drop(a);
        assert_eq!(mux.counts(), (0, 0));
    }
}
