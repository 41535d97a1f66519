//! Consumers of a package's output besides the renderers (a recorder, a relay to another
//! node): each [`Observer`] gets a bounded queue of the init segments and complete segments
//! the package takes in, in order per rendition. A slow consumer loses events — counted, and
//! reported by [`Observer::dropped`] — and never holds back the pipeline or the renderers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use time::OffsetDateTime;
use tokio::sync::mpsc;

use super::{Output, Package, SegmentKey};

/// What a package took in.
#[derive(Debug, Clone)]
pub enum PackageEvent {
    /// A rendition's init segment (ftyp+moov); a new one follows a rebuilt pipeline.
    Init {
        output: Output,
        rendition: String,
        init: Bytes,
    },
    /// A complete segment, as it is stored.
    Segment(CompletedSegment),
}

#[derive(Debug, Clone)]
pub struct CompletedSegment {
    pub key: SegmentKey,
    /// Wall-clock time of its first sample.
    pub pdt: OffsetDateTime,
    pub duration: Duration,
    /// First segment after a reconnect or a source switch.
    pub discontinuity: bool,
    /// Its parts in order (shared with the package, not copied).
    pub chunks: Vec<Bytes>,
}

/// One consumer's side.
pub struct Observer {
    rx: mpsc::Receiver<PackageEvent>,
    dropped: Arc<AtomicU64>,
}

impl Observer {
    /// The next event; `None` once the package is gone.
    pub async fn recv(&mut self) -> Option<PackageEvent> {
        self.rx.recv().await
    }

    /// The next event if one is queued now.
    pub fn try_recv(&mut self) -> Option<PackageEvent> {
        self.rx.try_recv().ok()
    }

    /// Events lost because this consumer fell behind its queue.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

struct Tap {
    tx: mpsc::Sender<PackageEvent>,
    dropped: Arc<AtomicU64>,
}

/// The package's observers.
#[derive(Default)]
pub(super) struct Taps {
    taps: Mutex<Vec<Tap>>,
}

impl Taps {
    fn taps(&self) -> std::sync::MutexGuard<'_, Vec<Tap>> {
        self.taps.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn any(&self) -> bool {
        !self.taps().is_empty()
    }

    /// Offers the event to every observer; a full queue drops it for that one, a closed one
    /// is forgotten.
    pub fn send(&self, event: PackageEvent) {
        self.taps().retain(|t| match t.tx.try_send(event.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                t.dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }
}

impl Package {
    /// A new consumer of what the package takes in from now on, with a queue of `capacity`
    /// events (a segment is one event).
    pub fn observe(&self, capacity: usize) -> Observer {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        self.taps.taps().push(Tap {
            tx,
            dropped: dropped.clone(),
        });
        Observer { rx, dropped }
    }

    /// A new consumer of `output` as from the start of the current session, or after the
    /// segments `after` names per rendition (where the previous consumer ended): with the
    /// observer, what it would have received since — per rendition, each init segment followed
    /// by the complete segments that decode with it. Taken under the state lock, under which
    /// the package also offers inits and completed segments to its observers: each one is in
    /// exactly one of the two. (The source remux keeps no segments: its current inits only.)
    pub fn observe_since(
        &self,
        capacity: usize,
        output: Output,
        after: &BTreeMap<String, u64>,
    ) -> (Observer, Vec<PackageEvent>) {
        if output == Output::Source {
            let observer = self.observe(capacity);
            let inits = self.current_source_inits().into_iter();
            let init = |(rendition, init)| PackageEvent::Init {
                output,
                rendition,
                init,
            };
            return (observer, inits.map(init).collect());
        }
        let p = self.lock();
        let mut backlog = Vec::new();
        for r in p.list(output) {
            let mut init_version = None;
            let mut init = |backlog: &mut Vec<PackageEvent>, version: u32| {
                if init_version == Some(version) {
                    return;
                }
                init_version = Some(version);
                if let Some(init) = r.init(version) {
                    backlog.push(PackageEvent::Init {
                        output,
                        rendition: r.name.clone(),
                        init: init.clone(),
                    });
                }
            };
            let first = after.get(&r.name).map_or(0, |m| m + 1);
            let first = first.max(p.session_msn());
            let session = r.segments().iter().filter(|s| s.msn >= first);
            // Older ones may be on disk only; a recording's backlog is seconds, in memory.
            for s in session.filter(|s| s.complete && s.in_memory()) {
                init(&mut backlog, s.init_version);
                backlog.push(PackageEvent::Segment(CompletedSegment {
                    key: SegmentKey {
                        output,
                        rendition: r.name.clone(),
                        msn: s.msn,
                    },
                    pdt: s.pdt,
                    duration: s.duration(),
                    discontinuity: s.discontinuity,
                    chunks: s.chunks().1,
                }));
            }
            if r.has_init() {
                init(&mut backlog, r.current_init_version());
            }
        }
        let observer = self.observe(capacity);
        drop(p);
        (observer, backlog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::state::tests::{part, video_720p};
    use crate::package::{PackageState, PackagingConfig, PartIn};

    fn package() -> Arc<Package> {
        Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(1_000_000)],
        )))
    }

    #[tokio::test]
    async fn an_observer_gets_inits_and_complete_segments_in_order() {
        let pkg = package();
        let mut obs = pkg.observe(16);
        let sink = pkg.sink(Output::Cmaf, "720p").unwrap();
        sink.init(Bytes::from_static(b"ftyp+moov"), None);
        let t0 = OffsetDateTime::now_utc();
        for n in 0..9u64 {
            sink.part(part(n % 4 == 0, 500, t0 + Duration::from_millis(500 * n)));
        }
        match obs.recv().await.unwrap() {
            PackageEvent::Init {
                rendition, init, ..
            } => {
                assert_eq!((rendition.as_str(), &init[..]), ("720p", &b"ftyp+moov"[..]));
            }
            other => panic!("{other:?}"),
        }
        let mut seen = Vec::new();
        for _ in 0..2 {
            match obs.recv().await.unwrap() {
                PackageEvent::Segment(s) => seen.push(s),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen[1].key.msn, seen[0].key.msn + 1);
        assert_eq!(seen[0].duration, Duration::from_secs(2));
        assert_eq!(seen[0].pdt, t0);
        assert_eq!(seen[0].chunks.len(), 4);
        assert_eq!(seen[1].pdt, t0 + Duration::from_secs(2));
        assert_eq!(obs.dropped(), 0);
    }

    /// The inputs leave (or the pipeline is rebuilt) with a segment open. It ends
    /// there and is complete like any other: an observer gets it, with every part pushed, and
    /// storage holds it — before, it was only marked complete and a recording lost it.
    #[tokio::test]
    async fn a_discontinuity_hands_over_the_open_segment_to_observers_and_storage() {
        use crate::package::{MemoryStorage, SegmentStorage};
        let pkg = package();
        let storage = Arc::new(MemoryStorage::default());
        pkg.set_storage(storage.clone());
        let mut obs = pkg.observe(16);
        let sink = pkg.sink(Output::Cmaf, "720p").unwrap();
        let t0 = OffsetDateTime::now_utc();
        // One complete segment (msn 0) and three parts of the open one (msn 1).
        for n in 0..7u64 {
            let data = Bytes::from(vec![n as u8; 10]);
            let at = t0 + Duration::from_millis(500 * n);
            sink.part(PartIn {
                data,
                ..part(n % 4 == 0, 500, at)
            });
        }
        pkg.mark_discontinuity();
        let mut seen = Vec::new();
        while let Some(PackageEvent::Segment(s)) = obs.try_recv() {
            seen.push(s);
        }
        let msns: Vec<u64> = seen.iter().map(|s| s.key.msn).collect();
        assert_eq!(msns, [0, 1]);
        let last = &seen[1];
        assert_eq!(last.duration, Duration::from_millis(1500));
        assert_eq!(last.pdt, t0 + Duration::from_secs(2));
        assert_eq!(last.chunks.len(), 3);
        pkg.flush_storage();
        let stored = storage
            .get(&last.key)
            .expect("the closed segment is stored");
        assert_eq!(&stored[..], &[[4u8; 10], [5; 10], [6; 10]].concat()[..]);
        // Nothing is handed over twice: a second discontinuity finds no open segment.
        pkg.mark_discontinuity();
        assert!(obs.try_recv().is_none());
        assert_eq!(storage.len(), 2);
    }

    /// A consumer that starts with the session gets its init and the session's complete
    /// segments as a backlog — not those of the session before, not the open one — and every
    /// later segment from its queue, each once.
    #[tokio::test]
    async fn observing_since_the_session_start_backlogs_that_sessions_segments() {
        use crate::package::{MemoryStorage, SessionOptions};
        let pkg = package();
        let sink = pkg.sink(Output::Cmaf, "720p").unwrap();
        sink.init(Bytes::from_static(b"ftyp+moov"), None);
        let t0 = OffsetDateTime::now_utc();
        let at = |n: u64| t0 + Duration::from_millis(500 * n);
        // The previous session: msn 0 complete, msn 1 closed when its inputs left.
        for n in 0..6u64 {
            sink.part(part(n % 4 == 0, 500, at(n)));
        }
        pkg.mark_discontinuity();
        pkg.start_session(
            SessionOptions::default(),
            Arc::new(MemoryStorage::default()),
        );
        // This one: msn 2 and 3 complete, 4 open.
        for n in 8..17u64 {
            sink.part(part(n % 4 == 0, 500, at(n)));
        }
        let (mut obs, backlog) = pkg.observe_since(16, Output::Cmaf, &BTreeMap::new());
        let seen: Vec<String> = backlog
            .iter()
            .map(|e| match e {
                PackageEvent::Init { init, .. } => format!("init {}", init.len()),
                PackageEvent::Segment(s) => format!("segment {}", s.key.msn),
            })
            .collect();
        assert_eq!(seen, ["init 9", "segment 2", "segment 3"]);
        assert!(obs.try_recv().is_none());
        sink.part(part(true, 500, at(20)));
        match obs.try_recv() {
            Some(PackageEvent::Segment(s)) => assert_eq!(s.key.msn, 4),
            other => panic!("{other:?}"),
        }
        assert!(obs.try_recv().is_none());
    }

    #[tokio::test]
    async fn a_slow_observer_loses_events_counted_and_never_blocks() {
        let pkg = package();
        let mut slow = pkg.observe(1);
        let sink = pkg.sink(Output::Cmaf, "720p").unwrap();
        let t0 = OffsetDateTime::now_utc();
        // Five complete segments into a queue of one: four are dropped for this observer.
        for n in 0..21u64 {
            sink.part(part(n % 4 == 0, 500, t0 + Duration::from_millis(500 * n)));
        }
        assert_eq!(slow.dropped(), 4);
        assert!(matches!(slow.recv().await, Some(PackageEvent::Segment(_))));
        drop(slow);
        // A gone observer is forgotten at the next event.
        sink.part(part(true, 500, t0 + Duration::from_secs(30)));
        assert!(!pkg.taps.any());
    }
}
