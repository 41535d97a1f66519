//! Who watches a stream's HLS and DASH outputs. Those players hold no session with us, so each
//! is counted by its manifest requests (an LL-HLS or TS-HLS playlist, the MPD): one viewer per
//! client address (with `X-Forwarded-For` behind a proxy) and user agent, for as long as it
//! asked within [`WINDOW`]. Manifests only: CMAF segments serve HLS and DASH alike, and every
//! player reloads its manifest at least every 10 s (our MPD's `minimumUpdatePeriod` is 2–10 s).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A player that has not asked for a manifest for this long has left.
pub const WINDOW: Duration = Duration::from_secs(15);
/// Players tracked at most per stream: a flood of made-up user agents costs bounded memory
/// (past it, new ones are not counted until old ones expire).
const MOST: usize = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Hls,
    Dash,
    HlsMpegts,
}

/// Players per output, as counted now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counted {
    pub hls: usize,
    pub dash: usize,
    pub hls_mpegts: usize,
}

#[derive(Debug, Default)]
pub struct Audience {
    /// Keyed by a hash of who asked (random keys: no one can aim collisions).
    seen: Mutex<HashMap<u64, (Output, Instant)>>,
    keys: std::collections::hash_map::RandomState,
}

impl Audience {
    /// The key of the player at `addr` (the connection's peer) saying `forwarded` and `agent`.
    pub fn who(&self, addr: Option<IpAddr>, forwarded: &[u8], agent: &[u8]) -> u64 {
        self.keys.hash_one((addr, forwarded, agent))
    }

    /// `who` asked for a manifest of `output` at `now`.
    pub fn seen(&self, who: u64, output: Output, now: Instant) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MOST && !seen.contains_key(&who) {
            seen.retain(|_, (_, at)| now.saturating_duration_since(*at) < WINDOW);
            if seen.len() >= MOST {
                return;
            }
        }
        seen.insert(who, (output, now));
    }

    /// The players that asked within [`WINDOW`] of `now`, by output (the others are forgotten).
    pub fn count(&self, now: Instant) -> Counted {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|_, (_, at)| now.saturating_duration_since(*at) < WINDOW);
        let mut c = Counted::default();
        for (output, _) in seen.values() {
            *match output {
                Output::Hls => &mut c.hls,
                Output::Dash => &mut c.dash,
                Output::HlsMpegts => &mut c.hls_mpegts,
            } += 1;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_player_counts_once_per_output_until_it_stops_asking() {
        let a = Audience::default();
        let t = Instant::now();
        let ip = Some(IpAddr::from([192, 0, 2, 1]));
        let safari = a.who(ip, b"", b"Safari");
        let chrome = a.who(ip, b"", b"Chrome");
        // Behind a proxy: one peer, told apart by the address it forwards.
        let behind = a.who(ip, b"198.51.100.7", b"Chrome");
        assert!(safari != chrome && chrome != behind);
        for i in 0..10 {
            a.seen(safari, Output::Hls, t + Duration::from_millis(500 * i));
        }
        a.seen(chrome, Output::Dash, t);
        a.seen(behind, Output::HlsMpegts, t);
        let c = a.count(t + Duration::from_secs(5));
        assert_eq!((c.hls, c.dash, c.hls_mpegts), (1, 1, 1));
        // The DASH and TS players asked last at t; Safari at t + 4.5 s.
        let c = a.count(t + WINDOW + Duration::from_secs(1));
        assert_eq!((c.hls, c.dash, c.hls_mpegts), (1, 0, 0));
        assert_eq!(a.count(t + WINDOW * 2), Counted::default());
    }

    #[test]
    fn made_up_players_past_the_bound_are_not_kept() {
        let a = Audience::default();
        let t = Instant::now();
        for i in 0..(MOST as u64 + 10) {
            a.seen(i, Output::Hls, t);
        }
        assert_eq!(a.count(t).hls, MOST);
        // Once they expire, room again.
        a.seen(u64::MAX, Output::Dash, t + WINDOW);
        assert_eq!(a.count(t + WINDOW).dash, 1);
    }
}
