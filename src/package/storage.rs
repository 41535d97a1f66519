//! Where complete segments live beyond the package's memory window: the [`SegmentStorage`]
//! trait with a disk backend (the daemon's) and a memory backend, and the `Writer` that runs
//! every storage call on its own thread behind a bounded queue — never on a GStreamer
//! streaming thread, so a slow disk cannot stall the renditions — and reports each outcome
//! back to the package. New consumers (a recorder, another backend) attach here.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, Weak};

use bytes::Bytes;

use super::{Output, Package};

/// Storage jobs waiting for the writer thread; past this a write is treated as failed (the
/// segment stays in memory, bounded) and a deletion is counted and skipped (its file is
/// removed with the media directory at the next start).
pub const WRITER_QUEUE: usize = 256;

/// One complete segment of one rendition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SegmentKey {
    pub output: Output,
    pub rendition: String,
    pub msn: u64,
}

/// A store of complete segments. Calls block (disk I/O): they run on the `Writer` thread or
/// on the blocking pool, never on an async worker or a streaming thread.
pub trait SegmentStorage: Send + Sync + 'static {
    /// Stores a segment's chunks in order, atomically: a reader never sees half a segment.
    fn put(&self, key: &SegmentKey, chunks: &[Bytes]) -> io::Result<()>;
    fn get(&self, key: &SegmentKey) -> io::Result<Bytes>;
    /// Removes a segment; a missing one is not an error.
    fn delete(&self, key: &SegmentKey);
}

/// `DATA_DIR/media/{id}/{cmaf|mpegts}/{rung}/seg_{msn}.{m4s|ts}`. Names come from the package
/// (rung names, sequence numbers), never from a request.
#[derive(Debug, Clone)]
pub struct DiskStorage {
    root: PathBuf,
}

impl DiskStorage {
    pub fn new(root: PathBuf) -> DiskStorage {
        DiskStorage { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path(&self, key: &SegmentKey) -> PathBuf {
        let dir = match key.output {
            Output::Cmaf => "cmaf",
            Output::Ts => "mpegts",
            Output::Source => "source",
        };
        self.root.join(dir).join(&key.rendition).join(format!(
            "seg_{}.{}",
            key.msn,
            key.output.extension()
        ))
    }
}

impl SegmentStorage for DiskStorage {
    /// Temp file + rename, and no concatenated copy of the chunks.
    fn put(&self, key: &SegmentKey, chunks: &[Bytes]) -> io::Result<()> {
        use std::io::Write as _;
        let path = self.path(key);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("part");
        let mut file = std::fs::File::create(&tmp)?;
        for c in chunks {
            file.write_all(c)?;
        }
        drop(file);
        std::fs::rename(&tmp, path)
    }

    fn get(&self, key: &SegmentKey) -> io::Result<Bytes> {
        std::fs::read(self.path(key)).map(Bytes::from)
    }

    fn delete(&self, key: &SegmentKey) {
        let _ = std::fs::remove_file(self.path(key));
    }
}

/// Segments kept in a map: for a deployment without a data disk, and for tests.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    segments: Mutex<HashMap<SegmentKey, Bytes>>,
}

impl MemoryStorage {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<SegmentKey, Bytes>> {
        self.segments.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }
}

impl SegmentStorage for MemoryStorage {
    fn put(&self, key: &SegmentKey, chunks: &[Bytes]) -> io::Result<()> {
        self.map().insert(key.clone(), Bytes::from(chunks.concat()));
        Ok(())
    }

    fn get(&self, key: &SegmentKey) -> io::Result<Bytes> {
        self.map()
            .get(key)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn delete(&self, key: &SegmentKey) {
        self.map().remove(key);
    }
}

pub(super) enum Job {
    Put(SegmentKey, Vec<Bytes>),
    Delete(SegmentKey),
    /// Answered once every job before it is done.
    Flush(mpsc::SyncSender<()>),
}

/// A package's storage and the thread that calls it.
pub(super) struct Writer {
    pub storage: Arc<dyn SegmentStorage>,
    jobs: mpsc::SyncSender<Job>,
}

impl Writer {
    /// Starts the writer thread; it ends when the writer is dropped (the package's storage
    /// replaced, or the package gone).
    pub fn spawn(storage: Arc<dyn SegmentStorage>, package: Weak<Package>) -> io::Result<Writer> {
        let (jobs, rx) = mpsc::sync_channel::<Job>(WRITER_QUEUE);
        let backend = storage.clone();
        std::thread::Builder::new()
            .name("segment-writer".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Put(key, chunks) => {
                            let len = chunks.iter().map(Bytes::len).sum();
                            let written = backend.put(&key, &chunks);
                            let Some(package) = package.upgrade() else {
                                return;
                            };
                            package.stored(&key, len, written);
                        }
                        Job::Delete(key) => backend.delete(&key),
                        Job::Flush(done) => {
                            let _ = done.try_send(());
                        }
                    }
                }
            })?;
        Ok(Writer { storage, jobs })
    }

    /// Queues a job without waiting; a full queue (or a gone thread) gives it back.
    pub fn send(&self, job: Job) -> Result<(), Job> {
        self.jobs.try_send(job).map_err(|e| match e {
            mpsc::TrySendError::Full(job) | mpsc::TrySendError::Disconnected(job) => job,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::state::tests::{part, video_720p};
    use crate::package::{PackageState, PackagingConfig};
    use std::time::Duration;

    /// A storage whose writes wait until the test lets them through: a disk that stalls.
    struct Gated {
        inner: MemoryStorage,
        gate: Mutex<mpsc::Receiver<()>>,
    }

    impl SegmentStorage for Gated {
        fn put(&self, key: &SegmentKey, chunks: &[Bytes]) -> io::Result<()> {
            let _ = self.gate.lock().unwrap().recv();
            self.inner.put(key, chunks)
        }
        fn get(&self, key: &SegmentKey) -> io::Result<Bytes> {
            self.inner.get(key)
        }
        fn delete(&self, key: &SegmentKey) {
            self.inner.delete(key)
        }
    }

    #[test]
    fn a_stalled_storage_never_blocks_the_producer_and_catches_up() {
        let (open, gate) = mpsc::channel();
        let storage = Arc::new(Gated {
            inner: MemoryStorage::default(),
            gate: Mutex::new(gate),
        });
        let pkg = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(1_000_000)],
        )));
        pkg.set_storage(storage.clone());
        let sink = pkg.sink(Output::Cmaf, "720p").unwrap();
        let t0 = time::OffsetDateTime::now_utc();
        // Three segments of four parts: two complete. With writes on this thread, the first
        // completed segment would block here forever (the gate is closed).
        for n in 0..12u64 {
            sink.part(part(n % 4 == 0, 500, t0 + Duration::from_millis(500 * n)));
        }
        let complete = pkg.read(|p| {
            let r = &p.renditions()[0];
            let complete: Vec<_> = r.segments().iter().filter(|s| s.complete).collect();
            assert!(
                complete.iter().all(|s| s.on_disk.is_none()),
                "nothing stored yet"
            );
            complete.len()
        });
        assert_eq!(complete, 2);
        assert!(storage.inner.is_empty());
        for _ in 0..complete {
            open.send(()).unwrap();
        }
        pkg.flush_storage();
        assert_eq!(storage.inner.len(), 2);
        let stored = pkg.read(|p| {
            p.renditions()[0]
                .segments()
                .iter()
                .filter(|s| s.on_disk.is_some())
                .count()
        });
        assert_eq!(stored, 2);
        let first = pkg.read(|p| p.renditions()[0].segments()[0].msn);
        let key = SegmentKey {
            output: Output::Cmaf,
            rendition: "720p".into(),
            msn: first,
        };
        assert_eq!(
            storage.get(&key).unwrap().len(),
            4 * part(true, 500, t0).data.len()
        );
    }
}
