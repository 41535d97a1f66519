//! WebRTC RTP → media (sans-IO): RTP packets with their arrival times in, [`MediaMessage`]s
//! out. H.264 is reordered, depacketized and re-framed as avcC; Opus packets are frames as they
//! are. Each track's RTP clock is unwrapped by its own [`Timeline`] and placed on the session's
//! time by the arrival of its first packet, which keeps audio and video together to within
//! the network's jitter at start (RTCP sender reports are not delivered by the crate).

use std::time::Duration;

use bytes::Bytes;

use super::rtp::{H264Depacketizer, Released, Reorder, Unit};
use crate::media::codec::{AnnexBFramer, CodecError};
use crate::media::timeline::Clock;
use crate::media::{AudioConfig, Frame, MediaMessage, OpusConfig, Timeline, TrackKind};

/// RTP timestamps of H.264 video (RFC 6184 §5.1: 90 kHz) and of Opus (RFC 7587 §4.1: 48 kHz).
const VIDEO_CLOCK: Clock = Clock {
    hz: 90_000,
    bits: 32,
};
const OPUS_CLOCK: Clock = Clock {
    hz: 48_000,
    bits: 32,
};
/// Largest Opus packet: 120 ms of 510 kbit/s stereo is under 8 KiB (RFC 6716 §3.4, R5).
const MAX_OPUS_PACKET: usize = 8 * 1024;

/// The parts of an RTP packet the adapter needs.
#[derive(Debug, Clone)]
pub struct RtpPacket {
    pub seq: u16,
    pub ts: u32,
    pub marker: bool,
    pub payload: Bytes,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RtpStats {
    pub lost: u64,
    pub late: u64,
    pub damaged_units: u64,
    pub skipped_frames: u64,
}

/// One track's time: its RTP clock unwrapped, offset by its first arrival.
#[derive(Debug)]
struct TrackTime {
    timeline: Timeline,
    anchor: Option<u64>,
}

impl TrackTime {
    fn new(clock: Clock) -> Self {
        TrackTime {
            timeline: Timeline::new(clock),
            anchor: None,
        }
    }

    fn map(&mut self, track: TrackKind, ts: u32, since_epoch: Duration) -> u64 {
        let anchor = *self
            .anchor
            .get_or_insert(since_epoch.as_nanos().min(u128::from(u64::MAX)) as u64);
        anchor + self.timeline.map_ns(track, u64::from(ts))
    }
}

#[derive(Debug)]
pub struct RtpToMedia {
    /// Arrival of the session's first packet: time 0 of the output.
    epoch: Option<Duration>,
    video_order: Reorder<RtpPacket>,
    depacketizer: H264Depacketizer,
    framer: AnnexBFramer,
    video_time: TrackTime,
    /// Set after a damaged unit: frames wait for the next keyframe, one is requested.
    wait_keyframe: bool,
    audio_order: Reorder<RtpPacket>,
    audio_time: TrackTime,
    opus: Option<OpusConfig>,
    skipped: u64,
    damaged: u64,
    released: Vec<Released<RtpPacket>>,
    units: Vec<Unit>,
}

impl RtpToMedia {
    /// `channels`: the Opus channel count negotiated in the SDP (`opus/48000/2`).
    pub fn new(channels: u8) -> Self {
        RtpToMedia {
            epoch: None,
            video_order: Reorder::default(),
            depacketizer: H264Depacketizer::default(),
            framer: AnnexBFramer::default(),
            video_time: TrackTime::new(VIDEO_CLOCK),
            wait_keyframe: true,
            audio_order: Reorder::default(),
            audio_time: TrackTime::new(OPUS_CLOCK),
            opus: Some(OpusConfig {
                channels: channels.clamp(1, 2),
            }),
            skipped: 0,
            damaged: 0,
            released: Vec::new(),
            units: Vec::new(),
        }
    }

    pub fn stats(&self) -> RtpStats {
        RtpStats {
            lost: self.video_order.lost + self.audio_order.lost,
            late: self.video_order.late + self.audio_order.late,
            damaged_units: self.damaged,
            skipped_frames: self.skipped,
        }
    }

    /// Whether video is waiting for a keyframe (the caller asks the sender for one).
    pub fn wants_keyframe(&self) -> bool {
        self.wait_keyframe
    }

    pub fn push(
        &mut self,
        track: TrackKind,
        packet: RtpPacket,
        now: Duration,
        out: &mut Vec<MediaMessage>,
    ) -> Result<(), CodecError> {
        if self.epoch.is_none() {
            // The offer was accepted with both an H.264 and an Opus m-line: both are declared,
            // so the outputs wait for the first keyframe (the PLI asks for it) with audio.
            out.push(MediaMessage::Tracks(crate::media::Tracks {
                video: true,
                audio: true,
            }));
            self.epoch = Some(now);
        }
        match track {
            TrackKind::Video => self.video_order.push(packet.seq, now, packet),
            TrackKind::Audio => self.audio_order.push(packet.seq, now, packet),
        }
        self.poll(now, out)
    }

    /// Releases what the reorder buffers let go by `now`; call it on a timer too, so a gap
    /// is skipped even when no further packet comes.
    pub fn poll(&mut self, now: Duration, out: &mut Vec<MediaMessage>) -> Result<(), CodecError> {
        let Some(epoch) = self.epoch else {
            return Ok(());
        };
        self.audio_order.pop(now, &mut self.released);
        for p in std::mem::take(&mut self.released) {
            self.audio(p, epoch, out);
        }
        self.video_order.pop(now, &mut self.released);
        for p in std::mem::take(&mut self.released) {
            self.depacketizer.push(
                p.item.ts,
                p.item.marker,
                &p.item.payload,
                p.gap_before,
                &mut self.units,
            );
            for unit in std::mem::take(&mut self.units) {
                self.video(unit, p.arrival.saturating_sub(epoch), out)?;
            }
        }
        Ok(())
    }

    fn audio(&mut self, p: Released<RtpPacket>, epoch: Duration, out: &mut Vec<MediaMessage>) {
        let payload = p.item.payload;
        if payload.is_empty() || payload.len() > MAX_OPUS_PACKET {
            self.skipped += 1;
            return;
        }
        if let Some(config) = self.opus.take() {
            out.push(MediaMessage::AudioConfig(AudioConfig::Opus(config)));
        }
        let t = self
            .audio_time
            .map(TrackKind::Audio, p.item.ts, p.arrival.saturating_sub(epoch));
        out.push(MediaMessage::Frame(Frame {
            track: TrackKind::Audio,
            dts: t,
            pts: t,
            keyframe: true,
            duration: None,
            data: payload,
        }));
    }

    fn video(
        &mut self,
        unit: Unit,
        since_epoch: Duration,
        out: &mut Vec<MediaMessage>,
    ) -> Result<(), CodecError> {
        let (ts, nals) = match unit {
            Unit::Damaged { .. } => {
                self.damaged += 1;
                self.wait_keyframe = true;
                return Ok(());
            }
            Unit::Complete { ts, nals } => (ts, nals),
        };
        let Some(frame) = self.framer.frame(nals.iter().map(Vec::as_slice), out)? else {
            return Ok(());
        };
        if self.framer.config.is_none() || (self.wait_keyframe && !frame.keyframe) {
            self.skipped += 1;
            return Ok(());
        }
        self.wait_keyframe = false;
        // WebRTC H.264 has no B-frames (browsers send Constrained Baseline): pts = dts.
        let t = self.video_time.map(TrackKind::Video, ts, since_epoch);
        out.push(MediaMessage::Frame(Frame {
            track: TrackKind::Video,
            dts: t,
            pts: t,
            keyframe: frame.keyframe,
            duration: None,
            data: Bytes::from(frame.data),
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::codec::tests::AVCC_720P;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn pkt(seq: u16, ts: u32, marker: bool, payload: &[u8]) -> RtpPacket {
        RtpPacket {
            seq,
            ts,
            marker,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    fn stap(nals: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![24];
        for n in nals {
            v.extend_from_slice(&(n.len() as u16).to_be_bytes());
            v.extend_from_slice(n);
        }
        v
    }

    fn frames(out: &[MediaMessage]) -> Vec<(TrackKind, u64, bool)> {
        out.iter()
            .filter_map(|m| match m {
                MediaMessage::Frame(f) => Some((f.track, f.dts / 1_000_000, f.keyframe)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn video_waits_for_a_keyframe_and_tracks_share_the_session_clock() {
        let sps = &AVCC_720P[8..8 + 0x1a];
        let pps = &AVCC_720P[8 + 0x1a + 3..8 + 0x1a + 3 + 6];
        let mut a = RtpToMedia::new(2);
        let mut out = Vec::new();
        // Audio starts first (its RTP base just before the 32-bit wrap), video 40 ms later
        // with a delta frame, which waits for the keyframe.
        let base = u32::MAX - 959;
        a.push(
            TrackKind::Audio,
            pkt(100, base, true, &[0xfc, 1]),
            ms(1000),
            &mut out,
        )
        .unwrap();
        a.push(
            TrackKind::Video,
            pkt(7, 123, true, &[0x41, 1]),
            ms(1040),
            &mut out,
        )
        .unwrap();
        assert!(a.wants_keyframe());
        a.push(
            TrackKind::Video,
            pkt(8, 3123, false, &stap(&[sps, pps])),
            ms(1073),
            &mut out,
        )
        .unwrap();
        a.push(
            TrackKind::Video,
            pkt(9, 3123, true, &[0x65, 1, 2]),
            ms(1073),
            &mut out,
        )
        .unwrap();
        a.push(
            TrackKind::Audio,
            pkt(101, base.wrapping_add(960), true, &[0xfc, 2]),
            ms(1020),
            &mut out,
        )
        .unwrap();
        a.push(
            TrackKind::Video,
            pkt(10, 6123, true, &[0x41, 3]),
            ms(1106),
            &mut out,
        )
        .unwrap();
        assert!(!a.wants_keyframe());
        // Both tracks are declared before anything else, so the outputs wait for the keyframe.
        assert_eq!(
            out[0],
            MediaMessage::Tracks(crate::media::Tracks {
                video: true,
                audio: true
            })
        );
        assert!(matches!(
            out[1],
            MediaMessage::AudioConfig(AudioConfig::Opus(OpusConfig { channels: 2 }))
        ));
        assert!(out
            .iter()
            .any(|m| matches!(m, MediaMessage::VideoConfig(c) if c.height == 720)));
        // Video is placed by the arrival of its first usable unit (73 ms), then follows its
        // RTP clock; audio crosses its clock's wrap without a jump.
        assert_eq!(
            frames(&out),
            [
                (TrackKind::Audio, 0, true),
                (TrackKind::Video, 73, true),
                (TrackKind::Audio, 20, true),
                (TrackKind::Video, 106, false),
            ]
        );
        assert_eq!(a.stats().skipped_frames, 1);
    }

    #[test]
    fn a_lost_packet_drops_frames_until_the_next_keyframe() {
        let sps = &AVCC_720P[8..8 + 0x1a];
        let pps = &AVCC_720P[8 + 0x1a + 3..8 + 0x1a + 3 + 6];
        let mut a = RtpToMedia::new(2);
        let mut out = Vec::new();
        let mut t = 0;
        a.push(
            TrackKind::Video,
            pkt(1, 0, false, &stap(&[sps, pps])),
            ms(t),
            &mut out,
        )
        .unwrap();
        a.push(
            TrackKind::Video,
            pkt(2, 0, true, &[0x65, 1]),
            ms(t),
            &mut out,
        )
        .unwrap();
        t += 33;
        // Packet 3 is lost; 4 waits in the reorder buffer, then is released as damaged.
        a.push(
            TrackKind::Video,
            pkt(4, 3000, true, &[0x41, 1]),
            ms(t),
            &mut out,
        )
        .unwrap();
        a.poll(ms(t) + super::super::rtp::REORDER_WAIT, &mut out)
            .unwrap();
        assert!(a.wants_keyframe());
        a.push(
            TrackKind::Video,
            pkt(5, 6000, true, &[0x41, 2]),
            ms(300),
            &mut out,
        )
        .unwrap();
        a.push(
            TrackKind::Video,
            pkt(6, 9000, true, &[0x65, 3]),
            ms(333),
            &mut out,
        )
        .unwrap();
        let keys: Vec<bool> = frames(&out).iter().map(|f| f.2).collect();
        assert_eq!(
            keys,
            [true, true],
            "the delta frames after the loss are skipped"
        );
        assert_eq!(a.stats().lost, 1);
        assert_eq!(a.stats().damaged_units, 1);
        assert_eq!(a.stats().skipped_frames, 1);
    }
}
