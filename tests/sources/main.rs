//! End to end: sources as they really arrive. An SRT feed whose first bytes fall inside a long
//! GOP (a hardware encoder reconnecting), HEVC over SRT (x265) and over Enhanced RTMP, and a PULL
//! from nginx-rtmp joined mid-GOP: each must come out with its video, checked by m3u8-rs and by
//! ffprobe decoding the top rung.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/media.rs"]
mod media;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use common::tempdir;
use media::*;

/// Sends `ts` to `url` through srt-live-transmit at `bytes_per_sec`, in 1316-byte payloads, as
/// an encoder would: the bytes exactly as given, even when they start mid-packet-stream.
fn paced_srt(url: &str, ts: Vec<u8>, bytes_per_sec: usize) -> Proc {
    let mut slt = Proc::spawn(
        Command::new("srt-live-transmit")
            .args(["-q", "file://con", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "srt-live-transmit",
    );
    let mut stdin = slt.child().stdin.take().unwrap();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        for (i, chunk) in ts.chunks(1316 * 8).enumerate() {
            let due = Duration::from_secs_f64((i * 1316 * 8) as f64 / bytes_per_sec as f64);
            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
            if stdin.write_all(chunk).is_err() {
                return;
            }
        }
    });
    slt
}

#[tokio::test]
async fn an_srt_feed_joining_mid_gop_keeps_its_video() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "mid-gop"})).await;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap();
    // The stream id percent-encoded, as URL-minded tools write it (`#` starts a fragment).
    let url = format!("srt://{}?streamid={id}%23{token}", d.srt);
    let ts = std::fs::read(fixture("longgop-720p25.ts")).unwrap();
    // Keyframes at 0, 4 and 8 s (bytes ~0, ~0.94 MB, ~1.8 MB): 400 kB in is 1.7 s into the
    // first GOP, so 2.3 s of audio and headless video arrive before the next keyframe, and the
    // first bytes are neither a PAT nor a PMT.
    let cut = ts[400_000 / 188 * 188..].to_vec();
    let rate = ts.len() / 10;
    let t0 = Instant::now();
    let _push = paced_srt(&url, cut, rate);
    wait_record(&d, id, Duration::from_secs(30), |r| {
        r["video_height"].is_number()
    })
    .await;
    let to_live = t0.elapsed();
    let live = assert_video_out(&d, id, (1280, 720)).await;
    let fps = live["frame_rate"].as_f64().unwrap();
    assert!((24.0..26.5).contains(&fps), "frame_rate {fps}");
    assert_eq!(
        live["transcoded_qualities"],
        json!(["720p", "480p", "360p"]),
        "{live}"
    );
    println!(
        "mid-GOP SRT join: transcoding video and audio {:.1} s after the first byte \
         (the first keyframe was 2.3 s in)",
        to_live.as_secs_f64()
    );
}

#[tokio::test]
async fn hevc_over_srt_is_transcoded_to_the_h264_ladder() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "hevc"})).await;
    let id = rec["id"].as_i64().unwrap();
    let _push = push(rec["push_url_srt"].as_str().unwrap(), "hevc-720p.ts", 2);
    let live = assert_video_out(&d, id, (1280, 720)).await;
    assert_eq!(
        live["transcoded_qualities"],
        json!(["720p", "480p", "360p"])
    );
    let fps = live["frame_rate"].as_f64().unwrap();
    assert!((29.0..31.5).contains(&fps), "frame_rate {fps}");
}

/// One FLV tag to send: video or audio, RTMP timestamp (ms), body.
struct FlvTag {
    video: bool,
    ms: u32,
    body: Vec<u8>,
}

/// The Enhanced RTMP video codecs the test pusher sends.
#[derive(Clone, Copy)]
enum ExCodec {
    /// `hvc1`: from an MPEG-TS, the hvcC written by h265parse, frames with composition offsets.
    Hevc,
    /// `av01`: from an MP4, its av1C, temporal units (no composition offset field).
    Av1,
}

/// Demuxes a fixture with GStreamer into Enhanced RTMP video tags (sequence start with the
/// codec record, coded frames) and AAC audio tags, `loops` times over, timestamps continuing.
/// Independent of the daemon's own codec code.
fn enhanced_rtmp_tags(fixture: &std::path::Path, codec: ExCodec, loops: u32) -> Vec<FlvTag> {
    use gstreamer as gst;
    use gstreamer::prelude::*;
    gst::init().unwrap();
    let (demux, video, fourcc) = match codec {
        ExCodec::Hevc => (
            "tsdemux",
            "h265parse ! video/x-h265,stream-format=hvc1,alignment=au",
            b"hvc1",
        ),
        ExCodec::Av1 => (
            "qtdemux",
            // qtdemux gives MP4 samples (temporal units) with the av1C as codec_data.
            "video/x-av1",
            b"av01",
        ),
    };
    let desc = format!(
        "filesrc location={} ! {demux} name=d \
         d. ! queue ! {video} ! appsink name=v sync=false \
         d. ! queue ! aacparse ! audio/mpeg,stream-format=raw ! appsink name=a sync=false",
        fixture.display()
    );
    let pipeline = gst::parse::launch(&desc)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let sink = |name| {
        pipeline
            .by_name(name)
            .unwrap()
            .downcast::<gstreamer_app::AppSink>()
            .unwrap()
    };
    let (vsink, asink) = (sink("v"), sink("a"));
    pipeline.set_state(gst::State::Playing).unwrap();
    let ms = |t: Option<gst::ClockTime>| t.map_or(0, |t| t.mseconds() as i64);
    let record = |s: &gstreamer_app::AppSink| {
        let mut config = None;
        let mut frames = Vec::new();
        while let Ok(sample) = s.pull_sample() {
            if config.is_none() {
                let caps = sample.caps().unwrap();
                let data = caps.structure(0).unwrap().get::<gst::Buffer>("codec_data");
                config = Some(data.ok().map(|d| d.map_readable().unwrap().to_vec()));
            }
            let b = sample.buffer().unwrap();
            frames.push((
                ms(b.dts().or(b.pts())),
                ms(b.pts()),
                !b.flags().contains(gst::BufferFlags::DELTA_UNIT),
                b.map_readable().unwrap().to_vec(),
            ));
        }
        (config.flatten(), frames)
    };
    let (record_bytes, video) = record(&vsink);
    // qtdemux 1.22 leaves the av1C out of its caps: take the box from the file.
    let record_bytes = match (codec, record_bytes) {
        (ExCodec::Av1, None) => {
            let mp4 = std::fs::read(fixture).unwrap();
            let at = mp4
                .windows(4)
                .position(|w| w == b"av1C")
                .expect("an av1C box");
            let size = u32::from_be_bytes(mp4[at - 4..at].try_into().unwrap()) as usize;
            mp4[at + 4..at - 4 + size].to_vec()
        }
        (_, record) => record.expect("codec_data in the caps"),
    };
    let (asc, audio) = record(&asink);
    let asc = asc.expect("AAC codec_data");
    pipeline.set_state(gst::State::Null).unwrap();
    let t0 = video[0].0.min(audio[0].0);
    let period = video.last().unwrap().0 - video[0].0 + (video[1].0 - video[0].0);
    let mut tags = vec![
        FlvTag {
            video: true,
            ms: 0,
            // IsExHeader | keyframe | SequenceStart, FourCC, HEVCDecoderConfigurationRecord.
            body: [&[0x80 | 0x10][..], fourcc, &record_bytes].concat(),
        },
        FlvTag {
            video: false,
            ms: 0,
            body: [&[0xaf, 0][..], &asc].concat(),
        },
    ];
    for n in 0..i64::from(loops) {
        let shift = n * period - t0;
        let mut all: Vec<FlvTag> = video
            .iter()
            .map(|(dts, pts, key, data)| {
                let frame_type = if *key { 0x10 } else { 0x20 };
                // IsExHeader | frame type | CodedFrames, FourCC, [SI24 offset], frame.
                let cts = match codec {
                    ExCodec::Hevc => ((pts - dts) as i32).to_be_bytes()[1..].to_vec(),
                    ExCodec::Av1 => Vec::new(),
                };
                FlvTag {
                    video: true,
                    ms: (dts + shift).max(0) as u32,
                    body: [&[0x80 | frame_type | 1][..], fourcc, &cts, data].concat(),
                }
            })
            .chain(audio.iter().map(|(dts, _, _, data)| FlvTag {
                video: false,
                ms: (dts + shift).max(0) as u32,
                body: [&[0xaf, 1][..], data].concat(),
            }))
            .collect();
        all.sort_by_key(|t| t.ms);
        tags.extend(all);
    }
    tags
}

/// Publishes `tags` over RTMP with rml_rtmp's client session, paced by their timestamps, with
/// `onMetaData` declaring the video (`videocodecid` = the FourCC, as Enhanced RTMP says) and
/// AAC.
fn push_enhanced_rtmp(
    addr: &str,
    key: &str,
    fourcc: &'static [u8; 4],
    tags: Vec<FlvTag>,
) -> std::thread::JoinHandle<()> {
    use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
    use rml_rtmp::sessions::{
        ClientSession, ClientSessionConfig, ClientSessionEvent, ClientSessionResult,
        PublishRequestType, StreamMetadata,
    };
    use rml_rtmp::time::RtmpTimestamp;
    use std::io::Read;
    let (addr, key) = (addr.to_owned(), key.to_owned());
    std::thread::spawn(move || {
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; 65536];
        let mut hs = Handshake::new(PeerType::Client);
        tcp.write_all(&hs.generate_outbound_p0_and_p1().unwrap())
            .unwrap();
        let rest = loop {
            let n = tcp.read(&mut buf).unwrap();
            assert!(n > 0, "closed during the handshake");
            match hs.process_bytes(&buf[..n]).unwrap() {
                HandshakeProcessResult::InProgress { response_bytes } => {
                    tcp.write_all(&response_bytes).unwrap()
                }
                HandshakeProcessResult::Completed {
                    response_bytes,
                    remaining_bytes,
                } => {
                    tcp.write_all(&response_bytes).unwrap();
                    break remaining_bytes;
                }
            }
        };
        let (mut session, _) = ClientSession::new(ClientSessionConfig::new()).unwrap();
        let send = |tcp: &mut std::net::TcpStream, r: ClientSessionResult| {
            if let ClientSessionResult::OutboundResponse(p) = r {
                tcp.write_all(&p.bytes).unwrap();
            }
        };
        // Feeds the server's bytes to the session until `done` sees the awaited event.
        let mut wait = |tcp: &mut std::net::TcpStream,
                        session: &mut ClientSession,
                        mut input: Vec<u8>,
                        done: &dyn Fn(&ClientSessionEvent) -> bool| loop {
            let mut hit = false;
            for r in session.handle_input(&input).unwrap() {
                match r {
                    ClientSessionResult::RaisedEvent(e) => hit |= done(&e),
                    other => send(tcp, other),
                }
            }
            if hit {
                return;
            }
            let n = tcp.read(&mut buf).unwrap();
            assert!(n > 0, "the server closed the connection");
            input = buf[..n].to_vec();
        };
        let r = session.request_connection("in".into()).unwrap();
        send(&mut tcp, r);
        wait(&mut tcp, &mut session, rest, &|e| {
            matches!(e, ClientSessionEvent::ConnectionRequestAccepted)
        });
        let r = session
            .request_publishing(key, PublishRequestType::Live)
            .unwrap();
        send(&mut tcp, r);
        wait(&mut tcp, &mut session, Vec::new(), &|e| {
            matches!(e, ClientSessionEvent::PublishRequestAccepted)
        });
        let mut meta = StreamMetadata::new();
        meta.video_codec_id = Some(u32::from_be_bytes(*fourcc));
        meta.audio_codec_id = Some(10);
        meta.video_width = Some(1280);
        meta.video_height = Some(720);
        let r = session.publish_metadata(&meta).unwrap();
        send(&mut tcp, r);
        let t0 = Instant::now();
        for tag in tags {
            let due = Duration::from_millis(u64::from(tag.ms));
            if let Some(w) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(w);
            }
            let (body, ts) = (bytes::Bytes::from(tag.body), RtmpTimestamp::new(tag.ms));
            let r = if tag.video {
                session.publish_video_data(body, ts, false)
            } else {
                session.publish_audio_data(body, ts, false)
            };
            if let ClientSessionResult::OutboundResponse(p) = r.unwrap() {
                if tcp.write_all(&p.bytes).is_err() {
                    return; // the daemon is gone: the test has ended
                }
            }
        }
    })
}

/// A stream pushed over Enhanced RTMP with `codec` transcodes to the 720p ladder.
async fn enhanced_rtmp_is_transcoded(codec: ExCodec, fixture_name: &str, fourcc: &'static [u8; 4]) {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "e-rtmp"})).await;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap();
    let tags = enhanced_rtmp_tags(&fixture(fixture_name), codec, 3);
    let pusher = push_enhanced_rtmp(&d.rtmp, &format!("{id}?{token}"), fourcc, tags);
    let live = assert_video_out(&d, id, (1280, 720)).await;
    assert_eq!(
        live["transcoded_qualities"],
        json!(["720p", "480p", "360p"])
    );
    drop(d);
    let _ = tokio::task::spawn_blocking(move || pusher.join()).await;
}

#[tokio::test]
async fn hevc_over_enhanced_rtmp_is_transcoded_to_the_h264_ladder() {
    enhanced_rtmp_is_transcoded(ExCodec::Hevc, "hevc-720p.ts", b"hvc1").await;
}

#[tokio::test]
async fn av1_over_enhanced_rtmp_is_transcoded_to_the_h264_ladder() {
    enhanced_rtmp_is_transcoded(ExCodec::Av1, "av1-720p.mp4", b"av01").await;
}
