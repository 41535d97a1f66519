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
use crate::hub::WHEP_READER as READER_NAME;

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
    pub rung: String,
    /// Fires when the stream ends (its session is over, not a rebuild).
    pub ended: watch::Receiver<bool>,
    pub stop: watch::Receiver<bool>,
}

fn subscribe(hub: &Arc<Hub>, feed: Feed, capacity: usize) -> Reader {
    hub.subscribe(feed, ReaderOptions::new(READER_NAME, capacity))
}

/// Runs a viewer's session until it ends; the reason, for the log.
pub async fn run(
    negotiated: Negotiated,
    mut keyframe_requests: mpsc::Receiver<()>,
    mut source: Source,
    connect_timeout: Duration,
) -> (String, SendStats) {
    let Negotiated {
        pc,
        mut states,
        video,
        audio,
        ..
    } = negotiated;
    let feed = Feed::Video(source.rung.clone());
    let mut stats = SendStats::default();
    let mut video = RtpOut::new(video, 90_000);
    let mut audio = audio.map(|a| RtpOut::new(a, 48_000));
    // Subscribed once connected: frames queued before could not be sent.
    let mut vreader: Option<Reader> = None;
    let mut areader: Option<Reader> = None;
    let mut packetizer: Option<Packetizer> = None;
    let mut need_keyframe = true;
    let mut last_request: Option<Instant> = None;
    let deadline = Instant::now() + connect_timeout;
    let mut tick = tokio::time::interval(KEYFRAME_RETRY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reason = loop {
        tokio::select! {
            _ = async { drop(source.stop.wait_for(|s| *s).await) } => break "ended by DELETE or the server".to_owned(),
            _ = async { drop(source.ended.wait_for(|s| *s).await) } => break "the stream ended".to_owned(),
            state = states.recv() => match state {
                None => break "peer connection gone".to_owned(),
                Some(RTCPeerConnectionState::Connected) if vreader.is_none() => {
                    vreader = Some(subscribe(&source.hub, feed.clone(), VIDEO_QUEUE));
                    areader = audio.as_ref().map(|_| subscribe(&source.hub, Feed::Opus, AUDIO_QUEUE));
                    need_keyframe = true;
                    last_request = None;
                }
                Some(RTCPeerConnectionState::Failed) => break "ICE/DTLS failed".to_owned(),
                Some(RTCPeerConnectionState::Closed) => break "connection closed".to_owned(),
                Some(_) => {}
            },
            Some(()) = keyframe_requests.recv() => {
                // The viewer lost a picture: the same rate-limited request as a join.
                if source.hub.request_keyframe(&feed) {
                    stats.keyframe_requests += 1;
                }
            }
            msg = next(&mut vreader) => match msg {
                Some(MediaMessage::VideoConfig(c)) => {
                    packetizer = crate::media::codec::avcc_parameter_sets(&c.record)
                        .ok()
                        .map(|sets| Packetizer::new(&sets));
                    need_keyframe = true;
                }
                Some(MediaMessage::Frame(f)) => {
                    if need_keyframe && !f.keyframe {
                        stats.skipped += 1;
                        continue;
                    }
                    let Some(p) = &packetizer else { continue };
                    let mut payloads = Vec::new();
                    if p.packetize(&f.data, &mut payloads).is_err() {
                        stats.skipped += 1;
                        need_keyframe = true;
                        continue;
                    }
                    need_keyframe = false;
                    stats.frames += 1;
                    let ts = video.clock.at(f.pts, Instant::now());
                    if !video.send(payloads, ts, &mut stats).await {
                        break "connection closed".to_owned();
                    }
                }
                Some(_) => {}
                None => {
                    // The rung's producer ended: a rebuild, or the stream's end (which ends us
                    // through `ended`). Wait for it to come back.
                    (vreader, areader, packetizer) = (None, None, None);
                    match resume(&source.hub, &source.rung, &mut source.ended).await {
                        true => {
                            vreader = Some(subscribe(&source.hub, feed.clone(), VIDEO_QUEUE));
                            areader = audio.as_ref().map(|_| subscribe(&source.hub, Feed::Opus, AUDIO_QUEUE));
                            video.clock.rebase = true;
                            if let Some(a) = &mut audio {
                                a.clock.rebase = true;
                            }
                            need_keyframe = true;
                            last_request = None;
                        }
                        false => break "the stream ended".to_owned(),
                    }
                }
            },
            msg = next(&mut areader) => {
                if let (Some(MediaMessage::Frame(f)), Some(a)) = (msg, &mut audio) {
                    // Opus after the first picture only: the player starts both together.
                    if need_keyframe {
                        continue;
                    }
                    let ts = a.clock.at(f.pts, Instant::now());
                    if !a.send(vec![f.data], ts, &mut stats).await {
                        break "connection closed".to_owned();
                    }
                }
            }
            _ = tick.tick() => {
                let now = Instant::now();
                if vreader.is_none() && now > deadline {
                    break format!("ICE/DTLS did not connect within {connect_timeout:?}");
                }
                if vreader.is_some() && need_keyframe && last_request.is_none_or(|t| now - t >= KEYFRAME_RETRY) {
                    last_request = Some(now);
                    if source.hub.request_keyframe(&feed) {
                        stats.keyframe_requests += 1;
                    }
                }
            }
        }
    };
    drop((vreader, areader));
    let _ = tokio::time::timeout(Duration::from_secs(2), pc.close()).await;
    (reason, stats)
}

/// The reader's next message; pending while there is no reader (not connected yet, no audio)
/// and, for audio, after its end (the video reader's end is what the session acts on).
async fn next(reader: &mut Option<Reader>) -> Option<MediaMessage> {
    match reader {
        Some(r) => match r.recv().await {
            Some(m) => Some(m),
            None => {
                *reader = None;
                None
            }
        },
        None => std::future::pending().await,
    }
}

/// Waits for the rung to be produced again; `false` if the stream ended or it did not come
/// back within [`RESUME_WAIT`].
async fn resume(hub: &Hub, rung: &str, ended: &mut watch::Receiver<bool>) -> bool {
    let until = Instant::now() + RESUME_WAIT;
    while Instant::now() < until {
        if *ended.borrow() {
            return false;
        }
        if hub.video_rungs().iter().any(|r| r.name == rung) {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = ended.changed() => {}
        }
    }
    false
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
