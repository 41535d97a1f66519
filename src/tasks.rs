//! Tasks a subsystem owns (rule 16): spawned into its set, reaped as they end, and at its stop
//! waited for up to a bound, then cut — the one shape every owner of tasks shares.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::task::JoinSet;

/// A subsystem's tasks.
#[derive(Debug, Default)]
pub struct Owned(Mutex<JoinSet<()>>);

impl Owned {
    /// Adds a task, reaping those already done (their results were nothing to keep).
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Every task, for the stop ([`drain`]); the set is left empty.
    pub fn take(&self) -> JoinSet<()> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Waits up to `within` for `tasks` to end (a panicked one counts as ended), then aborts and
/// awaits the rest; returns how many were cut.
pub async fn drain(mut tasks: JoinSet<()>, within: Duration) -> usize {
    let all = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(within, all).await.is_ok() {
        return 0;
    }
    let left = tasks.len();
    tasks.shutdown().await;
    left
}
