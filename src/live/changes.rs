//! The record-change feed: ids of stream records that were created, changed or deleted, for
//! the PULL fetcher to follow. Bounded: when it is full the fetcher rescans every record.

use std::sync::Mutex;

use tokio::sync::mpsc;

/// Record changes queued for the PULL fetcher; beyond this it rescans every record instead.
const CHANGES_QUEUE: usize = 1024;

pub struct Changes {
    tx: mpsc::Sender<i64>,
    rx: Mutex<Option<mpsc::Receiver<i64>>>,
}

impl Default for Changes {
    fn default() -> Changes {
        let (tx, rx) = mpsc::channel(CHANGES_QUEUE);
        Changes {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl Changes {
    /// Returns `false` when the queue is full (the reader then rescans everything).
    pub fn changed(&self, id: i64) -> bool {
        self.tx.try_send(id).is_ok()
    }

    /// The feed, taken once by its one reader.
    pub fn take(&self) -> Option<mpsc::Receiver<i64>> {
        self.rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}
