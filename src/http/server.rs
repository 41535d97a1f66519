//! The daemon's HTTP part: its port bound at start (the cluster announces it, the API's URLs
//! name it), then served: every request routed ([`super::router`]) under the listener's limits
//! and admission gate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::Request;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::{rustls, TlsAcceptor};

use super::listener::{self, HttpLimits};
use crate::admission::Admission;
use crate::shutdown::Stopping;

/// An HTTP port (in the clear, or HTTPS), bound and not yet accepting.
pub struct Http {
    listener: TcpListener,
    pub addr: SocketAddr,
    tls: Option<TlsAcceptor>,
}

impl Http {
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Http> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(Http {
            listener,
            addr,
            tls: None,
        })
    }

    /// HTTPS on `addr`: HTTP/2 or HTTP/1.1 as the client's ALPN asks (LL-HLS as Apple
    /// specifies it is served over HTTP/2: a player's blocking reloads and parts share one
    /// connection).
    pub async fn bind_tls(
        addr: SocketAddr,
        mut config: rustls::ServerConfig,
    ) -> std::io::Result<Http> {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let http = Http::bind(addr).await?;
        Ok(Http {
            tls: Some(TlsAcceptor::from(Arc::new(config))),
            ..http
        })
    }

    /// Serves until the stop closes the listeners, then lets in-flight requests finish (the
    /// task ends then).
    pub fn serve(
        self,
        routes: Arc<super::router::Routes>,
        limits: HttpLimits,
        admission: Admission,
        stopping: Stopping,
    ) -> JoinHandle<()> {
        let handler = move |req: Request<Incoming>, _peer: SocketAddr| {
            let routes = routes.clone();
            async move {
                let (class, started) = (super::stats::Route::of(req.uri().path()), Instant::now());
                let resp = super::router::route(&routes, req).await;
                super::stats::record(class, &resp, started.elapsed());
                resp
            }
        };
        tokio::spawn(listener::serve(
            self.listener,
            self.tls,
            handler,
            limits,
            admission,
            stopping,
        ))
    }
}
