//! A recording's files: the track each init generation writes to, and the writer thread that
//! appends the recorder's jobs in order within the disk budget, then finalises the directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use bytes::Bytes;
use time::OffsetDateTime;

use crate::record::budget::Budget;
use crate::record::fragments::{self, FragmentsError, Summary, Writer};

/// What the recorder hands its writer thread.
pub(super) enum Job {
    Init {
        track: String,
        init: Bytes,
    },
    Fragment {
        track: String,
        chunks: Vec<Bytes>,
        duration: Duration,
        pdt: OffsetDateTime,
        discontinuity: bool,
    },
}

/// Track names per rendition: the rendition's name, then `-2`, `-3`… when a rebuilt pipeline
/// brings a different init segment (a new file, as its fragments need that init). A rebuilt
/// pipeline with the same init (a reconnect with the same source) continues the same file.
#[derive(Default)]
pub(super) struct Tracks {
    names: BTreeMap<String, (String, u32, Bytes)>,
}

impl Tracks {
    /// The track for `init`, and whether it is new (its init must be written).
    pub(super) fn open(&mut self, rendition: &str, init: &Bytes) -> (String, bool) {
        match self.names.get_mut(rendition) {
            Some((name, _, current)) if current == init => (name.clone(), false),
            Some((name, n, current)) => {
                *n += 1;
                *name = track_name(rendition, *n);
                *current = init.clone();
                (name.clone(), true)
            }
            None => {
                let name = track_name(rendition, 1);
                self.names
                    .insert(rendition.to_owned(), (name.clone(), 1, init.clone()));
                (name, true)
            }
        }
    }

    pub(super) fn current(&self, rendition: &str) -> Option<String> {
        self.names.get(rendition).map(|(name, _, _)| name.clone())
    }
}

/// `720p`, then `720p-2`, `720p-3`… (see [`crate::record::fragments::rendition_of`]).
fn track_name(rendition: &str, generation: u32) -> String {
    if generation == 1 {
        rendition.to_owned()
    } else {
        format!("{rendition}-{generation}")
    }
}

/// The writer thread: every job in order, each within the disk budget; after the first
/// failure it only drains (the video keeps what was written), then finalises what is there.
pub(super) fn write_all(
    mut writer: Writer,
    jobs: std_mpsc::Receiver<Job>,
    dir: PathBuf,
    budget: &Budget,
    failed: &AtomicBool,
) -> (Summary, Option<FragmentsError>) {
    let mut error = None;
    for job in jobs {
        if error.is_some() {
            continue;
        }
        let size = match &job {
            Job::Init { init, .. } => init.len() as u64,
            Job::Fragment { chunks, .. } => chunks.iter().map(|c| c.len() as u64).sum(),
        };
        if let Err(e) = budget.reserve(size) {
            tracing::warn!(dir = %dir.display(), error = %e, "recording stopped: no space");
            error = Some(FragmentsError::NoSpace(e));
            failed.store(true, Ordering::Relaxed);
            continue;
        }
        let result = match job {
            Job::Init { track, init } => writer.init(&track, &init),
            Job::Fragment {
                track,
                chunks,
                duration,
                pdt,
                discontinuity,
            } => writer
                .fragment(&track, &chunks, duration, pdt, discontinuity)
                .map(|_| ()),
        };
        if let Err(e) = result {
            tracing::error!(dir = %dir.display(), error = %e, "recording stopped writing");
            error = Some(e);
            failed.store(true, Ordering::Relaxed);
        }
    }
    let summary = writer.summary().clone();
    if let Err(e) = fragments::finalize(&dir, &summary) {
        tracing::error!(dir = %dir.display(), error = %e, "cannot finalise the recording");
        error.get_or_insert(e);
    }
    (summary, error)
}
