//! The disk budget of recordings: the bytes the videos directory holds against
//! `recordings_max_bytes`, and the free space of its filesystem against
//! `recordings_min_free_bytes`. A recording starts only within both and stops writing when
//! the next fragment would leave them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why no more may be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoSpace {
    #[error("the recordings quota is used: {used} of recordings_max_bytes={max} bytes")]
    Quota { used: u64, max: u64 },
    #[error(
        "the disk of the recordings is nearly full: {free} bytes free, recordings_min_free_bytes={min}"
    )]
    Disk { free: u64, min: u64 },
}

/// The room a recording needs to start (a few seconds of a ladder): less is a full quota.
pub const START_ROOM: u64 = 1 << 20;

pub struct Budget {
    root: PathBuf,
    max: Option<u64>,
    min_free: u64,
    used: AtomicU64,
}

impl Budget {
    /// Counts what `root` holds now (a missing directory holds nothing).
    pub fn new(root: PathBuf, max: Option<u64>, min_free: u64) -> Budget {
        let used = dir_size(&root);
        Budget {
            root,
            max,
            min_free,
            used: AtomicU64::new(used),
        }
    }

    /// Whether a new recording may start: room for at least [`START_ROOM`].
    pub fn check_start(&self) -> Result<(), NoSpace> {
        self.check(START_ROOM)
    }

    /// The quota (`recordings_max_bytes`), and the free bytes of the videos' filesystem when
    /// it can be asked.
    pub fn limits(&self) -> (Option<u64>, Option<u64>) {
        (self.max, free_space(&self.root))
    }

    /// Bytes the videos hold.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether `more` bytes may be written; counts them when they may.
    pub fn reserve(&self, more: u64) -> Result<(), NoSpace> {
        self.check(more)?;
        self.used.fetch_add(more, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `more` bytes would stay within the quota and leave the free-space floor.
    pub fn check(&self, more: u64) -> Result<(), NoSpace> {
        let used = self.used();
        if let Some(max) = self.max {
            if used.saturating_add(more) > max {
                return Err(NoSpace::Quota { used, max });
            }
        }
        if self.min_free > 0 {
            // A filesystem we cannot ask is not reported full: the write itself will tell.
            if let Some(free) = free_space(&self.root) {
                if free.saturating_sub(more) < self.min_free {
                    return Err(NoSpace::Disk {
                        free,
                        min: self.min_free,
                    });
                }
            }
        }
        Ok(())
    }

    /// Bytes written outside [`Budget::reserve`] (an assembled download).
    pub fn add(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes deleted (a video removed).
    pub fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(bytes))
            });
    }
}

/// What the filesystem holding `path` (or its nearest existing parent) has free for us.
fn free_space(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let s = rustix::fs::statvfs(existing).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

/// The bytes of every file under `dir`, recursively.
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Removes a video's directory and gives its bytes back to the quota (what is gone, even when
/// the removal stopped halfway).
pub fn remove_dir(budget: &Budget, dir: &std::path::Path) -> std::io::Result<()> {
    let size = dir_size(dir);
    let removed = std::fs::remove_dir_all(dir);
    budget.release(size.saturating_sub(dir_size(dir)));
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_counts_what_is_there_and_what_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("1")).unwrap();
        std::fs::write(tmp.path().join("1/a.mp4"), vec![0u8; 600]).unwrap();
        let b = Budget::new(tmp.path().to_owned(), Some(1000), 0);
        assert_eq!(b.used(), 600);
        b.reserve(400).unwrap();
        assert_eq!(
            b.reserve(1),
            Err(NoSpace::Quota {
                used: 1000,
                max: 1000
            })
        );
        b.release(600);
        b.reserve(1).unwrap();
        assert_eq!(b.used(), 401);
    }

    #[test]
    fn a_free_space_floor_above_the_disk_refuses_and_none_allows() {
        let tmp = tempfile::tempdir().unwrap();
        let unlimited = Budget::new(tmp.path().join("videos"), None, 0);
        unlimited.reserve(u64::MAX / 2).unwrap();
        let floor = Budget::new(tmp.path().join("videos"), None, u64::MAX);
        assert!(matches!(floor.check(0), Err(NoSpace::Disk { .. })));
    }
}
