//! SRT readers: a caller on the SRT port whose stream id asks to read (`play:{id}`,
//! `play:{id}/{rung}`, `play:{id}/origin`, `#!::r=…,m=request`) gets the stream as MPEG-TS in
//! 1316-byte payloads — a rung's H.264 with the AAC every rung carries, or the source as
//! received (H.264/HEVC + AAC), remuxed, never re-encoded. Before the handshake is answered:
//! the stream must be live, a signed-playback stream needs a valid grant in the stream id, the
//! rendition must exist and be carriable in TS; the stream's SRT passphrase is the key, as for
//! its publishers. Each reader is two (or one, for the origin) hub readers with bounded queues
//! and its own [`TsMuxer`]; nothing it does can hold up the hub or the other readers.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::future::BoxFuture;
use futures::StreamExt;
use srt_protocol::settings::KeySettings;
use srt_tokio::access::ServerRejectReason;
use srt_tokio::{ConnectionRequest, SrtSocket};

use crate::db::{Store, StreamRow};
use crate::formats::mpegts_mux::{take_payloads, MuxError, TsMuxer};
use crate::hub::{default_rung, Feed, Hub, Reader, ReaderOptions, SRT_READER};
use crate::ingest::srt::conn::{key_settings, reject};
use crate::ingest::srt::streamid::{PlayTarget, Rendition};
use crate::live::Registry;
use crate::media::{MediaMessage, TrackKind};
use crate::playback_auth::{Resource, Signing};
use crate::shutdown::Stopping;

/// Messages queued per hub reader: a few seconds of video or audio frames. A reader that falls
/// further behind loses frames (counted) and resumes at the next keyframe.
const READER_QUEUE: usize = 256;
/// A reader whose SRT sending has failed (its socket's queue full) for this long is closed: it
/// has not taken what it was sent for that long and would only ever see keyframe gaps.
const SLOW_READER_LIMIT: Duration = Duration::from_secs(5);
/// How long a reader of a stream that just went live waits for its ladder's first outputs:
/// within a caller's connect timeout (libsrt's default is 3 s), which runs meanwhile.
const RUNG_WAIT: Duration = Duration::from_secs(2);
/// How long a closing handshake may take before the socket is simply dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// What SRT readers need: the registry's hubs, the records (passphrase, signed playback) and
/// the signing key. Cheap to clone.
#[derive(Clone)]
pub struct SrtReads(Arc<Shared>);

struct Shared {
    registry: Arc<Registry>,
    store: Arc<dyn Store>,
    signing: Option<Signing>,
    /// CDN resources whose streams all need signed playback (as `Endpoints::secure`).
    secure_cdns: HashSet<i64>,
}

impl SrtReads {
    pub fn new(
        registry: Arc<Registry>,
        store: Arc<dyn Store>,
        signing: Option<Signing>,
        secure_cdns: HashSet<i64>,
    ) -> SrtReads {
        SrtReads(Arc::new(Shared {
            registry,
            store,
            signing,
            secure_cdns,
        }))
    }
}

impl crate::ingest::srt::Readers for SrtReads {
    fn read(
        &self,
        request: ConnectionRequest,
        target: PlayTarget,
        stopping: Stopping,
    ) -> BoxFuture<'static, ()> {
        let this = self.clone();
        Box::pin(async move { this.run(request, target, stopping).await })
    }
}

/// Why a reader was refused: the SRT reject reason and the log's words.
type Refusal = (ServerRejectReason, String);

/// An admitted reader before its handshake is answered.
struct Admitted {
    key: Option<KeySettings>,
    hub: Arc<Hub>,
    feed: Feed,
    readers: Vec<Reader>,
    muxer: TsMuxer,
    /// Messages that arrived behind the replayed configs.
    early: Vec<MediaMessage>,
}

impl SrtReads {
    async fn run(self, request: ConnectionRequest, target: PlayTarget, stopping: Stopping) {
        let peer = request.remote();
        let id = target.stream_id;
        let admitted = match self.admit(&request, &target).await {
            Ok(a) => a,
            Err((reason, why)) => {
                tracing::info!(%peer, stream = id, rendition = ?target.rendition, reason = ?reason, "SRT read refused: {why}");
                return reject(request, reason).await;
            }
        };
        let encrypted = admitted.key.is_some();
        let socket = match request.accept(admitted.key.clone()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(%peer, stream = id, encrypted, error = %e, "SRT read handshake failed (passphrase mismatch?)");
                return;
            }
        };
        tracing::info!(%peer, stream = id, feed = ?admitted.feed, encrypted, "SRT reader connected");
        let mut sending = Sending::new(socket, admitted, peer);
        let reason = sending.run(stopping).await;
        sending.finish(id, &reason).await;
    }

    /// Whether the caller may read, and from where, decided before the handshake is answered.
    async fn admit(
        &self,
        request: &ConnectionRequest,
        target: &PlayTarget,
    ) -> Result<Admitted, Refusal> {
        let id = target.stream_id;
        let row = self.load(id).await?;
        self.check_grant(&row, target)?;
        let not_live = || {
            (
                ServerRejectReason::Notfound,
                "the stream is not live".to_owned(),
            )
        };
        let hub = self.0.registry.hub(id).ok_or_else(not_live)?;
        let name = format!("{SRT_READER} {}", request.remote());
        let options = || ReaderOptions::new(name.clone(), READER_QUEUE);
        let rungs = hub.settled_video_rungs(RUNG_WAIT).await;
        let feed = match &target.rendition {
            Rendition::Origin => Feed::Source,
            Rendition::Default => {
                Feed::Video(default_rung(&rungs).ok_or_else(not_live)?.name.clone())
            }
            Rendition::Rung(rung) if rungs.iter().any(|r| &r.name == rung) => {
                Feed::Video(rung.clone())
            }
            Rendition::Rung(rung) => {
                let known: Vec<&str> = rungs.iter().map(|r| r.name.as_str()).collect();
                let why = format!("no rung {rung:?} (the stream has {known:?})");
                return Err((ServerRejectReason::Notfound, why));
            }
        };
        let mut readers = vec![hub.subscribe(feed.clone(), options())];
        if feed != Feed::Source {
            readers.push(hub.subscribe(Feed::Audio, options()));
        }
        let mut muxer = TsMuxer::default();
        let mut early = Vec::new();
        let mut configured = false;
        for reader in &mut readers {
            // The replayed header is queued at subscription: read it now, to refuse what TS
            // cannot carry before answering.
            while let Some(m) = reader.try_recv() {
                let done = !matches!(
                    m,
                    MediaMessage::Tracks(_)
                        | MediaMessage::VideoConfig(_)
                        | MediaMessage::AudioConfig(_)
                );
                configured |= configure(&mut muxer, &m)
                    .map_err(|e| (ServerRejectReason::NotSupMedia, e.to_string()))?;
                if done {
                    early.push(m);
                    break;
                }
            }
        }
        if !configured {
            return Err(not_live());
        }
        let key = key_settings(request, row.settings.srt_passphrase.clone(), id)
            .map_err(|reason| (reason, "the stored passphrase is unusable".to_owned()))?;
        Ok(Admitted {
            key,
            hub,
            feed,
            readers,
            muxer,
            early,
        })
    }

    async fn load(&self, id: i64) -> Result<StreamRow, Refusal> {
        let store = self.0.store.clone();
        match tokio::task::spawn_blocking(move || store.get_stream(id)).await {
            Ok(Ok(Some(row))) => Ok(row),
            Ok(Ok(None)) => Err((ServerRejectReason::Notfound, "no such stream".to_owned())),
            Ok(Err(e)) => Err((
                ServerRejectReason::InternalServerError,
                format!("store: {e}"),
            )),
            Err(e) => Err((
                ServerRejectReason::InternalServerError,
                format!("store task: {e}"),
            )),
        }
    }

    /// Signed playback is not bypassed over SRT: a stream that needs a grant for its HTTP
    /// outputs needs one in the stream id too (`play:{id}/t/{expires}/{token}`); a grant that
    /// is given is checked even where none is needed, as the HTTP gate does.
    fn check_grant(&self, row: &StreamRow, target: &PlayTarget) -> Result<(), Refusal> {
        let s = &row.settings;
        let needed = s.secure_playback || s.cdn_id.is_some_and(|c| self.0.secure_cdns.contains(&c));
        let unauthorized = |why: &str| Err((ServerRejectReason::Unauthorized, why.to_owned()));
        match (&target.grant, &self.0.signing) {
            (None, _) if needed => unauthorized("signed playback: no grant in the stream id"),
            (None, _) => Ok(()),
            (Some(_), None) => unauthorized("a grant, but no playback_signing_key to check it"),
            (Some(grant), Some(signing)) => {
                let now = time::OffsetDateTime::now_utc().unix_timestamp();
                match signing.verify(&Resource::Stream(row.id).name(), grant, now) {
                    true => Ok(()),
                    false => unauthorized("the grant is wrong or expired"),
                }
            }
        }
    }
}

/// Applies a config message to the muxer; whether it was one.
fn configure(muxer: &mut TsMuxer, m: &MediaMessage) -> Result<bool, MuxError> {
    match m {
        MediaMessage::VideoConfig(c) => muxer.set_video(c).map(|_| true),
        MediaMessage::AudioConfig(c) => muxer.set_audio(c).map(|_| true),
        _ => Ok(false),
    }
}

/// One connected reader: hub messages → TS → SRT payloads.
struct Sending {
    socket: SrtSocket,
    peer: SocketAddr,
    hub: Arc<Hub>,
    feed: Feed,
    readers: Vec<Reader>,
    muxer: TsMuxer,
    early: Vec<MediaMessage>,
    ts: Vec<u8>,
    buf: BytesMut,
    /// Video is dropped until a keyframe: at the start, and after any loss.
    waiting_keyframe: bool,
    /// Hub losses already acted on.
    seen_lost: u64,
    stats: Stats,
}

#[derive(Debug, Default)]
struct Stats {
    bytes: u64,
    skipped_frames: u64,
    bad_frames: u64,
}

impl Sending {
    fn new(socket: SrtSocket, admitted: Admitted, peer: SocketAddr) -> Sending {
        let Admitted {
            hub,
            feed,
            readers,
            muxer,
            early,
            ..
        } = admitted;
        // Start now rather than at the rung's next scheduled keyframe (rate-limited in the hub;
        // the source's keyframes are the publisher's: an origin reader waits for the next).
        hub.request_keyframe(&feed);
        Sending {
            socket,
            peer,
            hub,
            feed,
            readers,
            muxer,
            early,
            ts: Vec::new(),
            buf: BytesMut::new(),
            waiting_keyframe: true,
            seen_lost: 0,
            stats: Stats::default(),
        }
    }

    /// Sends until the stream ends, the caller leaves or cannot keep up, or the server stops
    /// (the reader calls again, another node behind a load balancer); returns why.
    async fn run(&mut self, mut stopping: Stopping) -> String {
        for m in std::mem::take(&mut self.early) {
            if let Err(why) = self.message(m) {
                return why;
            }
        }
        loop {
            let (first, rest) = self.readers.split_at_mut(1);
            let message = tokio::select! {
                _ = stopping.until_refusing() => return "the server is shutting down".to_owned(),
                m = first[0].recv() => m,
                m = async { rest.first_mut()?.recv().await }, if !rest.is_empty() => m,
                incoming = self.socket.next() => match incoming {
                    // A reader has nothing to send us: whatever comes is ignored.
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return format!("receive error: {e}"),
                    None => return "reader closed".to_owned(),
                },
            };
            let Some(message) = message else {
                return "the stream ended".to_owned();
            };
            self.note_losses();
            if let Err(why) = self.message(message) {
                return why;
            }
            if let Err(why) = self.send().await {
                return why;
            }
        }
    }

    /// A hub reader lost messages (its queue was full): the picture is broken until the next
    /// keyframe.
    fn note_losses(&mut self) {
        let lost: u64 = self.readers.iter().map(Reader::dropped).sum();
        if lost > self.seen_lost {
            tracing::debug!(peer = %self.peer, lost = lost - self.seen_lost, "SRT reader fell behind the hub");
            self.seen_lost = lost;
            self.skip_to_keyframe();
        }
    }

    fn skip_to_keyframe(&mut self) {
        self.waiting_keyframe = true;
        self.hub.request_keyframe(&self.feed);
    }

    fn message(&mut self, m: MediaMessage) -> Result<(), String> {
        match m {
            MediaMessage::Frame(frame) => {
                if frame.track == TrackKind::Video {
                    if self.waiting_keyframe && !frame.keyframe {
                        self.stats.skipped_frames += 1;
                        return Ok(());
                    }
                    self.waiting_keyframe = false;
                }
                if let Err(e) = self.muxer.write(&frame, &mut self.ts) {
                    // Per-frame: counted, the stream goes on.
                    self.stats.bad_frames += 1;
                    tracing::debug!(peer = %self.peer, error = %e, "frame not sent");
                }
            }
            // The source switched (main/backup): the other encoder's pictures start at its
            // keyframe.
            MediaMessage::Discontinuity { .. } => self.skip_to_keyframe(),
            m => {
                configure(&mut self.muxer, &m)
                    .map_err(|e| format!("the stream changed to what TS cannot carry: {e}"))?;
            }
        }
        Ok(())
    }

    /// Hands whole payloads to the SRT socket, waiting for room in its queue: srt-tokio's
    /// holds 128 payloads, fewer than one 1080p IDR makes (150–250 KB), so a reader that only
    /// tried would never get a keyframe through. Behind that queue the protocol's send buffer
    /// keeps each payload until the caller acknowledges it; it must hold a whole IDR, which
    /// arrives faster than it is paced out (vendor/srt-protocol PATCHED.md, send buffer
    /// overflow). Waiting never holds the hub: a reader that cannot keep up falls behind in its
    /// own hub queue, which loses (counted) and resumes at a keyframe; one whose socket takes
    /// nothing for [`SLOW_READER_LIMIT`] is closed.
    async fn send(&mut self) -> Result<(), String> {
        use futures::SinkExt;
        self.buf.extend_from_slice(&self.ts);
        self.ts.clear();
        let too_slow = |peer: &SocketAddr| {
            tracing::warn!(peer = %peer, "SRT reader too slow; closing");
            format!("too slow: nothing sent for {SLOW_READER_LIMIT:?}")
        };
        for payload in take_payloads(&mut self.buf) {
            let len = payload.len() as u64;
            let fed = self.socket.feed((Instant::now(), payload));
            match tokio::time::timeout(SLOW_READER_LIMIT, fed).await {
                Ok(Ok(())) => self.stats.bytes += len,
                Ok(Err(e)) => return Err(format!("send error: {e}")),
                Err(_) => return Err(too_slow(&self.peer)),
            }
        }
        match tokio::time::timeout(SLOW_READER_LIMIT, self.socket.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("send error: {e}")),
            Err(_) => Err(too_slow(&self.peer)),
        }
    }

    /// Sends what is left (a payload shorter than 1316 bytes), closes, and logs the reader's
    /// account.
    async fn finish(&mut self, id: i64, reason: &str) {
        if !self.buf.is_empty() {
            let rest = self.buf.split().freeze();
            let _ = self.socket.try_send(Instant::now(), rest);
        }
        self.readers.clear();
        let _ =
            tokio::time::timeout(CLOSE_TIMEOUT, futures::SinkExt::close(&mut self.socket)).await;
        let s = &self.stats;
        tracing::info!(
            peer = %self.peer,
            stream = id,
            feed = ?self.feed,
            reason,
            bytes = s.bytes,
            hub_dropped = self.seen_lost,
            skipped_frames = s.skipped_frames,
            bad_frames = s.bad_frames,
            "SRT reader left"
        );
    }
}
