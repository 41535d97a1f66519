//! Legacy MPEG-TS HLS (version 6): a segmenter that cuts `mpegtsmux` output at video keyframes
//! (the same forced keyframes the CMAF segments start on) or, without video, on audio PES starts
//! every segment duration; and the playlist renderer. Sans-IO: TS bytes in, segments out; the
//! packets, sections and PES headers are read by [`crate::formats::mpegts`].

use std::fmt::Write;
use std::time::Duration;

use bytes::Bytes;

use super::state::{PackageState, Rendition};
use crate::formats::mpegts::{
    pat_first_pmt_pid, stream_type, Packet, PesHeader, Pmt, SectionReader, PID_PAT, TS_PACKET,
};
use crate::media::timeline::Clock;

/// A finished TS segment.
#[derive(Debug, Clone, PartialEq)]
pub struct TsSegment {
    pub data: Bytes,
    pub duration: Duration,
    /// 90 kHz PTS of its first PES (unwrapped).
    pub start_pts: u64,
}

#[derive(Debug, Default)]
pub struct TsSegmenter {
    segment: Duration,
    pat: Option<[u8; TS_PACKET]>,
    pmt: Option<[u8; TS_PACKET]>,
    sections: SectionReader,
    pmt_pid: Option<u16>,
    video_pid: Option<u16>,
    audio_pid: Option<u16>,
    current: Vec<u8>,
    start_pts: Option<u64>,
    last_pts: Option<u64>,
    /// Bytes of an incomplete packet from the previous input.
    partial: Vec<u8>,
    /// Packets that are not well-formed TS (no sync byte, an adaptation field past the end):
    /// counted, skipped.
    pub bad_packets: u64,
}

impl TsSegmenter {
    pub fn new(segment: Duration) -> Self {
        TsSegmenter {
            segment,
            ..Self::default()
        }
    }

    /// Feeds muxer output; returns the segments completed by it.
    pub fn push(&mut self, input: &[u8]) -> Vec<TsSegment> {
        let mut out = Vec::new();
        let mut buf = std::mem::take(&mut self.partial);
        buf.extend_from_slice(input);
        let whole = buf.len() / TS_PACKET * TS_PACKET;
        for chunk in buf[..whole].chunks_exact(TS_PACKET) {
            let packet: &[u8; TS_PACKET] = chunk.try_into().expect("exact chunk");
            if let Some(seg) = self.packet(packet) {
                out.push(seg);
            }
        }
        self.partial = buf[whole..].to_vec();
        out
    }

    /// Starts over after a gap in the muxer's input (TS muxing paused and resumed): the segment
    /// in progress is dropped and the next one starts at the next keyframe. The PSI is kept.
    pub fn restart(&mut self) {
        self.current.clear();
        self.partial.clear();
        self.start_pts = None;
        self.last_pts = None;
    }

    /// Ends the stream: the segment in progress is complete.
    pub fn finish(&mut self) -> Option<TsSegment> {
        self.cut(self.last_pts)
    }

    fn cut(&mut self, next_pts: Option<u64>) -> Option<TsSegment> {
        let start = self.start_pts?;
        if self.current.is_empty() {
            return None;
        }
        let end = next_pts.unwrap_or(start).max(start);
        let seg = TsSegment {
            data: Bytes::from(std::mem::take(&mut self.current)),
            duration: Duration::from_nanos((end - start) * 100_000 / 9),
            start_pts: start,
        };
        self.start_pts = None;
        Some(seg)
    }

    fn packet(&mut self, p: &[u8; TS_PACKET]) -> Option<TsSegment> {
        let packet = match Packet::parse(p) {
            Ok(packet) => packet,
            Err(_) => {
                self.bad_packets += 1;
                return None;
            }
        };
        let (pid, pusi, rai) = (packet.pid, packet.unit_start, packet.random_access());
        let payload = packet.payload.unwrap_or_default();
        if pid == PID_PAT {
            self.pat = Some(*p);
            if let Some(section) = self.sections.push(pid, pusi, payload) {
                self.pmt_pid = pat_first_pmt_pid(&section);
            }
            return None;
        }
        if Some(pid) == self.pmt_pid {
            self.pmt = Some(*p);
            if let Some(section) = self.sections.push(pid, pusi, payload) {
                let (v, a) = media_pids(&section);
                self.video_pid = v;
                self.audio_pid = a;
            }
            return None;
        }
        let mut done = None;
        let media = Some(pid) == self.video_pid || Some(pid) == self.audio_pid;
        if media && pusi {
            let pts =
                PesHeader::parse(payload)
                    .and_then(|h| h.pts)
                    .map(|raw| match self.last_pts {
                        Some(last) => Clock::MPEG_TS.unwrap_near(last, raw),
                        None => raw,
                    });
            let is_video = Some(pid) == self.video_pid;
            let boundary = match (is_video, self.video_pid.is_some()) {
                // Video: every keyframe (random access indicator) starts a segment.
                (true, _) => rai,
                // Audio-only: a PES start once the segment is long enough.
                (false, false) => match (self.start_pts, pts) {
                    (Some(s), Some(p)) => {
                        p.saturating_sub(s) * 100_000 / 9 >= self.segment.as_nanos() as u64
                    }
                    (None, _) => true,
                    _ => false,
                },
                (false, true) => false,
            };
            if boundary && self.start_pts.is_some() {
                done = self.cut(pts);
            }
            if let Some(p) = pts {
                // A video variant's segment starts at a keyframe: audio muxed ahead of the
                // first one is not a segment of its own.
                let starts = boundary || (!is_video && self.video_pid.is_none());
                if self.start_pts.is_none() && starts {
                    // Every segment is decodable alone: it opens with PAT and PMT.
                    if let (Some(pat), Some(pmt)) = (self.pat, self.pmt) {
                        self.current.extend_from_slice(&pat);
                        self.current.extend_from_slice(&pmt);
                    }
                    self.start_pts = Some(p);
                }
                self.last_pts = Some(self.last_pts.map_or(p, |l| l.max(p)));
            }
        }
        if self.start_pts.is_some() {
            self.current.extend_from_slice(p);
        }
        done
    }
}

/// (video PID, audio PID) from a whole PMT section: the first H.264/HEVC and the first AAC
/// (ADTS or LATM) stream.
fn media_pids(section: &[u8]) -> (Option<u16>, Option<u16>) {
    let Some(pmt) = Pmt::parse(section) else {
        return (None, None);
    };
    let (mut video, mut audio) = (None, None);
    for (kind, pid) in pmt.streams() {
        match kind {
            stream_type::H264 | stream_type::HEVC if video.is_none() => video = Some(pid),
            stream_type::AAC_ADTS | stream_type::AAC_LATM if audio.is_none() => audio = Some(pid),
            _ => {}
        }
    }
    (video, audio)
}

/// `duration_sec=N` for `get_duration_sec=true`: an integer for whole seconds, else a decimal.
fn duration_param(d: Duration) -> String {
    let ms = (d.as_secs_f64() * 1000.0).round() as u64;
    if ms.is_multiple_of(1000) {
        format!("{}", ms / 1000)
    } else {
        let s = format!("{:.3}", ms as f64 / 1000.0);
        s.trim_end_matches('0').to_owned()
    }
}

/// A TS variant's codecs: its rung's H.264 (from the CMAF init) plus the muxed AAC.
fn ts_codecs(pkg: &PackageState, r: &Rendition) -> String {
    let audio = pkg
        .renditions()
        .iter()
        .find(|c| matches!(c.kind, super::RenditionKind::Audio { .. }))
        .map(|a| a.codecs.clone());
    let video = match r.kind {
        super::RenditionKind::Video { .. } => pkg.rendition(&r.name).map(|c| c.codecs.clone()),
        super::RenditionKind::Audio { .. } => None,
    };
    video.into_iter().chain(audio).collect::<Vec<_>>().join(",")
}

/// The MPEG-TS master playlist (one variant per rung, audio muxed into each).
pub fn render_master(pkg: &PackageState, with_duration: bool) -> String {
    let mut out = String::from("#EXTM3U\n#EXT-X-VERSION:6\n#EXT-X-INDEPENDENT-SEGMENTS\n");
    let query = if with_duration {
        "?get_duration_sec=true"
    } else {
        ""
    };
    for r in pkg.ts_renditions() {
        let mut attrs = format!(
            "BANDWIDTH={},AVERAGE-BANDWIDTH={},CODECS=\"{}\"",
            r.peak_bitrate(),
            r.average_bitrate(),
            ts_codecs(pkg, r)
        );
        if let super::RenditionKind::Video {
            width,
            height,
            frame_rate,
        } = r.kind
        {
            let _ = write!(
                attrs,
                ",RESOLUTION={width}x{height},FRAME-RATE={frame_rate:.3}"
            );
        }
        let _ = writeln!(
            out,
            "#EXT-X-STREAM-INF:{attrs}\n{}/index.m3u8{query}",
            r.name
        );
    }
    out
}

/// A v6 media playlist of whole TS segments: no parts, no LL tags.
pub fn render_media(
    pkg: &PackageState,
    r: &Rendition,
    with_duration: bool,
    endlist: bool,
) -> String {
    let segments = r.segments();
    let first = if pkg.dvr_window().is_some() {
        0
    } else {
        segments.len().saturating_sub(pkg.config().window_segments)
    };
    let td = pkg.config().target_duration_for(segments.range(first..));
    let hidden = segments.range(..first).filter(|s| s.discontinuity).count() as u64;
    let mut out = String::new();
    let _ = writeln!(out, "#EXTM3U\n#EXT-X-VERSION:6\n#EXT-X-TARGETDURATION:{td}");
    let _ = writeln!(
        out,
        "#EXT-X-MEDIA-SEQUENCE:{}",
        segments.get(first).map_or(r.next_msn(), |s| s.msn)
    );
    let disc = r.discontinuity_sequence() + hidden;
    if disc > 0 {
        let _ = writeln!(out, "#EXT-X-DISCONTINUITY-SEQUENCE:{disc}");
    }
    for s in segments.range(first..) {
        if s.discontinuity {
            out.push_str("#EXT-X-DISCONTINUITY\n");
        }
        let d = s.duration();
        let _ = write!(out, "#EXTINF:{:.5},\nseg_{}.ts", d.as_secs_f64(), s.msn);
        if with_duration {
            let _ = write!(out, "?duration_sec={}", duration_param(d));
        }
        out.push('\n');
    }
    if endlist {
        out.push_str("#EXT-X-ENDLIST\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::mpegts::testing::timestamp_bytes;
    use crate::formats::mpegts::SYNC;
    use crate::package::state::tests::{stereo_audio, video_720p};
    use crate::package::{PackagingConfig, PartIn};
    use time::OffsetDateTime;

    const PTS_WRAP: u64 = 1 << 33;

    fn packet(pid: u16, pusi: bool, rai: bool, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![
            SYNC,
            (pid >> 8) as u8 | if pusi { 0x40 } else { 0 },
            pid as u8,
        ];
        if rai {
            p.push(0x30);
            p.extend_from_slice(&[1, 0x40]);
        } else {
            p.push(0x10);
        }
        p.extend_from_slice(payload);
        p.resize(TS_PACKET, 0xff);
        p
    }

    fn pes(pts: u64) -> Vec<u8> {
        [
            &[0, 0, 1, 0xe0, 0, 0, 0x80, 0x80, 5][..],
            &timestamp_bytes(2, pts),
        ]
        .concat()
    }

    fn psi() -> Vec<u8> {
        // PAT: program 1 → PMT PID 0x1000; PMT: H.264 on 0x100, AAC on 0x101.
        let pat = [
            0u8, 0x00, 0xb0, 0x0d, 0, 1, 0xc1, 0, 0, 0, 1, 0xf0, 0x00, 0, 0, 0, 0,
        ];
        let pmt = [
            0u8, 0x02, 0xb0, 0x17, 0, 1, 0xc1, 0, 0, 0xe1, 0x00, 0xf0, 0x00, 0x1b, 0xe1, 0x00,
            0xf0, 0x00, 0x0f, 0xe1, 0x01, 0xf0, 0x00, 0, 0, 0, 0,
        ];
        [
            packet(0, true, false, &pat),
            packet(0x1000, true, false, &pmt),
        ]
        .concat()
    }

    #[test]
    fn cuts_at_keyframes_with_psi_up_front() {
        let mut s = TsSegmenter::new(Duration::from_secs(2));
        let mut input = psi();
        for (i, pts) in [0u64, 90_000, 180_000, 270_000, 360_000].iter().enumerate() {
            input.extend(packet(0x100, true, i % 2 == 0, &pes(*pts)));
            input.extend(packet(0x101, true, false, &pes(*pts)));
        }
        // Fed in awkward pieces.
        let mut out = Vec::new();
        for piece in input.chunks(100) {
            out.extend(s.push(piece));
        }
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].duration, Duration::from_secs(2));
        assert_eq!(out[0].start_pts, 0);
        for seg in &out {
            assert_eq!(seg.data.len() % TS_PACKET, 0);
            assert_eq!(&seg.data[1..3], &[0x40, 0x00], "starts with the PAT");
        }
        let last = s.finish().unwrap();
        assert_eq!(last.start_pts, 360_000);
    }

    /// TS muxing paused and resumed: the segment cut short is dropped, the next starts at
    /// the first keyframe after the gap, and audio muxed ahead of it makes no segment.
    #[test]
    fn restart_drops_the_cut_short_segment_and_waits_for_a_keyframe() {
        let mut s = TsSegmenter::new(Duration::from_secs(2));
        let mut input = psi();
        // Audio ahead of the first keyframe is no segment of its own.
        input.extend(packet(0x101, true, false, &pes(0)));
        for (i, pts) in [90_000u64, 180_000, 270_000].iter().enumerate() {
            input.extend(packet(0x100, true, i % 2 == 0, &pes(*pts)));
        }
        let out = s.push(&input);
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0].start_pts, 90_000,
            "starts at the keyframe, not the audio"
        );
        // Paused after 270 000 (a segment in progress), resumed a minute later.
        s.restart();
        let resume = 90_000 * 60;
        let mut input = Vec::new();
        input.extend(packet(0x101, true, false, &pes(resume)));
        input.extend(packet(0x100, true, false, &pes(resume + 3_000)));
        for pts in [resume + 6_000, resume + 186_000] {
            input.extend(packet(0x100, true, true, &pes(pts)));
        }
        let out = s.push(&input);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].start_pts, resume + 6_000);
        assert_eq!(out[0].duration, Duration::from_secs(2));
        assert_eq!(
            &out[0].data[1..3],
            &[0x40, 0x00],
            "still opens with the PAT"
        );
    }

    #[test]
    fn audio_only_cuts_by_time_and_pts_unwraps() {
        let mut s = TsSegmenter::new(Duration::from_secs(2));
        let pat = [
            0u8, 0x00, 0xb0, 0x0d, 0, 1, 0xc1, 0, 0, 0, 1, 0xf0, 0x00, 0, 0, 0, 0,
        ];
        let pmt = [
            0u8, 0x02, 0xb0, 0x12, 0, 1, 0xc1, 0, 0, 0xe1, 0x01, 0xf0, 0x00, 0x0f, 0xe1, 0x01,
            0xf0, 0x00, 0, 0, 0, 0,
        ];
        let mut input = [
            packet(0, true, false, &pat),
            packet(0x1000, true, false, &pmt),
        ]
        .concat();
        let start = PTS_WRAP - 45_000; // wraps after half a second
        for i in 0..100u64 {
            input.extend(packet(
                0x101,
                true,
                false,
                &pes((start + i * 9_000) % PTS_WRAP),
            ));
        }
        let out = s.push(&input);
        assert_eq!(out.len(), 4, "{out:?}");
        assert!(out.iter().all(|seg| seg.duration == Duration::from_secs(2)));
        assert!(out[1].start_pts > PTS_WRAP, "unwrapped past 2^33");
    }

    #[test]
    fn duration_params() {
        assert_eq!(duration_param(Duration::from_secs(2)), "2");
        assert_eq!(duration_param(Duration::from_millis(2500)), "2.5");
        assert_eq!(duration_param(Duration::from_millis(1984)), "1.984");
    }

    #[test]
    fn golden_ts_playlists() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let mut pkg = PackageState::new(PackagingConfig::default(), vec![]);
        let mut v = video_720p(3_000_000);
        pkg.list_mut(crate::package::Output::Cmaf)
            .unwrap()
            .push(video_720p(1));
        pkg.list_mut(crate::package::Output::Cmaf)
            .unwrap()
            .push(stereo_audio(1));
        for (i, ms) in [2000u64, 2000, 2500].iter().enumerate() {
            if i == 2 {
                v.mark_discontinuity();
            }
            v.push_part(
                PartIn {
                    starts_segment: true,
                    independent: true,
                    duration: Duration::from_millis(*ms),
                    pdt: t0,
                    data: Bytes::from(vec![0u8; 1000]),
                },
                crate::package::state::Retention::Segments(10),
            );
        }
        v.close_open_segment();
        pkg.list_mut(crate::package::Output::Ts).unwrap().push(v);
        pkg.list_mut(crate::package::Output::Ts)
            .unwrap()
            .push(stereo_audio(1));
        let master = render_master(&pkg, true);
        assert!(master.starts_with("#EXTM3U\n#EXT-X-VERSION:6\n"));
        assert!(master.contains("CODECS=\"avc1.64001f,mp4a.40.2\",RESOLUTION=1280x720,FRAME-RATE=30.000\n720p/index.m3u8?get_duration_sec=true\n"), "{master}");
        let media = render_media(&pkg, &pkg.ts_renditions()[0], true, true);
        assert_eq!(
            media,
            "#EXTM3U\n#EXT-X-VERSION:6\n#EXT-X-TARGETDURATION:3\n#EXT-X-MEDIA-SEQUENCE:0\n\
#EXTINF:2.00000,\nseg_0.ts?duration_sec=2\n#EXTINF:2.00000,\nseg_1.ts?duration_sec=2\n\
#EXT-X-DISCONTINUITY\n#EXTINF:2.50000,\nseg_2.ts?duration_sec=2.5\n#EXT-X-ENDLIST\n"
        );
        assert!(!media.contains("EXT-X-PART"));
    }
}
