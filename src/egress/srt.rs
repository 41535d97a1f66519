//! One SRT push to a restream target (`srt://host:port?streamid=…&passphrase=…&latency=ms`, the
//! query as srt-live-transmit and OBS write it): srt-tokio as a caller, the stream as MPEG-TS
//! (the writer SRT readers use) in 1316-byte payloads, waiting for room in the socket's queue.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::SinkExt;
use srt_tokio::SrtSocket;

use crate::formats::mpegts_mux::{take_payloads, TsMuxer};
use crate::media::MediaMessage;

/// libsrt's bounds on a passphrase (bytes); srt-tokio panics outside them.
const PASSPHRASE: std::ops::RangeInclusive<usize> = 10..=80;
/// SRT stream ids are at most 512 bytes (SRT access control, §3.2.1.3.1).
const MAX_STREAM_ID: usize = 512;

#[derive(Clone, PartialEq, Eq)]
pub struct SrtTarget {
    pub host: String,
    pub port: u16,
    stream_id: Option<String>,
    passphrase: Option<String>,
    latency: Option<Duration>,
}

impl std::fmt::Debug for SrtTarget {
    // The stream id may hold the target's key, the passphrase is a secret: neither is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "srt://{}:{}", self.host, self.port)?;
        if self.stream_id.is_some() {
            write!(f, "?streamid=****")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SrtTargetError {
    #[error("an SRT target is srt://host:port")]
    Address,
    #[error("the passphrase must be {}..={} characters", PASSPHRASE.start(), PASSPHRASE.end())]
    Passphrase,
    #[error("the stream id is longer than {MAX_STREAM_ID} bytes")]
    StreamId,
    #[error("latency is in milliseconds (20..=8000)")]
    Latency,
    #[error("unknown SRT target parameter `{0}` (streamid, passphrase, latency)")]
    Unknown(String),
}

impl SrtTarget {
    pub fn parse(uri: &url::Url) -> Result<SrtTarget, SrtTargetError> {
        if uri.scheme() != "srt" {
            return Err(SrtTargetError::Address);
        }
        let host = uri
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or(SrtTargetError::Address)?;
        let port = uri.port().ok_or(SrtTargetError::Address)?;
        let mut t = SrtTarget {
            host: host.trim_matches(['[', ']']).to_owned(),
            port,
            stream_id: None,
            passphrase: None,
            latency: None,
        };
        for (k, v) in uri.query_pairs() {
            match k.as_ref() {
                "streamid" if v.len() <= MAX_STREAM_ID => t.stream_id = Some(v.into_owned()),
                "streamid" => return Err(SrtTargetError::StreamId),
                "passphrase" if PASSPHRASE.contains(&v.len()) => {
                    t.passphrase = Some(v.into_owned())
                }
                "passphrase" => return Err(SrtTargetError::Passphrase),
                "latency" => {
                    let ms: u64 = v.parse().map_err(|_| SrtTargetError::Latency)?;
                    if !(20..=8000).contains(&ms) {
                        return Err(SrtTargetError::Latency);
                    }
                    t.latency = Some(Duration::from_millis(ms));
                }
                other => return Err(SrtTargetError::Unknown(other.to_owned())),
            }
        }
        Ok(t)
    }
}

/// Calls the target (within `patience`) and returns the sender.
pub async fn connect(target: &SrtTarget, patience: Duration) -> Result<TsSender, std::io::Error> {
    let mut builder = SrtSocket::builder();
    if let Some(p) = &target.passphrase {
        builder = builder.encryption(0, p.clone());
    }
    if let Some(l) = target.latency {
        builder = builder.latency(l);
    }
    // The DNS guard: the address called is one the URL policy checked now.
    let addr = crate::url_policy::resolve(&target.host, target.port)
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .into_iter()
        .next()
        .ok_or_else(|| std::io::Error::other("the target's host has no address"))?;
    let call = builder.call(addr, target.stream_id.as_deref());
    let socket = tokio::time::timeout(patience, call)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no SRT handshake"))??;
    Ok(TsSender {
        socket,
        muxer: TsMuxer::default(),
        ts: Vec::new(),
        buf: BytesMut::new(),
        bytes_sent: 0,
    })
}

/// An SRT error as shown in `last_error`: srt-tokio's may carry no message, then its kind
/// says what happened.
pub fn describe(e: &std::io::Error) -> String {
    match e.to_string() {
        text if text.trim().is_empty() => format!("{:?}", e.kind()),
        text => text,
    }
}

/// A connected SRT push: media messages in, TS payloads out.
pub struct TsSender {
    socket: SrtSocket,
    muxer: TsMuxer,
    ts: Vec<u8>,
    buf: BytesMut,
    pub bytes_sent: u64,
}

impl TsSender {
    /// Muxes `msg` and sends the whole payloads it completes.
    pub async fn send(&mut self, msg: &MediaMessage) -> Result<(), std::io::Error> {
        let muxed = match msg {
            MediaMessage::VideoConfig(c) => self.muxer.set_video(c),
            MediaMessage::AudioConfig(c) => self.muxer.set_audio(c),
            MediaMessage::Frame(f) => self.muxer.write(f, &mut self.ts),
            _ => Ok(()),
        };
        muxed.map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        self.buf.extend_from_slice(&self.ts);
        self.ts.clear();
        for payload in take_payloads(&mut self.buf) {
            self.bytes_sent += payload.len() as u64;
            self.socket.feed((Instant::now(), payload)).await?;
        }
        self.socket.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_carry_their_parameters_and_hide_their_secrets() {
        let t = SrtTarget::parse(
            &"srt://ingest.example:9000?streamid=publish:KEY&passphrase=0123456789ab&latency=200"
                .parse()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.latency),
            ("ingest.example", 9000, Some(Duration::from_millis(200)))
        );
        let shown = format!("{t:?}");
        assert!(
            !shown.contains("KEY") && !shown.contains("0123456789ab"),
            "{shown}"
        );
        for bad in [
            "srt://h",
            "srt://h:1?passphrase=short",
            "srt://h:1?latency=5",
            "srt://h:1?mode=listener",
            "rtmp://h:1",
        ] {
            assert!(SrtTarget::parse(&bad.parse().unwrap()).is_err(), "{bad}");
        }
    }

    /// ffmpeg as an SRT listener (a target as a restream meets it) writes what it receives;
    /// ffprobe reads it: the fixture's H.264 1280x720 + AAC, its 6 s.
    #[tokio::test]
    async fn an_ffmpeg_srt_listener_receives_the_stream() {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = dir.path().join("out.ts");
        let pass = "restream-pass-0123";
        let mut ffmpeg = tokio::process::Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-y", "-i"])
            .arg(format!(
                "srt://127.0.0.1:{port}?mode=listener&passphrase={pass}"
            ))
            .args(["-c", "copy", "-f", "mpegts"])
            .arg(&out)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let target = SrtTarget::parse(
            &format!("srt://127.0.0.1:{port}?passphrase={pass}")
                .parse()
                .unwrap(),
        )
        .unwrap();
        let mut sender = None;
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Ok(s) = connect(&target, Duration::from_secs(1)).await {
                sender = Some(s);
                break;
            }
        }
        let mut sender = sender.expect("the ffmpeg listener took the call");
        // In real time, as a live restream sends (SRT's live mode drops what comes in a burst
        // past its latency window).
        let start = tokio::time::Instant::now();
        for m in crate::egress::test_support::fixture_messages() {
            if let MediaMessage::Frame(f) = &m {
                tokio::time::sleep_until(start + Duration::from_nanos(f.dts)).await;
            }
            sender.send(&m).await.unwrap();
        }
        // The receiver's latency window (120 ms) before the end.
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(sender);
        let _ = tokio::time::timeout(Duration::from_secs(10), ffmpeg.wait()).await;
        crate::egress::test_support::assert_fixture(&crate::egress::test_support::probe(&out));
    }
}
