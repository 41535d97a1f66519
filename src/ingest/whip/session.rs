//! One WHIP session's WebRTC side: the peer connection built for an offer (our codecs only,
//! non-trickle answer), then the task that feeds its RTP to the registry until the client
//! deletes the session, the connection fails or goes idle, or the server ends the publish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rtc::interceptor::Registry as Interceptors;
use rtc::peer_connection::configuration::interceptor_registry::register_default_interceptors;
use rtc::peer_connection::configuration::media_engine::{
    MediaEngine, MIME_TYPE_H264, MIME_TYPE_OPUS,
};
use rtc::peer_connection::configuration::setting_engine::SettingEngineBuilder;
use rtc::peer_connection::configuration::RTCConfigurationBuilder;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::rtcp::payload_feedbacks::picture_loss_indication::PictureLossIndication;
use rtc::rtp_transceiver::rtp_sender::{
    RTCPFeedback, RTCRtpCodec, RTCRtpCodecParameters, RtpCodecKind,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use webrtc::media_stream::track_remote::{TrackRemote, TrackRemoteEvent};
use webrtc::peer_connection::{
    PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler, RTCIceGatheringState,
    RTCPeerConnectionState,
};

use super::mux::MuxRuntime;
use super::to_media::{RtpPacket, RtpToMedia};
use super::{Muxes, WhipConfig};
use crate::live::Publisher;
use crate::media::TrackKind;

/// How long ICE gathering may take before the answer is sent with what was gathered.
const GATHER_TIMEOUT: Duration = Duration::from_secs(3);
/// A session whose ICE/DTLS has not connected by then is dropped (the client never came).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A connected session that sends no RTP for this long is gone.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// ICE consent: disconnected after 5 s without checks, failed after 10 s more (RFC 7675).
const ICE_DISCONNECTED: Duration = Duration::from_secs(5);
const ICE_FAILED: Duration = Duration::from_secs(10);
/// How often a keyframe is asked for while video waits for one (PLI, RFC 4585 §6.3.1).
const KEYFRAME_REQUEST_INTERVAL: Duration = Duration::from_millis(500);
/// Packets between the track readers and the session task; a full queue drops (counted).
const PACKET_QUEUE: usize = 1024;
/// H.264 profiles we answer (profile_idc + constraint flags, the part of profile-level-id the
/// stack matches): Constrained Baseline, Baseline, Main, constrained Main, High, constrained
/// High. The decoder takes any of them; the level is the sender's business.
const H264_PROFILES: [&str; 6] = ["42e01f", "42001f", "4d001f", "4d401f", "64001f", "640c1f"];
const FIRST_H264_PT: u8 = 102;
const OPUS_PT: u8 = 111;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("the offer was not accepted: {0}")]
    Offer(String),
    #[error("WebRTC set-up failed: {0}")]
    Setup(String),
    /// The stack found no codec in common for a required track.
    #[error(transparent)]
    Unsupported(#[from] super::sdp::SdpError),
}

/// What a peer connection tells its session (WHIP publishers and WHEP viewers alike).
pub(crate) enum Event {
    State(RTCPeerConnectionState),
    Track(Arc<dyn TrackRemote>),
}

/// Forwards a peer connection's events to its session without blocking the stack's driver, and
/// says when ICE gathering is complete (the answer waits for it: no trickle).
pub(crate) struct Handler {
    events: mpsc::Sender<Event>,
    gathered: watch::Sender<bool>,
}

impl Handler {
    /// The handler, its events and its gathering-complete signal.
    pub(crate) fn new() -> (Arc<Handler>, mpsc::Receiver<Event>, watch::Receiver<bool>) {
        let (events, events_rx) = mpsc::channel(64);
        let (gathered, gathered_rx) = watch::channel(false);
        (
            Arc::new(Handler { events, gathered }),
            events_rx,
            gathered_rx,
        )
    }
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for Handler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            let _ = self.gathered.send(true);
        }
    }

    async fn on_connection_state_change(&self, state: RTCPeerConnectionState) {
        let _ = self.events.try_send(Event::State(state));
    }

    async fn on_track(&self, track: Arc<dyn TrackRemote>) {
        let _ = self.events.try_send(Event::Track(track));
    }
}

/// A peer connection with its answer ready; nothing is received yet.
pub struct Negotiated {
    pc: Arc<dyn PeerConnection>,
    events: mpsc::Receiver<Event>,
    pub answer: String,
}

impl Negotiated {
    pub async fn close(self) {
        let _ = self.pc.close().await;
    }
}

fn feedback(typ: &str, parameter: &str) -> RTCPFeedback {
    RTCPFeedback {
        typ: typ.to_owned(),
        parameter: parameter.to_owned(),
    }
}

/// Only what we can ingest: H.264 packetization-mode 1 and Opus.
fn media_engine() -> Result<MediaEngine, SessionError> {
    let setup = |e: rtc::shared::error::Error| SessionError::Setup(e.to_string());
    let mut engine = MediaEngine::default();
    engine
        .register_codec(
            RTCRtpCodecParameters {
                rtp_codec: RTCRtpCodec {
                    mime_type: MIME_TYPE_OPUS.to_owned(),
                    clock_rate: 48_000,
                    channels: 2,
                    sdp_fmtp_line: "minptime=10;useinbandfec=1".to_owned(),
                    rtcp_feedback: vec![],
                },
                payload_type: OPUS_PT,
            },
            RtpCodecKind::Audio,
        )
        .map_err(setup)?;
    let video_feedback = vec![
        feedback("nack", ""),
        feedback("nack", "pli"),
        feedback("ccm", "fir"),
    ];
    for (i, profile) in H264_PROFILES.iter().enumerate() {
        engine
            .register_codec(
                RTCRtpCodecParameters {
                    rtp_codec: RTCRtpCodec {
                        mime_type: MIME_TYPE_H264.to_owned(),
                        clock_rate: 90_000,
                        channels: 0,
                        sdp_fmtp_line: format!(
                            "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id={profile}"
                        ),
                        rtcp_feedback: video_feedback.clone(),
                    },
                    payload_type: FIRST_H264_PT + i as u8,
                },
                RtpCodecKind::Video,
            )
            .map_err(setup)?;
    }
    Ok(engine)
}

/// Builds the peer connection for `offer` and waits for ICE gathering, so the answer carries
/// every candidate (WHIP without trickle, RFC 9725 §4.3.1).
pub async fn negotiate(
    offer: String,
    config: &WhipConfig,
    muxes: &Muxes,
) -> Result<Negotiated, SessionError> {
    let setup = |e: rtc::shared::error::Error| SessionError::Setup(e.to_string());
    let mut engine = media_engine()?;
    let interceptors =
        register_default_interceptors(Interceptors::new(), &mut engine).map_err(setup)?;
    let (handler, events, gathered) = Handler::new();
    let peer = build_peer(config, muxes, engine, interceptors, handler).await?;
    let answered = answer(&peer, offer, gathered, config, |answer| {
        super::sdp::check_answer(answer.as_bytes())
    })
    .await;
    match answered {
        Ok(answer) => Ok(Negotiated {
            pc: peer.pc,
            events,
            answer,
        }),
        Err(e) => {
            let _ = peer.pc.close().await;
            Err(e)
        }
    }
}

/// A peer connection on the daemon's ICE ports, and the runtime that put it there.
pub(crate) struct Peer {
    pub pc: Arc<dyn PeerConnection>,
    runtime: Option<Arc<MuxRuntime>>,
}

/// A peer connection for one session on the shared ICE ports (the WHIP publishers' and the
/// WHEP viewers' alike): our ICE credentials, so the muxes route its packets by ufrag before
/// the answer exists; no mDNS; the consent timeouts.
pub(crate) async fn build_peer(
    config: &WhipConfig,
    muxes: &Muxes,
    engine: MediaEngine,
    interceptors: Interceptors,
    handler: Arc<dyn PeerConnectionEventHandler>,
) -> Result<Peer, SessionError> {
    let setup = |e: rtc::shared::error::Error| SessionError::Setup(e.to_string());
    let ufrag = rtc::ice::rand::generate_ufrag();
    let settings = SettingEngineBuilder::new()
        .with_ice_timeouts(Some(ICE_DISCONNECTED), Some(ICE_FAILED), None)
        .with_ice_credentials(ufrag.clone(), rtc::ice::rand::generate_pwd())
        // mDNS candidates hide addresses from peers, which a server does not need; and each
        // session would open a 5353 socket of its own.
        .with_multicast_dns_mode(rtc::ice::mdns::MulticastDnsMode::Disabled);
    // The driver binds on these (port 0) and the runtime swaps each socket for the mux's: on
    // the mux's own IPs, so every key has its shared socket.
    let udp_addrs: Vec<String> = match &muxes.udp {
        Some(mux) => mux
            .local_addrs()
            .iter()
            .map(|a| SocketAddr::new(a.ip(), 0).to_string())
            .collect(),
        None => config.udp_addrs.iter().map(ToString::to_string).collect(),
    };
    let tcp_addrs: Vec<String> = muxes
        .tcp
        .iter()
        .map(|t| SocketAddr::new(t.local_addr().ip(), 0).to_string())
        .collect();
    let runtime = (muxes.udp.is_some() || muxes.tcp.is_some())
        .then(|| Arc::new(MuxRuntime::new(muxes.udp.clone(), muxes.tcp.clone(), ufrag)));
    let mut builder = PeerConnectionBuilder::new()
        .with_configuration(RTCConfigurationBuilder::new().build())
        .with_media_engine(engine)
        .with_setting_engine(settings.build())
        .with_interceptor_registry(interceptors)
        .with_handler(handler)
        .with_udp_addrs(udp_addrs)
        .with_tcp_addrs(tcp_addrs);
    if let Some(rt) = &runtime {
        builder = builder.with_runtime(rt.clone());
    }
    let pc = builder.build().await.map_err(setup)?;
    Ok(Peer {
        pc: Arc::new(pc),
        runtime,
    })
}

/// Takes the offer, answers it and waits for ICE gathering (at most [`GATHER_TIMEOUT`]), so
/// the answer carries every candidate (no trickle, RFC 9725 §4.3.1); `check` refuses an
/// answer that rejected a section the session needs. The answer as clients must see it.
pub(crate) async fn answer(
    peer: &Peer,
    offer: String,
    mut gathered: watch::Receiver<bool>,
    config: &WhipConfig,
    check: impl Fn(&str) -> Result<(), super::sdp::SdpError>,
) -> Result<String, SessionError> {
    let pc = &peer.pc;
    let setup = |e: rtc::shared::error::Error| SessionError::Setup(e.to_string());
    let offer =
        RTCSessionDescription::offer(offer).map_err(|e| SessionError::Offer(e.to_string()))?;
    pc.set_remote_description(offer)
        .await
        .map_err(|e| SessionError::Offer(e.to_string()))?;
    let answer = pc
        .create_answer(None)
        .await
        .map_err(|e| SessionError::Offer(e.to_string()))?;
    // A section the stack could not match is rejected (port 0) in the answer: refuse before
    // going further.
    check(&answer.sdp)?;
    pc.set_local_description(answer).await.map_err(setup)?;
    let _ = tokio::time::timeout(GATHER_TIMEOUT, gathered.wait_for(|done| *done)).await;
    let answer = pc
        .local_description()
        .await
        .map(|d| d.sdp)
        .ok_or_else(|| SessionError::Setup("no local description".into()))?;
    let bound = peer
        .runtime
        .as_ref()
        .map(|rt| rt.bound())
        .unwrap_or_default();
    Ok(super::sdp::advertise(&answer, &bound, &config.nat_ips))
}

/// Why a session ended, for the log.
fn state_ends(state: RTCPeerConnectionState) -> Option<&'static str> {
    match state {
        RTCPeerConnectionState::Failed => Some("connection failed"),
        RTCPeerConnectionState::Closed => Some("connection closed"),
        _ => None,
    }
}

/// Reads one track's events into the session's packet queue; never blocks the stack's driver.
fn read_track(
    track: Arc<dyn TrackRemote>,
    kind: TrackKind,
    tx: mpsc::Sender<(TrackKind, RtpPacket, Instant)>,
) {
    tokio::spawn(async move {
        let mut dropped = 0u64;
        while let Some(event) = track.poll().await {
            match event {
                TrackRemoteEvent::OnRtpPacket(p) => {
                    let packet = RtpPacket {
                        seq: p.header.sequence_number,
                        ts: p.header.timestamp,
                        marker: p.header.marker,
                        payload: p.payload,
                    };
                    match tx.try_send((kind, packet, Instant::now())) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => dropped += 1,
                        Err(mpsc::error::TrySendError::Closed(_)) => break,
                    }
                }
                TrackRemoteEvent::OnEnded => break,
                _ => {}
            }
        }
        if dropped > 0 {
            tracing::warn!(
                ?kind,
                dropped,
                "WHIP packets dropped: the session fell behind"
            );
        }
    });
}

/// Drives a session until it ends; returns the reason.
pub async fn run(
    negotiated: Negotiated,
    mut publisher: Publisher,
    opus_channels: u8,
    (connect_timeout, idle_timeout): (Duration, Duration),
    mut stop: watch::Receiver<bool>,
) -> String {
    let Negotiated { pc, mut events, .. } = negotiated;
    let start = Instant::now();
    let (packets_tx, mut packets) = mpsc::channel(PACKET_QUEUE);
    let mut adapter = RtpToMedia::new(opus_channels);
    let mut out = Vec::new();
    let mut video: Option<(Arc<dyn TrackRemote>, u32)> = None;
    let mut audio_seen = false;
    let mut connected = false;
    let mut last_packet = start;
    let mut last_keyframe_request: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reason = loop {
        tokio::select! {
            _ = async { drop(stop.wait_for(|s| *s).await) } => break "ended by DELETE or the server".to_owned(),
            _ = publisher.closed() => break "publish ended by the server (replaced, deactivated or failed)".to_owned(),
            event = events.recv() => match event {
                None => break "peer connection gone".to_owned(),
                Some(Event::State(state)) => {
                    tracing::debug!(stream = publisher.stream_id, %state, "WHIP connection state");
                    if state == RTCPeerConnectionState::Connected {
                        connected = true;
                        last_packet = Instant::now();
                    }
                    if let Some(why) = state_ends(state) {
                        break why.to_owned();
                    }
                }
                Some(Event::Track(track)) => {
                    let kind = match track.kind().await {
                        RtpCodecKind::Video if video.is_none() => TrackKind::Video,
                        RtpCodecKind::Audio if !audio_seen => TrackKind::Audio,
                        other => {
                            tracing::info!(stream = publisher.stream_id, ?other, "extra WHIP track ignored");
                            continue;
                        }
                    };
                    if kind == TrackKind::Video {
                        let ssrc = track.ssrcs().await.first().copied().unwrap_or(0);
                        video = Some((track.clone(), ssrc));
                    } else {
                        audio_seen = true;
                    }
                    read_track(track, kind, packets_tx.clone());
                }
            },
            packet = packets.recv() => {
                let Some((kind, packet, at)) = packet else { continue };
                last_packet = at;
                if let Err(e) = adapter.push(kind, packet, at - start, &mut out) {
                    tracing::info!(stream = publisher.stream_id, error = %e, "WHIP video unusable; waiting for the next keyframe");
                }
            }
            _ = tick.tick() => {
                let now = Instant::now();
                let _ = adapter.poll(now - start, &mut out);
                if !connected && now - start > connect_timeout {
                    break format!("ICE/DTLS did not connect within {connect_timeout:?}");
                }
                if connected && now - last_packet > idle_timeout {
                    break format!("no RTP for {idle_timeout:?}");
                }
                if let Some((track, ssrc)) = &video {
                    let due = last_keyframe_request.is_none_or(|t| now - t >= KEYFRAME_REQUEST_INTERVAL);
                    if adapter.wants_keyframe() && due {
                        last_keyframe_request = Some(now);
                        let pli = PictureLossIndication { sender_ssrc: 0, media_ssrc: *ssrc };
                        let _ = track.write_rtcp(vec![Box::new(pli)]).await;
                    }
                }
            }
        }
        if !out.drain(..).all(|m| publisher.send(m)) {
            break "publish ended by the server".to_owned();
        }
    };
    let stats = adapter.stats();
    tracing::info!(
        stream = publisher.stream_id,
        lost = stats.lost,
        late = stats.late,
        damaged_units = stats.damaged_units,
        skipped_frames = stats.skipped_frames,
        "WHIP session statistics"
    );
    drop(publisher);
    let _ = tokio::time::timeout(Duration::from_secs(2), pc.close()).await;
    reason
}
