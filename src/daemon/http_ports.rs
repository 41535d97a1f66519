//! The daemon's HTTP ports: the plain one and, with `https_addr`, the TLS one (its certificate
//! configured or the RTMPS one), both serving the same routes under the same limits and gate;
//! and the URLs clients and the other nodes are told to reach them by.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use super::DaemonError;
use crate::config::Config;
use crate::http::listener::HttpLimits;
use crate::http::router::Routes;
use crate::http::server::Http;

/// The base URL clients are told to use: configured, or the bound HTTP address (a wildcard
/// bind is shown as loopback, the only address known to reach it).
pub(super) fn public_url(config: &Config, bound: SocketAddr) -> Url {
    if let Some(url) = &config.public_url {
        return url.clone();
    }
    let ip = match bound.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".parse().expect("valid"),
        ip if ip.is_unspecified() => "::1".parse().expect("valid"),
        ip => ip,
    };
    let host = SocketAddr::new(ip, bound.port());
    Url::parse(&format!("http://{host}")).expect("a socket address makes a valid URL")
}

/// Where the other nodes reach this one: `node_url`, or the bound address (the host name when
/// bound to every interface).
pub(super) fn node_url(config: &Config, bound: SocketAddr) -> String {
    if let Some(url) = &config.node_url {
        return url.as_str().trim_end_matches('/').to_owned();
    }
    if bound.ip().is_unspecified() {
        return format!("http://{}:{}", crate::cluster::host_name(), bound.port());
    }
    format!("http://{bound}")
}

pub(super) fn http_limits(config: &Config) -> HttpLimits {
    HttpLimits {
        header_timeout: Duration::from_secs(config.http_header_timeout_secs),
        body_timeout: config.http_body_timeout,
        stall_timeout: config.http_stall_timeout,
    }
}

pub(super) async fn bind_http(addr: SocketAddr) -> Result<Http, DaemonError> {
    Http::bind(addr).await.map_err(|source| DaemonError::Bind {
        what: "http",
        addr,
        source,
    })
}

/// Serves the HTTP port and the HTTPS one (if any) with the same routes. One gate for both: the
/// caps count a client's connections wherever they land.
pub(super) fn serve_http(
    ports: [Option<Http>; 2],
    routes: Arc<Routes>,
    config: &Config,
    gate: crate::admission::Admission,
    stopping: crate::shutdown::Stopping,
) -> Vec<tokio::task::JoinHandle<()>> {
    ports
        .into_iter()
        .flatten()
        .map(|port| {
            port.serve(
                routes.clone(),
                http_limits(config),
                gate.clone(),
                stopping.clone(),
            )
        })
        .collect()
}

/// The HTTPS port, when `https_addr` is set: its certificate is `https_cert_file`, else the
/// RTMPS one (configured, or self-signed in the data dir).
pub(super) async fn bind_https(config: &Config) -> Result<Option<Http>, DaemonError> {
    let Some(addr) = config.https_addr else {
        return Ok(None);
    };
    let files = match (&config.https_cert_file, &config.https_key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        _ => config
            .rtmps_cert_file
            .clone()
            .zip(config.rtmps_key_file.clone()),
    };
    let dir = config.data_dir.clone();
    let tls = tokio::task::spawn_blocking(move || {
        let files = files.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        crate::tls::server_config(files, &dir)
    })
    .await?
    .map_err(DaemonError::HttpsTls)?;
    let http = Http::bind_tls(addr, tls)
        .await
        .map_err(|source| DaemonError::Bind {
            what: "https",
            addr,
            source,
        })?;
    tracing::info!(addr = %http.addr, "https listening (HTTP/2 and HTTP/1.1)");
    Ok(Some(http))
}
