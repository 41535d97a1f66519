//! End to end: ffmpeg pushes fixtures over RTMP/RTMPS into the real daemon; ffprobe and an
//! independent m3u8 parser read the LL-HLS output; refusals leave nothing behind.

mod capacity;
#[path = "../common/mod.rs"]
mod common;
mod feed;
mod health;
mod https;
mod logs;
#[path = "../common/media.rs"]
mod media;
mod shutdown;
mod signed;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use common::metrics::scrape;
use common::proc::{run_within, Proc};
use common::{tempdir, Daemon};
use media::*;

#[tokio::test]
async fn rtmp_push_transcodes_to_ll_hls_and_ends_cleanly() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "spine"})).await;
    let id = rec["id"].as_i64().unwrap();
    // Three plays of the 6 s fixture: the checks below need the stream live until /metrics.
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 2);

    let live = wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true && r["transcoding_speed"].is_number()
    })
    .await;
    assert_eq!(live["video_width"], 1280);
    assert_eq!(live["video_height"], 720);
    assert_eq!(
        live["transcoded_qualities"],
        json!(["720p", "480p", "360p"])
    );
    let fps = live["frame_rate"].as_f64().unwrap();
    assert!((29.0..31.5).contains(&fps), "frame_rate {fps}");
    assert!(live["started_at_primary"].is_string());
    assert!(live["finished_at_primary"].is_null());

    // The master playlist, read by an independent parser.
    let master_url = rec["hls_cmaf_url"].as_str().unwrap().to_owned();
    let (status, master_text) = text(&master_url).await;
    assert_eq!(status, StatusCode::OK);
    let master = hls::master(&master_text);
    assert!(master.independent_segments);
    let heights: Vec<u64> = master
        .variants
        .iter()
        .map(|v| v.resolution.unwrap().height)
        .collect();
    assert_eq!(heights, [720, 480, 360]);
    for v in &master.variants {
        let codecs = v.codecs.as_deref().unwrap();
        assert!(
            codecs.starts_with("avc1.64") && codecs.ends_with(",mp4a.40.2"),
            "{codecs}"
        );
        assert!(v.bandwidth > 0 && v.average_bandwidth.unwrap() > 0);
        assert_eq!(v.audio.as_deref(), Some("aac"));
        assert!((v.frame_rate.unwrap() - 30.0).abs() < 0.01);
    }
    assert_eq!(master.alternatives.len(), 1);
    assert_eq!(
        master.alternatives[0].media_type,
        m3u8_rs::AlternativeMediaType::Audio
    );

    // ffprobe reads the whole ladder.
    wait_segments(&master_url, 2).await;
    let probe = ffprobe(&master_url);
    let streams = probe["streams"].as_array().unwrap();
    let mut video: Vec<(i64, i64)> = streams
        .iter()
        .filter(|s| s["codec_type"] == "video")
        .map(|s| (s["width"].as_i64().unwrap(), s["height"].as_i64().unwrap()))
        .collect();
    video.sort();
    video.dedup();
    assert_eq!(video, [(640, 360), (854, 480), (1280, 720)]);
    assert!(streams.iter().any(|s| s["codec_name"] == "aac"));
    assert!(streams
        .iter()
        .filter(|s| s["codec_type"] == "video")
        .all(|s| s["codec_name"] == "h264" && s["pix_fmt"] == "yuv420p"));
    // The fixture does not signal its colorimetry: every rung, SD ones included, carries the one
    // the daemon assumed for the source (a rung tagged otherwise was converted on the way).
    for s in streams.iter().filter(|s| s["codec_type"] == "video") {
        assert_eq!(
            (
                &s["color_space"],
                &s["color_primaries"],
                &s["color_transfer"]
            ),
            (&json!("bt709"), &json!("bt709"), &json!("bt709")),
            "{}x{}",
            s["width"],
            s["height"]
        );
    }

    // Media playlist: LL-HLS tags, parts of 0.5 s, segments of 2 s aligned across renditions.
    let base = master_url.trim_end_matches("master.m3u8").to_owned();
    let (_, t720) = text(&format!("{base}720p/index.m3u8")).await;
    let pl = hls::media(&t720);
    assert_eq!((pl.version, pl.target_duration), (Some(9), 2), "{t720}");
    // LL-HLS tags, which m3u8-rs does not read.
    for tag in [
        "#EXT-X-PART-INF:PART-TARGET=0.500",
        "CAN-BLOCK-RELOAD=YES",
        "PART-HOLD-BACK=1.000",
        "#EXT-X-PRELOAD-HINT:TYPE=PART",
        "#EXT-X-RENDITION-REPORT:URI=\"../480p/index.m3u8\"",
        "INDEPENDENT=YES",
    ] {
        assert!(t720.contains(tag), "missing {tag} in\n{t720}");
    }
    assert!(
        pl.segments.iter().any(|s| s.program_date_time.is_some()),
        "no EXT-X-PROGRAM-DATE-TIME in\n{t720}"
    );
    assert!(
        pl.segments.iter().all(|s| (s.duration - 2.0).abs() < 0.05),
        "{t720}"
    );
    // A plain request is answered with a part that was not there when it arrived, so two in a
    // row end on different parts (a tuning-in player then starts from a fresh live edge).
    let last_part = |t: &str| {
        t.lines()
            .rfind(|l| l.starts_with("#EXT-X-PART:"))
            .map(str::to_owned)
    };
    let (_, first) = text(&format!("{base}720p/index.m3u8")).await;
    let (_, second) = text(&format!("{base}720p/index.m3u8")).await;
    assert!(last_part(&first).is_some(), "{first}");
    assert_ne!(last_part(&first), last_part(&second), "{second}");
    let (_, t360) = text(&format!("{base}360p/index.m3u8")).await;
    let pl360 = hls::media(&t360);
    assert_eq!(
        pl.media_sequence, pl360.media_sequence,
        "renditions share segment numbering"
    );

    // Rungs up to 720p30 are encoded on one thread, one slice a frame: x264 states its settings
    // in an SEI of the stream's first frame.
    // The window has not slid yet (6 complete segments listed at most), so the first listed is
    // the stream's first (numbers start at a clock-derived value, not 0).
    assert!(pl.segments.len() < 6, "{t720}");
    let first = &pl.segments[0].uri;
    for rung in ["720p", "480p", "360p"] {
        let seg = reqwest::get(format!("{base}{rung}/{first}"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let sei = String::from_utf8_lossy(&seg);
        let opts = sei
            .find("x264 - core")
            .map(|at| &sei[at..(at + 600).min(sei.len())])
            .unwrap_or_else(|| panic!("{rung}: no x264 SEI in {first}"));
        assert!(
            opts.contains(" threads=1 ") && opts.contains(" sliced_threads=0 "),
            "{rung}: {opts}"
        );
    }

    // A segment (init + fragment) decodes in ffprobe with the advertised duration.
    let seg_uri = &pl.segments.last().unwrap().uri;
    let init = reqwest::get(format!("{base}720p/init_0.mp4"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let seg = reqwest::get(format!("{base}720p/{seg_uri}")).await.unwrap();
    assert_eq!(seg.headers()["content-type"], "video/iso.segment");
    assert!(seg.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    let seg = seg.bytes().await.unwrap();
    let file = dir.path().join("seg.mp4");
    std::fs::write(&file, [init.as_ref(), seg.as_ref()].concat()).unwrap();
    let probe = ffprobe_with(
        &[
            "-count_packets",
            "-show_entries",
            "stream=nb_read_packets,codec_name",
        ],
        file.to_str().unwrap(),
    );
    let s = &probe["streams"][0];
    assert_eq!(s["codec_name"], "h264");
    assert_eq!(
        s["nb_read_packets"], "60",
        "a 2 s segment at 30 fps: {probe}"
    );
    // The same segment of every rung, read by ffprobe: each starts with a keyframe at the same
    // time and holds the same 60 frames. Each rung's muxer asks its own encoder for the keyframe
    // at each fragment start through the media hub; without it, x264's fallback GOP is 4 s.
    let mut starts = Vec::new();
    for rung in ["720p", "480p", "360p"] {
        let mut media = Vec::new();
        for name in ["init_0.mp4", seg_uri.as_str()] {
            let body = reqwest::get(format!("{base}{rung}/{name}")).await.unwrap();
            media.extend_from_slice(&body.bytes().await.unwrap());
        }
        let file = dir.path().join(format!("{rung}.mp4"));
        std::fs::write(&file, media).unwrap();
        let probe = ffprobe_with(
            &[
                "-show_entries",
                "packet=pts_time,flags",
                "-select_streams",
                "v",
            ],
            file.to_str().unwrap(),
        );
        let packets = probe["packets"].as_array().unwrap();
        assert_eq!(packets.len(), 60, "{rung}: {probe}");
        let first = &packets[0];
        assert!(
            first["flags"].as_str().unwrap().starts_with('K'),
            "{rung}: {first}"
        );
        let keyframes = packets
            .iter()
            .filter(|p| p["flags"].as_str().unwrap().starts_with('K'))
            .count();
        assert_eq!(keyframes, 1, "{rung}: one GOP per segment");
        starts.push(first["pts_time"].as_str().unwrap().to_owned());
    }
    assert!(starts.windows(2).all(|w| w[0] == w[1]), "{starts:?}");

    // Blocking reload: ask for a part ahead of the live edge; the answer is held until it exists
    // (a request that outlived the hold limit would get 503 instead).
    let next_msn = hls::next_msn(&pl) + 1;
    let (status, blocked) = text(&format!(
        "{base}720p/index.m3u8?_HLS_msn={next_msn}&_HLS_part=0"
    ))
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        blocked.contains(&format!("part_{next_msn}_0.m4s")),
        "{blocked}"
    );
    // What a CDN in front needs (README "Delivery through a CDN"): a blocking answer is
    // cacheable under its query, a plain playlist for a second, a part that is not there yet
    // not at all.
    let cache = |r: &reqwest::Response| {
        r.headers()
            .get("cache-control")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let r = reqwest::get(format!(
        "{base}720p/index.m3u8?_HLS_msn={next_msn}&_HLS_part=0"
    ))
    .await
    .unwrap();
    assert_eq!(cache(&r), "public, max-age=30");
    let r = reqwest::get(format!("{base}720p/index.m3u8"))
        .await
        .unwrap();
    assert_eq!(cache(&r), "public, max-age=0, s-maxage=1");
    let r = reqwest::get(format!("{base}720p/part_{}_0.m4s", next_msn + 40))
        .await
        .unwrap();
    assert_eq!(
        (r.status(), cache(&r).as_str()),
        (StatusCode::NOT_FOUND, "no-store")
    );
    for bad in [
        "_HLS_part=1",
        "_HLS_msn=18446744073709551615",
        "_HLS_msn=x",
        &format!("_HLS_msn={}", next_msn + 50),
    ] {
        let (status, _) = text(&format!("{base}720p/index.m3u8?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    // Byte ranges and CORS on a part.
    let part = reqwest::Client::new()
        .get(format!("{base}720p/part_{next_msn}_0.m4s"))
        .header("range", "bytes=0-7")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.headers()["access-control-allow-origin"], "*");
    let head = part.bytes().await.unwrap();
    assert!(&head[4..8] == b"styp" || &head[4..8] == b"moof", "{head:?}");

    // PROGRAM-DATE-TIME is the wall clock at ingest: the stream's first media (its first
    // segment, listed first: the window had not slid) entered when the publish started, not
    // after the pipeline's probing second.
    let started = time::OffsetDateTime::parse(
        live["started_at_primary"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let first = &pl.segments[0];
    let pdt = first.program_date_time.unwrap();
    let pdt0 =
        time::OffsetDateTime::from_unix_timestamp_nanos(pdt.timestamp_nanos_opt().unwrap() as i128)
            .unwrap();
    let offset = (pdt0 - started).as_seconds_f64();
    assert!(
        (-0.1..0.2).contains(&offset),
        "the first segment starts {offset:.3} s after the publish started"
    );

    // /metrics: a scraper's view of the same stream, read by an independent parser.
    let unauthorized = reqwest::get(d.url("/metrics")).await.unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
    let before = scrape(&d).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = scrape(&d).await;
    assert_eq!(after.stream("livepack_stream_live", id), 1.0);
    assert!(
        after.stream("livepack_stream_frames_received_total", id)
            > before.stream("livepack_stream_frames_received_total", id) + 60.0,
        "1.5 s of 30 fps video and audio frames arrived"
    );
    assert!(
        after.stream("livepack_stream_parts_published_total", id)
            >= before.stream("livepack_stream_parts_published_total", id) + 2.0
    );
    assert_eq!(
        after.stream("livepack_stream_frames_dropped_total", id),
        0.0
    );
    // The media hub's readers while nobody else watches: the pipeline (of the source) and the
    // package (of each rendition: three rungs and the audio); they keep up.
    assert_eq!(after.stream("livepack_stream_hub_readers", id), 5.0);
    assert_eq!(after.stream("livepack_stream_hub_dropped_total", id), 0.0);
    let speed = after.stream("livepack_stream_transcoding_speed", id);
    assert!((0.9..1.2).contains(&speed), "speed {speed}");
    let delay = after.stream("livepack_stream_output_delay_seconds", id);
    assert!((0.0..3.0).contains(&delay), "output delay {delay} s");
    assert!(after.value("process_resident_memory_bytes") > 10e6);
    assert!(after.value("process_open_fds") > 3.0);
    assert!(after.value("process_cpu_seconds_total") > 0.0);
    assert!(after.value("livepack_tasks") > 0.0);
    assert_eq!(after.value("livepack_streams"), 1.0);

    // The publisher ends: the record goes off air; after the grace period the playlist ends.
    let (ok, err) = finish(ffmpeg, Duration::from_secs(30)).await;
    assert!(ok, "ffmpeg failed: {err}");
    let ended = wait_record(&d, id, Duration::from_secs(15), |r| r["live"] == false).await;
    assert!(ended["finished_at_primary"].is_string());
    assert_eq!(ended["started_at_primary"], live["started_at_primary"]);
    let ended = wait_endlist(&format!("{base}720p/index.m3u8")).await;
    assert!(!ended.contains("PRELOAD-HINT"));
}

#[tokio::test]
async fn rtmps_push_and_reconnect_continue_the_playlist() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = create(&d, json!({"name": "tls", "quality_set_id": 3})).await;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap();
    let url = format!("rtmps://{}/in/{id}?{token}", d.rtmps);
    let ffmpeg = push(&url, "av-720p.flv", 1);
    wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true && r["transcoding_speed"].is_number()
    })
    .await;
    // Both HLS outputs: CMAF (LL-HLS) and MPEG-TS, which is muxed once a player asks for it.
    let ts_base = rec["hls_mpegts_url"]
        .as_str()
        .unwrap()
        .trim_end_matches("master_mpegts.m3u8")
        .to_owned();
    assert_eq!(
        text(&format!("{ts_base}720p/index.m3u8")).await.0,
        StatusCode::OK
    );
    let (ok, err) = finish(ffmpeg, Duration::from_secs(30)).await;
    assert!(ok, "rtmps push failed: {err}");
    wait_record(&d, id, Duration::from_secs(15), |r| r["live"] == false).await;
    let playlists = [
        format!("{}/cmaf/{id}/720p/index.m3u8", d.base),
        format!("{ts_base}720p/index.m3u8"),
    ];
    let mut last_before = Vec::new();
    for playlist in &playlists {
        let (_, before) = text(playlist).await;
        last_before.push(hls::last_msn(&hls::media(&before)));
    }

    // Back within the grace period (plain RTMP this time): same playlists, a discontinuity,
    // and sequence numbers that only go forward.
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 0);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    for (playlist, last_before) in playlists.iter().zip(last_before) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let (t, p) = loop {
            let (_, t) = text(playlist).await;
            let p = hls::media(&t);
            if p.segments.iter().any(|s| s.discontinuity)
                && !p.segments.last().unwrap().discontinuity
            {
                break (t, p);
            }
            assert!(
                Instant::now() < deadline,
                "no discontinuity after reconnect in {playlist}:\n{t}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        let first_new =
            p.segments.iter().position(|s| s.discontinuity).unwrap() as u64 + hls::first_msn(&p);
        assert!(
            first_new > last_before,
            "msn went back in {playlist}: {first_new} <= {last_before}\n{t}"
        );
    }
    let (_, cmaf) = text(&playlists[0]).await;
    assert!(hls::media(&cmaf).segments.iter().any(|s| s.map.is_some()));
    let _ = finish(ffmpeg, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn refused_publishes_allocate_nothing() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let ok = create(&d, json!({"name": "ok"})).await;
    let inactive = create(&d, json!({"name": "off", "active": false})).await;
    let pull = create(
        &d,
        json!({"name": "pull", "pull": true, "uri": "rtmp://127.0.0.1:9/x"}),
    )
    .await;
    let id = ok["id"].as_i64().unwrap();
    let token = ok["token"].as_str().unwrap();
    let rtmp = &d.rtmp;
    let cases = [
        format!("rtmp://{rtmp}/in/999?{token}"),
        format!("rtmp://{rtmp}/in/{id}?wrongtoken"),
        format!("rtmp://{rtmp}/in/{id}"),
        format!("rtmp://{rtmp}/live/{id}?{token}"),
        format!(
            "rtmp://{rtmp}/in/{}?{}",
            inactive["id"],
            inactive["token"].as_str().unwrap()
        ),
        format!(
            "rtmp://{rtmp}/in/{}?{}",
            pull["id"],
            pull["token"].as_str().unwrap()
        ),
        format!("rtmp://{rtmp}/in/{id}b?wrongtoken"),
    ];
    for url in &cases {
        let t0 = Instant::now();
        let (ok, _err) = finish(push(url, "av-720p.flv", 0), Duration::from_secs(15)).await;
        assert!(!ok, "publish to {url} was accepted");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "refusal of {url} took {:?}",
            t0.elapsed()
        );
    }
    for rec in [&ok, &inactive, &pull] {
        let r = record(&d, rec["id"].as_i64().unwrap()).await;
        assert_eq!(r["live"], false);
        assert!(r["started_at_primary"].is_null(), "{r}");
        let (status, _) = text(rec["hls_cmaf_url"].as_str().unwrap()).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, _) = text(&format!("{}/cmaf/999/master.m3u8", d.base)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A key already live is refused; the first publisher is not disturbed.
    let _g = heavy().await;
    let first = push(ok["push_url"].as_str().unwrap(), "audio.flv", 0);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let (second_ok, _) = finish(
        push(ok["push_url"].as_str().unwrap(), "audio.flv", 0),
        Duration::from_secs(15),
    )
    .await;
    assert!(!second_ok, "a second publisher was accepted");
    assert_eq!(record(&d, id).await["live"], true);
    let (first_ok, err) = finish(first, Duration::from_secs(30)).await;
    assert!(first_ok, "the first publisher was disturbed: {err}");
}

#[tokio::test]
async fn audio_only_and_video_only_streams() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    for (fixture_name, expect_video, expect_audio) in
        [("audio.flv", false, true), ("video-720p.flv", true, false)]
    {
        let rec = create(&d, json!({"name": fixture_name, "quality_set_id": 3})).await;
        let id = rec["id"].as_i64().unwrap();
        let ffmpeg = push(rec["push_url"].as_str().unwrap(), fixture_name, 0);
        let live = wait_record(&d, id, Duration::from_secs(20), |r| {
            r["live"] == true && r["transcoding_speed"].is_number()
        })
        .await;
        let (status, master) = text(rec["hls_cmaf_url"].as_str().unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{fixture_name}");
        assert_eq!(master.contains("RESOLUTION="), expect_video, "{master}");
        assert_eq!(master.contains("mp4a.40.2"), expect_audio, "{master}");
        assert_eq!(live["video_height"].is_number(), expect_video);
        wait_segments(rec["hls_cmaf_url"].as_str().unwrap(), 2).await;
        let probe = ffprobe(rec["hls_cmaf_url"].as_str().unwrap());
        let kinds: Vec<&str> = probe["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["codec_type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds.contains(&"video"), expect_video, "{kinds:?}");
        assert_eq!(kinds.contains(&"audio"), expect_audio, "{kinds:?}");
        // Screenshots come from the same pipeline: a JPEG ≤ 1080 px wide, aspect kept; none
        // for an audio-only stream.
        let shot_url = rec["screenshot"].as_str().unwrap();
        let shot = reqwest::get(shot_url).await.unwrap();
        if expect_video {
            assert_eq!(shot.status(), StatusCode::OK);
            assert_eq!(shot.headers()["content-type"], "image/jpeg");
            let jpeg = shot.bytes().await.unwrap();
            assert_eq!(&jpeg[..3], &[0xff, 0xd8, 0xff]);
            let file = dir.path().join("shot.jpg");
            std::fs::write(&file, &jpeg).unwrap();
            let probe = ffprobe(file.to_str().unwrap());
            let s = &probe["streams"][0];
            assert_eq!(
                (
                    s["codec_name"].as_str(),
                    s["width"].as_i64(),
                    s["height"].as_i64()
                ),
                (Some("mjpeg"), Some(1080), Some(608))
            );
        } else {
            assert_eq!(shot.status(), StatusCode::NOT_FOUND);
        }
        let (ok, err) = finish(ffmpeg, Duration::from_secs(30)).await;
        assert!(ok, "{fixture_name}: {err}");
    }
}

#[tokio::test]
async fn deactivating_or_deleting_a_live_stream_cuts_the_publisher() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = create(&d, json!({"name": "cut"})).await;
    let id = rec["id"].as_i64().unwrap();
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "audio.flv", 20);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"active": false}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let t0 = Instant::now();
    let (ok, _) = finish(ffmpeg, Duration::from_secs(20)).await;
    assert!(!ok, "ffmpeg kept publishing to a deactivated stream");
    assert!(t0.elapsed() < Duration::from_secs(15));
    wait_record(&d, id, Duration::from_secs(10), |r| r["live"] == false).await;
    // And it cannot come back while inactive.
    let (ok, _) = finish(
        push(rec["push_url"].as_str().unwrap(), "audio.flv", 0),
        Duration::from_secs(15),
    )
    .await;
    assert!(!ok);

    let rec = create(&d, json!({"name": "deleted"})).await;
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "audio.flv", 20);
    let id = rec["id"].as_i64().unwrap();
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    assert_eq!(
        d.delete(&format!("/streaming/streams/{id}")).await.status,
        StatusCode::NO_CONTENT
    );
    let (ok, _) = finish(ffmpeg, Duration::from_secs(20)).await;
    assert!(!ok, "ffmpeg kept publishing to a deleted stream");
}

#[tokio::test]
async fn kicking_cuts_the_publisher_and_a_reconnect_is_accepted() {
    use reqwest::Method;
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = create(&d, json!({"name": "kick"})).await;
    let id = rec["id"].as_i64().unwrap();
    let kick = format!("/streaming/streams/{id}/kick");
    // Nobody publishes yet: a clear refusal, not a silent success.
    let r = d.call(Method::PUT, &kick, None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "not_live");
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "audio.flv", 30);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    // A bad slot names its field; the backup input is empty.
    let r = d
        .call(Method::PUT, &kick, Some(json!({"slot": "side"})))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "slot");
    let r = d
        .call(Method::PUT, &kick, Some(json!({"slot": "backup"})))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    let r = d
        .call(Method::PUT, &kick, Some(json!({"slot": "main"})))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let t0 = Instant::now();
    let (ok, _) = finish(ffmpeg, Duration::from_secs(20)).await;
    assert!(!ok, "ffmpeg kept publishing after the kick");
    assert!(t0.elapsed() < Duration::from_secs(15));
    wait_record(&d, id, Duration::from_secs(10), |r| r["live"] == false).await;
    // Still active: the publisher comes back (no body: every slot).
    let r = d.get(&format!("/streaming/streams/{id}")).await;
    assert_eq!(r.body["active"], true);
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "audio.flv", 30);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let r = d.call(Method::PUT, &kick, None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let (ok, _) = finish(ffmpeg, Duration::from_secs(20)).await;
    assert!(!ok, "ffmpeg kept publishing after the second kick");
}

/// Whether GStreamer's own HLS client (souphttpsrc ! hlsdemux ! tsdemux) decodes video frames
/// (within a minute: a client that never gets its 30 frames must not hang the test).
fn gst_hlsdemux_decodes(url: &str) -> bool {
    let mut gst = Command::new("gst-launch-1.0");
    gst.args(["-q", "souphttpsrc"])
        .arg(format!("location={url}"))
        .args([
            "!",
            "hlsdemux",
            "!",
            "tsdemux",
            "name=d",
            "d.",
            "!",
            "queue",
            "!",
            "h264parse",
            "!",
            "avdec_h264",
            "!",
            "fakesink",
            "num-buffers=30",
            "sync=false",
        ]);
    run_within(&mut gst, "gst-launch-1.0", Duration::from_secs(60))
        .status
        .success()
}

/// A player reloading a playlist every second until aborted.
fn keep_watching(url: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let _ = text(&url).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

#[tokio::test]
async fn mpegts_hls_from_the_same_encoders() {
    let _g = heavy().await;
    let dir = tempdir();
    // TS-HLS is muxed on demand: here it stops 3 s after its last request.
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", common::KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "2"),
            ("LIVEPACK_MPEGTS_IDLE_SECS", "3"),
        ],
    );
    let rec = create(&d, json!({"name": "ts", "quality_set_id": 2})).await;
    let id = rec["id"].as_i64().unwrap();
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 5);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let master_url = rec["hls_mpegts_url"].as_str().unwrap().to_owned();
    let base = master_url.trim_end_matches("master_mpegts.m3u8").to_owned();
    let media_dir = dir.path().join("data/media").join(id.to_string());
    let ts_files = |rung: &str| files_on_disk(&media_dir.join("mpegts").join(rung), "ts");
    // Nobody asked for TS yet: none is muxed while the CMAF output runs.
    wait_segments(rec["hls_cmaf_url"].as_str().unwrap(), 2).await;
    assert!(ts_files("720p").is_empty() && ts_files("360p").is_empty());
    assert!(!files_on_disk(&media_dir.join("cmaf/720p"), "m4s").is_empty());
    // The first request waits for the first segment instead of answering an empty playlist.
    let (status, first) = text(&format!("{base}720p/index.m3u8")).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert!(!hls::media(&first).segments.is_empty(), "{first}");
    // Wait for two whole TS segments in every variant.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (a, b) = (
            text(&format!("{base}720p/index.m3u8")).await.1,
            text(&format!("{base}360p/index.m3u8")).await.1,
        );
        let complete = |t: &str| hls::try_media(t).is_some_and(|p| p.segments.len() >= 2);
        if complete(&a) && complete(&b) {
            break;
        }
        assert!(Instant::now() < deadline, "no TS segments:\n{a}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (status, master) = text(&format!("{master_url}?get_duration_sec=true")).await;
    assert_eq!(status, StatusCode::OK);
    let parsed = hls::master(&master);
    assert_eq!(parsed.version, Some(6));
    let uris: Vec<&str> = parsed.variants.iter().map(|v| v.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "720p/index.m3u8?get_duration_sec=true",
            "360p/index.m3u8?get_duration_sec=true"
        ]
    );
    assert!(parsed
        .variants
        .iter()
        .all(|v| v.codecs.as_deref().unwrap().ends_with(",mp4a.40.2")));

    let (_, media) = text(&format!(
        "{base}720p/{}",
        uris[0].trim_start_matches("720p/")
    ))
    .await;
    let pl = hls::media(&media);
    assert_eq!(pl.version, Some(6));
    assert!(
        !media.contains("EXT-X-PART")
            && !media.contains("PRELOAD-HINT")
            && !media.contains("SERVER-CONTROL")
    );
    for s in &pl.segments {
        assert!((s.duration - 2.0).abs() < 0.05, "{media}");
        assert!(s.uri.ends_with(".ts?duration_sec=2"), "{}", s.uri);
    }
    // Cut at the same keyframes as the CMAF segments: the same durations, segment for segment.
    let (_, cmaf) = text(&format!("{}/cmaf/{id}/720p/index.m3u8", d.base)).await;
    let cmaf = hls::media(&cmaf);
    assert!(cmaf
        .segments
        .iter()
        .all(|s| (s.duration - 2.0).abs() < 0.05));
    // A TS segment is decodable on its own (PAT/PMT first, IDR with SPS/PPS).
    let seg = reqwest::get(format!("{base}720p/{}", pl.segments[1].uri))
        .await
        .unwrap();
    assert_eq!(seg.headers()["content-type"], "video/mp2t");
    let seg = seg.bytes().await.unwrap();
    assert_eq!((seg[0], seg.len() % 188), (0x47, 0));
    let file = dir.path().join("seg.ts");
    std::fs::write(&file, &seg).unwrap();
    let probe = ffprobe(file.to_str().unwrap());
    let kinds: Vec<&str> = probe["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["codec_name"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"h264") && kinds.contains(&"aac"),
        "{kinds:?}"
    );
    // Independent readers: ffprobe over HTTP and GStreamer's hlsdemux.
    let probe = ffprobe(&master_url);
    assert!(probe["streams"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["height"] == 360));

    // Nobody asks for 3 s: muxing stops and the window is emptied (on disk too) while the
    // CMAF output goes on; the next request gets fresh segments after a discontinuity, with
    // numbers that only go forward and both variants opening at the same keyframe.
    let last_before = hls::last_msn(&hls::media(
        &text(&format!("{base}720p/index.m3u8")).await.1,
    ));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !(ts_files("720p").is_empty() && ts_files("360p").is_empty()) {
        assert!(
            Instant::now() < deadline,
            "TS still muxed: {:?}",
            ts_files("720p")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cmaf_url = format!("{}/cmaf/{id}/720p/index.m3u8", d.base);
    let cmaf_before = hls::last_msn(&hls::media(&text(&cmaf_url).await.1));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(ts_files("720p").is_empty(), "muxed without a request");
    assert!(hls::last_msn(&hls::media(&text(&cmaf_url).await.1)) > cmaf_before);
    let (status, again) = text(&format!("{base}720p/index.m3u8")).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    let again = hls::media(&again);
    assert!(again.segments[0].discontinuity, "{again:?}");
    assert!(hls::first_msn(&again) > last_before);
    let other = hls::media(&text(&format!("{base}360p/index.m3u8")).await.1);
    assert_eq!(hls::first_msn(&other), hls::first_msn(&again));
    let (_, master) = text(&master_url).await;
    assert_eq!(hls::master(&master).variants.len(), 2);

    // The broadcast ends, watched to the end: EXT-X-ENDLIST after the last segment
    // (hls_mpegts_endlist_tag=true).
    let watcher = keep_watching(format!("{base}360p/index.m3u8"));
    let (ok, err) = finish(ffmpeg, Duration::from_secs(40)).await;
    assert!(ok, "{err}");
    wait_endlist(&format!("{base}720p/index.m3u8")).await;
    watcher.abort();
    // Read once it ended: GStreamer's client stops at the end of the playlist (on a live one
    // it reads on after its 30 frames until the stream ends).
    assert!(
        gst_hlsdemux_decodes(&format!("{base}360p/index.m3u8")),
        "hlsdemux could not decode"
    );

    // With the tag off, an ended audio-only stream's TS playlist has no ENDLIST.
    let rec = create(
        &d,
        json!({"name": "no-endlist", "hls_mpegts_endlist_tag": false}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let ffmpeg = push(rec["push_url"].as_str().unwrap(), "audio.flv", 0);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let audio_url = rec["hls_mpegts_url"]
        .as_str()
        .unwrap()
        .replace("master_mpegts.m3u8", "audio/index.m3u8");
    // Watched while live (TS is muxed on demand).
    assert_eq!(text(&audio_url).await.0, StatusCode::OK);
    let watcher = keep_watching(audio_url.clone());
    let (ok, err) = finish(ffmpeg, Duration::from_secs(30)).await;
    assert!(ok, "{err}");
    wait_record(&d, id, Duration::from_secs(15), |r| r["live"] == false).await;
    watcher.abort();
    tokio::time::sleep(Duration::from_secs(4)).await; // past the 2 s grace period
    let (status, t) = text(&audio_url).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        t.contains("#EXTINF") && !t.contains("#EXT-X-ENDLIST"),
        "{t}"
    );
}

/// (sequence numbers, total duration) of the complete segments a playlist lists.
fn listed(p: &m3u8_rs::MediaPlaylist) -> (Vec<u64>, f64) {
    let msns = (hls::first_msn(p)..hls::next_msn(p)).collect();
    (msns, p.segments.iter().map(|s| f64::from(s.duration)).sum())
}

#[tokio::test]
async fn dvr_window_is_a_ring_on_disk() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let rec = create(
        &d,
        json!({"name": "dvr", "dvr_enabled": true, "dvr_duration": 30}),
    )
    .await;
    let id = rec["id"].as_i64().unwrap();
    let _ffmpeg = push(rec["push_url"].as_str().unwrap(), "audio.flv", 8);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    let cmaf = format!("{}/cmaf/{id}/audio/index.m3u8", d.base);
    let ts = format!("{}/mpegts/{id}/audio/index.m3u8", d.base);
    let media = dir.path().join("data/media").join(id.to_string());
    wait_segments(rec["hls_cmaf_url"].as_str().unwrap(), 1).await;

    // Once the window is full and sliding, the playlist and the disk hold exactly the window.
    let start = hls::first_msn(&hls::media(&text(&cmaf).await.1));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, t) = text(&cmaf).await;
        if hls::first_msn(&hls::media(&t)) > start + 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the window never slid:\n{t}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (url, sub, ext) in [(&cmaf, "cmaf/audio", "m4s"), (&ts, "mpegts/audio", "ts")] {
        let mut tries = 0;
        loop {
            // Compare only when nothing changed between the two playlist reads.
            let before = hls::media(&text(url).await.1);
            let files = files_on_disk(&media.join(sub), ext);
            let after = hls::media(&text(url).await.1);
            let (msns, total) = listed(&after);
            if listed(&before).0 == msns {
                assert!(
                    (28.0..=32.5).contains(&total),
                    "{url}: {total} s listed for a 30 s window"
                );
                assert_eq!(files, msns, "{url}: disk and playlist disagree");
                break;
            }
            tries += 1;
            assert!(tries < 20, "{url}: playlist never stable");
        }
    }

    // A longer window takes effect live.
    let r = d
        .patch(
            &format!("/streaming/streams/{id}"),
            json!({"stream": {"dvr_duration": 60}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, total) = listed(&hls::media(&text(&cmaf).await.1));
        if total > 34.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the window did not grow: {total} s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // dvr_cleanup empties it, on disk too; the stream goes on.
    let r = d
        .call(
            reqwest::Method::PUT,
            &format!("/streaming/streams/{id}/dvr_cleanup"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let (msns, total) = listed(&hls::media(&text(&cmaf).await.1));
    assert!(total <= 2.5, "{total} s left after cleanup: {msns:?}");
    assert!(files_on_disk(&media.join("cmaf/audio"), "m4s").len() <= 1);
    assert_eq!(record(&d, id).await["live"], true);
    let r = d
        .call(
            reqwest::Method::PUT,
            "/streaming/streams/999/dvr_cleanup",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn ll_dash_mpd_time_and_chunked_segments() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    // The clock DASH players sync to.
    let (status, now) = text(&format!("{}/time", d.base)).await;
    assert_eq!(status, StatusCode::OK);
    let t =
        time::OffsetDateTime::parse(&now, &time::format_description::well_known::Rfc3339).unwrap();
    assert!((time::OffsetDateTime::now_utc() - t).abs() < time::Duration::seconds(5));

    let rec = create(&d, json!({"name": "dash", "quality_set_id": 3})).await;
    let id = rec["id"].as_i64().unwrap();
    let _ffmpeg = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 2);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    wait_segments(rec["hls_cmaf_url"].as_str().unwrap(), 2).await;
    let mpd_url = rec["dash_url"].as_str().unwrap();
    let resp = reqwest::get(mpd_url).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/dash+xml");
    let mpd = resp.text().await.unwrap();
    for needle in [
        "type=\"dynamic\"",
        "availabilityTimeComplete=\"false\"",
        "<ServiceDescription",
        "<ProducerReferenceTime",
        "urn:mpeg:dash:utc:http-iso:2014",
    ] {
        assert!(mpd.contains(needle), "missing {needle}:\n{mpd}");
    }
    // ffmpeg's DASH demuxer reads it: video and audio.
    let probe = ffprobe(mpd_url);
    let kinds: Vec<&str> = probe["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["codec_type"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"video") && kinds.contains(&"audio"),
        "{kinds:?}"
    );

    // The segment being produced is delivered while it grows: chunked, one moof per part.
    let (_, hls) = text(&format!("{}/cmaf/{id}/720p/index.m3u8", d.base)).await;
    let next = hls::next_msn(&hls::media(&hls)) + 1;
    let resp = reqwest::get(format!("{}/cmaf/{id}/720p/seg_{next}.m4s", d.base))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()
            .get("transfer-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("chunked")
    );
    assert!(resp.headers().get("content-length").is_none());
    let body = resp.bytes().await.unwrap();
    let moofs = body.windows(4).filter(|w| w == b"moof").count();
    assert_eq!(moofs, 4, "a 2 s segment of 0.5 s chunks");
}

/// GStreamer's own DASH client (`uridecodebin3` → `dashdemux2`, gst-launch honouring its
/// buffering messages) renders our LL-DASH. GStreamer 1.22.0 needs 30 s of media before it
/// plays, so the stream has been live for longer than that when the client starts.
#[tokio::test]
async fn gstreamer_dash_client_renders_our_ll_dash() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "gst-dash", "quality_set_id": 3})).await;
    let id = rec["id"].as_i64().unwrap();
    let _push = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 10);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    tokio::time::sleep(Duration::from_secs(36)).await;
    let mpd_url = rec["dash_url"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let rendered = tokio::task::spawn_blocking(move || {
        use std::io::{BufRead, BufReader};
        let mut gst = Proc::spawn(
            Command::new("timeout")
                .args(["20", "gst-launch-1.0", "-v", "uridecodebin3"])
                .arg(format!("uri={mpd_url}"))
                .args([
                    "!",
                    "videoconvert",
                    "!",
                    "fakesink",
                    "sync=true",
                    "silent=false",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
            "gst-launch-1.0",
        );
        let out = BufReader::new(gst.child().stdout.take().unwrap());
        // fakesink logs "chain" for each buffer rendered in PLAYING ("preroll" before).
        out.lines()
            .map_while(Result::ok)
            .find(|l| l.contains("fakesink0: last-message = chain"))
            .map(|_| started.elapsed())
    })
    .await
    .unwrap();
    let rendered = rendered.expect("gst-launch rendered no frame within 20 s");
    println!("GStreamer 1.22 dashdemux2: first frame rendered {rendered:?} after start");
    assert!(rendered < Duration::from_secs(10), "{rendered:?}");
}

/// VLC 3.0 (Debian 12's `cvlc`, its adaptive demuxer in low-latency mode on our MPD) receives
/// our LL-DASH at real time. It runs for a wall-clock time, not `--run-time`: VLC ends an input
/// once the demuxer's clock reaches start-time + run-time (`src/input/input.c`,
/// `MainLoopDemux`), and a live DASH demuxer's clock is the MPD timeline — the seconds since the
/// stream went live — so `--run-time 20` on a stream 14 s old stops after a few seconds of media
/// (6 were counted once), and on ffmpeg's own LL-DASH output once that is 20 s old, at once.
#[tokio::test]
async fn vlc_keeps_up_with_the_ll_dash_stream() {
    use std::os::unix::fs::PermissionsExt;
    const RUN: Duration = Duration::from_secs(20);
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "vlc-dash", "quality_set_id": 3})).await;
    let id = rec["id"].as_i64().unwrap();
    // Seven plays of the 6 s fixture: live until VLC is done.
    let _push = push(rec["push_url"].as_str().unwrap(), "av-720p.flv", 6);
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    // Joined some 10 s in, as a viewer would. VLC starts where the MPD's clock puts the live
    // edge; a clock ahead of the segments gets it a 404 there, after which it asks for nothing
    // more (an MPD 10 s early: no media at all).
    wait_segments(rec["hls_cmaf_url"].as_str().unwrap(), 5).await;

    // VLC refuses to run as root: it runs as nobody and writes where nobody may.
    let out = tempdir();
    std::fs::set_permissions(out.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let ts = out.path().join("vlc.ts");
    let log_path = out.path().join("vlc.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let sout = format!("#std{{access=file,mux=ts,dst={}}}", ts.display());
    let mpd_url = rec["dash_url"].as_str().unwrap().to_owned();
    let wall = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        // `timeout` runs as nobody too, so its SIGTERM reaches VLC itself, which then closes
        // the TS file properly.
        let mut vlc = Proc::spawn(
            Command::new("runuser")
                .args(["-u", "nobody", "--", "timeout"])
                .arg(RUN.as_secs().to_string())
                .args(["cvlc", "-I", "dummy", &mpd_url, "--sout", &sout])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log)),
            "cvlc",
        );
        vlc.wait_within(RUN + Duration::from_secs(15))
            .expect("cvlc did not stop at its timeout");
        started.elapsed()
    })
    .await
    .unwrap();

    let vlc_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let written = std::fs::metadata(&ts).map_or(0, |m| m.len());
    assert!(written > 0, "VLC wrote no media; its log:\n{}", vlc_log());
    let probe = ffprobe_with(
        &[
            "-show_entries",
            "format=duration:stream=codec_type,codec_name",
        ],
        ts.to_str().unwrap(),
    );
    let mut codecs: Vec<&str> = probe["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["codec_name"].as_str().unwrap())
        .collect();
    codecs.sort();
    assert_eq!(codecs, ["aac", "h264"], "{probe}");
    let media: f64 = probe["format"]["duration"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no duration: {probe}"));
    println!("VLC received {media:.1} s of LL-DASH media in {wall:.1?}");
    assert!(
        media >= 0.8 * wall.as_secs_f64(),
        "VLC received {media:.1} s of media in {wall:.1?}; its log:\n{}",
        vlc_log()
    );
}

/// The fixture as ffprobe reads it: (height, frame rate, keyframe interval s, video kbit/s).
fn fixture_facts(name: &str) -> (u64, f64, f64, f64) {
    let path = fixture(name);
    let p = ffprobe_with(
        &[
            "-select_streams",
            "v",
            "-show_entries",
            "stream=height,r_frame_rate",
        ],
        path.to_str().unwrap(),
    );
    let height = p["streams"][0]["height"].as_u64().unwrap();
    let (n, d) = p["streams"][0]["r_frame_rate"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap();
    let fps = n.parse::<f64>().unwrap() / d.parse::<f64>().unwrap();
    let p = ffprobe_with(
        &[
            "-select_streams",
            "v",
            "-show_entries",
            "packet=pts_time,size,flags",
        ],
        path.to_str().unwrap(),
    );
    let packets = p["packets"].as_array().unwrap();
    let time = |p: &serde_json::Value| p["pts_time"].as_str().unwrap().parse::<f64>().unwrap();
    let keys: Vec<f64> = packets
        .iter()
        .filter(|p| p["flags"].as_str().unwrap().starts_with('K'))
        .map(time)
        .collect();
    let gop = keys[1] - keys[0];
    let bytes: u64 = packets
        .iter()
        .map(|p| p["size"].as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    let kbps = bytes as f64 * 8.0 / 1000.0 / (packets.len() as f64 / fps);
    (height, fps, gop, kbps)
}

#[tokio::test]
async fn statistics_describe_the_source_and_show_when_it_was_off() {
    let _g = heavy().await;
    let (height, fps, gop, kbps) = fixture_facts("av-720p.flv");
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", common::KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "2"),
            ("LIVEPACK_STATISTICS_SAMPLE_SECS", "2"),
        ],
    );
    let from = time::OffsetDateTime::now_utc() - Duration::from_secs(60);
    // One rung keeps the test light; the figures are the source's, not the rung's.
    let rec = create(&d, json!({"name": "stats", "quality_set_id": 3})).await;
    let id = rec["id"].as_i64().unwrap();
    let url = rec["push_url"].as_str().unwrap().to_owned();
    for (round, pause) in [(0, 12), (1, 0)] {
        let _ffmpeg = push(&url, "av-720p.flv", 1);
        wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
        // The pusher ends by itself after two plays of the fixture.
        wait_record(&d, id, Duration::from_secs(40), |r| r["live"] == false).await;
        if round == 0 {
            tokio::time::sleep(Duration::from_secs(pause)).await;
        }
    }
    let fmt = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let to = time::OffsetDateTime::now_utc() + Duration::from_secs(60);
    let query = format!(
        "/streaming/statistics/ffprobe?stream_id={id}&date_from={}&date_to={}&interval=2",
        fmt(from),
        fmt(to)
    );
    let r = d.get(&query).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let items = r.body["data"].as_array().unwrap().clone();
    let times: Vec<time::OffsetDateTime> = items
        .iter()
        .map(|i| {
            time::OffsetDateTime::parse(
                i["time"].as_str().unwrap(),
                &time::format_description::well_known::Rfc3339,
            )
            .unwrap()
        })
        .collect();
    // Two pushes of ~12 s in 2 s buckets, with a gap of more than 12 s between them.
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_seconds_f64())
        .collect();
    assert!(items.len() >= 8, "{items:?}");
    assert_eq!(
        gaps.iter().filter(|g| **g > 2.0).count(),
        1,
        "one gap, while nothing was pushed: {gaps:?}"
    );
    assert!(gaps.iter().any(|g| *g >= 10.0), "{gaps:?}");
    let max = |k: &str| {
        items
            .iter()
            .map(|i| i[k].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    assert_eq!(max("max_height") as u64, height);
    assert!(
        (max("max_fps") - fps).abs() <= 1.0,
        "{} vs {fps}",
        max("max_fps")
    );
    assert!(
        (max("max_keyframe_interval") - gop).abs() <= 0.1,
        "{} vs {gop}",
        max("max_keyframe_interval")
    );
    // Whole buckets (not the first or last of a push) carry the source's bitrate and frames.
    let inner: Vec<&serde_json::Value> = items[1..items.len() - 1].iter().collect();
    let median_kbps = {
        let mut v: Vec<f64> = inner
            .iter()
            .map(|i| i["avg_bitrate"].as_f64().unwrap())
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    assert!(
        (median_kbps / kbps - 1.0).abs() < 0.35,
        "{median_kbps} kbit/s vs the fixture's {kbps}"
    );
    let frames: u64 = items
        .iter()
        .map(|i| i["sum_frames"].as_u64().unwrap())
        .sum();
    let pushed = (4.0 * 6.0 * fps) as u64;
    assert!(
        frames as f64 >= pushed as f64 * 0.9 && frames <= pushed + 10,
        "{frames} frames counted, {pushed} pushed"
    );

    // Bad parameters name themselves; an unknown stream is 404.
    let r = d
        .get(&format!(
            "/streaming/statistics/ffprobe?stream_id={id}&date_from=x&date_to=y"
        ))
        .await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::BAD_REQUEST, Some("date_from"))
    );
    let r = d
        .get("/streaming/statistics/ffprobe?stream_id=999&date_from=2026-01-01&date_to=2026-01-02")
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

/// A 25 fps source: parts of 13 frames (0.52 s) and a shorter last one tile each 2 s segment,
/// and the playlists announce what they hold — PART-TARGET 0.52, PART-HOLD-BACK 2 of it, the MPD's
/// latency target (three parts) and availabilityTimeOffset from the same — instead of 1 s parts.
#[tokio::test]
async fn parts_are_half_a_second_at_25_fps() {
    let _g = heavy().await;
    let dir = tempdir();
    let d = short_grace_daemon(dir.path());
    let rec = create(&d, json!({"name": "pal", "quality_set_id": 3})).await;
    let id = rec["id"].as_i64().unwrap();
    let _ffmpeg = push(rec["push_url"].as_str().unwrap(), "longgop-720p25.ts", 2);
    wait_record(&d, id, Duration::from_secs(30), |r| r["live"] == true).await;
    let master = rec["hls_cmaf_url"].as_str().unwrap();
    wait_segments(master, 3).await;
    let (_, playlist) = text(&master.replace("master.m3u8", "720p/index.m3u8")).await;
    assert!(
        playlist.contains("#EXT-X-PART-INF:PART-TARGET=0.520\n"),
        "{playlist}"
    );
    assert!(playlist.contains("PART-HOLD-BACK=1.040"), "{playlist}");
    // Every complete segment: 2 s; its parts 13 frames but the last (RFC 8216bis §4.4.4.9 lets
    // a segment's final part be shorter than 85 % of the target), adding up to it.
    let pl = hls::media(&playlist);
    let complete: Vec<f32> = pl.segments.iter().map(|s| s.duration).collect();
    assert!(complete.len() >= 2, "{playlist}");
    for d in &complete {
        assert!((d - 2.0).abs() < 0.001, "segment of {d} s: {playlist}");
    }
    let mut parts: Vec<Vec<f64>> = vec![Vec::new()];
    for line in playlist.lines() {
        if let Some(attrs) = line.strip_prefix("#EXT-X-PART:") {
            let d: f64 = attrs
                .split(',')
                .find_map(|a| a.strip_prefix("DURATION="))
                .unwrap()
                .parse()
                .unwrap();
            parts.last_mut().unwrap().push(d);
        } else if line.starts_with("seg_") {
            parts.push(Vec::new());
        }
    }
    let whole: Vec<&Vec<f64>> = parts[..parts.len() - 1]
        .iter()
        .filter(|p| !p.is_empty())
        .collect();
    assert!(!whole.is_empty(), "{playlist}");
    for seg in whole {
        assert_eq!(seg.len(), 4, "{seg:?}");
        assert!((seg.iter().sum::<f64>() - 2.0).abs() < 0.01, "{seg:?}");
        let (last, rest) = seg.split_last().unwrap();
        for d in rest {
            assert!((d - 0.52).abs() < 0.002, "a part of {d} s: {seg:?}");
        }
        assert!((0.04..=0.52).contains(last), "{seg:?}");
    }
    // The audio's segments start where the video's do, within one AAC frame (1024 samples at
    // 48 kHz, 21.3 ms), whatever their number: they used to be 1.984 s each and drift 16 ms a
    // segment.
    let (_, audio) = text(&master.replace("master.m3u8", "audio/index.m3u8")).await;
    let starts = |pl: &m3u8_rs::MediaPlaylist| {
        pl.segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((pl.media_sequence + i as u64, s.program_date_time?)))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (video_starts, audio_starts) = (starts(&pl), starts(&hls::media(&audio)));
    let mut compared = 0;
    for (msn, v) in &video_starts {
        if let Some(a) = audio_starts.get(msn) {
            let ms = (*a - *v).num_milliseconds();
            assert!(
                (-1..=22).contains(&ms),
                "segment {msn}: audio starts {ms} ms after the video\n{audio}\n{playlist}"
            );
            compared += 1;
        }
    }
    assert!(compared >= 2, "{audio}\n{playlist}");
    let (_, mpd) = text(&master.replace("master.m3u8", "index.mpd")).await;
    assert!(
        mpd.contains("<Latency referenceId=\"0\" target=\"1560\""),
        "{mpd}"
    );
    assert!(mpd.contains("availabilityTimeOffset=\"1.480\""), "{mpd}");
}
