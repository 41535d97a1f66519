//! The daemon's ingest part: every publisher-facing port (RTMP, RTMPS, SRT, WHIP's ICE muxes)
//! bound at start, then served together with the PULL fetcher. Binding comes first and accepts
//! nothing, so a taken port fails the start before any publisher is let in, and the other parts
//! (the cluster's first heartbeat, crash recovery) are ready before the first publish.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::rtmp::listener as rtmp;
use super::whip::{Muxes, Whip};
use super::{pull, srt, whip};
use crate::admission::Admission;
use crate::config::Config;
use crate::db::Store;
use crate::live::Registry;
use crate::shutdown::Stopping;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("RTMPS: {0}")]
    Tls(#[from] rtmp::TlsError),
    #[error("PULL: {0}")]
    Pull(#[from] pull::PullError),
    #[error(transparent)]
    WhipMux(#[from] whip::MuxError),
    #[error("startup task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Each ingest listener's admission gate.
pub struct IngestGates {
    pub rtmp: Admission,
    pub rtmps: Admission,
    pub srt: Admission,
    pub ice_tcp: Admission,
}

/// The ingest ports, bound and not yet accepting.
pub struct Bound {
    rtmp: TcpListener,
    rtmps: TcpListener,
    tls: TlsAcceptor,
    srt: UdpSocket,
    muxes: Muxes,
    gates: IngestGates,
    pub rtmp_addr: SocketAddr,
    pub rtmps_addr: SocketAddr,
    pub srt_addr: SocketAddr,
}

/// The ingest part, serving.
pub struct Ingest {
    pub rtmp_addr: SocketAddr,
    pub rtmps_addr: SocketAddr,
    pub srt_addr: SocketAddr,
    /// The WHIP ICE ports every session shares (one UDP address per interface), if enabled.
    pub whip_udp_addrs: Vec<SocketAddr>,
    pub whip_tcp_addr: Option<SocketAddr>,
    /// WHIP's signalling, which the HTTP router hands its requests to.
    pub whip: Arc<Whip>,
    /// The ICE ports, which WHEP viewers share with WHIP publishers.
    pub muxes: Muxes,
    /// The listeners' tasks, which end (their connections with them) once the server's stop
    /// closes the listeners: awaited at shutdown (srt-tokio's `close` panics if the runtime
    /// cancels its task first).
    pub listeners: Vec<JoinHandle<()>>,
}

async fn bind_tcp(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), IngestError> {
    let err = |source| IngestError::Bind { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
}

impl Ingest {
    /// Loads (or makes) the RTMPS certificate and binds every ingest port, each with its gate.
    pub async fn bind(config: &Config, gates: IngestGates) -> Result<Bound, IngestError> {
        let tls = {
            let (cert, key, dir) = (
                config.rtmps_cert_file.clone(),
                config.rtmps_key_file.clone(),
                config.data_dir.clone(),
            );
            tokio::task::spawn_blocking(move || {
                rtmp::tls_acceptor(cert.as_deref(), key.as_deref(), &dir)
            })
            .await??
        };
        let (rtmp, rtmp_addr) = bind_tcp("rtmp", config.rtmp_addr).await?;
        let (rtmps, rtmps_addr) = bind_tcp("rtmps", config.rtmps_addr).await?;
        let (srt, srt_addr) = srt::listener::bind(config.srt_addr)
            .await
            .map_err(|source| IngestError::Bind {
                what: "srt",
                addr: config.srt_addr,
                source,
            })?;
        let muxes = Muxes::bind(&config.whip, gates.ice_tcp.clone()).await?;
        Ok(Bound {
            rtmp,
            rtmps,
            tls,
            srt,
            muxes,
            gates,
            rtmp_addr,
            rtmps_addr,
            srt_addr,
        })
    }
}

impl Bound {
    /// Starts accepting publishers on every port and the PULL fetcher, until the server's stop
    /// (`stopping`). Readers on the SRT port go to `srt_readers`.
    pub fn serve(
        self,
        config: &Config,
        (registry, store): (&Arc<Registry>, &Arc<dyn Store>),
        srt_readers: Arc<dyn srt::Readers>,
        stopping: &Stopping,
    ) -> Result<Ingest, IngestError> {
        let whip_udp_addrs = self
            .muxes
            .udp
            .as_ref()
            .map(|m| m.local_addrs())
            .unwrap_or_default();
        let whip_tcp_addr = self.muxes.tcp.as_ref().map(|m| m.local_addr());
        let muxes = self.muxes.clone();
        let whip = Whip::new(registry.clone(), config.whip.clone(), self.muxes);
        let rtmp = tokio::spawn(rtmp::serve(
            self.rtmp,
            None,
            self.gates.rtmp,
            registry.clone(),
            config.rtmp,
            stopping.clone(),
        ));
        let rtmps = tokio::spawn(rtmp::serve(
            self.rtmps,
            Some(self.tls),
            self.gates.rtmps,
            registry.clone(),
            config.rtmp,
            stopping.clone(),
        ));
        let srt = tokio::spawn(srt::listener::serve(
            self.srt,
            self.srt_addr,
            registry.clone(),
            config.srt,
            self.gates.srt,
            srt_readers,
            stopping.clone(),
        ));
        // Ends once the daemon refuses newcomers, its PULLs stopped: awaited with the listeners.
        let pulls = pull::Puller::spawn(
            registry.clone(),
            store.clone(),
            config.pull,
            stopping.clone(),
        )?;
        tracing::info!(rtmp = %self.rtmp_addr, rtmps = %self.rtmps_addr, srt = %self.srt_addr, "ingest listening");
        tracing::info!(udp = ?whip_udp_addrs, tcp = ?whip_tcp_addr, "WHIP ICE ports");
        Ok(Ingest {
            rtmp_addr: self.rtmp_addr,
            rtmps_addr: self.rtmps_addr,
            srt_addr: self.srt_addr,
            whip_udp_addrs,
            whip_tcp_addr,
            whip,
            muxes,
            listeners: vec![rtmp, rtmps, srt, pulls],
        })
    }
}
