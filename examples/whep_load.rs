//! A WHEP load client for `scripts/bench-whep`: N viewers of one stream on webrtc-rs (the
//! stack, not Chromium: no decoding, so one machine can hold a hundred), each a recvonly
//! H.264 + Opus peer connection that counts what arrives — packets, bytes, sequence gaps (lost)
//! and packets that came later than their successors — and asks again for what it missed (the
//! stack's NACK generator), as a browser would. Prints one JSON line at the end.
//! Usage: cargo run --release --example whep_load -- WHEP_URL VIEWERS SECONDS

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtc::interceptor::Registry;
use rtc::peer_connection::configuration::interceptor_registry::register_default_interceptors;
use rtc::peer_connection::configuration::media_engine::{
    MediaEngine, MIME_TYPE_H264, MIME_TYPE_OPUS,
};
use rtc::peer_connection::configuration::RTCConfigurationBuilder;
use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::rtp_transceiver::rtp_sender::{
    RTCPFeedback, RTCRtpCodec, RTCRtpCodecParameters, RtpCodecKind,
};
use rtc::rtp_transceiver::{RTCRtpTransceiverDirection, RTCRtpTransceiverInit};
use tokio::sync::watch;
use webrtc::media_stream::track_remote::{TrackRemote, TrackRemoteEvent};
use webrtc::peer_connection::{
    PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler, RTCIceGatheringState,
    RTCPeerConnectionState,
};

#[derive(Default)]
struct Counts {
    packets: AtomicU64,
    bytes: AtomicU64,
    lost: AtomicU64,
    late: AtomicU64,
    video_packets: AtomicU64,
    first_ms: AtomicU64,
    connected: AtomicU64,
}

struct Handler {
    gathered: watch::Sender<bool>,
    counts: Arc<Counts>,
    start: Instant,
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for Handler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            let _ = self.gathered.send(true);
        }
    }

    async fn on_connection_state_change(&self, state: RTCPeerConnectionState) {
        if state == RTCPeerConnectionState::Connected {
            self.counts.connected.store(1, Ordering::Relaxed);
        }
    }

    async fn on_track(&self, track: Arc<dyn TrackRemote>) {
        let (counts, start) = (self.counts.clone(), self.start);
        let video = track.kind().await == RtpCodecKind::Video;
        tokio::spawn(async move {
            let mut last: Option<u16> = None;
            while let Some(event) = track.poll().await {
                let TrackRemoteEvent::OnRtpPacket(p) = event else {
                    continue;
                };
                let seq = p.header.sequence_number;
                if let Some(prev) = last {
                    let gap = seq.wrapping_sub(prev);
                    if gap == 0 || gap > 0x8000 {
                        counts.late.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    counts.lost.fetch_add(u64::from(gap - 1), Ordering::Relaxed);
                }
                last = Some(seq);
                counts.packets.fetch_add(1, Ordering::Relaxed);
                counts
                    .bytes
                    .fetch_add(p.payload.len() as u64, Ordering::Relaxed);
                if video && counts.video_packets.fetch_add(1, Ordering::Relaxed) == 0 {
                    counts
                        .first_ms
                        .store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            }
        });
    }
}

fn engine() -> MediaEngine {
    let mut e = MediaEngine::default();
    let fb = |t: &str, p: &str| RTCPFeedback {
        typ: t.into(),
        parameter: p.into(),
    };
    let h264 = RTCRtpCodec {
        mime_type: MIME_TYPE_H264.into(),
        clock_rate: 90_000,
        channels: 0,
        sdp_fmtp_line: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640c1f"
            .into(),
        rtcp_feedback: vec![fb("nack", ""), fb("nack", "pli")],
    };
    let opus = RTCRtpCodec {
        mime_type: MIME_TYPE_OPUS.into(),
        clock_rate: 48_000,
        channels: 2,
        sdp_fmtp_line: "minptime=10;useinbandfec=1".into(),
        rtcp_feedback: vec![],
    };
    e.register_codec(
        RTCRtpCodecParameters {
            rtp_codec: h264,
            payload_type: 102,
        },
        RtpCodecKind::Video,
    )
    .expect("H.264");
    e.register_codec(
        RTCRtpCodecParameters {
            rtp_codec: opus,
            payload_type: 111,
        },
        RtpCodecKind::Audio,
    )
    .expect("Opus");
    e
}

/// One viewer: negotiates, then holds the session until `until`; DELETEs it.
async fn viewer(url: String, until: Instant, counts: Arc<Counts>) -> Result<(), String> {
    let e = |e: webrtc::error::Error| e.to_string();
    let mut engine = engine();
    let interceptors =
        register_default_interceptors(Registry::new(), &mut engine).map_err(|e| e.to_string())?;
    let (gathered_tx, mut gathered) = watch::channel(false);
    let start = Instant::now();
    let handler = Arc::new(Handler {
        gathered: gathered_tx,
        counts,
        start,
    });
    let pc = PeerConnectionBuilder::new()
        .with_configuration(RTCConfigurationBuilder::new().build())
        .with_media_engine(engine)
        .with_interceptor_registry(interceptors)
        .with_handler(handler)
        .with_udp_addrs(vec!["127.0.0.1:0".to_owned()])
        .build()
        .await
        .map_err(e)?;
    for kind in [RtpCodecKind::Video, RtpCodecKind::Audio] {
        let init = RTCRtpTransceiverInit {
            direction: RTCRtpTransceiverDirection::Recvonly,
            streams: vec![],
            send_encodings: vec![],
        };
        pc.add_transceiver_from_kind(kind, Some(init))
            .await
            .map_err(e)?;
    }
    let offer = pc.create_offer(None).await.map_err(e)?;
    pc.set_local_description(offer).await.map_err(e)?;
    let _ = tokio::time::timeout(Duration::from_secs(3), gathered.wait_for(|g| *g)).await;
    let offer = pc.local_description().await.ok_or("no offer")?.sdp;
    let client = reqwest::Client::new();
    let r = client
        .post(&url)
        .header("content-type", "application/sdp")
        .body(offer)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status() != reqwest::StatusCode::CREATED {
        return Err(format!("POST: {}", r.status()));
    }
    let location = r.headers()["location"]
        .to_str()
        .map_err(|e| e.to_string())?
        .to_owned();
    let answer = r.text().await.map_err(|e| e.to_string())?;
    pc.set_remote_description(RTCSessionDescription::answer(answer).map_err(|e| e.to_string())?)
        .await
        .map_err(e)?;
    tokio::time::sleep_until(until.into()).await;
    let session = url::Url::parse(&url)
        .and_then(|u| u.join(&location))
        .map_err(|e| e.to_string())?;
    let _ = client.delete(session).send().await;
    let _ = pc.close().await;
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, n, seconds): (String, usize, f64) = match &args[1..] {
        [u, n, s] => (
            u.clone(),
            n.parse().expect("VIEWERS"),
            s.parse().expect("SECONDS"),
        ),
        _ => panic!("usage: whep_load WHEP_URL VIEWERS SECONDS"),
    };
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let counts: Vec<Arc<Counts>> = (0..n).map(|_| Arc::new(Counts::default())).collect();
    let mut tasks = Vec::new();
    for c in &counts {
        tasks.push(tokio::spawn(viewer(url.clone(), until, c.clone())));
        // Joins spread over a second or two, as an audience arrives.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut errors = Vec::new();
    for t in tasks {
        if let Ok(Err(e)) = t.await {
            errors.push(e);
        }
    }
    let sum = |f: fn(&Counts) -> &AtomicU64| {
        counts
            .iter()
            .map(|c| f(c).load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let mut first: Vec<u64> = counts
        .iter()
        .filter(|c| c.video_packets.load(Ordering::Relaxed) > 0)
        .map(|c| c.first_ms.load(Ordering::Relaxed))
        .collect();
    first.sort_unstable();
    let pct = |q: f64| {
        first
            .get(((first.len() as f64 * q) as usize).min(first.len().saturating_sub(1)))
            .copied()
    };
    println!(
        "{}",
        serde_json::json!({
            "viewers": n,
            "connected": sum(|c| &c.connected),
            "receiving": first.len(),
            "packets": sum(|c| &c.packets),
            "bytes": sum(|c| &c.bytes),
            "lost": sum(|c| &c.lost),
            "late": sum(|c| &c.late),
            "first_packet_ms_p50": pct(0.5),
            "first_packet_ms_p90": pct(0.9),
            "errors": errors,
        })
    );
}
