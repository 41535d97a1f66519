//! WHIP ingest end to end: headless Chromium (fake camera and microphone) pushes H.264 + Opus
//! through the WHIP signalling to the daemon; ffprobe reads the LL-HLS outputs; the ladder
//! keeps its initial size when the browser lowers what it sends; DELETE ends the session. And
//! every refusal of the signalling, with nothing left behind. Two publishers at once through the
//! one shared UDP port; a publisher without UDP over ICE-TCP; the per-session sockets mode.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/media.rs"]
mod media;
mod whep;

use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

use common::proc::AsyncProc;
use common::{hls, root, tempdir, Daemon, KEY};
use media::{create, record, wait_record};

/// A daemon whose WHIP sessions offer loopback candidates, with a 2 s grace period.
fn whip_daemon(dir: &std::path::Path) -> Daemon {
    Daemon::start_with(
        dir,
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "2"),
            ("LIVEPACK_WHIP_UDP_ADDRS", "127.0.0.1:0"),
        ],
    )
}

/// The browser publisher (`tests/whip/whip.mjs`) and its JSON event lines.
struct Browser {
    child: AsyncProc,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Browser {
    fn start(url: &str, auth: &str) -> Browser {
        Browser::start_over(url, auth, "udp")
    }

    /// `transport` `tcp`: the page drops the answer's UDP candidates (UDP blocked).
    fn start_over(url: &str, auth: &str, transport: &str) -> Browser {
        Browser::driver(&["tests/whip/whip.mjs", url, auth, transport])
    }

    /// A driver script (`tests/whip/*.mjs`) with its arguments.
    fn driver(args: &[&str]) -> Browser {
        let mut child = AsyncProc::spawn(
            Command::new("node")
                .current_dir(root())
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
            "node (installed by scripts/test)",
        );
        let lines = BufReader::new(child.child().stdout.take().unwrap()).lines();
        Browser { child, lines }
    }

    /// The next event named `name` (others, like stats, are skipped), within `within`.
    async fn event(&mut self, name: &str, within: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no {name:?} event from the browser"))
                .unwrap()
                .unwrap_or_else(|| panic!("the browser driver exited before {name:?}"));
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["event"] == name {
                return v;
            }
            assert_ne!(v["event"], "failed", "{v}");
        }
    }

    async fn command(&mut self, cmd: &str) {
        let stdin = self.child.child().stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{cmd}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }
}

/// Width and height of the first video stream ffprobe finds at `url`.
fn probe_video(url: &str) -> (i64, i64) {
    let p = media::ffprobe(url);
    let v = p["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["codec_type"] == "video")
        .unwrap_or_else(|| panic!("no video stream: {p}"))
        .clone();
    assert_eq!(v["codec_name"], "h264", "{v}");
    (v["width"].as_i64().unwrap(), v["height"].as_i64().unwrap())
}

/// The daemon's shared WHIP ICE address for `udp` or `tcp`, from its banner.
fn mux_addr(d: &Daemon, proto: &str) -> std::net::SocketAddr {
    d.banner
        .iter()
        .find_map(|l| l.strip_prefix(&format!("whip_{proto}: ")))
        .unwrap_or_else(|| panic!("no whip_{proto} line in {:?}", d.banner))
        .parse()
        .unwrap()
}

/// Every candidate of an answer names one of the shared ports (never a per-session one).
fn assert_candidates_on(candidates: &[String], ports: &[u16]) {
    assert!(!candidates.is_empty());
    for c in candidates {
        let port: u16 = c.split(' ').nth(5).unwrap().parse().unwrap();
        assert!(ports.contains(&port), "{c} is not on {ports:?}");
        assert!(!c.contains("tcptype active"), "{c}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_push_goes_live_keeps_its_initial_ladder_and_delete_ends_it() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = whip_daemon(dir.path());
    let rec = create(&d, json!({"name": "whip"})).await;
    let id = rec["id"].as_i64().unwrap();
    let url = rec["push_url_whip"].as_str().unwrap().to_owned();
    assert!(
        url.starts_with(&format!("{}/whip/{id}?token=", d.base)),
        "{url}"
    );

    let mut browser = Browser::start(&url, "bearer");
    let created = browser.event("created", Duration::from_secs(30)).await;
    assert_eq!(created["status"], 201, "{created}");
    let location = created["location"].as_str().unwrap().to_owned();
    assert!(location.starts_with(&format!("/whip/{id}/")), "{created}");
    assert_eq!(created["contentType"], "application/sdp");
    assert!(
        created["etag"].as_str().is_some_and(|e| e.len() > 2),
        "{created}"
    );
    let connected = browser.event("connected", Duration::from_secs(20)).await;
    println!("WHIP connected in {} ms", connected["ms"]);

    let live = wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true && !r["transcoding_speed"].is_null()
    })
    .await;
    let (w0, h0) = (
        live["video_width"].as_i64().unwrap(),
        live["video_height"].as_i64().unwrap(),
    );
    let qualities = live["transcoded_qualities"].clone();
    println!(
        "WHIP source {w0}x{h0}, ladder {qualities}, frame_rate {}",
        live["frame_rate"]
    );
    assert!(h0 >= 180 && w0 > h0, "{live}");

    let master = live["hls_cmaf_url"].as_str().unwrap().to_owned();
    media::wait_segments(&master, 2).await;
    let (_, master_text) = media::text(&master).await;
    let m = hls::master(&master_text);
    let top = m.variants.iter().max_by_key(|v| v.bandwidth).unwrap();
    let size = top.resolution.unwrap();
    assert!(
        top.codecs.as_deref().unwrap().contains("mp4a.40.2"),
        "{master_text}"
    );
    let top_uri = master.replace("master.m3u8", &top.uri);
    assert_eq!(
        probe_video(&top_uri),
        (size.width as i64, size.height as i64)
    );
    let p = media::ffprobe(&master);
    let audio = p["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["codec_type"] == "audio")
        .unwrap()
        .clone();
    assert_eq!(
        (audio["codec_name"].as_str(), audio["sample_rate"].as_str()),
        (Some("aac"), Some("48000")),
        "Opus in, AAC out: {audio}"
    );

    // The browser halves what it sends: the source changes, the outputs do not.
    browser.command("downscale").await;
    let smaller = wait_record(&d, id, Duration::from_secs(20), |r| {
        r["video_height"].as_i64().is_some_and(|h| h < h0)
    })
    .await;
    println!(
        "WHIP source after downscale {}x{}",
        smaller["video_width"], smaller["video_height"]
    );
    let (_, before) = media::text(&top_uri).await;
    let first = hls::next_msn(&hls::media(&before));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, now) = media::text(&top_uri).await;
        if hls::next_msn(&hls::media(&now)) >= first + 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "segments stopped after the downscale:\n{now}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Same variants (BANDWIDTH and AVERAGE-BANDWIDTH are measured, so they move).
    let ladder = |text: &str| {
        hls::master(text)
            .variants
            .iter()
            .map(|v| (v.uri.clone(), v.resolution, v.codecs.clone(), v.frame_rate))
            .collect::<Vec<_>>()
    };
    let (_, after_master) = media::text(&master).await;
    assert_eq!(
        ladder(&after_master),
        ladder(&master_text),
        "the ladder changed mid-stream"
    );
    assert_eq!(record(&d, id).await["transcoded_qualities"], qualities);
    assert_eq!(
        probe_video(&top_uri),
        (size.width as i64, size.height as i64)
    );

    browser.command("delete").await;
    let deleted = browser.event("deleted", Duration::from_secs(10)).await;
    assert_eq!(deleted["status"], 200, "{deleted}");
    wait_record(&d, id, Duration::from_secs(8), |r| r["live"] == false).await;
    let playlist = media::wait_endlist(&top_uri).await;
    assert!(playlist.contains("#EXT-X-PART"), "{playlist}");
    // The session is gone: a second DELETE finds nothing.
    let again = reqwest::Client::new()
        .delete(format!("{}{location}", d.base))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
    let _ = browser.child.child().wait().await;
}

async fn post(
    d: &Daemon,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", d.base))
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    let text = r.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// What a refused POST sends (label, path, headers, body) and must get (status, error code).
type Refusal<'a> = (
    &'a str,
    String,
    Vec<(&'a str, &'a str)>,
    Vec<u8>,
    StatusCode,
    &'a str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_and_an_abandoned_session_leave_nothing_behind() {
    let dir = tempdir();
    let d = whip_daemon(dir.path());
    let rec = create(&d, json!({"name": "whip-refusals"})).await;
    let id = rec["id"].as_i64().unwrap();
    let token = rec["token"].as_str().unwrap().to_owned();
    let bearer = format!("Bearer {token}");
    let path = format!("/whip/{id}");
    let sdp = ("content-type", "application/sdp");
    let auth = ("authorization", bearer.as_str());
    let offer = common::whip_offer_without_client();
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();

    // CORS preflight on the endpoint.
    let r = reqwest::Client::new()
        .request(Method::OPTIONS, format!("{}{path}", d.base))
        .header("origin", "https://publisher.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
    assert!(r.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));
    assert!(r.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("Authorization"));
    assert!(r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .contains("Location"));

    let cases: Vec<Refusal> = vec![
        (
            "wrong content type",
            path.clone(),
            vec![("content-type", "application/json"), auth],
            offer.clone().into(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            "body over 128 KiB",
            path.clone(),
            vec![sdp, auth],
            vec![b'a'; 128 * 1024 + 1],
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            "unparsable SDP",
            path.clone(),
            vec![sdp, auth],
            b"hello, not sdp".to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_sdp",
        ),
        (
            "1000 m-lines",
            path.clone(),
            vec![sdp, auth],
            format!(
                "v=0\r\n{}",
                "m=video 9 UDP/TLS/RTP/SAVPF 102\r\n".repeat(1000)
            )
            .into(),
            StatusCode::BAD_REQUEST,
            "invalid_sdp",
        ),
        (
            "no H.264",
            path.clone(),
            vec![sdp, auth],
            offer.replace("H264/90000", "VP8/90000").into(),
            StatusCode::NOT_ACCEPTABLE,
            "unsupported_codecs",
        ),
        (
            "no Opus",
            path.clone(),
            vec![sdp, auth],
            offer.replace("opus/48000/2", "PCMU/8000").into(),
            StatusCode::NOT_ACCEPTABLE,
            "unsupported_codecs",
        ),
        (
            "H.264 in single-NAL mode only",
            path.clone(),
            vec![sdp, auth],
            offer
                .replace("packetization-mode=1", "packetization-mode=0")
                .into(),
            StatusCode::NOT_ACCEPTABLE,
            "unsupported_codecs",
        ),
        (
            "no token",
            path.clone(),
            vec![sdp],
            offer.clone().into(),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "wrong token",
            path.clone(),
            vec![sdp, ("authorization", "Bearer 0123456789abcdef")],
            offer.clone().into(),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "wrong token in the query",
            format!("{path}?token=0123456789abcdef"),
            vec![sdp],
            offer.clone().into(),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "unknown stream",
            "/whip/999999".into(),
            vec![sdp, auth],
            offer.clone().into(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "not a stream id",
            "/whip/..%2f1".into(),
            vec![sdp, auth],
            offer.clone().into(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    for (what, path, headers, body, status, want) in cases {
        let (got, _, v) = post(&d, &path, &headers, body).await;
        assert_eq!((got, code(&v).as_str()), (status, want), "{what}: {v}");
    }

    // Inactive and PULL streams are forbidden.
    let set_active = |on: bool| {
        let d = &d;
        async move {
            let r = d
                .patch(
                    &format!("/streaming/streams/{id}"),
                    json!({"stream": {"active": on}}),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        }
    };
    set_active(false).await;
    let (got, _, v) = post(&d, &path, &[sdp, auth], offer.clone()).await;
    assert_eq!(
        (got, code(&v).as_str()),
        (StatusCode::FORBIDDEN, "stream_inactive"),
        "{v}"
    );
    set_active(true).await;
    let pull = create(
        &d,
        json!({"name": "pull", "pull": true, "uri": "rtmp://127.0.0.1/live/x"}),
    )
    .await;
    let pull_path = format!("/whip/{}", pull["id"]);
    let pull_auth = format!("Bearer {}", pull["token"].as_str().unwrap());
    let (got, _, v) = post(
        &d,
        &pull_path,
        &[sdp, ("authorization", pull_auth.as_str())],
        offer.clone(),
    )
    .await;
    assert_eq!(
        (got, code(&v).as_str()),
        (StatusCode::FORBIDDEN, "pull_stream"),
        "{v}"
    );

    // Nothing above took the stream: a valid offer (token in the query) is accepted…
    let (got, headers, answer) =
        post(&d, &format!("{path}?token={token}"), &[sdp], offer.clone()).await;
    assert_eq!(got, StatusCode::CREATED, "{answer}");
    let answer = answer.as_str().unwrap().to_owned();
    assert!(
        answer.contains("a=candidate:") && answer.contains("127.0.0.1"),
        "non-trickle answer with loopback candidates:\n{answer}"
    );
    assert!(
        answer.contains("H264/90000") && answer.contains("opus/48000"),
        "{answer}"
    );
    let candidates: Vec<String> = answer
        .lines()
        .filter(|l| l.starts_with("a=candidate:"))
        .map(str::to_owned)
        .collect();
    assert_candidates_on(
        &candidates,
        &[mux_addr(&d, "udp").port(), mux_addr(&d, "tcp").port()],
    );
    assert!(
        headers.get("link").is_none(),
        "no ICE servers configured, no Link"
    );
    let location = headers["location"].to_str().unwrap().to_owned();
    // …trickle ICE is not supported, other methods are not allowed…
    let client = reqwest::Client::new();
    let r = client
        .patch(format!("{}{location}", d.base))
        .header("content-type", "application/trickle-ice-sdpfrag")
        .body("a=end-of-candidates")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(r.headers()["allow"].to_str().unwrap().contains("DELETE"));
    let r = client
        .get(format!("{}{path}", d.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let r = client
        .delete(format!(
            "{}/whip/{id}/0123456789abcdef0123456789abcdef",
            d.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // …a second publisher is refused while it holds the stream…
    let (got, _, v) = post(&d, &path, &[sdp, auth], offer.clone()).await;
    assert_eq!(
        (got, code(&v).as_str()),
        (StatusCode::CONFLICT, "already_live"),
        "{v}"
    );
    // …and since no client completes ICE, the session sends nothing: after the switch timeout
    // (3 s) a new publish replaces it (a reloaded page must not wait for the old one to time
    // out).
    let started = Instant::now();
    loop {
        let (got, headers, v) = post(&d, &path, &[sdp, auth], offer.clone()).await;
        if got == StatusCode::CREATED {
            println!("silent WHIP session replaced after {:?}", started.elapsed());
            let second = headers["location"].to_str().unwrap().to_owned();
            assert_ne!(second, location);
            let r = client
                .delete(format!("{}{second}", d.base))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            break;
        }
        assert_eq!(got, StatusCode::CONFLICT, "{v}");
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "the silent session was never replaced"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The DELETE ends the session; its publisher leaves right after (the answer does not wait
    // for the pipeline's drain).
    wait_record(&d, id, Duration::from_secs(8), |r| r["live"] == false).await;
    // The old session resource is gone too.
    let r = client
        .delete(format!("{}{location}", d.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // Left alone, a session whose ICE never completes ends by itself at the connect timeout.
    let (got, headers, v) = post(&d, &path, &[sdp, auth], offer.clone()).await;
    assert_eq!(got, StatusCode::CREATED, "{v}");
    let session = format!("{}{}", d.base, headers["location"].to_str().unwrap());
    let started = Instant::now();
    loop {
        // PATCH answers 405 while the session exists, 404 once it is gone.
        let r = client.patch(&session).body("").send().await.unwrap();
        if r.status() == StatusCode::NOT_FOUND {
            println!(
                "unconnected WHIP session ended after {:?}",
                started.elapsed()
            );
            break;
        }
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the session never timed out"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (got, _, v) = post(&d, &path, &[sdp, auth], offer).await;
    assert_eq!(got, StatusCode::CREATED, "the stream is free again: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_browser_ends_its_session_and_the_stream_takes_a_new_one() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    // The per-session mode (a UDP socket per session, no ICE-TCP) stays an option: this test
    // runs on it.
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "2"),
            ("LIVEPACK_WHIP_UDP_ADDRS", "127.0.0.1:0"),
            ("LIVEPACK_WHIP_UDP_MUX_ADDR", "off"),
            ("LIVEPACK_WHIP_TCP_MUX_ADDR", "off"),
        ],
    );
    assert!(
        d.banner.iter().any(|l| l == "whip_udp: off"),
        "{:?}",
        d.banner
    );
    let rec = create(&d, json!({"name": "whip-vanish"})).await;
    let id = rec["id"].as_i64().unwrap();
    let url = rec["push_url_whip"].as_str().unwrap().to_owned();
    // The token in the query, as `push_url_whip` carries it (for clients without headers).
    let mut browser = Browser::start(&url, "query");
    let created = browser.event("created", Duration::from_secs(30)).await;
    assert_eq!(created["status"], 201, "{created}");
    let connected = browser.event("connected", Duration::from_secs(20)).await;
    println!(
        "WHIP on a per-session UDP socket: ICE connected {} ms, DTLS connected {} ms after the answer; remote {}",
        connected["iceMs"], connected["ms"], connected["remote"]
    );
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    // The browser dies without a DELETE or a DTLS close: no RTP, then no ICE consent.
    browser.child.kill().await;
    let gone = Instant::now();
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == false).await;
    println!("vanished WHIP client noticed after {:?}", gone.elapsed());
    // The stream is free for the next publisher at once.
    let mut again = Browser::start(&url, "bearer");
    let created = again.event("created", Duration::from_secs(30)).await;
    assert_eq!(created["status"], 201, "{created}");
    again.event("connected", Duration::from_secs(20)).await;
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == true).await;
    again.command("close").await;
    again.event("closed", Duration::from_secs(10)).await;
    let closed = Instant::now();
    wait_record(&d, id, Duration::from_secs(20), |r| r["live"] == false).await;
    println!(
        "closed WHIP peer connection noticed after {:?}",
        closed.elapsed()
    );
}

/// Two publishers at once through the one UDP port, both live and both playable; the 201 carries
/// the configured STUN/TURN servers as `Link` headers the page can read (CORS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_publish_at_once_through_the_one_udp_port() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_GRACE_PERIOD_SECS", "2"),
            (
                "LIVEPACK_WHIP_ICE_SERVERS",
                "stun:stun.example.net:3478,turn:alice:s3cret@turn.example.net:3478?transport=udp",
            ),
        ],
    );
    let udp = mux_addr(&d, "udp");
    let tcp = mux_addr(&d, "tcp");
    let mut streams = Vec::new();
    for name in ["whip-mux-a", "whip-mux-b"] {
        let rec = create(&d, json!({ "name": name })).await;
        let url = rec["push_url_whip"].as_str().unwrap().to_owned();
        streams.push((rec["id"].as_i64().unwrap(), url));
    }
    // Both POST at once: the sessions negotiate and connect side by side.
    let mut browsers: Vec<Browser> = streams
        .iter()
        .map(|(_, url)| Browser::start(url, "bearer"))
        .collect();
    for b in &mut browsers {
        let created = b.event("created", Duration::from_secs(30)).await;
        assert_eq!(created["status"], 201, "{created}");
        let candidates: Vec<String> =
            serde_json::from_value(created["candidates"].clone()).unwrap();
        assert_candidates_on(&candidates, &[udp.port(), tcp.port()]);
        assert_eq!(
            created["link"],
            "<stun:stun.example.net:3478>; rel=\"ice-server\", \
             <turn:turn.example.net:3478?transport=udp>; rel=\"ice-server\"; username=\"alice\"; \
             credential=\"s3cret\"; credential-type=\"password\"",
            "{created}"
        );
    }
    for b in &mut browsers {
        let connected = b.event("connected", Duration::from_secs(20)).await;
        println!(
            "WHIP through the UDP mux: ICE connected {} ms, DTLS connected {} ms after the answer; remote {}",
            connected["iceMs"], connected["ms"], connected["remote"]
        );
        assert_eq!(connected["remote"]["protocol"], "udp", "{connected}");
        assert_eq!(connected["remote"]["port"], udp.port(), "{connected}");
    }
    for (id, _) in &streams {
        let live = wait_record(&d, *id, Duration::from_secs(20), |r| {
            r["live"] == true && !r["transcoding_speed"].is_null()
        })
        .await;
        let master = live["hls_cmaf_url"].as_str().unwrap().to_owned();
        media::wait_segments(&master, 2).await;
        let (_, text) = media::text(&master).await;
        let top = hls::master(&text)
            .variants
            .iter()
            .max_by_key(|v| v.bandwidth)
            .unwrap()
            .clone();
        let size = top.resolution.unwrap();
        assert_eq!(
            probe_video(&master.replace("master.m3u8", &top.uri)),
            (size.width as i64, size.height as i64)
        );
    }
    // The preflight carries no Link: the servers are for the session the POST creates.
    let r = reqwest::Client::new()
        .request(Method::OPTIONS, format!("{}/whip/{}", d.base, streams[0].0))
        .header("origin", "https://publisher.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(r.headers().get("link").is_none());
    for b in &mut browsers {
        b.command("delete").await;
        let deleted = b.event("deleted", Duration::from_secs(10)).await;
        assert_eq!(deleted["status"], 200, "{deleted}");
    }
    for (id, _) in &streams {
        wait_record(&d, *id, Duration::from_secs(8), |r| r["live"] == false).await;
    }
}

/// A publisher whose UDP is blocked (the page only sees the TCP candidate) connects over ICE-TCP
/// to the shared TCP port, goes live and plays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_without_udp_connects_over_ice_tcp() {
    let _heavy = media::heavy().await;
    let dir = tempdir();
    let d = whip_daemon(dir.path());
    let tcp = mux_addr(&d, "tcp");
    let rec = create(&d, json!({"name": "whip-tcp"})).await;
    let id = rec["id"].as_i64().unwrap();
    let url = rec["push_url_whip"].as_str().unwrap().to_owned();
    let mut browser = Browser::start_over(&url, "bearer", "tcp");
    let created = browser.event("created", Duration::from_secs(30)).await;
    assert_eq!(created["status"], 201, "{created}");
    let candidates: Vec<String> = serde_json::from_value(created["candidates"].clone()).unwrap();
    assert!(
        candidates.iter().all(|c| c.contains(" tcp ")),
        "{candidates:?}"
    );
    let connected = browser.event("connected", Duration::from_secs(20)).await;
    println!(
        "WHIP over ICE-TCP: ICE connected {} ms, DTLS connected {} ms after the answer; remote {}",
        connected["iceMs"], connected["ms"], connected["remote"]
    );
    assert_eq!(connected["remote"]["protocol"], "tcp", "{connected}");
    assert_eq!(connected["remote"]["port"], tcp.port(), "{connected}");
    let live = wait_record(&d, id, Duration::from_secs(20), |r| {
        r["live"] == true && !r["transcoding_speed"].is_null()
    })
    .await;
    let master = live["hls_cmaf_url"].as_str().unwrap().to_owned();
    media::wait_segments(&master, 2).await;
    assert!(probe_video(&master).0 > 0);
    browser.command("delete").await;
    let deleted = browser.event("deleted", Duration::from_secs(10)).await;
    assert_eq!(deleted["status"], 200, "{deleted}");
    wait_record(&d, id, Duration::from_secs(8), |r| r["live"] == false).await;
}
