//! One RTMP or RTMPS publish to a restream target (YouTube, Twitch, Facebook, another server):
//! TCP or TLS (rustls: the system's roots plus an operator's CA file, so the certificate is
//! validated), the RTMP handshake and `connect`/`createStream`/`publish` through rml_rtmp's
//! client session, then FLV tag bodies as audio/video messages. What the server sends back
//! (acknowledgements, pings, a `publish` refusal) is read as it comes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use rml_rtmp::sessions::{
    ClientSession, ClientSessionConfig, ClientSessionEvent, ClientSessionResult, PublishRequestType,
};
use rml_rtmp::time::RtmpTimestamp;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::flv::Tag;

/// The RTMP port (and RTMPS's, by the custom YouTube, Twitch and Facebook follow).
const RTMP_PORT: u16 = 1935;
const RTMPS_PORT: u16 = 443;
/// Chunk size we announce: a 4 KiB chunk keeps the per-chunk header overhead under 0.3 %.
const CHUNK_SIZE: u32 = 4096;
/// Bytes read per socket read; what a server sends a publisher is small.
const READ_BUF: usize = 16 * 1024;

/// Where a restream goes: `rtmp[s]://host[:port]/app[/more]/key` — the last path segment
/// (with the query, e.g. `?backup=1`) is the stream key, the rest the application.
#[derive(Clone, PartialEq, Eq)]
pub struct RtmpTarget {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub app: String,
    key: String,
}

impl std::fmt::Debug for RtmpTarget {
    // The key is the target's secret: never in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}:{}/{}/****",
            if self.tls { "rtmps" } else { "rtmp" },
            self.host,
            self.port,
            self.app
        )
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("a restream target is rtmp://, rtmps:// or srt://")]
    Scheme,
    #[error("the target names no host")]
    NoHost,
    #[error("the target's path must be /{{app}}/{{stream key}}")]
    NoKey,
}

impl RtmpTarget {
    pub fn parse(uri: &url::Url) -> Result<RtmpTarget, TargetError> {
        let tls = match uri.scheme() {
            "rtmp" => false,
            "rtmps" => true,
            _ => return Err(TargetError::Scheme),
        };
        let host = uri
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or(TargetError::NoHost)?;
        let path = uri.path().trim_matches('/');
        let (app, key) = path.rsplit_once('/').ok_or(TargetError::NoKey)?;
        if app.is_empty() || key.is_empty() {
            return Err(TargetError::NoKey);
        }
        let key = match uri.query() {
            Some(q) => format!("{key}?{q}"),
            None => key.to_owned(),
        };
        Ok(RtmpTarget {
            tls,
            host: host.trim_matches(['[', ']']).to_owned(),
            port: uri
                .port()
                .unwrap_or(if tls { RTMPS_PORT } else { RTMP_PORT }),
            app: app.to_owned(),
            key,
        })
    }

    fn tc_url(&self) -> String {
        let scheme = if self.tls { "rtmps" } else { "rtmp" };
        format!("{scheme}://{}:{}/{}", self.host, self.port, self.app)
    }
}

/// Why a publish to a target ended or never started (the restream's `last_error`).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connecting: {0}")]
    Connect(std::io::Error),
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error("the RTMP handshake failed: {0}")]
    Handshake(String),
    #[error("the server refused: {0}")]
    Refused(String),
    #[error("RTMP: {0}")]
    Protocol(String),
    #[error("the connection was lost: {0}")]
    Io(std::io::Error),
    #[error("the server closed the connection")]
    Closed,
    #[error("no answer from the server within {0:?}")]
    Timeout(Duration),
}

impl SendError {
    /// The error without `key` in what the server said (a server may quote the stream key it
    /// refuses; it must not reach the API or the log).
    fn without(self, key: &str) -> SendError {
        let hide = |s: String| {
            if key.is_empty() {
                s
            } else {
                s.replace(key, "****")
            }
        };
        match self {
            SendError::Refused(s) => SendError::Refused(hide(s)),
            SendError::Protocol(s) => SendError::Protocol(hide(s)),
            e => e,
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A publish in progress: tags go out through [`Publisher::send`].
pub struct Publisher {
    io: Box<dyn Io>,
    session: ClientSession,
    buf: Vec<u8>,
    pub bytes_sent: u64,
}

fn protocol(e: impl std::fmt::Display) -> SendError {
    SendError::Protocol(e.to_string())
}

/// Connects to `target`, handshakes and publishes its key, within `patience`.
pub async fn publish(
    target: &RtmpTarget,
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    patience: Duration,
) -> Result<Publisher, SendError> {
    tokio::time::timeout(patience, open(target, tls))
        .await
        .map_err(|_| SendError::Timeout(patience))?
}

async fn open(
    target: &RtmpTarget,
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
) -> Result<Publisher, SendError> {
    // The DNS guard: the addresses connected to are the ones the URL policy checked now (a
    // name rebound to a link-local or metadata address since the record was written is refused).
    let addrs = crate::url_policy::resolve(&target.host, target.port)
        .await
        .map_err(|e| SendError::Connect(std::io::Error::other(e.to_string())))?;
    let tcp = TcpStream::connect(addrs.as_slice())
        .await
        .map_err(SendError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let mut io: Box<dyn Io> = match (target.tls, tls) {
        (true, Some(config)) => {
            let name = tokio_rustls::rustls::pki_types::ServerName::try_from(target.host.clone())
                .map_err(|e| SendError::Tls(std::io::Error::other(e)))?;
            let connector = tokio_rustls::TlsConnector::from(config);
            Box::new(connector.connect(name, tcp).await.map_err(SendError::Tls)?)
        }
        (true, None) => {
            return Err(SendError::Tls(std::io::Error::other(
                "no TLS configuration",
            )))
        }
        (false, _) => Box::new(tcp),
    };
    let leftover = handshake(&mut io).await?;
    let config = ClientSessionConfig {
        chunk_size: CHUNK_SIZE,
        tc_url: Some(target.tc_url()),
        ..ClientSessionConfig::new()
    };
    let (session, initial) = ClientSession::new(config).map_err(protocol)?;
    let mut p = Publisher {
        io,
        session,
        buf: vec![0; READ_BUF],
        bytes_sent: 0,
    };
    p.results(initial).await?;
    let connect = p
        .session
        .request_connection(target.app.clone())
        .map_err(protocol)?;
    p.results(vec![connect]).await?;
    p.until(leftover, |e| {
        matches!(e, ClientSessionEvent::ConnectionRequestAccepted)
    })
    .await?;
    let publish = p
        .session
        .request_publishing(target.key.clone(), PublishRequestType::Live)
        .map_err(protocol)?;
    p.results(vec![publish]).await?;
    p.until(Vec::new(), |e| {
        matches!(e, ClientSessionEvent::PublishRequestAccepted)
    })
    .await
    .map_err(|e| e.without(&target.key))?;
    Ok(p)
}

/// The client side of the RTMP handshake; returns what the server sent after it.
async fn handshake(io: &mut Box<dyn Io>) -> Result<Vec<u8>, SendError> {
    let err = |e: rml_rtmp::handshake::HandshakeError| SendError::Handshake(format!("{e:?}"));
    let mut hs = Handshake::new(PeerType::Client);
    let c0c1 = hs.generate_outbound_p0_and_p1().map_err(err)?;
    io.write_all(&c0c1).await.map_err(SendError::Io)?;
    let mut buf = vec![0u8; READ_BUF];
    loop {
        let n = io.read(&mut buf).await.map_err(SendError::Io)?;
        if n == 0 {
            return Err(SendError::Closed);
        }
        match hs.process_bytes(&buf[..n]).map_err(err)? {
            HandshakeProcessResult::InProgress { response_bytes } => {
                io.write_all(&response_bytes).await.map_err(SendError::Io)?;
            }
            HandshakeProcessResult::Completed {
                response_bytes,
                remaining_bytes,
            } => {
                io.write_all(&response_bytes).await.map_err(SendError::Io)?;
                return Ok(remaining_bytes);
            }
        }
    }
}

impl Publisher {
    /// Writes what the session produced; returns its events.
    async fn results(
        &mut self,
        results: Vec<ClientSessionResult>,
    ) -> Result<Vec<ClientSessionEvent>, SendError> {
        let mut events = Vec::new();
        for r in results {
            match r {
                ClientSessionResult::OutboundResponse(packet) => {
                    self.io
                        .write_all(&packet.bytes)
                        .await
                        .map_err(SendError::Io)?;
                    self.bytes_sent += packet.bytes.len() as u64;
                }
                ClientSessionResult::RaisedEvent(e) => events.push(e),
                ClientSessionResult::UnhandleableMessageReceived(_) => {}
            }
        }
        Ok(events)
    }

    /// Reads the server until an event `done` says, or a refusal.
    async fn until(
        &mut self,
        mut pending: Vec<u8>,
        done: impl Fn(&ClientSessionEvent) -> bool,
    ) -> Result<(), SendError> {
        loop {
            if pending.is_empty() {
                let n = self.io.read(&mut self.buf).await.map_err(SendError::Io)?;
                if n == 0 {
                    return Err(SendError::Closed);
                }
                pending = self.buf[..n].to_vec();
            }
            let results = self.session.handle_input(&pending).map_err(protocol)?;
            pending.clear();
            for e in self.results(results).await? {
                match e {
                    e if done(&e) => return Ok(()),
                    ClientSessionEvent::ConnectionRequestRejected { description } => {
                        return Err(SendError::Refused(description))
                    }
                    _ => {}
                }
            }
        }
    }

    /// Sends one tag; also answers what the server sent meanwhile (acknowledgements, pings).
    pub async fn send(&mut self, tag: Tag) -> Result<(), SendError> {
        let packet = match tag {
            Tag::Video {
                timestamp,
                body,
                keyframe,
            } => self
                .session
                .publish_video_data(body, RtmpTimestamp::new(timestamp), !keyframe)
                .map_err(protocol)?,
            Tag::Audio { timestamp, body } => self
                .session
                .publish_audio_data(body, RtmpTimestamp::new(timestamp), false)
                .map_err(protocol)?,
        };
        self.results(vec![packet]).await?;
        self.read_pending().await
    }

    /// Handles whatever the server sent, without waiting for more.
    async fn read_pending(&mut self) -> Result<(), SendError> {
        loop {
            let read = futures::FutureExt::now_or_never(self.io.read(&mut self.buf));
            let n = match read {
                None => return Ok(()),
                Some(Ok(0)) => return Err(SendError::Closed),
                Some(Ok(n)) => n,
                Some(Err(e)) => return Err(SendError::Io(e)),
            };
            let input = Bytes::copy_from_slice(&self.buf[..n]);
            let results = self.session.handle_input(&input).map_err(protocol)?;
            self.results(results).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::test_support::{assert_fixture, fixture_tags, nginx_rtmp, recorded};

    #[test]
    fn a_refusal_quoting_the_key_is_shown_without_it() {
        let e = SendError::Refused("stream key 'live_123_abc' is not valid".into());
        assert_eq!(
            e.without("live_123_abc").to_string(),
            "the server refused: stream key '****' is not valid"
        );
    }

    /// A 6 s H.264 + AAC clip published to nginx-rtmp, which records it; ffprobe reads the
    /// file.
    #[tokio::test]
    async fn nginx_rtmp_records_what_a_restream_publishes() {
        let dir = tempfile::tempdir().unwrap();
        let (mut nginx, port, _) = nginx_rtmp(dir.path(), None);
        let url = format!("rtmp://127.0.0.1:{port}/live/restream-key");
        let target = RtmpTarget::parse(&url.parse().unwrap()).unwrap();
        let mut p = publish(&target, None, Duration::from_secs(5))
            .await
            .unwrap();
        for tag in fixture_tags() {
            p.send(tag).await.unwrap();
        }
        assert!(p.bytes_sent > 100_000, "{}", p.bytes_sent);
        drop(p);
        let v = recorded(dir.path(), "restream-key").await;
        let _ = nginx.kill();
        assert_fixture(&v);
    }

    /// RTMPS through TLS in front of nginx-rtmp, with a certificate of a CA the test makes: with
    /// that CA the publish goes through; with the system's roots only it is refused (the
    /// certificate is validated, not just encrypted to).
    #[tokio::test]
    async fn rtmps_validates_the_target_certificate_against_the_configured_ca() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let (ca_file, cert_file, key_file) = (
            dir.path().join("ca.pem"),
            dir.path().join("cert.pem"),
            dir.path().join("key.pem"),
        );
        std::fs::write(&ca_file, ca.pem()).unwrap();
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let (mut nginx, _, tls_port) = nginx_rtmp(dir.path(), Some((&cert_file, &key_file)));
        let url = format!("rtmps://localhost:{tls_port}/live/secure-key");
        let target = RtmpTarget::parse(&url.parse().unwrap()).unwrap();

        let system_only = super::super::tls::client_config(None).unwrap();
        let refused = publish(&target, Some(system_only), Duration::from_secs(5)).await;
        assert!(
            matches!(refused, Err(SendError::Tls(_))),
            "{:?}",
            refused.err()
        );

        let ours = super::super::tls::client_config(Some(&ca_file)).unwrap();
        let mut p = publish(&target, Some(ours), Duration::from_secs(5))
            .await
            .unwrap();
        for tag in fixture_tags() {
            p.send(tag).await.unwrap();
        }
        drop(p);
        let v = recorded(dir.path(), "secure-key").await;
        let _ = nginx.kill();
        assert_fixture(&v);
    }

    #[test]
    fn targets_are_app_and_key_and_the_key_never_shows() {
        let t = RtmpTarget::parse(&"rtmp://a.rtmp.youtube.com/live2/abcd-efgh".parse().unwrap())
            .unwrap();
        assert_eq!(
            (
                t.tls,
                t.host.as_str(),
                t.port,
                t.app.as_str(),
                t.key.as_str()
            ),
            (false, "a.rtmp.youtube.com", 1935, "live2", "abcd-efgh")
        );
        let t = RtmpTarget::parse(
            &"rtmps://live-api-s.facebook.com:443/rtmp/FB-123?s_bl=1"
                .parse()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (t.tls, t.port, t.app.as_str(), t.key.as_str()),
            (true, 443, "rtmp", "FB-123?s_bl=1")
        );
        assert!(!format!("{t:?}").contains("FB-123"));
        let t = RtmpTarget::parse(&"rtmp://host:1936/app/inst/key".parse().unwrap()).unwrap();
        assert_eq!((t.app.as_str(), t.key.as_str()), ("app/inst", "key"));
        for bad in ["http://h/app/key", "rtmp://h/key", "rtmp://h/app/"] {
            assert!(RtmpTarget::parse(&bad.parse().unwrap()).is_err(), "{bad}");
        }
    }
}
