//! One restream's task: reads its feed from the live stream's hub (the source as received, or a
//! rung and the audio as encoded — nothing decoded or encoded for it), sends it to the target,
//! and reconnects with backoff (1 s doubling to 30 s) when the target fails, until stopped.
//! Starts at a keyframe each time it (re)connects; its state is what the API shows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::flv::{FlvWriter, Tag};
use super::rtmp::{self, Publisher};
use super::srt::{self, TsSender};
use super::target::Target;
use crate::events::Event;
use crate::hub::{Feed, Hub, Reader, ReaderOptions};
use crate::live::RestreamStatus;
use crate::media::{MediaMessage, TrackKind};

/// First wait after a failure; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A target that does not complete its handshake in this long has failed.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);
/// A target that takes none of a message's bytes for this long has stopped reading (a frozen
/// server keeps its connection open): it has failed, and is called again with the backoff.
/// Longer than any stall a working target shows, shorter than the reader's queue.
const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Messages queued per restream reader: ~8 s of video. A target slower than the stream loses
/// frames here (counted by the hub) and resumes at a keyframe.
const QUEUE: usize = 256;
/// How long the rungs of a stream going live are waited for before a rung restream checks its.
const RUNG_WAIT: Duration = Duration::from_secs(5);

/// Which media a restream sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The source as received (after the main/backup switch), remuxed.
    Origin,
    /// A rung's H.264 and the AAC, as encoded for the other outputs.
    Rung(String),
}

enum Conn {
    Rtmp(Publisher, FlvWriter),
    Srt(TsSender),
}

impl Conn {
    async fn send(&mut self, msg: &MediaMessage, tags: &mut Vec<Tag>) -> Result<(), String> {
        match self {
            Conn::Rtmp(p, w) => {
                w.push(msg, tags).map_err(|e| e.to_string())?;
                for tag in tags.drain(..) {
                    p.send(tag).await.map_err(|e| e.to_string())?;
                }
                Ok(())
            }
            Conn::Srt(s) => s
                .send(msg)
                .await
                .map_err(|e| format!("SRT: {}", srt::describe(&e))),
        }
    }

    fn bytes_sent(&self) -> u64 {
        match self {
            Conn::Rtmp(p, _) => p.bytes_sent,
            Conn::Srt(s) => s.bytes_sent,
        }
    }
}

/// Everything one restream task needs.
pub struct Restream {
    pub id: i64,
    pub hub: Arc<Hub>,
    pub source: Source,
    pub target: Target,
    pub tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    pub state: Arc<Mutex<RestreamStatus>>,
    pub stream_id: i64,
    /// Where its start, stop and failures are told (webhooks follow it).
    pub events: Option<crate::events::Events>,
}

impl Restream {
    fn emit(&self, event: crate::events::Event) {
        if let Some(e) = &self.events {
            e.emit(event);
        }
    }

    fn update(&self, f: impl FnOnce(&mut RestreamStatus)) {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
    }

    fn subscribe(&self) -> Vec<Reader> {
        let name = format!("restream {}", self.id);
        let sub = |feed| {
            self.hub
                .subscribe(feed, ReaderOptions::new(name.clone(), QUEUE))
        };
        match &self.source {
            Source::Origin => vec![sub(Feed::Source)],
            Source::Rung(rung) => {
                let feed = Feed::Video(rung.clone());
                let readers = vec![sub(feed.clone()), sub(Feed::Audio)];
                // Start now rather than at the rung's next keyframe (rate-limited in the hub).
                self.hub.request_keyframe(&feed);
                readers
            }
        }
    }

    /// A rung restream's rung is in the ladder now (a source smaller than the rung has none).
    async fn rung_present(&self) -> Result<(), String> {
        let Source::Rung(rung) = &self.source else {
            return Ok(());
        };
        let rungs = self.hub.settled_video_rungs(RUNG_WAIT).await;
        if rungs.is_empty() || rungs.iter().any(|r| &r.name == rung) {
            // No rung yet: the stream has no media; the session waits for it.
            return Ok(());
        }
        let names: Vec<&str> = rungs.iter().map(|r| r.name.as_str()).collect();
        Err(format!(
            "the stream has no {rung} rung now (its rungs: {})",
            names.join(", ")
        ))
    }

    async fn connect(&self) -> Result<Conn, String> {
        match &self.target {
            Target::Rtmp(t) => rtmp::publish(t, self.tls.clone(), CONNECT_PATIENCE)
                .await
                .map(|p| Conn::Rtmp(p, FlvWriter::default()))
                .map_err(|e| e.to_string()),
            Target::Srt(t) => srt::connect(t, CONNECT_PATIENCE)
                .await
                .map(Conn::Srt)
                .map_err(|e| format!("SRT: {}", srt::describe(&e))),
        }
    }

    /// Runs until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let ended = tokio::select! {
                r = self.session() => r,
                _ = async { drop(stop.wait_for(|s| *s).await) } => break,
            };
            let was_live = self.state.lock().map(|s| s.live).unwrap_or(false);
            self.update(|s| s.live = false);
            let failure = match ended {
                // The stream's media paused (its publisher left, a pipeline rebuilt): wait for
                // it again; the target was not at fault.
                Ended::Media => {
                    backoff = FIRST_BACKOFF;
                    if was_live {
                        self.emit(Event::RestreamStopped {
                            stream_id: self.stream_id,
                            restream_id: self.id,
                        });
                    }
                    continue;
                }
                Ended::Failed(e) => e,
            };
            self.emit(Event::RestreamFailed {
                stream_id: self.stream_id,
                restream_id: self.id,
                error: failure.clone(),
            });
            self.update(|s| {
                s.reconnects += 1;
                s.last_error = Some(failure.clone());
            });
            tracing::info!(restream = self.id, destination = %self.target.shown(), error = %failure, ?backoff, "restream interrupted; reconnecting");
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = async { drop(stop.wait_for(|s| *s).await) } => break,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        let was_live = self.state.lock().map(|s| s.live).unwrap_or(false);
        self.update(|s| s.live = false);
        if was_live {
            self.emit(Event::RestreamStopped {
                stream_id: self.stream_id,
                restream_id: self.id,
            });
        }
    }

    /// One connection: subscribe, wait for media (no connection to the target while the
    /// stream has none), connect, send from the first keyframe until something fails.
    async fn session(&self) -> Ended {
        if let Err(e) = self.rung_present().await {
            return Ended::Failed(e);
        }
        let mut readers = self.subscribe();
        let Some(first) = next(&mut readers).await else {
            return Ended::Media;
        };
        let mut conn = match self.connect().await {
            Ok(c) => c,
            Err(e) => return Ended::Failed(e),
        };
        self.update(|s| {
            s.live = true;
            s.started_at_ms =
                Some((time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64);
        });
        tracing::info!(restream = self.id, destination = %self.target.shown(), "restream connected");
        self.emit(Event::RestreamStarted {
            stream_id: self.stream_id,
            restream_id: self.id,
        });
        let base = self.state.lock().map(|s| s.bytes_sent).unwrap_or(0);
        let (mut tags, mut started, mut pending) = (Vec::new(), false, Some(first));
        // A reader is given the track declaration and codec configs first: an audio-only
        // stream starts at its first frame, any other at a video keyframe.
        let mut video = false;
        loop {
            let msg = match pending.take() {
                Some(m) => m,
                None => match next(&mut readers).await {
                    Some(m) => m,
                    None => return Ended::Media,
                },
            };
            match &msg {
                MediaMessage::VideoConfig(_) => video = true,
                MediaMessage::Tracks(t) => video |= t.video,
                _ => {}
            }
            if let MediaMessage::Frame(f) = &msg {
                started |= !video || (f.track == TrackKind::Video && f.keyframe);
                if !started {
                    continue;
                }
            }
            match tokio::time::timeout(WRITE_DEADLINE, conn.send(&msg, &mut tags)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Ended::Failed(e),
                Err(_) => {
                    return Ended::Failed(format!(
                        "the target took nothing for {} s",
                        WRITE_DEADLINE.as_secs()
                    ))
                }
            }
            let sent = base + conn.bytes_sent();
            self.update(|s| s.bytes_sent = sent);
        }
    }
}

/// Why a session ended.
enum Ended {
    /// The stream's media ended (for now).
    Media,
    /// The target failed, or refused.
    Failed(String),
}

/// The next message of a restream's readers (the one feed, or the rung's video and the audio).
async fn next(readers: &mut [Reader]) -> Option<MediaMessage> {
    match readers {
        [one] => one.recv().await,
        [video, audio] => tokio::select! {
            m = video.recv() => m,
            m = audio.recv() => m,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::test_support::{fixture_messages, nginx_rtmp};

    /// The fixture published into a hub's source feed in real time, `loops` times (times
    /// continuing), as the input switch would.
    fn publish_live(hub: Arc<Hub>, loops: u64) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let messages = fixture_messages();
            let start = tokio::time::Instant::now();
            for lap in 0..loops {
                for m in &messages {
                    let mut m = m.clone();
                    if let MediaMessage::Frame(f) = &mut m {
                        let shift = lap * 6_000_000_000;
                        (f.dts, f.pts) = (f.dts + shift, f.pts + shift);
                        tokio::time::sleep_until(start + Duration::from_nanos(f.dts)).await;
                    }
                    hub.publish(&Feed::Source, m);
                }
            }
        })
    }

    /// An origin restream to nginx-rtmp: live, bytes counted; nginx killed and started again on
    /// its port → the restream is back within 5 s (1 s, then 2 s of backoff), counted once; the
    /// second recording is the stream (ffprobe).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_origin_restream_reconnects_when_its_target_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let (mut nginx, port, _) = nginx_rtmp(dir.path(), None);
        let hub = Hub::new();
        let feeder = publish_live(hub.clone(), 3);
        let url = format!("rtmp://127.0.0.1:{port}/live/origin-key");
        let state = Arc::new(Mutex::new(RestreamStatus::default()));
        let restream = Restream {
            id: 1,
            hub: hub.clone(),
            source: Source::Origin,
            target: Target::parse(&url).unwrap(),
            tls: None,
            state: state.clone(),
            stream_id: 1,
            events: None,
        };
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(restream.run(stop_rx));
        let snapshot = || state.lock().unwrap().clone();
        let until = |what: &'static str, secs: u64, f: Box<dyn Fn(&RestreamStatus) -> bool>| async move {
            let end = tokio::time::Instant::now() + Duration::from_secs(secs);
            loop {
                let s = snapshot();
                if f(&s) {
                    return s;
                }
                assert!(tokio::time::Instant::now() < end, "{what}: {s:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        until("live", 10, Box::new(|s| s.live && s.bytes_sent > 50_000)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = nginx.kill();
        let _ = nginx.wait();
        until(
            "the failure seen",
            10,
            Box::new(|s| !s.live && s.reconnects == 1),
        )
        .await;
        let back = tokio::time::Instant::now();
        let (mut nginx, _, _) = crate::egress::test_support::nginx_rtmp_on(dir.path(), port);
        let s = until("back", 10, Box::new(|s| s.live)).await;
        println!("restream back after {:?}: {s:?}", back.elapsed());
        assert!(back.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.send(true).unwrap();
        task.await.unwrap();
        feeder.abort();
        let v = crate::egress::test_support::recorded(dir.path(), "origin-key").await;
        let _ = nginx.kill();
        let streams = v["streams"].as_array().unwrap();
        assert!(
            streams
                .iter()
                .any(|s| s["codec_name"] == "h264" && s["height"] == 720),
            "{v}"
        );
        let duration: f64 = v["format"]["duration"].as_str().unwrap().parse().unwrap();
        assert!(duration >= 2.0, "{v}");
    }
}
