//! The stream record's publish times (`started_at_primary`, `started_at_backup`,
//! `finished_at_primary`), stored off the media path: the input task states a time and goes on
//! switching; one writer task stores the times in order and tries a failed write again, so a
//! slow or locked store never holds a failover and a time is never lost to a store error.
//! Until a time is stored the API reads it from here ([`TimesWriter::unwritten`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::Notify;

use crate::db::Store;

/// First wait before a failed write is tried again; doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// The times a stream's record is to hold; `None` leaves a field as stored.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    pub started_primary: Option<OffsetDateTime>,
    pub started_backup: Option<OffsetDateTime>,
    pub finished_primary: Option<OffsetDateTime>,
}

impl Times {
    /// `newer` over `self`, field by field: the later statement of a field wins.
    fn merge(&mut self, newer: Times) {
        self.started_primary = newer.started_primary.or(self.started_primary);
        self.started_backup = newer.started_backup.or(self.started_backup);
        self.finished_primary = newer.finished_primary.or(self.finished_primary);
    }
}

/// Times stated and not yet stored, one entry per stream: bounded by the number of streams,
/// so stating a time never waits and never drops.
#[derive(Default)]
pub(super) struct TimesWriter {
    pending: Mutex<HashMap<i64, Times>>,
    wake: Notify,
    closing: AtomicBool,
}

impl TimesWriter {
    pub fn set(&self, id: i64, times: Times) {
        lock(&self.pending).entry(id).or_default().merge(times);
        self.wake.notify_one();
    }

    /// What is stated for the stream and not stored yet.
    pub fn unwritten(&self, id: i64) -> Times {
        lock(&self.pending).get(&id).copied().unwrap_or_default()
    }

    /// The writer stores what is pending, then ends ([`TimesWriter::run`]).
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Stores pending times until [`TimesWriter::close`] and nothing is left to store. A write
    /// that fails stays pending (under any newer statement) and is tried again after a backoff.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Store>) {
        let mut backoff = RETRY_FIRST;
        loop {
            let batch: Vec<(i64, Times)> = lock(&self.pending)
                .iter()
                .map(|(id, t)| (*id, *t))
                .collect();
            if batch.is_empty() {
                if self.closing.load(Ordering::SeqCst) {
                    return;
                }
                self.wake.notified().await;
                continue;
            }
            let mut failed = false;
            for (id, times) in batch {
                let s = store.clone();
                let stored = tokio::task::spawn_blocking(move || {
                    s.set_stream_times(
                        id,
                        times.started_primary,
                        times.started_backup,
                        times.finished_primary,
                    )
                })
                .await;
                match stored {
                    Ok(Ok(_)) => {
                        // Stored: forget it unless a newer time was stated meanwhile.
                        let mut pending = lock(&self.pending);
                        if pending.get(&id) == Some(&times) {
                            pending.remove(&id);
                        }
                    }
                    Ok(Err(e)) => {
                        failed = true;
                        tracing::warn!(stream = id, error = %e, retry_in = ?backoff,
                            "cannot record stream times; trying again");
                    }
                    Err(e) => {
                        failed = true;
                        tracing::error!(stream = id, error = %e, "stream times write panicked");
                    }
                }
            }
            if failed {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RETRY_MAX);
            } else {
                backoff = RETRY_FIRST;
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Option<OffsetDateTime> {
        Some(OffsetDateTime::from_unix_timestamp(s).unwrap())
    }

    #[test]
    fn a_later_statement_wins_field_by_field() {
        let mut t = Times {
            started_primary: at(1),
            finished_primary: at(2),
            ..Times::default()
        };
        t.merge(Times {
            started_backup: at(3),
            finished_primary: at(4),
            ..Times::default()
        });
        assert_eq!(
            t,
            Times {
                started_primary: at(1),
                started_backup: at(3),
                finished_primary: at(4),
            }
        );
    }
}
