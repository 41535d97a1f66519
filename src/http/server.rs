//! The daemon's HTTP part: its port bound at start (the cluster announces it, the API's URLs
//! name it), then served: every request routed ([`super::router`]) under the listener's limits
//! and admission gate.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::Request;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::listener::{self, HttpLimits};
use crate::admission::Admission;
use crate::shutdown::Stopping;

/// The HTTP port, bound and not yet accepting.
pub struct Http {
    listener: TcpListener,
    pub addr: SocketAddr,
}

impl Http {
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Http> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(Http { listener, addr })
    }

    /// Serves until the stop closes the listeners, then lets in-flight requests finish (the
    /// task ends then).
    pub fn serve(
        self,
        routes: super::router::Routes,
        limits: HttpLimits,
        admission: Admission,
        stopping: Stopping,
    ) -> JoinHandle<()> {
        let routes = Arc::new(routes);
        let handler = move |req: Request<Incoming>, _peer: SocketAddr| {
            let routes = routes.clone();
            async move { super::router::route(&routes, req).await }
        };
        tokio::spawn(listener::serve(
            self.listener,
            handler,
            limits,
            admission,
            stopping,
        ))
    }
}
