//! Packaging: the per-stream segment store fed by the pipeline, and the renderers that turn it
//! into LL-HLS and MPEG-TS HLS playlists and the LL-DASH MPD. Never imports ingest.

pub mod audience;
mod config;
pub mod dash;
pub mod hls;
mod numbering;
pub mod observe;
mod rendition;
pub mod sink;
pub mod state;
pub mod storage;
pub(crate) mod ts;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

pub use state::{
    PackageState, PackagingConfig, PartIn, PushOutcome, Rendition, RenditionKind, Retention,
};

pub use numbering::{Handover, Numbering};
pub use observe::{CompletedSegment, Observer, PackageEvent};
pub use sink::{Layout, RenditionSink};
pub use storage::{DiskStorage, MemoryStorage, SegmentKey, SegmentStorage};

use bytes::Bytes;

/// Which output a rendition belongs to: its list in the package and its file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Output {
    Cmaf,
    Ts,
    /// The source remuxed without re-encoding (fragmented MP4, audio and video in one track
    /// set): observe-only — it is handed to observers (an `origin` recording) and kept nowhere.
    Source,
}

impl Output {
    pub fn extension(self) -> &'static str {
        match self {
            Output::Cmaf => "m4s",
            Output::Ts => "ts",
            Output::Source => "mp4",
        }
    }
}

/// While segments cannot be written, at most this many complete ones per rendition are held in
/// memory only (a minute of 2 s segments): the window is cut from the front beyond it.
pub const MAX_UNWRITTEN_SEGMENTS: usize = 30;

/// The per-session choices of the stream record that the renderers apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionOptions {
    /// Rewind window kept (DVR); `None`: the live window only.
    pub dvr_window: Option<Duration>,
    /// Whether an ended stream's playlists carry EXT-X-ENDLIST.
    pub endlist_tag: bool,
}

/// A [`PackageState`] shared between the pipeline's streaming threads (writers, through the
/// [`sink`] API) and HTTP handlers (readers), with a change counter that blocking requests
/// wait on, and the storage its complete segments go to.
pub struct Package {
    state: Mutex<PackageState>,
    /// Fires on every change; the change count itself is [`PackageState::version`].
    changed: watch::Sender<()>,
    /// Where complete segments go beyond memory; `None`: memory only.
    writer: Mutex<Option<storage::Writer>>,
    /// Consumers besides the renderers (recorders).
    taps: observe::Taps,
    /// The source remux's current init segment, and whether its next fragment follows a
    /// discontinuity (a reconnect or a rebuilt pipeline).
    source: Mutex<std::collections::HashMap<String, (Option<Bytes>, bool)>>,
    /// How many consumers want the source remux now (origin recordings): the pipeline feeds
    /// its source branch only while one does.
    source_demand: Arc<std::sync::atomic::AtomicUsize>,
    /// Whether the MPEG-TS HLS output is muxed now ([`Package::ts_demand`]).
    ts: Mutex<TsDemand>,
    /// The HLS and DASH players watching.
    pub audience: audience::Audience,
}

/// MPEG-TS HLS is muxed on demand: from the first request for it until nobody has asked for
/// [`PackagingConfig::mpegts_idle`] (MediaMTX's `hlsAlwaysRemux: no` and
/// `hlsMuxerCloseAfter`). The three muxers and their parsers cost ~4 % of a transcoded
/// stream's CPU for an output most streams never serve. A stream with a DVR window muxes
/// always: its rewind window must exist before anyone asks.
#[derive(Debug, Default)]
struct TsDemand {
    /// `None`: muxed always.
    idle: Option<Duration>,
    /// When the last request for TS ended.
    last_request: Option<std::time::Instant>,
    /// Requests for TS being answered (a first playlist request waits for the first segment).
    requests: usize,
    /// The stream has a DVR window.
    always: bool,
    /// Segments are being produced (the pipeline opened its TS branches).
    live: bool,
    /// Bumped at each pause: a segment muxed before it is never stored after it.
    generation: u64,
}

/// What the pipeline's TS branches read before each buffer ([`Package::ts_demand`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsView {
    pub wanted: bool,
    pub live: bool,
    pub generation: u64,
}

/// Empties a rendition's complete segments ([`Rendition::clear_complete`]); their storage keys.
fn cleared(output: Output, r: &mut Rendition) -> Vec<SegmentKey> {
    r.clear_complete()
        .into_iter()
        .map(|msn| SegmentKey {
            output,
            rendition: r.name.clone(),
            msn,
        })
        .collect()
}

/// A TS-HLS request being answered ([`Package::request_ts`]); the idle time counts from its end.
pub struct TsRequest(Arc<Package>);

impl Drop for TsRequest {
    fn drop(&mut self) {
        let mut ts = self.0.ts();
        ts.requests = ts.requests.saturating_sub(1);
        ts.last_request = Some(std::time::Instant::now());
    }
}

/// A consumer's claim on the source remux ([`Package::demand_source`]); released on drop.
pub struct SourceDemand(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for SourceDemand {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Package {
    pub fn new(package: PackageState) -> Package {
        let ts = TsDemand {
            idle: package.config().mpegts_idle,
            ..TsDemand::default()
        };
        Package {
            state: Mutex::new(package),
            changed: watch::Sender::new(()),
            writer: Mutex::new(None),
            taps: observe::Taps::default(),
            source: Mutex::default(),
            source_demand: Arc::default(),
            ts: Mutex::new(ts),
            audience: audience::Audience::default(),
        }
    }

    fn ts(&self) -> MutexGuard<'_, TsDemand> {
        self.ts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request for the TS-HLS output, held while it is answered: muxed from the next
    /// keyframe on, until it has not been asked for during [`PackagingConfig::mpegts_idle`].
    pub fn request_ts(self: &Arc<Self>) -> TsRequest {
        self.ts().requests += 1;
        TsRequest(self.clone())
    }

    /// Whether TS-HLS should be muxed now, whether it is, and the current generation.
    pub fn ts_demand(&self) -> TsView {
        let ts = self.ts();
        TsView {
            wanted: ts.always
                || ts.requests > 0
                || match (ts.idle, ts.last_request) {
                    (None, _) => true,
                    (Some(idle), Some(t)) => t.elapsed() < idle,
                    (Some(_), None) => false,
                },
            live: ts.live,
            generation: ts.generation,
        }
    }

    /// Whether TS segments are being produced (the TS playlists wait for it).
    pub fn ts_live(&self) -> bool {
        self.ts().live
    }

    /// The pipeline opened its TS branches: returns the generation its segments belong to.
    pub fn ts_opened(&self) -> u64 {
        let mut ts = self.ts();
        ts.live = true;
        ts.generation
    }

    /// Nobody asked for TS-HLS for a while: the pipeline stops muxing it and its window is
    /// emptied, so a player that comes back later starts from fresh segments (after an
    /// `EXT-X-DISCONTINUITY`), never from a stale window.
    pub fn pause_ts(&self) {
        {
            let mut ts = self.ts();
            if !ts.live {
                return;
            }
            ts.live = false;
            // Bumped before the window is emptied: a segment pushed after this with the old
            // generation is refused under the state lock (see `push`).
            ts.generation += 1;
        }
        let removed = self.update(|p| {
            let mut removed = Vec::new();
            // The variants stop muxing each in its own thread, one maybe a segment after
            // another: they resume on one number, as players switching variants expect.
            let next = p.ts_renditions().iter().map(|r| r.next_msn()).max();
            for r in p.list_mut(Output::Ts).into_iter().flatten() {
                if let Some(next) = next.filter(|&n| n > 0) {
                    r.continue_after(next - 1);
                }
                // TS segments arrive whole: none is open.
                removed.extend(cleared(Output::Ts, r));
                r.mark_discontinuity();
            }
            removed
        });
        self.queue(removed.into_iter().map(storage::Job::Delete).collect());
    }

    fn set_ts_always(&self, options: &SessionOptions) {
        self.ts().always = options.dvr_window.is_some();
    }

    /// Asks the pipeline for the source remux until the returned claim is dropped.
    pub fn demand_source(&self) -> SourceDemand {
        self.source_demand
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        SourceDemand(self.source_demand.clone())
    }

    /// Whether a consumer wants the source remux (read by the pipeline's source branch).
    pub fn wants_source(&self) -> bool {
        self.source_demand
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    }

    fn lock(&self) -> MutexGuard<'_, PackageState> {
        // Writers only append to in-memory structures; a panic mid-update leaves a usable store.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn writer(&self) -> MutexGuard<'_, Option<storage::Writer>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn read<R>(&self, f: impl FnOnce(&PackageState) -> R) -> R {
        f(&self.lock())
    }

    /// Applies a change and wakes every waiting request.
    pub fn update<R>(&self, f: impl FnOnce(&mut PackageState) -> R) -> R {
        let out = {
            let mut p = self.lock();
            p.bump_version();
            f(&mut p)
        };
        self.changed.send_replace(());
        out
    }

    /// Where complete segments are kept beyond memory (delivery reads old ones from it).
    pub fn storage(&self) -> Option<Arc<dyn SegmentStorage>> {
        self.writer().as_ref().map(|w| w.storage.clone())
    }

    /// Sends complete segments to `storage` from now on, through a writer thread of its own.
    pub fn set_storage(self: &Arc<Self>, storage: Arc<dyn SegmentStorage>) {
        match storage::Writer::spawn(storage, Arc::downgrade(self)) {
            Ok(w) => *self.writer() = Some(w),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the segment writer; segments stay in memory");
            }
        }
    }

    /// Waits until every storage job queued so far is done (tests, and a clean shutdown).
    pub fn flush_storage(&self) {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let queued = self
            .writer()
            .as_ref()
            .is_some_and(|w| w.send(storage::Job::Flush(tx)).is_ok());
        if queued {
            let _ = rx.recv();
        }
    }

    /// Queues storage jobs; a write that cannot be queued counts as a failed one.
    fn queue(&self, jobs: Vec<storage::Job>) {
        let mut refused = Vec::new();
        if let Some(w) = self.writer().as_ref() {
            for job in jobs {
                if let Err(storage::Job::Put(key, chunks)) = w.send(job) {
                    refused.push((key, chunks.iter().map(Bytes::len).sum::<usize>()));
                }
            }
        }
        for (key, len) in refused {
            let behind = std::io::Error::other("the segment writer is behind (disk too slow)");
            self.stored(&key, len, Err(behind));
        }
    }

    /// Appends a part to a rendition (`ts_generation`: the part is a complete TS segment muxed
    /// in that TS generation), then hands the completed segment and the evicted ones to the
    /// storage writer.
    pub(crate) fn push(
        &self,
        output: Output,
        name: &str,
        part: PartIn,
        ts_generation: Option<u64>,
    ) {
        // When the part came out of the muxer: the MPD's clock compares it with the announcement.
        let now = time::OffsetDateTime::now_utc();
        let begins = part.starts_segment && output == Output::Cmaf;
        let (evicted, completed) = self.update(|p| {
            if let Some(generation) = ts_generation {
                // Under the state lock, which `pause_ts` takes after bumping the generation:
                // a segment of a paused generation never lands after its window was emptied.
                let ts = self.ts();
                if !ts.live || ts.generation != generation {
                    return (Vec::new(), None);
                }
            }
            let retention = p.retention();
            let Some(r) = p.rendition_in_mut(output, name) else {
                return (Vec::new(), None);
            };
            let mut outcome = r.push_part(part, retention);
            if ts_generation.is_some() {
                r.close_open_segment();
                outcome.completed = r.segments().back().map(|s| s.chunks());
            }
            let completed = outcome
                .completed
                .map(|(msn, chunks)| self.completed(output, r, msn, chunks));
            if begins {
                dash::segment_began(p, name, now);
            }
            (outcome.evicted, completed)
        });
        let mut jobs: Vec<storage::Job> = evicted
            .into_iter()
            .map(|msn| {
                storage::Job::Delete(SegmentKey {
                    output,
                    rendition: name.to_owned(),
                    msn,
                })
            })
            .collect();
        jobs.extend(completed);
        if !jobs.is_empty() {
            self.queue(jobs);
        }
    }

    /// A segment of `r` just completed, under the state lock: the observers get it now and the
    /// returned storage write is to be queued once the lock is released. Sent under the lock
    /// (state, then taps): an observer registered meanwhile ([`Package::observe_since`] takes
    /// the same lock) finds the segment either in the package or in its queue, never in neither
    /// — checking for observers before taking the state lock missed it.
    fn completed(
        &self,
        output: Output,
        r: &Rendition,
        msn: u64,
        chunks: Vec<Bytes>,
    ) -> storage::Job {
        let key = SegmentKey {
            output,
            rendition: r.name.clone(),
            msn,
        };
        if self.taps.any() {
            if let Some(s) = r.segment(msn) {
                self.taps.send(PackageEvent::Segment(CompletedSegment {
                    key: key.clone(),
                    pdt: s.pdt,
                    duration: s.duration(),
                    discontinuity: s.discontinuity,
                    chunks: chunks.clone(),
                }));
            }
        }
        storage::Job::Put(key, chunks)
    }

    /// The writer's outcome for a completed segment. A failed write (disk full) keeps the
    /// segment in memory, sets [`PackageState::storage_error`] (shown in the record) and cuts
    /// the window to [`MAX_UNWRITTEN_SEGMENTS`] held in memory only; live output goes on, and
    /// the next segment written clears the error.
    fn stored(&self, key: &SegmentKey, len: usize, written: std::io::Result<()>) {
        let (recovered, failed_first, evicted) = self.update(|p| {
            let (recovered, failed_first) = match &written {
                Ok(()) => (p.storage_recovered(), false),
                Err(e) => (
                    None,
                    p.storage_failed(time::OffsetDateTime::now_utc(), e.to_string()),
                ),
            };
            let Some(r) = p.rendition_in_mut(key.output, &key.rendition) else {
                return (recovered, failed_first, Vec::new());
            };
            let evicted = match &written {
                Ok(()) => {
                    r.mark_on_disk(key.msn, len);
                    Vec::new()
                }
                Err(_) => r.cap_unwritten(MAX_UNWRITTEN_SEGMENTS),
            };
            (recovered, failed_first, evicted)
        });
        let (name, msn) = (&key.rendition, key.msn);
        if let (true, Err(e)) = (failed_first, &written) {
            tracing::error!(rendition = %name, msn, error = %e, "cannot write segments; live output continues from memory");
        }
        if let Some((since, _)) = recovered {
            let secs = (time::OffsetDateTime::now_utc() - since).whole_seconds();
            tracing::info!(rendition = %name, msn, failing_secs = secs, "segments are written again");
        }
        if let Some(w) = self.writer().as_ref() {
            for msn in evicted {
                let _ = w.send(storage::Job::Delete(SegmentKey { msn, ..key.clone() }));
            }
        }
    }

    /// A (re)started session's options and where its complete segments go.
    pub fn start_session(
        self: &Arc<Self>,
        options: SessionOptions,
        storage: Arc<dyn SegmentStorage>,
    ) {
        self.set_ts_always(&options);
        self.update(|p| p.start_session(options.endlist_tag, options.dvr_window));
        if self.writer().is_none() {
            self.set_storage(storage);
        }
    }

    /// Changed settings of a live (or lingering) stream: effective with the next part.
    pub fn set_options(&self, options: SessionOptions) {
        self.set_ts_always(&options);
        self.update(|p| p.set_options(options.endlist_tag, options.dvr_window));
    }

    /// The inputs are gone (grace period) or the pipeline is rebuilt: whatever comes next
    /// continues every playlist after a discontinuity.
    pub fn mark_discontinuity(&self) {
        for (_, d) in self
            .source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values_mut()
        {
            *d = true;
        }
        // The open segment ends here: it is complete like any other, so it goes to observers
        // (a recording would otherwise end a segment short) and to storage.
        let puts = self.update(|p| {
            let mut puts = Vec::new();
            for output in [Output::Cmaf, Output::Ts] {
                for r in p.list_mut(output).into_iter().flatten() {
                    let open = r.open_segment().filter(|s| !s.parts.is_empty());
                    let open = open.map(|s| s.chunks());
                    r.mark_discontinuity();
                    if let Some((msn, chunks)) = open {
                        puts.push(self.completed(output, r, msn, chunks));
                    }
                }
            }
            puts
        });
        if !puts.is_empty() {
            self.queue(puts);
        }
    }

    /// The grace period passed without a new publish: playlists end (EXT-X-ENDLIST).
    pub fn set_ended(&self) {
        self.update(|p| p.set_ended(true));
    }

    /// Empties the rewind window (memory and storage); the open segment stays.
    pub fn clear_dvr(&self) {
        let removed = self.update(|p| {
            let mut removed = Vec::new();
            for output in [Output::Cmaf, Output::Ts] {
                for r in p.list_mut(output).into_iter().flatten() {
                    removed.extend(cleared(output, r));
                }
            }
            removed
        });
        self.queue(removed.into_iter().map(storage::Job::Delete).collect());
    }

    /// Why segments are not being written, for the stream record; `None` while they are.
    pub fn storage_error(&self) -> Option<String> {
        self.read(|p| {
            p.storage_error().as_ref().map(|(since, why)| {
                format!("cannot write segments since {}: {why}", utc_ms(*since))
            })
        })
    }

    /// Evaluates `f` now and after every change until it yields a value or `timeout` passes.
    pub async fn wait_for<R>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&PackageState) -> Option<R>,
    ) -> Option<R> {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            if let Some(r) = self.read(&mut f) {
                return Some(r);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                // Sender gone (cannot happen while `self` lives) or deadline passed.
                _ => return self.read(&mut f),
            }
        }
    }
}

/// A UTC time as ISO 8601 with milliseconds and `Z`: EXT-X-PROGRAM-DATE-TIME (RFC 8216bis
/// §4.4.4.6) and the MPD's xs:dateTime attributes both take this form.
pub fn utc_ms(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A media dir that cannot be written (a file stands where its directory should be): the
    /// error shows, memory holds at most MAX_UNWRITTEN_SEGMENTS, and it clears once writable.
    #[test]
    fn a_failing_disk_is_reported_bounded_and_recovered_from() {
        use state::tests::{part, video_720p};
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("media");
        std::fs::write(&root, b"in the way").unwrap();
        let mut sp = PackageState::new(PackagingConfig::default(), vec![video_720p(1_000_000)]);
        sp.set_dvr_window(Some(Duration::from_secs(3600)));
        let pkg = Arc::new(Package::new(sp));
        pkg.set_storage(Arc::new(DiskStorage::new(root.clone())));
        let t0 = time::OffsetDateTime::now_utc();
        let mut msn_parts = 0u64;
        let mut segment = |pkg: &Package| {
            for i in 0..4 {
                let t = t0 + Duration::from_millis(500 * msn_parts);
                pkg.push(Output::Cmaf, "720p", part(i == 0, 500, t), None);
                msn_parts += 1;
            }
            // Writes happen on the writer thread: wait for their outcome.
            pkg.flush_storage();
        };
        for _ in 0..(MAX_UNWRITTEN_SEGMENTS + 10) {
            segment(&pkg);
        }
        let (error, held) = pkg.read(|p| {
            let r = &p.renditions()[0];
            let held = r.segments().iter().filter(|s| s.complete).count();
            (p.storage_error().cloned(), held)
        });
        let (_, why) = error.expect("the error is recorded");
        assert!(
            why.contains("Not a directory") || why.contains("exists"),
            "{why}"
        );
        assert_eq!(held, MAX_UNWRITTEN_SEGMENTS);
        // Space is back: the next completed segment is written and the error clears.
        std::fs::remove_file(&root).unwrap();
        segment(&pkg);
        segment(&pkg);
        assert!(pkg.read(|p| p.storage_error().is_none()));
        let on_disk = std::fs::read_dir(root.join("cmaf/720p")).unwrap().count();
        assert!(on_disk >= 1);
    }

    /// A package numbered from `left`, with a 720p rendition and an audio one.
    fn numbered_package(left: Numbering) -> (Arc<Package>, PackagingConfig) {
        use state::tests::{stereo_audio, video_720p};
        let config = PackagingConfig::default();
        let pkg = Arc::new(Package::new(
            PackageState::new(config, vec![]).numbered_from(left),
        ));
        pkg.install(Layout {
            segment: config.segment,
            part: config.part,
            cmaf: vec![video_720p(1_000_000), stereo_audio(128_000)],
            ts: vec![],
        });
        (pkg, config)
    }

    /// A package numbered from where another node left the stream: its playlists go on past
    /// that node's segment and discontinuity numbers (read back with m3u8-rs), and what it
    /// leaves for the next node is past its own.
    #[test]
    fn a_package_numbers_on_from_where_the_last_node_left() {
        use state::tests::part;
        let left = Numbering {
            next_msn: 1_764_000_000,
            next_discontinuity: 4,
            handover: None,
        };
        let (pkg, config) = numbered_package(left);
        let t0 = time::OffsetDateTime::now_utc();
        let per_segment = (config.segment.as_millis() / 500) as u64;
        for i in 0..3 * per_segment {
            let t = t0 + Duration::from_millis(500 * i);
            for name in ["720p", "audio"] {
                pkg.push(Output::Cmaf, name, part(i % per_segment == 0, 500, t), None);
            }
        }
        let text = pkg.read(|p| hls::render_media(p, &p.renditions()[0], false, false));
        let listed = match m3u8_rs::parse_playlist_res(text.as_bytes()) {
            Ok(m3u8_rs::Playlist::MediaPlaylist(m)) => m,
            other => panic!("{other:?}: {text}"),
        };
        assert_eq!(listed.media_sequence, left.next_msn, "{text}");
        assert_eq!(
            listed.discontinuity_sequence, left.next_discontinuity,
            "{text}"
        );
        assert!(listed.segments.iter().all(|s| !s.discontinuity), "{text}");
        // A publisher came back within the grace period: one discontinuity more.
        pkg.update(|p| {
            for r in p.list_mut(Output::Cmaf).into_iter().flatten() {
                r.mark_discontinuity();
            }
        });
        pkg.push(Output::Cmaf, "720p", part(true, 500, t0), None);
        let next = pkg.read(|p| p.numbering());
        assert_eq!(next.next_msn, left.next_msn + 4, "3 complete, 1 open");
        assert_eq!(next.next_discontinuity, left.next_discontinuity + 2);
    }

    /// A package taking a stream over from a node that stopped cleanly bridges from where that
    /// node left its viewers: the numbers it left unused are gap segments in its discontinuity,
    /// dated from its edge to this package's first segment, then a discontinuity (read back
    /// with m3u8-rs). Once the first segment leaves the window, so does the bridge.
    #[test]
    fn a_package_taking_over_bridges_from_the_stopping_node_s_edge() {
        use state::tests::part;
        let t0 = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let edge = t0 - Duration::from_millis(1500);
        let left = Numbering {
            next_msn: 900_000_002,
            next_discontinuity: 4,
            handover: Some(Handover {
                first_msn: 900_000_000,
                edge_ms: (edge.unix_timestamp_nanos() / 1_000_000) as i64,
            }),
        };
        let (pkg, config) = numbered_package(left);
        let per_segment = (config.segment.as_millis() / 500) as u64;
        let push = |from: u64, to: u64| {
            for i in from..to {
                let t = t0 + Duration::from_millis(500 * i);
                for name in ["720p", "audio"] {
                    pkg.push(Output::Cmaf, name, part(i % per_segment == 0, 500, t), None);
                }
            }
        };
        push(0, 3 * per_segment);
        let playlist = |skip: bool| {
            let text = pkg.read(|p| hls::render_media(p, &p.renditions()[0], skip, false));
            match m3u8_rs::parse_playlist_res(text.as_bytes()) {
                Ok(m3u8_rs::Playlist::MediaPlaylist(m)) => (m, text),
                other => panic!("{other:?}: {text}"),
            }
        };
        let (listed, text) = playlist(false);
        assert_eq!(listed.media_sequence, 900_000_000, "{text}");
        assert_eq!(
            listed.discontinuity_sequence, 3,
            "the stopping node's: {text}"
        );
        let gap = |s: &m3u8_rs::MediaSegment| s.unknown_tags.iter().any(|t| t.tag == "X-GAP");
        let (gaps, ours) = listed.segments.split_at(2);
        for (i, g) in gaps.iter().enumerate() {
            assert!(gap(g) && !g.discontinuity, "{text}");
            assert!((g.duration - 0.75).abs() < 1e-3, "{text}");
            let pdt = g.program_date_time.unwrap().timestamp_millis();
            let want = (edge + Duration::from_millis(750 * i as u64)).unix_timestamp() * 1000
                + i64::from((edge + Duration::from_millis(750 * i as u64)).millisecond());
            assert_eq!(pdt, want, "{text}");
        }
        assert!(ours[0].discontinuity && !gap(&ours[0]), "{text}");
        assert_eq!(
            ours[0].program_date_time.unwrap().timestamp(),
            t0.unix_timestamp(),
            "{text}"
        );
        assert!(
            ours[1..].iter().all(|s| !s.discontinuity && !gap(s)),
            "{text}"
        );
        // A delta update that skips nothing lists the bridge too.
        assert_eq!(playlist(true).0.segments.len(), listed.segments.len());
        // The first segment leaves the live window: the bridge with it, and the sequence
        // counts the discontinuity that left.
        push(3 * per_segment, 12 * per_segment);
        let (later, text) = playlist(false);
        assert!(later.media_sequence > 900_000_002, "{text}");
        assert_eq!(later.discontinuity_sequence, 4, "{text}");
        assert!(
            later.segments.iter().all(|s| !gap(s) && !s.discontinuity),
            "{text}"
        );
    }

    fn ts_package(idle: Option<Duration>) -> (Arc<Package>, Vec<RenditionSink>) {
        use state::tests::video_720p;
        let config = PackagingConfig {
            mpegts_idle: idle,
            ..PackagingConfig::default()
        };
        let pkg = Arc::new(Package::new(PackageState::new(config, vec![])));
        let mut low = video_720p(800_000);
        low.name = "360p".into();
        let (_, ts) = pkg.install(Layout {
            segment: Duration::from_secs(2),
            part: Duration::from_millis(500),
            cmaf: vec![],
            ts: vec![video_720p(3_000_000), low],
        });
        (pkg, ts)
    }

    #[test]
    fn ts_is_wanted_while_asked_for_and_for_the_idle_time_after() {
        let idle = Duration::from_millis(100);
        let (pkg, _) = ts_package(Some(idle));
        assert!(!pkg.ts_demand().wanted, "nobody asked");
        let request = pkg.request_ts();
        // A request waiting longer than the idle time (a first playlist request) still counts.
        std::thread::sleep(idle * 2);
        assert!(pkg.ts_demand().wanted);
        drop(request);
        assert!(
            pkg.ts_demand().wanted,
            "the idle time counts from the request's end"
        );
        std::thread::sleep(idle * 2);
        assert!(!pkg.ts_demand().wanted);
        // A DVR window needs TS from the start; `mpegts_idle_secs = 0` muxes always.
        let options = SessionOptions {
            dvr_window: Some(Duration::from_secs(60)),
            endlist_tag: true,
        };
        pkg.set_options(options);
        assert!(pkg.ts_demand().wanted);
        pkg.set_options(SessionOptions::default());
        assert!(!pkg.ts_demand().wanted);
        assert!(ts_package(None).0.ts_demand().wanted);
    }

    #[test]
    fn a_pause_empties_the_ts_window_and_refuses_what_was_muxed_before_it() {
        use state::tests::part;
        let (pkg, sinks) = ts_package(Some(Duration::from_secs(60)));
        let t0 = time::OffsetDateTime::now_utc();
        let first = pkg.ts_opened();
        assert!(pkg.ts_live());
        for i in 0..3 {
            sinks[0].segment(first, part(true, 2000, t0 + Duration::from_secs(2 * i)));
        }
        sinks[1].segment(first, part(true, 2000, t0));
        pkg.pause_ts();
        let counts = |pkg: &Package| {
            pkg.read(|p| {
                p.ts_renditions()
                    .iter()
                    .map(|r| r.segments().len())
                    .collect::<Vec<_>>()
            })
        };
        assert!(!pkg.ts_live());
        assert_eq!(counts(&pkg), [0, 0], "the window is emptied");
        // A segment muxed before the pause and stored after it is refused.
        sinks[1].segment(first, part(true, 2000, t0 + Duration::from_secs(2)));
        assert_eq!(counts(&pkg), [0, 0]);
        // Resumed: a new generation, one number for both variants, after a discontinuity.
        let second = pkg.ts_opened();
        assert_ne!(second, first);
        let t1 = t0 + Duration::from_secs(120);
        sinks[0].segment(second, part(true, 2000, t1));
        sinks[1].segment(second, part(true, 2000, t1));
        let firsts = pkg.read(|p| {
            p.ts_renditions()
                .iter()
                .map(|r| {
                    let s = &r.segments()[0];
                    (s.msn, s.discontinuity)
                })
                .collect::<Vec<_>>()
        });
        assert_eq!(firsts, [(3, true), (3, true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_wake_on_update_and_time_out() {
        let pkg = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![],
        )));
        let waiter = {
            let pkg = pkg.clone();
            tokio::spawn(async move {
                pkg.wait_for(Duration::from_secs(6), |p| p.ended().then_some(1))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        pkg.update(|p| p.set_ended(true));
        assert_eq!(waiter.await.unwrap(), Some(1));
        let none = pkg.wait_for(Duration::from_secs(6), |_| None::<u8>).await;
        assert_eq!(none, None);
    }
}
