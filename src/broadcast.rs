//! Broadcasts' viewers: counts the player pages open on each broadcast from their polls (each
//! page load picks a random viewer id and sends it with every poll of its state; no cookies),
//! as the distinct ids seen within the last [`WINDOW`]. Sans-IO: the caller passes `now`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A page counts while it polled within this window. The page polls every
/// [`POLL_INTERVAL`]; the window spans several polls so a late or lost one does not drop a
/// viewer, and a closed page stops counting at most this long after its last poll.
pub const WINDOW: Duration = Duration::from_secs(15);
/// How often the broadcast player page polls its state (stated here, used by the page).
pub const POLL_INTERVAL: Duration = Duration::from_secs(3);
/// Viewer ids are the page's 128 random bits in hex; this bounds what a client can send.
pub const VIEWER_ID_CHARS: std::ops::RangeInclusive<usize> = 8..=64;
/// Viewers remembered per broadcast and in all: each entry is a few dozen bytes, so the
/// bounds cap the memory polls can take (≈ 10 MB) whatever ids clients invent. Past them a
/// new id is not counted (and the refusal is counted) until old ones expire.
pub const MAX_VIEWERS_PER_BROADCAST: usize = 50_000;
pub const MAX_VIEWERS: usize = 200_000;
/// Expired ids of a broadcast are dropped at most this often (not on every poll: a poll
/// must stay O(1) however many viewers there are).
const PRUNE_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Viewers {
    last_seen: HashMap<String, Instant>,
    pruned_at: Option<Instant>,
}

impl Viewers {
    fn prune(&mut self, now: Instant) -> usize {
        let before = self.last_seen.len();
        self.last_seen
            .retain(|_, seen| now.saturating_duration_since(*seen) < WINDOW);
        self.pruned_at = Some(now);
        before - self.last_seen.len()
    }
}

#[derive(Default)]
struct State {
    broadcasts: HashMap<i64, Viewers>,
    total: usize,
    refused: u64,
}

/// The spectator counts of every broadcast; shared by the player page (which records polls)
/// and the control API (which reports counts).
#[derive(Default)]
pub struct Spectators {
    state: Mutex<State>,
}

/// A viewer id as the page generates it (hex), within bounds; anything else is not counted.
pub fn valid_viewer_id(id: &str) -> bool {
    VIEWER_ID_CHARS.contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Spectators {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Counting holds no invariant a panic could break halfway.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A poll of broadcast `id`'s page by `viewer` (already checked with [`valid_viewer_id`]).
    pub fn seen(&self, id: i64, viewer: &str, now: Instant) {
        let mut st = self.lock();
        let State {
            broadcasts,
            total,
            refused,
        } = &mut *st;
        let viewers = broadcasts.entry(id).or_default();
        if viewers
            .pruned_at
            .is_none_or(|t| now.saturating_duration_since(t) >= PRUNE_EVERY)
        {
            *total -= viewers.prune(now);
        }
        if let Some(seen) = viewers.last_seen.get_mut(viewer) {
            *seen = now;
            return;
        }
        if *total >= MAX_VIEWERS {
            // Full: drop every broadcast's expired ids before refusing anyone.
            for v in broadcasts.values_mut() {
                *total -= v.prune(now);
            }
            broadcasts.retain(|_, v| !v.last_seen.is_empty() || v.pruned_at.is_none());
        }
        let viewers = broadcasts.entry(id).or_default();
        if *total >= MAX_VIEWERS || viewers.last_seen.len() >= MAX_VIEWERS_PER_BROADCAST {
            *refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    broadcast = id,
                    refused = *refused,
                    "spectator table full: new viewer ids are not counted"
                );
            }
            return;
        }
        viewers.last_seen.insert(viewer.to_owned(), now);
        *total += 1;
    }

    /// Distinct viewers of broadcast `id` that polled within [`WINDOW`] before `now`.
    pub fn count(&self, id: i64, now: Instant) -> usize {
        let mut st = self.lock();
        let State {
            broadcasts, total, ..
        } = &mut *st;
        let Some(viewers) = broadcasts.get_mut(&id) else {
            return 0;
        };
        *total -= viewers.prune(now);
        let n = viewers.last_seen.len();
        if n == 0 {
            broadcasts.remove(&id);
        }
        n
    }

    /// A deleted broadcast's viewers are forgotten at once.
    pub fn forget(&self, id: i64) {
        let mut st = self.lock();
        if let Some(v) = st.broadcasts.remove(&id) {
            st.total -= v.last_seen.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_viewers_within_the_window() {
        let s = Spectators::default();
        let t0 = Instant::now();
        s.seen(1, "aaaaaaaa", t0);
        s.seen(1, "aaaaaaaa", t0 + Duration::from_secs(3));
        s.seen(1, "bbbbbbbb", t0 + Duration::from_secs(4));
        s.seen(2, "aaaaaaaa", t0);
        assert_eq!(s.count(1, t0 + Duration::from_secs(5)), 2);
        assert_eq!(s.count(2, t0 + Duration::from_secs(5)), 1);
        // a's last poll was at 3 s, b's at 4 s.
        assert_eq!(s.count(1, t0 + Duration::from_secs(18)), 1);
        assert_eq!(s.count(1, t0 + Duration::from_secs(19)), 0);
        assert_eq!(s.count(3, t0), 0);
        s.forget(2);
        assert_eq!(s.count(2, t0), 0);
        assert_eq!(s.lock().total, 0);
    }

    #[test]
    fn the_table_is_bounded_and_expired_ids_make_room() {
        let s = Spectators::default();
        let t0 = Instant::now();
        for i in 0..MAX_VIEWERS_PER_BROADCAST + 10 {
            s.seen(1, &format!("viewer{i:08}"), t0);
        }
        assert_eq!(s.count(1, t0), MAX_VIEWERS_PER_BROADCAST);
        assert_eq!(s.lock().refused, 10);
        let later = t0 + WINDOW + Duration::from_secs(1);
        s.seen(1, "newviewer", later);
        assert_eq!(s.count(1, later), 1);
        assert_eq!(s.lock().total, 1);
    }

    #[test]
    fn viewer_ids() {
        assert!(valid_viewer_id("0123456789abcdef0123456789abcdef"));
        for bad in ["", "short", "has space!", &"a".repeat(65), "ünïcode1"] {
            assert!(!valid_viewer_id(bad), "{bad}");
        }
    }
}
