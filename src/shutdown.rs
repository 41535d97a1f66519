//! The daemon's stop as its listeners see it: one watch, set by [`crate::daemon::Running`] and
//! read by every listener and connection, in two steps after serving. *Refusing* (from the stop
//! signal): newcomers get their protocol's "unavailable" (HTTP 503 with `Retry-After`, an RTMP
//! error status, SRT's reject code), connected publishers are told and closed so their encoders
//! reconnect to another node, requests in flight go on. *Closed* (once the streams, recordings
//! and webhooks are done): the listeners stop accepting and wait, bounded, for what is left.

use tokio::sync::watch;

/// Where the stop is; ordered, so "at least refusing" is a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    Refusing,
    Closed,
}

/// The daemon's end of the watch: it moves the phase forward, never back.
pub struct Shutdown(watch::Sender<Phase>);

/// A listener's or connection's view of the stop.
#[derive(Debug, Clone)]
pub struct Stopping(watch::Receiver<Phase>);

impl Shutdown {
    pub fn new() -> (Shutdown, Stopping) {
        let (tx, rx) = watch::channel(Phase::Serving);
        (Shutdown(tx), Stopping(rx))
    }

    /// From now on newcomers are refused and publishers told.
    pub fn refuse(&self) {
        self.advance(Phase::Refusing);
    }

    /// The listeners stop accepting.
    pub fn close(&self) {
        self.advance(Phase::Closed);
    }

    fn advance(&self, to: Phase) {
        self.0.send_if_modified(|phase| {
            let moved = *phase < to;
            if moved {
                *phase = to;
            }
            moved
        });
    }
}

impl Stopping {
    /// Whether newcomers are refused now.
    pub fn refusing(&self) -> bool {
        *self.0.borrow() >= Phase::Refusing
    }

    /// Returns once newcomers are refused (at once if they are); never if the daemon is gone
    /// without saying so.
    pub async fn until_refusing(&mut self) {
        self.until(Phase::Refusing).await
    }

    /// Returns once the listeners are to stop accepting.
    pub async fn until_closed(&mut self) {
        self.until(Phase::Closed).await
    }

    async fn until(&mut self, phase: Phase) {
        // The guard `wait_for` returns is not Send: dropped here, inside the future.
        if self.0.wait_for(|p| *p >= phase).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn phases_only_move_forward_and_wake_their_waiters() {
        let (shutdown, stopping) = Shutdown::new();
        assert!(!stopping.refusing());
        let mut waiter = stopping.clone();
        let refused = tokio::spawn(async move {
            waiter.until_refusing().await;
            waiter.refusing()
        });
        shutdown.refuse();
        assert!(refused.await.unwrap());
        shutdown.close();
        shutdown.refuse();
        assert_eq!(*stopping.0.borrow(), Phase::Closed, "never back");
        let mut late = stopping.clone();
        late.until_closed().await;
        late.until_refusing().await;
    }
}
