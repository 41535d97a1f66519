//! The daemon's stop as its listeners see it: one watch, set by [`crate::daemon::Running`] and
//! read by every listener and connection, in two steps after serving. *Refusing* (from the stop
//! signal): newcomers get their protocol's "unavailable" (HTTP 503 with `Retry-After`, an RTMP
//! error status, SRT's reject code), connected publishers are told and closed so their encoders
//! reconnect to another node, requests in flight go on. *Closed* (once the streams, recordings
//! and webhooks are done, and not before the accept grace has passed): the listeners stop
//! accepting and wait, bounded, for what is left.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Where the stop is; ordered, so "at least refusing" is a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    Refusing,
    Closed,
}

/// The daemon's end of the watch: it moves the phase forward, never back.
pub struct Shutdown {
    phase: watch::Sender<Phase>,
    /// The least time from refusing to closing: a health-checking balancer needs a check or two
    /// to see `/readyz` fail and stop sending newcomers; until then they get a refusal that
    /// says "elsewhere" rather than a closed port.
    accept_grace: Duration,
    refused_at: Option<Instant>,
}

/// A listener's or connection's view of the stop.
#[derive(Debug, Clone)]
pub struct Stopping(watch::Receiver<Phase>);

impl Shutdown {
    /// A stop that closes as soon as it is done refusing.
    pub fn new() -> (Shutdown, Stopping) {
        Shutdown::with_accept_grace(Duration::ZERO)
    }

    /// A stop that stays refusing newcomers for at least `accept_grace` before it closes.
    pub fn with_accept_grace(accept_grace: Duration) -> (Shutdown, Stopping) {
        let (tx, rx) = watch::channel(Phase::Serving);
        let shutdown = Shutdown {
            phase: tx,
            accept_grace,
            refused_at: None,
        };
        (shutdown, Stopping(rx))
    }

    /// From now on newcomers are refused and publishers told.
    pub fn refuse(&mut self) {
        self.refused_at.get_or_insert_with(Instant::now);
        self.advance(Phase::Refusing);
    }

    /// The listeners stop accepting, once the accept grace since the refusal has passed.
    pub async fn close(&mut self) {
        if let Some(at) = self.refused_at {
            tokio::time::sleep_until(at + self.accept_grace).await;
        }
        self.close_now();
    }

    /// The listeners stop accepting now, whatever the grace (a drop cannot wait).
    pub fn close_now(&self) {
        self.advance(Phase::Closed);
    }

    fn advance(&self, to: Phase) {
        self.phase.send_if_modified(|phase| {
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
        let (mut shutdown, stopping) = Shutdown::new();
        assert!(!stopping.refusing());
        let mut waiter = stopping.clone();
        let refused = tokio::spawn(async move {
            waiter.until_refusing().await;
            waiter.refusing()
        });
        shutdown.refuse();
        assert!(refused.await.unwrap());
        shutdown.close().await;
        shutdown.refuse();
        assert_eq!(*stopping.0.borrow(), Phase::Closed, "never back");
        let mut late = stopping.clone();
        late.until_closed().await;
        late.until_refusing().await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_close_waits_out_the_accept_grace_from_the_refusal() {
        let grace = Duration::from_secs(5);
        let (mut shutdown, stopping) = Shutdown::with_accept_grace(grace);
        let began = Instant::now();
        shutdown.refuse();
        tokio::time::sleep(Duration::from_secs(2)).await;
        shutdown.close().await;
        assert_eq!(began.elapsed(), grace, "closed before the grace was over");
        let mut closed = stopping.clone();
        closed.until_closed().await;
        // Once past the grace, a close is at once.
        let (mut late, _) = Shutdown::with_accept_grace(grace);
        late.refuse();
        tokio::time::sleep(grace * 2).await;
        let at = Instant::now();
        late.close().await;
        assert_eq!(at.elapsed(), Duration::ZERO);
    }
}
