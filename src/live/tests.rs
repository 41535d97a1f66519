//! Lifecycle scenarios of the registry at unit level: a real SQLite store, a fake pipeline
//! factory that records its jobs, and paused time, so grace periods and switch timeouts of
//! seconds run in milliseconds and every wait is exact.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex as StdMutex;

use bytes::Bytes;
use time::OffsetDateTime;
use tokio::time::Instant;

use super::*;
use crate::db::{SqliteStore, StreamStore};
use crate::media::{Frame, MediaMessage, TrackKind, VideoCodec, VideoConfig};

const GRACE: Duration = Duration::from_secs(60);
const LINGER: Duration = Duration::from_secs(30);
const SWITCH: Duration = Duration::from_secs(3);

/// What the fake pipeline saw of one job.
#[derive(Default)]
struct Seen {
    /// Media messages received, in order.
    media: Vec<MediaMessage>,
    /// Ended by `stop` rather than by its media closing.
    stopped: bool,
}

/// Drains its media like a pipeline, then takes `drain` to flush, as a real one does.
struct FakePipelines {
    drain: Duration,
    jobs: StdMutex<Vec<(i64, Arc<StdMutex<Seen>>)>>,
}

impl PipelineFactory for FakePipelines {
    fn run(
        &self,
        mut job: PipelineJob,
    ) -> Pin<Box<dyn Future<Output = Result<(), PipelineFailure>> + Send>> {
        let seen = Arc::new(StdMutex::new(Seen::default()));
        self.jobs
            .lock()
            .unwrap()
            .push((job.stream.id, seen.clone()));
        let drain = self.drain;
        Box::pin(async move {
            loop {
                // A stop cuts the inputs too, so both may be ready: the stop is what happened.
                tokio::select! {
                    biased;
                    _ = job.stop.wait_for(|s| *s) => {
                        seen.lock().unwrap().stopped = true;
                        break;
                    }
                    m = job.media.recv() => match m {
                        Some(m) => seen.lock().unwrap().media.push(m),
                        None => break,
                    },
                }
            }
            tokio::time::sleep(drain).await;
            Ok(())
        })
    }
}

struct Harness {
    registry: Arc<Registry>,
    pipelines: Arc<FakePipelines>,
    store: Arc<SqliteStore>,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new(drain: Duration) -> Harness {
        Harness::with(drain, None)
    }

    fn with(drain: Duration, leases: Option<Arc<dyn Leases>>) -> Harness {
        Harness::built(drain, leases, None)
    }

    /// With a capacity check that takes `max` transcodes (the CPU not measured).
    fn taking(max: usize) -> Harness {
        let capacity = crate::capacity::Capacity::fixed(crate::capacity::CapacityConfig {
            max_transcodes: Some(max),
            cpu_percent: 100,
            policy: crate::capacity::OverloadPolicy::Refuse,
        });
        Harness::built(Duration::ZERO, None, Some(Arc::new(capacity)))
    }

    fn built(
        drain: Duration,
        leases: Option<Arc<dyn Leases>>,
        capacity: Option<Arc<crate::capacity::Capacity>>,
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open_in(dir.path()).unwrap());
        let pipelines = Arc::new(FakePipelines {
            drain,
            jobs: StdMutex::default(),
        });
        let registry = Registry::new(
            store.clone(),
            Arc::new(QualitySets::builtin()),
            pipelines.clone(),
            LiveConfig {
                packaging: PackagingConfig::default(),
                grace: GRACE,
                linger: LINGER,
                switch_timeout: SWITCH,
                media_root: dir.path().join("media"),
                stats_period: crate::live::stats::DEFAULT_SAMPLE_PERIOD,
                publish_auth: None,
                capacity,
            },
            crate::events::Events::new("node-a"),
            leases,
        );
        Harness {
            registry,
            pipelines,
            store,
            _dir: dir,
        }
    }

    fn stream(&self, edit: impl FnOnce(&mut StreamSettings)) -> i64 {
        let mut settings = StreamSettings {
            name: "s".into(),
            ..StreamSettings::default()
        };
        edit(&mut settings);
        self.store
            .create_stream(&settings, "tok", OffsetDateTime::now_utc())
            .unwrap()
            .id
    }

    /// A publish, and the owner's turn to act on it (it starts the session after the publish
    /// is answered), without letting time pass.
    async fn publish(&self, id: i64, slot: Slot) -> Result<Publisher, PublishError> {
        let publisher = self
            .registry
            .publish(id, slot, "tok", (Protocol::Rtmp, &Caller::default()))
            .await;
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        publisher
    }

    fn jobs(&self) -> usize {
        self.pipelines.jobs.lock().unwrap().len()
    }

    fn seen(&self, job: usize) -> Arc<StdMutex<Seen>> {
        self.pipelines.jobs.lock().unwrap()[job].1.clone()
    }
}

/// Lets every ready task run (paused time does not move while something can run).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

fn keyframe_with_config(dts_ms: u64) -> [MediaMessage; 2] {
    [
        MediaMessage::VideoConfig(VideoConfig {
            codec: VideoCodec::H264,
            record: Bytes::from_static(b"avcc"),
            width: 1280,
            height: 720,
        }),
        frame(dts_ms, true),
    ]
}

fn frame(dts_ms: u64, keyframe: bool) -> MediaMessage {
    MediaMessage::Frame(Frame {
        track: TrackKind::Video,
        dts: dts_ms * 1_000_000,
        pts: dts_ms * 1_000_000,
        keyframe,
        duration: None,
        data: Bytes::from_static(b"x"),
    })
}

#[tokio::test(start_paused = true)]
async fn refusals_come_before_anything_is_allocated() {
    let h = Harness::new(Duration::ZERO);
    let push = h.stream(|_| {});
    let inactive = h.stream(|s| s.active = false);
    let pull = h.stream(|s| {
        s.pull = true;
        s.uri = Some("srt://127.0.0.1:9/".into());
    });
    let r = &h.registry;
    assert_eq!(
        r.publish(
            push,
            Slot::Main,
            "nope",
            (Protocol::Srt, &Caller::default())
        )
        .await
        .err(),
        Some(PublishError::WrongToken(push))
    );
    assert_eq!(
        h.publish(inactive, Slot::Main).await.err(),
        Some(PublishError::Inactive(inactive))
    );
    assert_eq!(
        h.publish(pull, Slot::Main).await.err(),
        Some(PublishError::PullStream(pull))
    );
    assert_eq!(
        h.publish(9999, Slot::Main).await.err(),
        Some(PublishError::UnknownStream(9999))
    );
    assert_eq!(h.jobs(), 0);
    assert!(r.package(push).is_none());
    assert!(r.metrics().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_full_node_refuses_a_new_transcode_but_not_a_backup_or_a_reconnect() {
    let h = Harness::taking(1);
    let (on_air, next, pulled) = (h.stream(|_| {}), h.stream(|_| {}), h.stream(|_| {}));
    let mut main = h.publish(on_air, Slot::Main).await.unwrap();
    for m in keyframe_with_config(0) {
        assert!(main.send(m));
    }
    settle().await;
    assert!(h.registry.full().is_some());
    let refused = h.publish(next, Slot::Main).await.err();
    assert!(
        matches!(refused, Some(PublishError::AtCapacity { id, .. }) if id == next),
        "{refused:?}"
    );
    assert!(matches!(
        h.registry.claim_pull(pulled).await,
        Err(PublishError::AtCapacity { .. })
    ));
    assert!(
        h.registry.package(next).is_none(),
        "allocated for a refusal"
    );
    // The backup joins the running transcode.
    let backup = h.publish(on_air, Slot::Backup).await.unwrap();
    assert_eq!(h.jobs(), 1);
    // Both leave; the session ends, and the node takes a stream again (a reconnect, or another).
    drop((main, backup));
    settle().await;
    assert!(
        h.registry.full().is_none(),
        "still full after the session ended"
    );
    let _next = h.publish(next, Slot::Main).await.unwrap();
    assert_eq!(h.jobs(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_taken_slot_is_refused_while_its_publisher_sends() {
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|_| {});
    let mut main = h.publish(id, Slot::Main).await.unwrap();
    for m in keyframe_with_config(0) {
        assert!(main.send(m));
    }
    settle().await;
    assert!(h.registry.status(id).live());
    let start = Instant::now();
    assert_eq!(
        h.publish(id, Slot::Main).await.err(),
        Some(PublishError::AlreadyLive(id))
    );
    // The refusal waited for the slot to be released, bounded.
    assert_eq!(start.elapsed(), sessions::SLOT_RELEASE_WAIT);
    assert_eq!(h.jobs(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_reconnect_within_grace_continues_the_package_then_it_ends_and_lingers() {
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|_| {});
    let first = h.publish(id, Slot::Main).await.unwrap();
    let package = h.registry.package(id).unwrap();
    drop(first);
    settle().await;
    assert!(!h.registry.status(id).live(), "inputs gone: not live");
    assert!(
        h.registry.package(id).is_some(),
        "outputs kept for the grace"
    );

    tokio::time::sleep(GRACE - Duration::from_secs(1)).await;
    let again = h.publish(id, Slot::Main).await.unwrap();
    assert!(Arc::ptr_eq(&package, &h.registry.package(id).unwrap()));
    assert_eq!(h.jobs(), 2, "a new pipeline on the same package");
    assert!(!package.read(|p| p.ended()));

    drop(again);
    settle().await;
    tokio::time::sleep(GRACE - Duration::from_millis(10)).await;
    assert!(
        !package.read(|p| p.ended()),
        "still within the grace period"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(package.read(|p| p.ended()), "grace passed: playlists end");
    assert!(h.registry.package(id).is_some(), "ended outputs linger");
    tokio::time::sleep(LINGER).await;
    assert!(
        h.registry.package(id).is_none(),
        "forgotten after the linger"
    );
    assert!(h.registry.metrics().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_publish_waits_for_the_draining_pipeline_without_polling() {
    let drain = Duration::from_millis(1234);
    let h = Harness::new(drain);
    let id = h.stream(|_| {});
    drop(h.publish(id, Slot::Main).await.unwrap());
    settle().await;
    let start = Instant::now();
    let _again = h.publish(id, Slot::Main).await.unwrap();
    // Woken by the session's end itself: the wait is the drain to the millisecond (the old
    // 50 ms polling rounded it up to 1250 ms).
    let waited = start.elapsed();
    assert!(
        waited >= drain - Duration::from_millis(2) && waited <= drain,
        "waited {waited:?} for a {drain:?} drain"
    );
    assert_eq!(h.jobs(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_silent_publisher_is_evicted_by_a_new_publish() {
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|_| {});
    let mut old = h.publish(id, Slot::Main).await.unwrap();
    for m in keyframe_with_config(0) {
        old.send(m);
    }
    settle().await;
    // Silent for longer than the switch timeout: no longer receiving.
    tokio::time::sleep(SWITCH + Duration::from_millis(200)).await;
    assert!(!h.registry.status(id).live());
    let _new = h.publish(id, Slot::Main).await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), old.closed())
        .await
        .expect("the evicted publisher's connection is told to close");
    assert!(!old.send(frame(40, false)));
}

#[tokio::test(start_paused = true)]
async fn a_kicked_slot_is_cut_while_the_other_goes_on_and_a_reconnect_is_accepted() {
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|_| {});
    let mut main = h.publish(id, Slot::Main).await.unwrap();
    let mut backup = h.publish(id, Slot::Backup).await.unwrap();
    for m in keyframe_with_config(0) {
        main.send(m.clone());
        backup.send(m);
    }
    settle().await;
    assert_eq!(
        h.registry.cut_publishers(id, Some(Slot::Main)),
        vec![Slot::Main]
    );
    tokio::time::timeout(Duration::from_secs(1), main.closed())
        .await
        .expect("the kicked publisher's connection is told to close");
    assert!(!main.send(frame(40, false)));
    settle().await;
    assert!(
        backup.send(frame(40, false)),
        "the other slot is not kicked"
    );
    assert!(h.registry.publishing(id));
    assert_eq!(
        h.registry.cut_publishers(id, Some(Slot::Main)),
        Vec::<Slot>::new(),
        "nobody left on that slot"
    );
    // Every publisher: the session ends as if they had left; the stream stays open to them.
    assert_eq!(h.registry.cut_publishers(id, None), vec![Slot::Backup]);
    tokio::time::timeout(Duration::from_secs(1), backup.closed())
        .await
        .expect("kicked");
    settle().await;
    assert!(!h.registry.publishing(id));
    assert!(h.registry.package(id).is_some(), "the grace period follows");
    let again = h.publish(id, Slot::Main).await;
    assert!(again.is_ok(), "a reconnect is accepted after a kick");
    assert_eq!(h.jobs(), 2, "the next session runs");
}

#[tokio::test(start_paused = true)]
async fn kick_stops_the_pipeline_and_closes_the_publisher() {
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|_| {});
    let publisher = h.publish(id, Slot::Main).await.unwrap();
    h.registry.kick(id);
    tokio::time::timeout(Duration::from_secs(1), publisher.closed())
        .await
        .expect("kicked publisher closed");
    assert!(h.seen(0).lock().unwrap().stopped);
    assert!(!h.registry.status(id).live());
    assert!(
        h.registry.package(id).is_some(),
        "grace period follows a kick"
    );
}

#[tokio::test(start_paused = true)]
async fn main_and_backup_share_one_session_and_the_backup_takes_over() {
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|_| {});
    let mut main = h.publish(id, Slot::Main).await.unwrap();
    let mut backup = h.publish(id, Slot::Backup).await.unwrap();
    assert_eq!(h.jobs(), 1, "the backup joins the main's session");
    assert_eq!(
        h.publish(id, Slot::Backup).await.err(),
        Some(PublishError::AlreadyLive(id))
    );
    for m in keyframe_with_config(0) {
        main.send(m.clone());
        backup.send(m);
    }
    settle().await;
    let status = h.registry.status(id);
    assert!(status.live() && status.backup_live());
    // The main goes silent; the backup keeps sending 40 ms frames past the switch timeout.
    let mut t = 0;
    let until = Instant::now() + SWITCH + Duration::from_secs(1);
    while Instant::now() < until {
        t += 40;
        backup.send(frame(t, t % 1000 == 0));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let status = h.registry.status(id);
    assert!(!status.live() && status.backup_live());
    let switched = h
        .seen(0)
        .lock()
        .unwrap()
        .media
        .iter()
        .any(|m| matches!(m, MediaMessage::Discontinuity { .. }));
    assert!(switched, "the switch to the backup is marked");
    drop(main);
    drop(backup);
    settle().await;
    assert!(h.registry.package(id).is_some());
    assert!(!h.registry.status(id).backup_live());
}

#[tokio::test(start_paused = true)]
async fn a_pull_stream_starts_without_a_token_and_only_once() {
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|s| {
        s.pull = true;
        s.uri = Some("srt://127.0.0.1:9/".into());
    });
    let _p = h.registry.publish_pull(id).await.unwrap();
    assert_eq!(
        h.registry.publish_pull(id).await.err(),
        Some(PublishError::AlreadyLive(id))
    );
    assert_eq!(h.jobs(), 1);
}

#[tokio::test(start_paused = true)]
async fn settings_changes_reach_a_live_package() {
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|_| {});
    let _p = h.publish(id, Slot::Main).await.unwrap();
    let package = h.registry.package(id).unwrap();
    assert_eq!(package.read(|p| p.dvr_window()), None);
    let settings = StreamSettings {
        dvr_enabled: true,
        dvr_duration: 600,
        hls_mpegts_endlist_tag: false,
        ..StreamSettings::default()
    };
    h.registry.apply_settings(id, &settings);
    assert_eq!(
        package.read(|p| (p.dvr_window(), p.endlist_tag())),
        (Some(Duration::from_secs(600)), false)
    );
}

#[tokio::test(start_paused = true)]
async fn followers_see_publish_start_inputs_gone_resume_and_end_in_order() {
    use crate::events::{Event, Next};
    let h = Harness::new(Duration::ZERO);
    let id = h.stream(|_| {});
    let mut events = h.registry.events().subscribe();
    let first = h.publish(id, Slot::Main).await.unwrap();
    drop(first);
    settle().await;
    let again = h.publish(id, Slot::Main).await.unwrap();
    drop(again);
    settle().await;
    tokio::time::sleep(GRACE + Duration::from_millis(10)).await;
    let mut seen = Vec::new();
    while let Some(Next::Event(e)) = events.try_next() {
        assert_eq!(e.event.stream_id(), id);
        seen.push(match &e.event {
            Event::PublishStarted { slot, .. } => format!("publish {slot:?}"),
            Event::PublishStopped { slot, .. } => format!("left {slot:?}"),
            Event::LiveStarted { resumed: false, .. } => "started".into(),
            Event::LiveStarted { resumed: true, .. } => "resumed".into(),
            Event::InputsGone { .. } => "gone".into(),
            Event::LiveEnded { .. } => "ended".into(),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        seen,
        [
            "publish Main",
            "started",
            "left Main",
            "gone",
            "publish Main",
            "resumed",
            "left Main",
            "gone",
            "ended"
        ]
    );
}

/// Records the lease calls the registry makes; every take succeeds, with `left` as where the
/// stream's last node left its numbering.
#[derive(Default)]
struct FakeLeases {
    calls: StdMutex<Vec<(&'static str, i64)>>,
    left: StdMutex<Numbering>,
}

impl Leases for FakeLeases {
    fn take(
        self: Arc<Self>,
        id: i64,
        _from_idle: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Numbering, PublishError>> + Send>> {
        self.calls.lock().unwrap().push(("take", id));
        let left = *self.left.lock().unwrap();
        Box::pin(async move { Ok(left) })
    }

    fn release(self: Arc<Self>, id: i64) {
        self.calls.lock().unwrap().push(("release", id));
    }

    fn state_changed(self: Arc<Self>, _id: i64) {}
}

impl Harness {
    fn with_leases(drain: Duration) -> (Harness, Arc<FakeLeases>) {
        let leases = Arc::new(FakeLeases::default());
        (Harness::with(drain, Some(leases.clone())), leases)
    }
}

fn releases(leases: &FakeLeases) -> usize {
    leases
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(call, _)| *call == "release")
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_publish_check_whose_session_never_opens_gives_the_lease_up() {
    let (h, leases) = Harness::with_leases(Duration::ZERO);
    let id = h.stream(|_| {});
    // The handshake failed after the check (an SRT passphrase, a WHIP negotiation).
    let permit = h
        .registry
        .check_publish(
            id,
            Slot::Main,
            "tok",
            (Protocol::Srt, &Caller::default()),
            DRAIN_WAIT,
        )
        .await
        .unwrap();
    drop(permit);
    assert_eq!(
        *leases.calls.lock().unwrap(),
        [("take", id), ("release", id)]
    );

    // A backup's failed handshake leaves the lease to the main it joins.
    let main = h.publish(id, Slot::Main).await.unwrap();
    let backup = h
        .registry
        .check_publish(
            id,
            Slot::Backup,
            "tok",
            (Protocol::Srt, &Caller::default()),
            DRAIN_WAIT,
        )
        .await
        .unwrap();
    drop(backup);
    assert_eq!(releases(&leases), 1, "the main's session keeps the lease");
    drop(main);
}

#[tokio::test(start_paused = true)]
async fn a_linger_ending_during_a_publish_check_keeps_the_lease() {
    let (h, leases) = Harness::with_leases(Duration::ZERO);
    let id = h.stream(|_| {});
    let other = h.stream(|_| {});
    // Left alone, an ended stream's lease goes at the end of its linger.
    drop(h.publish(other, Slot::Main).await.unwrap());
    settle().await;
    tokio::time::sleep(GRACE + LINGER + Duration::from_secs(1)).await;
    assert_eq!(
        *leases.calls.lock().unwrap().last().unwrap(),
        ("release", other)
    );

    drop(h.publish(id, Slot::Main).await.unwrap());
    settle().await;
    tokio::time::sleep(GRACE + LINGER - Duration::from_secs(1)).await;
    // A publisher is checked just before the linger ends; its handshake outlasts it.
    let permit = h
        .registry
        .check_publish(
            id,
            Slot::Main,
            "tok",
            (Protocol::Srt, &Caller::default()),
            DRAIN_WAIT,
        )
        .await
        .unwrap();
    assert!(
        h.registry.claimed(id) && !h.registry.publishing(id),
        "the lease says a publisher is coming"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        h.registry.package(id).is_none(),
        "the old stream is forgotten"
    );
    let publisher = h.registry.start(permit).await.unwrap();
    assert_eq!(releases(&leases), 1, "only the other stream's lease went");
    assert!(h.registry.publishing(id));
    drop(publisher);
}

#[tokio::test(start_paused = true)]
async fn a_kicked_publisher_is_cut_before_the_pipeline_has_drained() {
    let drain = Duration::from_secs(5);
    let h = Harness::new(drain);
    let id = h.stream(|_| {});
    let publisher = h.publish(id, Slot::Main).await.unwrap();
    let kicked = Instant::now();
    h.registry.kick(id);
    tokio::time::timeout(Duration::from_secs(1), publisher.closed())
        .await
        .expect("the publisher waited for the pipeline's drain");
    assert!(kicked.elapsed() < drain);
    assert!(h.registry.package(id).is_some());
    // The publisher reconnecting at once waits for the drain, then starts the next session.
    let again = h.publish(id, Slot::Main).await.unwrap();
    assert!(kicked.elapsed() >= drain);
    assert_eq!(h.jobs(), 2);
    drop(again);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_live_and_idle_streams_without_waiting_for_their_grace() {
    let h = Harness::new(Duration::from_millis(500));
    let (live, idle) = (h.stream(|_| {}), h.stream(|_| {}));
    let _on_air = h.publish(live, Slot::Main).await.unwrap();
    drop(h.publish(idle, Slot::Main).await.unwrap());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(h.registry.package(idle).is_some(), "in its grace period");
    let start = Instant::now();
    h.registry.shutdown(Duration::from_secs(20)).await;
    // The live one's pipeline drains (its 500 ms); the idle one's owner does not sit out the
    // grace period.
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert!(
        h.seen(0).lock().unwrap().stopped,
        "the live pipeline was told to stop"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_taken_over_numbers_on_from_where_its_last_node_left() {
    let (h, leases) = Harness::with_leases(Duration::ZERO);
    let segment = h.registry.packaging().segment;
    let clock = || Numbering::starting(std::time::SystemTime::now(), segment, None);
    // Nothing left anywhere: segment numbers count the clock's segments, discontinuities 0.
    let fresh = h.stream(|_| {});
    let before = clock().next_msn;
    let p = h.publish(fresh, Slot::Main).await.unwrap();
    let n = h.registry.numbering(fresh).unwrap();
    assert!(
        n.next_msn >= before && n.next_msn <= clock().next_msn,
        "{n:?}"
    );
    assert_eq!(n.next_discontinuity, 0);
    drop(p);

    // The last node ran ahead of this one's clock and counted discontinuities: both go on.
    let left = Numbering {
        next_msn: clock().next_msn + 1000,
        next_discontinuity: 7,
        handover: None,
    };
    *leases.left.lock().unwrap() = left;
    let moved = h.stream(|_| {});
    let p = h.publish(moved, Slot::Main).await.unwrap();
    assert_eq!(h.registry.numbering(moved), Some(left));
    drop(p);
}
