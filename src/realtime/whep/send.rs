//! A WHEP viewer's session once answered: reads the rung's H.264 and the stream's Opus from the
//! hub, and writes them as RTP until the viewer leaves (DELETE, ICE failure), the connection
//! never comes up, or the stream ends. A pipeline rebuilt within the stream's grace period (a
//! reconnecting encoder, a new source format) keeps the viewer: the session re-subscribes and
//! its RTP timeline goes on.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rtc::rtp;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use webrtc::media_stream::track_local::TrackLocal;
use webrtc::peer_connection::RTCPeerConnectionState;

use crate::ingest::whip::session::Event;

use super::h264::Packetizer;
use super::peer::{Negotiated, Outgoing};
use crate::hub::{Feed, Hub, Reader, ReaderOptions};
use crate::media::MediaMessage;

/// Messages queued for a viewer: ~5 s of 30 fps video. A viewer this far behind loses frames
/// and is put back on its feet at the next keyframe.
const VIDEO_QUEUE: usize = 150;
/// ~5 s of 20 ms Opus frames.
const AUDIO_QUEUE: usize = 256;
/// How often a viewer waiting for its first picture asks again: the hub forwards one request
/// per feed per 500 ms (every output of the rung pays for an IDR), so a refused request is
/// repeated until one goes through or a keyframe comes by itself.
const KEYFRAME_RETRY: Duration = Duration::from_millis(100);
/// After its feed ended, how long a session waits for the rung to come back (a rebuilt
/// pipeline) before it gives up; the stream's own end ends it sooner.
const RESUME_WAIT: Duration = Duration::from_secs(30);

/// What a session's sender counted, for the log and metrics.
#[derive(Debug, Default, Clone, Copy)]
pub struct SendStats {
    pub frames: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Frames skipped waiting for a keyframe (a join, a loss, a malformed unit).
    pub skipped: u64,
    pub keyframe_requests: u64,
}

/// Maps a feed's media time (ns) to RTP time: continuous across a re-subscription, whose
/// timestamps may start anywhere, by carrying on from the last one by the wall time between.
struct RtpClock {
    rate: u64,
    /// RTP time of media time 0, for the current subscription (wrapping arithmetic).
    offset: u32,
    last: Option<(u32, Instant)>,
    rebase: bool,
}

impl RtpClock {
    fn new(rate: u64) -> RtpClock {
        RtpClock {
            rate,
            offset: rand::random(),
            last: None,
            rebase: false,
        }
    }

    fn ticks(&self, ns: u64) -> u32 {
        ((u128::from(ns) * u128::from(self.rate) / 1_000_000_000) as u64) as u32
    }

    fn at(&mut self, pts: u64, now: Instant) -> u32 {
        if self.rebase {
            self.rebase = false;
            if let Some((last, when)) = self.last {
                let gap = now.saturating_duration_since(when).as_nanos() as u64;
                let continued = last.wrapping_add(self.ticks(gap).max(1));
                self.offset = continued.wrapping_sub(self.ticks(pts));
            }
        }
        let ts = self.offset.wrapping_add(self.ticks(pts));
        self.last = Some((ts, now));
        ts
    }
}

/// One outgoing RTP stream: its sequence numbers and clock.
struct RtpOut {
    out: Outgoing,
    seq: u16,
    clock: RtpClock,
}

impl RtpOut {
    fn new(out: Outgoing, rate: u64) -> RtpOut {
        RtpOut {
            out,
            seq: rand::random(),
            clock: RtpClock::new(rate),
        }
    }

    /// Writes one frame's payloads; `false` once the connection is gone.
    async fn send(&mut self, payloads: Vec<Bytes>, ts: u32, stats: &mut SendStats) -> bool {
        let last = payloads.len().saturating_sub(1);
        for (i, payload) in payloads.into_iter().enumerate() {
            stats.packets += 1;
            stats.bytes += payload.len() as u64;
            let packet = rtp::Packet {
                header: rtp::header::Header {
                    version: 2,
                    marker: i == last,
                    payload_type: self.out.payload_type,
                    sequence_number: self.seq,
                    timestamp: ts,
                    ssrc: self.out.ssrc,
                    ..Default::default()
                },
                payload,
            };
            self.seq = self.seq.wrapping_add(1);
            if self.out.track.write_rtp(packet).await.is_err() {
                return false;
            }
        }
        true
    }
}

/// Where a session reads from, and how it is stopped.
pub struct Source {
    pub hub: Arc<Hub>,
    /// The viewer's readers' name in the hub (`whep {session}`).
    pub name: String,
    pub rung: String,
    /// Fires when the stream ends (its session is over, not a rebuild).
    pub ended: watch::Receiver<bool>,
    pub stop: watch::Receiver<bool>,
}

/// Each viewer's readers carry its name (`whep {session}`): viewer counts count the names.
fn subscribe(hub: &Arc<Hub>, name: &str, feed: Feed, capacity: usize) -> Reader {
    hub.subscribe(feed, ReaderOptions::new(name, capacity))
}

/// A session's sending state: the readers (attached once connected: frames queued before
/// could not be sent), the packetizer of the rung's current configuration, and whether the
/// picture waits for a keyframe.
struct Viewer {
    source: Source,
    feed: Feed,
    video: RtpOut,
    audio: Option<RtpOut>,
    vreader: Option<Reader>,
    areader: Option<Reader>,
    packetizer: Option<Packetizer>,
    need_keyframe: bool,
    last_request: Option<Instant>,
    /// Since when the rung's feed is gone (a pipeline being rebuilt).
    resuming: Option<Instant>,
    stats: SendStats,
}

/// Why a session ends.
type End = String;

impl Viewer {
    /// Subscribes to the rung (and Opus) from now on; the picture restarts at a keyframe.
    fn attach(&mut self) {
        let hub = &self.source.hub;
        let name = &self.source.name;
        self.vreader = Some(subscribe(hub, name, self.feed.clone(), VIDEO_QUEUE));
        self.areader = self
            .audio
            .as_ref()
            .map(|_| subscribe(hub, name, Feed::Opus, AUDIO_QUEUE));
        self.need_keyframe = true;
        self.last_request = None;
    }

    fn ask_keyframe(&mut self) {
        if self.source.hub.request_keyframe(&self.feed) {
            self.stats.keyframe_requests += 1;
        }
    }

    async fn on_video(&mut self, msg: Option<MediaMessage>) -> Result<(), End> {
        match msg {
            Some(MediaMessage::VideoConfig(c)) => {
                self.packetizer = crate::media::codec::avcc_parameter_sets(&c.record)
                    .ok()
                    .map(|sets| Packetizer::new(&sets));
                self.need_keyframe = true;
            }
            Some(MediaMessage::Frame(f)) => {
                let Some(p) = &self.packetizer else {
                    return Ok(());
                };
                let mut payloads = Vec::new();
                if (self.need_keyframe && !f.keyframe)
                    || p.packetize(&f.data, &mut payloads).is_err()
                {
                    self.stats.skipped += 1;
                    return Ok(());
                }
                self.need_keyframe = false;
                self.stats.frames += 1;
                let ts = self.video.clock.at(f.pts, Instant::now());
                if !self.video.send(payloads, ts, &mut self.stats).await {
                    return Err("connection closed".into());
                }
            }
            Some(_) => {}
            None => {
                // The rung's producer ended: a rebuilt pipeline, or the stream's end (which
                // ends the session through `ended`). The tick looks for it coming back.
                (self.vreader, self.areader, self.packetizer) = (None, None, None);
                self.resuming = Some(Instant::now());
            }
        }
        Ok(())
    }

    async fn on_audio(&mut self, msg: Option<MediaMessage>) -> Result<(), End> {
        let (Some(MediaMessage::Frame(f)), Some(a)) = (msg, &mut self.audio) else {
            return Ok(());
        };
        // Opus from the first picture on: the player starts both together.
        if self.need_keyframe {
            return Ok(());
        }
        let ts = a.clock.at(f.pts, Instant::now());
        match a.send(vec![f.data], ts, &mut self.stats).await {
            true => Ok(()),
            false => Err("connection closed".into()),
        }
    }

    fn on_tick(&mut self, now: Instant, connect_deadline: Option<Instant>) -> Result<(), End> {
        if let Some(since) = self.resuming {
            if self
                .source
                .hub
                .video_rungs()
                .iter()
                .any(|r| r.name == self.source.rung)
            {
                self.resuming = None;
                self.video.clock.rebase = true;
                if let Some(a) = &mut self.audio {
                    a.clock.rebase = true;
                }
                self.attach();
            } else if now - since > RESUME_WAIT {
                return Err(format!("the rung did not come back within {RESUME_WAIT:?}"));
            }
        } else if self.vreader.is_none() {
            if connect_deadline.is_some_and(|d| now > d) {
                return Err("ICE/DTLS did not connect in time".into());
            }
        } else if self.need_keyframe && self.last_request.is_none_or(|t| now - t >= KEYFRAME_RETRY)
        {
            self.last_request = Some(now);
            self.ask_keyframe();
        }
        Ok(())
    }
}

/// Runs a viewer's session until it ends; the reason, for the log.
pub async fn run(
    negotiated: Negotiated,
    mut keyframe_requests: mpsc::Receiver<()>,
    source: Source,
    connect_timeout: Duration,
) -> (String, SendStats) {
    let Negotiated {
        pc,
        mut events,
        video,
        audio,
        ..
    } = negotiated;
    let (mut stop, mut ended) = (source.stop.clone(), source.ended.clone());
    let mut v = Viewer {
        feed: Feed::Video(source.rung.clone()),
        source,
        video: RtpOut::new(video, 90_000),
        audio: audio.map(|a| RtpOut::new(a, 48_000)),
        vreader: None,
        areader: None,
        packetizer: None,
        need_keyframe: true,
        last_request: None,
        resuming: None,
        stats: SendStats::default(),
    };
    let mut connect_deadline = Some(Instant::now() + connect_timeout);
    let mut tick = tokio::time::interval(KEYFRAME_RETRY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result: Result<(), End> = loop {
        let step = tokio::select! {
            _ = async { drop(stop.wait_for(|s| *s).await) } => Err("ended by DELETE or the server".into()),
            // Its sender goes with the session's entry (a DELETE): not the stream's end.
            r = async { ended.wait_for(|s| *s).await.is_ok() } => Err(match r {
                true => "the stream ended".into(),
                false => "ended by DELETE or the server".into(),
            }),
            event = events.recv() => match event {
                None => Err("peer connection gone".into()),
                Some(Event::State(RTCPeerConnectionState::Connected)) if connect_deadline.is_some() => {
                    connect_deadline = None;
                    v.attach();
                    Ok(())
                }
                Some(Event::State(RTCPeerConnectionState::Failed)) => Err("ICE/DTLS failed".into()),
                Some(Event::State(RTCPeerConnectionState::Closed)) => Err("connection closed".into()),
                Some(_) => Ok(()),
            },
            // The viewer lost a picture: the same rate-limited request as a join.
            Some(()) = keyframe_requests.recv() => {
                v.ask_keyframe();
                Ok(())
            }
            msg = next(&mut v.vreader) => v.on_video(msg).await,
            msg = next(&mut v.areader) => v.on_audio(msg).await,
            _ = tick.tick() => v.on_tick(Instant::now(), connect_deadline),
        };
        if let Err(end) = step {
            break Err(end);
        }
    };
    let stats = v.stats;
    drop(v);
    let _ = tokio::time::timeout(Duration::from_secs(2), pc.close()).await;
    (result.err().unwrap_or_default(), stats)
}

/// The reader's next message; pending while there is no reader (not connected yet, no audio).
async fn next(reader: &mut Option<Reader>) -> Option<MediaMessage> {
    match reader {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rtp_clock_follows_media_time_and_carries_on_across_a_resubscription() {
        let mut c = RtpClock::new(90_000);
        c.offset = u32::MAX - 1000;
        let t0 = Instant::now();
        let a = c.at(1_000_000_000, t0);
        let b = c.at(1_040_000_000, t0);
        assert_eq!(b.wrapping_sub(a), 3600);
        // A new subscription starts its media time at 0, half a second later.
        c.rebase = true;
        let d = c.at(0, t0 + Duration::from_millis(500));
        assert_eq!(d.wrapping_sub(b), 45_000);
        assert_eq!(c.at(40_000_000, t0).wrapping_sub(d), 3600);
    }
}
