//! One PULL stream's fetch loop: the source URLs in turn, round-robin, forever — a source that
//! gives nothing within the first-data timeout, stops sending, fails or ends is left for the
//! next, with a pause after a cycle in which none delivered. What a source delivers goes
//! through the TS → media adapter (or, from an RTMP server, the FLV one), re-timed so the outputs continue across sources with a
//! discontinuity. No data for the inactivity limit (24 h by default) deactivates the stream.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::gateway::{Gateway, GatewayError};
use super::source::{self, SourceError};
use super::PullConfig;
use crate::db::Store;
use crate::ingest::mpegts::to_media::TsToMedia;
use crate::ingest::rtmp::flv::{FlvReader, FlvTag};
use crate::ingest::rtmp::to_media::FlvToMedia;
use crate::live::{PublishError, Publisher, Registry};
use crate::media::retime::Retimer;
use crate::media::{MediaMessage, TrackKind};
use crate::url_policy::{self, redact, Purpose, UrlPolicyError};

/// How long an HTTP source must keep delivering before its data is used.
const HTTP_PROVE_LIVE: Duration = Duration::from_secs(4);

/// Re-times each source onto one continuous output timeline (the shared
/// [`crate::media::retime::Retimer`]): a new source's first frame goes where the wall clock
/// says the output is, after the last frame of the previous one, marked as a discontinuity.
#[derive(Debug, Default)]
struct Rebase {
    retimer: Retimer,
    /// The next frame is a new source's first.
    fresh: bool,
    has_video: bool,
    /// After a source change, video (and audio with it) waits for a keyframe.
    waiting_key: bool,
}

impl Rebase {
    fn new_source(&mut self) {
        self.fresh = true;
        self.has_video = false;
        self.waiting_key = true;
    }

    fn map(&mut self, msg: MediaMessage, now: Instant, out: &mut Vec<MediaMessage>) {
        let f = match msg {
            MediaMessage::Frame(f) => f,
            MediaMessage::VideoConfig(c) => {
                self.has_video = true;
                return out.push(MediaMessage::VideoConfig(c));
            }
            other => return out.push(other),
        };
        if self.has_video && self.waiting_key {
            if f.track == TrackKind::Video && f.keyframe {
                self.waiting_key = false;
            } else {
                return;
            }
        }
        if self.fresh {
            self.fresh = false;
            self.retimer.new_source();
            let continuing = self.retimer.has_output();
            let at = self.retimer.start(f.dts, f.dts, now);
            if continuing {
                out.push(MediaMessage::Discontinuity { at });
            }
        }
        if let Some(f) = self.retimer.retime(f, now) {
            out.push(MediaMessage::Frame(f));
        }
    }
}

/// How one attempt on one source ended.
struct Attempt {
    delivered: bool,
    reason: AttemptEnd,
}

/// Why the fetcher left a source for the next (the `reason` of its log line).
#[derive(Debug, thiserror::Error)]
enum AttemptEnd {
    #[error(transparent)]
    Policy(#[from] UrlPolicyError),
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("inactivity limit reached")]
    Inactive,
    #[error("no data for {0:?}")]
    Stalled(Duration),
    #[error("no data within {0:?}")]
    NoFirstData(Duration),
    #[error("source process gone")]
    ProcessGone,
    #[error("ended before proving live (a stale playlist?)")]
    EndedUnproven,
    #[error("source ended")]
    Ended,
    #[error("over {0} bytes while proving live")]
    HeldOverCap(usize),
    #[error("unusable data: {0}")]
    Unusable(#[from] AdapterError),
}

enum Flow {
    Continue(Attempt),
    Stop,
}

pub async fn run(
    id: i64,
    uris: Vec<String>,
    registry: Arc<Registry>,
    store: Arc<dyn Store>,
    gateway: Arc<Gateway>,
    config: PullConfig,
    mut stop: watch::Receiver<bool>,
) {
    if uris.is_empty() {
        return;
    }
    let mut publisher: Option<Publisher> = None;
    let mut rebase = Rebase::default();
    let mut last_data = Instant::now();
    let mut delivered_in_cycle = false;
    let mut index = 0;
    tracing::info!(stream = id, sources = uris.len(), "PULL started");
    loop {
        // A dropped sender (the manager is gone) stops the pull like an explicit stop.
        if *stop.borrow() || stop.has_changed().is_err() {
            break;
        }
        if last_data.elapsed() >= config.inactivity {
            tracing::warn!(stream = id, after = ?config.inactivity, "PULL received nothing; the stream is deactivated");
            deactivate(&registry, store, id).await;
            break;
        }
        // Several nodes on one store: one pulls, the others wait for its lease to free up
        // (its node dead), without fetching and without counting the wait as the source's.
        match registry.claim_pull(id).await {
            Ok(()) => {}
            Err(e) => {
                claim_refused(id, &e);
                last_data = Instant::now();
                tokio::select! {
                    _ = tokio::time::sleep(PULL_CLAIM_RETRY) => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
        }
        let uri = &uris[index];
        let flow = attempt(
            id,
            uri,
            &registry,
            &gateway,
            &config,
            &mut publisher,
            &mut rebase,
            &mut last_data,
            &mut stop,
        )
        .await;
        // What the attempt held while its source proved live (up to `max_held_bytes`) and what
        // its gateway session buffered are freed: back to the system, as after a pipeline.
        crate::heap::released();
        let attempt = match flow {
            Flow::Stop => break,
            Flow::Continue(a) => a,
        };
        delivered_in_cycle |= attempt.delivered;
        let from = index;
        index = (index + 1) % uris.len();
        left_source(&registry, id, (from, index, uris.len()), &attempt.reason);
        tracing::info!(
            stream = id,
            source = %redact(uri),
            reason = %attempt.reason,
            next = %redact(&uris[index]),
            "PULL source left; trying the next"
        );
        if index == 0 {
            if !delivered_in_cycle {
                // Nothing works: end the live session (the grace period and ENDLIST follow as
                // for a push that stops) and pause before the next cycle.
                if publisher.take().is_some() {
                    rebase = Rebase::default();
                }
                tokio::select! {
                    _ = tokio::time::sleep(config.cycle_pause) => {}
                    _ = stop.changed() => {}
                }
            }
            delivered_in_cycle = false;
        }
    }
    drop(publisher);
    registry.release_unserved(id);
    tracing::info!(stream = id, "PULL stopped");
}

/// Says that the fetcher left source `from` for `to` (of `count`), and why. The inactivity
/// limit ends the pull (next turn of the loop), not just this source: no switch for that.
fn left_source(registry: &Registry, id: i64, hop: (usize, usize, usize), why: &AttemptEnd) {
    let (from, to, count) = hop;
    if count > 1 && !matches!(why, AttemptEnd::Inactive) {
        registry
            .events()
            .emit(crate::events::Event::PullSourceSwitched {
                stream_id: id,
                from,
                to,
                reason: redact(&why.to_string()),
            });
    }
}

/// How often a node that does not pull a stream checks whether its puller's lease is free: with
/// the default 10 s dead-node bound, a dead puller's stream is taken over within 15 s.
/// Logs why this node does not pull the stream now (it asks again in a few seconds).
fn claim_refused(id: i64, e: &PublishError) {
    match e {
        PublishError::LiveElsewhere { .. } => {}
        PublishError::BetterPlaced { .. } => {
            tracing::debug!(stream = id, error = %e, "PULL left to another node")
        }
        // Said every few seconds while the node stays full: not a fault of the source.
        PublishError::AtCapacity { .. } => {
            tracing::info!(stream = id, error = %e, "PULL waits for room")
        }
        _ => tracing::warn!(stream = id, error = %e, "PULL cannot claim the stream yet"),
    }
}

const PULL_CLAIM_RETRY: Duration = Duration::from_secs(5);

#[allow(clippy::too_many_arguments)]
async fn attempt(
    id: i64,
    uri: &str,
    registry: &Arc<Registry>,
    gateway: &Arc<Gateway>,
    config: &PullConfig,
    publisher: &mut Option<Publisher>,
    rebase: &mut Rebase,
    last_data: &mut Instant,
    stop: &mut watch::Receiver<bool>,
) -> Flow {
    let Opened {
        mut source,
        http,
        gateway: _gateway,
    } = match open(id, uri, gateway, config).await {
        Ok(o) => o,
        Err(reason) => {
            return Flow::Continue(Attempt {
                delivered: false,
                reason,
            })
        }
    };
    let mut intake = Intake::new(Adapter::new(source.container, id), http);
    let mut delivered = false;
    let mut last = Instant::now();
    let mut mapped = Vec::new();
    rebase.new_source();
    tracing::info!(stream = id, source = %redact(uri), "PULL source opening");
    let reason = loop {
        let wait = if delivered {
            config.no_data_timeout
        } else {
            config.first_data_timeout
        };
        let event = tokio::select! {
            _ = stop.changed() => None,
            // The inactivity limit can fall inside an attempt (a limit shorter than the
            // timeouts, in tests).
            e = tokio::time::timeout_at((last + wait).min(*last_data + config.inactivity), source.next()) => Some(e),
        };
        let Some(event) = event else {
            source.stop().await;
            return Flow::Stop;
        };
        let data = match event {
            Err(_) if last_data.elapsed() >= config.inactivity => break AttemptEnd::Inactive,
            Err(_) if delivered => break AttemptEnd::Stalled(wait),
            Err(_) => break AttemptEnd::NoFirstData(wait),
            Ok(None) => break AttemptEnd::ProcessGone,
            Ok(Some(source::SourceEvent::Error(e))) => break e.into(),
            Ok(Some(source::SourceEvent::Eos)) if intake.proving() => {
                break AttemptEnd::EndedUnproven
            }
            Ok(Some(source::SourceEvent::Eos)) => break AttemptEnd::Ended,
            Ok(Some(source::SourceEvent::Tracks(t))) => {
                intake.declared = Some(t);
                continue;
            }
            Ok(Some(source::SourceEvent::Data(d))) => d,
        };
        let now = Instant::now();
        match intake.take(data, now, config.max_held_bytes) {
            Ok(true) => {}
            Ok(false) => {
                last = now;
                continue;
            }
            Err(e) => break e,
        }
        for m in intake.out.drain(..) {
            rebase.map(m, now, &mut mapped);
        }
        if !mapped.iter().any(|m| matches!(m, MediaMessage::Frame(_))) {
            mapped.retain(|m| !matches!(m, MediaMessage::Discontinuity { .. }));
            if mapped.is_empty() {
                continue;
            }
        }
        last = now;
        *last_data = now;
        if !delivered {
            delivered = true;
            tracing::info!(stream = id, source = %redact(uri), "PULL source delivering");
        }
        if !deliver(id, registry, publisher, rebase, &mut mapped).await {
            source.stop().await;
            return Flow::Stop;
        }
    };
    source.stop().await;
    Flow::Continue(Attempt { delivered, reason })
}

/// A source opened for one attempt: its process, whether it is HTTP(S), and the gateway
/// session it fetches through (HTTP(S) only; it lives as long as the attempt).
struct Opened {
    source: source::Source,
    http: bool,
    gateway: Option<super::gateway::Session>,
}

/// Checks the source URL and starts its process; why not, as the attempt's end.
async fn open(
    id: i64,
    uri: &str,
    gateway: &Arc<Gateway>,
    config: &PullConfig,
) -> Result<Opened, AttemptEnd> {
    let url = url_policy::parse(uri, Purpose::PullSource)?;
    let http = matches!(url.scheme(), "http" | "https");
    // HTTP(S) hosts are checked by the gateway on the addresses it connects to.
    if !http {
        url_policy::guard(&url, config.allow_link_local).await?;
    }
    // HTTP(S) goes through the gateway, which bounds and checks every request GStreamer's
    // HLS/DASH demuxers make; it lives as long as this attempt.
    let (session, fetch_uri, kind) = if http {
        let (session, local) = gateway.session(id, &url)?;
        let kind = session.probe().await?;
        (Some(session), local.to_string(), kind)
    } else {
        (None, uri.to_owned(), None)
    };
    let source = source::start(id, &fetch_uri, kind).await?;
    Ok(Opened {
        source,
        http,
        gateway: session,
    })
}

/// What a source delivers, turned into media messages (`out`): an HTTP (HLS/DASH) source's
/// data is first held until it has kept delivering for [`HTTP_PROVE_LIVE`] — a live playlist
/// that stopped updating replays its last segments and ends, and those must not reach the
/// outputs again on every cycle.
struct Intake {
    adapter: Adapter,
    out: Vec<MediaMessage>,
    /// Until when data is held; `None` once proven (or not HTTP).
    hold_until: Option<Instant>,
    held: Vec<bytes::Bytes>,
    held_bytes: usize,
    /// A declaration from the source not yet sent on.
    declared: Option<crate::media::Tracks>,
}

impl Intake {
    fn new(adapter: Adapter, http: bool) -> Intake {
        Intake {
            adapter,
            out: Vec::new(),
            hold_until: http.then(|| Instant::now() + HTTP_PROVE_LIVE),
            held: Vec::new(),
            held_bytes: 0,
            declared: None,
        }
    }

    /// The source has not proven live yet: its data is held.
    fn proving(&self) -> bool {
        self.hold_until.is_some()
    }

    /// Adapts `data` into `out`; `Ok(false)` while it is held.
    fn take(
        &mut self,
        data: bytes::Bytes,
        now: Instant,
        max_held: usize,
    ) -> Result<bool, AttemptEnd> {
        if let Some(until) = self.hold_until {
            self.held_bytes += data.len();
            if self.held_bytes > max_held {
                return Err(AttemptEnd::HeldOverCap(max_held));
            }
            self.held.push(data);
            if now < until {
                return Ok(false);
            }
            self.hold_until = None;
            // The held media is old by now: its decoder configs are kept, its frames dropped,
            // so the outputs start at the next keyframe in step with the wall clock.
            for chunk in self.held.drain(..) {
                self.adapter.push(&chunk, &mut self.out)?;
            }
            self.out.retain(|m| !matches!(m, MediaMessage::Frame(_)));
        } else {
            self.adapter.push(&data, &mut self.out)?;
        }
        // A TS source's demuxer pads declare its tracks (see `SourceEvent::Tracks`); the
        // declaration goes out with the first media after it.
        if let Some(t) = self.declared.take() {
            self.out.insert(0, MediaMessage::Tracks(t));
        }
        Ok(true)
    }
}

/// Sends `mapped` on through the stream's publisher, publishing first when there is none;
/// `false` when the stream no longer wants this PULL.
async fn deliver(
    id: i64,
    registry: &Arc<Registry>,
    publisher: &mut Option<Publisher>,
    rebase: &mut Rebase,
    mapped: &mut Vec<MediaMessage>,
) -> bool {
    if publisher.is_none() {
        match registry.publish_pull(id).await {
            Ok(p) => *publisher = Some(p),
            Err(e @ (PublishError::Inactive(_) | PublishError::UnknownStream(_))) => {
                tracing::info!(stream = id, error = %e, "PULL no longer wanted");
                return false;
            }
            Err(e) => {
                tracing::warn!(stream = id, error = %e, "PULL cannot publish yet");
                mapped.clear();
                return true;
            }
        }
    }
    let p = publisher.as_mut().expect("set above");
    if !mapped.drain(..).all(|m| p.send(m)) {
        // The server ended the session (deactivated, pipeline failed): start over.
        *publisher = None;
        *rebase = Rebase::default();
        rebase.new_source();
    }
    true
}

/// Media-level errors (unsupported codec, tag before its header) an FLV source may cause before
/// it is left as unusable; as for an RTMP push.
const MAX_FLV_ERRORS: u64 = 1000;

/// Why a source's bytes cannot be used; the attempt ends on the first (FLV media messages:
/// after [`MAX_FLV_ERRORS`], each counted before).
#[derive(Debug, thiserror::Error)]
enum AdapterError {
    #[error(transparent)]
    Ts(#[from] crate::ingest::mpegts::to_media::TsError),
    #[error(transparent)]
    Flv(#[from] crate::ingest::rtmp::flv::FlvStreamError),
    #[error("{count} unusable media messages, last: {last}")]
    FlvMedia {
        count: u64,
        last: crate::ingest::rtmp::to_media::FlvError,
    },
}

/// What turns a source's bytes into media messages.
enum Adapter {
    /// Re-muxed by the source pipeline: its PMT is no declaration (mpegtsmux lists a stream
    /// only once its first buffer came), so its `Tracks` are dropped for the demuxer pads'.
    Ts(TsToMedia),
    /// An RTMP server's FLV, read like an RTMP push; `onMetaData` declares the tracks.
    Flv {
        stream: i64,
        reader: FlvReader,
        media: FlvToMedia,
        tags: Vec<FlvTag>,
        errors: u64,
    },
}

impl Adapter {
    fn new(container: source::Container, stream: i64) -> Adapter {
        match container {
            source::Container::Ts => Adapter::Ts(TsToMedia::new()),
            source::Container::Flv => Adapter::Flv {
                stream,
                reader: FlvReader::new(),
                media: FlvToMedia::new(),
                tags: Vec::new(),
                errors: 0,
            },
        }
    }

    fn push(&mut self, data: &[u8], out: &mut Vec<MediaMessage>) -> Result<(), AdapterError> {
        match self {
            Adapter::Ts(ts) => {
                ts.push(data, out)?;
                out.retain(|m| !matches!(m, MediaMessage::Tracks(_)));
            }
            Adapter::Flv {
                stream,
                reader,
                media,
                tags,
                errors,
            } => {
                reader.push(data, tags)?;
                for tag in tags.drain(..) {
                    let msg = match tag {
                        FlvTag::Audio { timestamp, body } => media.audio(timestamp, &body),
                        FlvTag::Video { timestamp, body } => media.video(timestamp, &body),
                        FlvTag::Script { body } => media.script(&body),
                    };
                    match msg {
                        Ok(m) => out.extend(m),
                        Err(e) => {
                            *errors += 1;
                            if *errors == 1 || *errors % 100 == 0 {
                                tracing::warn!(stream = *stream, error = %e, count = *errors, "PULL media message dropped");
                            }
                            if *errors > MAX_FLV_ERRORS {
                                return Err(AdapterError::FlvMedia {
                                    count: *errors,
                                    last: e,
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The inactivity rule: the record is set `active=false` (persisted), which stops the pull.
async fn deactivate(registry: &Arc<Registry>, store: Arc<dyn Store>, id: i64) {
    let result = tokio::task::spawn_blocking(move || {
        for _ in 0..5 {
            let Some(mut row) = store.get_stream(id)? else {
                return Ok(false);
            };
            row.settings.active = false;
            match store.update_stream(id, row.revision, &row.settings)? {
                crate::db::Update::Done(_) => return Ok(true),
                crate::db::Update::Stale => continue,
                _ => return Ok(false),
            }
        }
        Ok::<bool, crate::db::StoreError>(false)
    })
    .await;
    match result {
        Ok(Ok(true)) => {
            registry.kick(id);
            let events = registry.events();
            events.emit(crate::events::Event::StreamUpdated { stream_id: id });
            events.emit(crate::events::Event::PullDeactivated { stream_id: id });
        }
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::error!(stream = id, error = %e, "cannot deactivate the stream"),
        Err(e) => tracing::error!(stream = id, error = %e, "deactivation task failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::Frame;
    use bytes::Bytes;

    fn frame(track: TrackKind, dts_ms: u64, keyframe: bool) -> MediaMessage {
        MediaMessage::Frame(Frame {
            track,
            dts: dts_ms * 1_000_000,
            pts: dts_ms * 1_000_000,
            keyframe,
            duration: None,
            data: Bytes::new(),
        })
    }

    fn times(out: &[MediaMessage]) -> Vec<String> {
        out.iter()
            .map(|m| match m {
                MediaMessage::Frame(f) => format!("{:?}@{}", f.track, f.dts / 1_000_000),
                MediaMessage::Discontinuity { at } => format!("disc@{}", at / 1_000_000),
                _ => "config".into(),
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_source_continues_the_timeline_after_the_outage() {
        let mut r = Rebase::default();
        let mut out = Vec::new();
        let t0 = Instant::now();
        r.new_source();
        r.map(frame(TrackKind::Audio, 0, true), t0, &mut out);
        r.map(
            frame(TrackKind::Audio, 1000, true),
            t0 + Duration::from_secs(1),
            &mut out,
        );
        // Four seconds without data, then a source whose clock starts at 0 again.
        r.new_source();
        let t1 = t0 + Duration::from_secs(5);
        r.map(frame(TrackKind::Audio, 0, true), t1, &mut out);
        r.map(frame(TrackKind::Audio, 20, true), t1, &mut out);
        assert_eq!(
            times(&out),
            [
                "Audio@0",
                "Audio@1000",
                "disc@5000",
                "Audio@5000",
                "Audio@5020"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn video_sources_start_on_a_keyframe() {
        let mut r = Rebase::default();
        let mut out = Vec::new();
        let now = Instant::now();
        r.new_source();
        r.map(
            MediaMessage::VideoConfig(
                crate::media::codec::parse_avcc(Bytes::from_static(
                    crate::media::codec::tests::AVCC_720P,
                ))
                .unwrap(),
            ),
            now,
            &mut out,
        );
        r.map(frame(TrackKind::Audio, 10, true), now, &mut out);
        r.map(frame(TrackKind::Video, 33, false), now, &mut out);
        r.map(frame(TrackKind::Video, 66, true), now, &mut out);
        r.map(frame(TrackKind::Audio, 70, true), now, &mut out);
        assert_eq!(times(&out), ["config", "Video@66", "Audio@70"]);
    }
}
