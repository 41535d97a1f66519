//! One WHEP viewer's WebRTC side: a send-only peer connection answering the viewer's offer with
//! the rung's H.264 (the profile its bitstream has) and Opus, RTX where the viewer offers it,
//! NACKs answered and sender reports sent by the stack's interceptors, and the viewer's picture
//! loss reports (PLI/FIR) handed to the session, which asks the rung's encoder for a keyframe.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use rtc::interceptor::{
    Attribute, Interceptor, Packet, Registry as Interceptors, Slot, StreamInfo, TaggedPacket,
};
use rtc::media_stream::MediaStreamTrack;
use rtc::peer_connection::configuration::interceptor_registry::register_default_interceptors;
use rtc::peer_connection::configuration::media_engine::{
    MediaEngine, MIME_TYPE_H264, MIME_TYPE_OPUS, MIME_TYPE_RTX,
};
use rtc::rtcp::payload_feedbacks::full_intra_request::FullIntraRequest;
use rtc::rtcp::payload_feedbacks::picture_loss_indication::PictureLossIndication;
use rtc::rtp_transceiver::rtp_sender::{
    RTCPFeedback, RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters,
    RTCRtpEncodingParameters, RtpCodecKind,
};
use rtc::sansio::Protocol;
use tokio::sync::mpsc;
use webrtc::media_stream::track_local::static_rtp::TrackLocalStaticRTP;
use webrtc::media_stream::track_local::TrackLocal;
use webrtc::peer_connection::PeerConnection;
use webrtc::rtp_transceiver::RtpSender;

use crate::ingest::whip::session::{self as ice, SessionError};
use crate::ingest::whip::{sdp, Muxes, WhipConfig};

const H264_PT: u8 = 102;
const H264_CONSTRAINED_PT: u8 = 103;
const RTX_PT: u8 = 104;
const RTX_CONSTRAINED_PT: u8 = 105;
const OPUS_PT: u8 = 111;

/// One track the session writes: its RTP stream's SSRC and the payload type the viewer
/// negotiated for it.
pub struct Outgoing {
    pub track: Arc<TrackLocalStaticRTP>,
    pub ssrc: u32,
    pub payload_type: u8,
}

/// A viewer's peer connection with its answer ready.
pub struct Negotiated {
    pub pc: Arc<dyn PeerConnection>,
    pub events: mpsc::Receiver<ice::Event>,
    pub video: Outgoing,
    pub audio: Option<Outgoing>,
    pub answer: String,
}

/// `profile-level-id` of an avcC (its profile, compatibility flags and level bytes: ISO
/// 14496-15 §5.3.3.1.2 copies them from the SPS), e.g. `64001f`.
pub fn profile_level_id(avcc: &[u8]) -> Option<String> {
    let b = avcc.get(1..4)?;
    Some(format!("{:02x}{:02x}{:02x}", b[0], b[1], b[2]))
}

fn h264(profile_level_id: &str) -> RTCRtpCodec {
    RTCRtpCodec {
        mime_type: MIME_TYPE_H264.to_owned(),
        clock_rate: 90_000,
        channels: 0,
        sdp_fmtp_line: format!(
            "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id={profile_level_id}"
        ),
        rtcp_feedback: ["nack", "nack pli", "ccm fir"]
            .iter()
            .map(|f| {
                let (typ, parameter) = f.split_once(' ').unwrap_or((f, ""));
                RTCPFeedback {
                    typ: typ.to_owned(),
                    parameter: parameter.to_owned(),
                }
            })
            .collect(),
    }
}

fn opus() -> RTCRtpCodec {
    RTCRtpCodec {
        mime_type: MIME_TYPE_OPUS.to_owned(),
        clock_rate: 48_000,
        channels: 2,
        sdp_fmtp_line: "minptime=10;useinbandfec=1".to_owned(),
        rtcp_feedback: vec![],
    }
}

/// What we send: the rung's own H.264 profile and level; for a High profile stream also as
/// Constrained High (`640c`), which it is (our rungs are x264 `zerolatency`: no B-frames,
/// progressive) and which is what Safari offers. RTX for each (RFC 4588). Opus.
fn media_engine(profile: &str) -> Result<MediaEngine, SessionError> {
    let setup = |e: rtc::shared::error::Error| SessionError::Setup(e.to_string());
    let mut engine = MediaEngine::default();
    let mut video = vec![(h264(profile), H264_PT, RTX_PT)];
    if let Some(level) = profile.strip_prefix("6400") {
        let constrained = format!("640c{level}");
        video.push((h264(&constrained), H264_CONSTRAINED_PT, RTX_CONSTRAINED_PT));
    }
    for (codec, pt, rtx) in video {
        let apt = RTCRtpCodec {
            mime_type: MIME_TYPE_RTX.to_owned(),
            clock_rate: 90_000,
            channels: 0,
            sdp_fmtp_line: format!("apt={pt}"),
            rtcp_feedback: vec![],
        };
        for (codec, payload_type) in [(codec, pt), (apt, rtx)] {
            let params = RTCRtpCodecParameters {
                rtp_codec: codec,
                payload_type,
            };
            engine
                .register_codec(params, RtpCodecKind::Video)
                .map_err(setup)?;
        }
    }
    let params = RTCRtpCodecParameters {
        rtp_codec: opus(),
        payload_type: OPUS_PT,
    };
    engine
        .register_codec(params, RtpCodecKind::Audio)
        .map_err(setup)?;
    Ok(engine)
}

/// Builds the peer connection for a viewer's `offer` and waits for ICE gathering (no trickle).
/// `avcc`: the rung's decoder configuration (the profile we declare); `audio`: whether to
/// offer the stream's Opus.
pub async fn negotiate(
    offer: String,
    avcc: &[u8],
    audio: bool,
    config: &WhipConfig,
    muxes: &Muxes,
) -> Result<(Negotiated, mpsc::Receiver<()>), SessionError> {
    let setup = |e: rtc::shared::error::Error| SessionError::Setup(e.to_string());
    let profile = profile_level_id(avcc)
        .ok_or_else(|| SessionError::Setup("the rung has no H.264 configuration".into()))?;
    let mut engine = media_engine(&profile)?;
    let (keyframes_tx, keyframes) = mpsc::channel(8);
    let interceptors = register_default_interceptors(Interceptors::new(), &mut engine)
        .map_err(setup)?
        .with(Slot::from(14_000), KeyframeRequests::default());
    let (handler, events, gathered) = ice::Handler::new();
    let peer = ice::build_peer(config, muxes, engine, interceptors, handler).await?;
    let built = async {
        let video = add_track(&peer.pc, RtpCodecKind::Video, h264(&profile)).await?;
        let audio = match audio {
            true => Some(add_track(&peer.pc, RtpCodecKind::Audio, opus()).await?),
            false => None,
        };
        let answer = ice::answer(&peer, offer, gathered, config, |answer| {
            // The video section must have been accepted: a viewer with no H.264 in common
            // gets 406, not a silent connection.
            let accepted = sdp::sections(answer.as_bytes())?
                .iter()
                .any(|s| s.port != 0 && s.has_h264());
            accepted
                .then_some(())
                .ok_or(sdp::SdpError::Unsupported("H.264 video"))
        })
        .await?;
        let video = outgoing(video, &profile).await?;
        let audio = match audio {
            Some(a) => Some(outgoing(a, &profile).await?),
            None => None,
        };
        Ok::<_, SessionError>((video, audio, answer))
    }
    .await;
    match built {
        Ok((video, audio, answer)) => {
            spawn_keyframe_listener(video.track.clone(), keyframes_tx);
            Ok((
                Negotiated {
                    pc: peer.pc,
                    events,
                    video,
                    audio,
                    answer,
                },
                keyframes,
            ))
        }
        Err(e) => {
            let _ = peer.pc.close().await;
            Err(e)
        }
    }
}

async fn add_track(
    pc: &Arc<dyn PeerConnection>,
    kind: RtpCodecKind,
    codec: RTCRtpCodec,
) -> Result<(Arc<TrackLocalStaticRTP>, Arc<dyn RtpSender>), SessionError> {
    let ssrc = rand::random::<u32>();
    let label = match kind {
        RtpCodecKind::Audio => "audio",
        _ => "video",
    };
    let track = Arc::new(TrackLocalStaticRTP::new(MediaStreamTrack::new(
        "livepack".to_owned(),
        format!("livepack-{label}"),
        label.to_owned(),
        kind,
        vec![RTCRtpEncodingParameters {
            rtp_coding_parameters: RTCRtpCodingParameters {
                ssrc: Some(ssrc),
                ..Default::default()
            },
            codec,
            ..Default::default()
        }],
    )));
    let sender = pc
        .add_track(track.clone() as Arc<dyn TrackLocal>)
        .await
        .map_err(|e| SessionError::Setup(e.to_string()))?;
    Ok((track, sender))
}

/// The SSRC we named and the payload type we send with: Opus's, or for H.264 the negotiated
/// format (packetization-mode 1) whose profile best covers the rung's bitstream
/// ([`h264_rank`]; RTX formats are not media).
async fn outgoing(
    (track, sender): (Arc<TrackLocalStaticRTP>, Arc<dyn RtpSender>),
    profile: &str,
) -> Result<Outgoing, SessionError> {
    let setup = |e: webrtc::error::Error| SessionError::Setup(e.to_string());
    let params = sender.get_parameters().await.map_err(setup)?;
    let payload_type = params
        .rtp_parameters
        .codecs
        .iter()
        .filter_map(|c| {
            let mime = c.rtp_codec.mime_type.to_ascii_lowercase();
            let fmtp = &c.rtp_codec.sdp_fmtp_line;
            match mime.as_str() {
                "audio/opus" => Some((0, c.payload_type)),
                "video/h264" => h264_rank(profile, fmtp).map(|r| (r, c.payload_type)),
                _ => None,
            }
        })
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, pt)| pt)
        .ok_or_else(|| SessionError::Setup("no codec negotiated for the track".into()))?;
    let ssrc = params
        .encodings
        .first()
        .and_then(|e| e.rtp_coding_parameters.ssrc)
        .ok_or_else(|| SessionError::Setup("the track has no SSRC".into()))?;
    Ok(Outgoing {
        track,
        ssrc,
        payload_type,
    })
}

/// How well an H.264 format the viewer negotiated (`fmtp`) fits our bitstream's
/// `profile-level-id` (lower is better; `None`: unusable, packetization-mode 0). The same
/// profile first (with or without the constrained flags), then the High profiles whose
/// decoders take any High stream (High 10, 4:2:2, 4:4:4 — Debian's Chromium offers High 4:4:4
/// and no High), then any other: every browser decodes in software what its offer names by
/// profile only, but a receiver that honours the profile is told one that covers the stream.
pub fn h264_rank(ours: &str, fmtp: &str) -> Option<u8> {
    let param = |name: &str| {
        fmtp.split(';').find_map(|p| {
            let (k, v) = p.trim().split_once('=')?;
            k.eq_ignore_ascii_case(name)
                .then(|| v.trim().to_ascii_lowercase())
        })
    };
    if param("packetization-mode").as_deref() != Some("1") {
        return None;
    }
    let theirs = param("profile-level-id").unwrap_or_else(|| "42001f".into());
    let idc = |p: &str| p.get(0..2).map(str::to_owned);
    let high_superset = ["6e", "7a", "f4"];
    Some(match (idc(ours), idc(&theirs)) {
        (a, b) if a == b => 0,
        (Some(a), Some(b)) if a == "64" && high_superset.contains(&b.as_str()) => 1,
        _ => 2,
    })
}

/// Forwards the viewer's keyframe requests on the video track to the session (one signal per
/// RTCP compound that holds a PLI or FIR; the session rate-limits).
fn spawn_keyframe_listener(track: Arc<TrackLocalStaticRTP>, tx: mpsc::Sender<()>) {
    use webrtc::media_stream::track_local::TrackLocalEvent;
    tokio::spawn(async move {
        while let Some(event) = track.poll().await {
            let TrackLocalEvent::OnRtcpPacket(packets) = event else {
                continue;
            };
            if packets.iter().any(is_keyframe_request) && tx.try_send(()).is_err() && tx.is_closed()
            {
                break;
            }
        }
    });
}

#[allow(clippy::borrowed_box)]
fn is_keyframe_request(packet: &Box<dyn rtc::rtcp::Packet>) -> bool {
    let p = packet.as_any();
    p.is::<PictureLossIndication>() || p.is::<FullIntraRequest>()
}

/// Marks inbound RTCP that holds a keyframe request for the application (the stack delivers
/// only what an interceptor marks); everything passes on unchanged, so the NACK responder and
/// the reports still see it.
#[derive(Default)]
struct KeyframeRequests {
    read: VecDeque<TaggedPacket>,
    write: VecDeque<TaggedPacket>,
}

impl Protocol<TaggedPacket, TaggedPacket, ()> for KeyframeRequests {
    type Rout = TaggedPacket;
    type Wout = TaggedPacket;
    type Eout = ();
    type Error = rtc::shared::error::Error;
    type Time = Instant;

    fn handle_read(&mut self, mut msg: TaggedPacket) -> Result<(), Self::Error> {
        if let Packet::Rtcp(packets) = &msg.message.packet {
            if packets.iter().any(is_keyframe_request) {
                msg.message.add(Attribute::DeliverToApplication);
            }
        }
        self.read.push_back(msg);
        Ok(())
    }

    fn poll_read(&mut self) -> Option<TaggedPacket> {
        self.read.pop_front()
    }

    fn handle_write(&mut self, msg: TaggedPacket) -> Result<(), Self::Error> {
        self.write.push_back(msg);
        Ok(())
    }

    fn poll_write(&mut self) -> Option<TaggedPacket> {
        self.write.pop_front()
    }
}

impl Interceptor for KeyframeRequests {
    fn bind_local_stream(&mut self, _info: &StreamInfo) {}
    fn unbind_local_stream(&mut self, _info: &StreamInfo) {}
    fn bind_remote_stream(&mut self, _info: &StreamInfo) {}
    fn unbind_remote_stream(&mut self, _info: &StreamInfo) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_sent_on_is_the_one_whose_profile_covers_the_stream() {
        let f = |p: &str, mode: u8| {
            format!("level-asymmetry-allowed=1;packetization-mode={mode};profile-level-id={p}")
        };
        assert_eq!(h264_rank("64001f", &f("64001f", 1)), Some(0));
        assert_eq!(h264_rank("64001f", &f("640c1f", 1)), Some(0));
        assert_eq!(h264_rank("64001f", &f("f4001f", 1)), Some(1));
        assert_eq!(h264_rank("64001f", &f("42e01f", 1)), Some(2));
        assert_eq!(h264_rank("64001f", &f("64001f", 0)), None);
        assert_eq!(h264_rank("42e01f", &f("42001f", 1)), Some(0));
        assert_eq!(
            profile_level_id(&[1, 0x64, 0, 0x1f, 0xff]).as_deref(),
            Some("64001f")
        );
    }
}
