//! Who watches a stream's HLS and DASH outputs. Those players hold no session with us, so each
//! is counted by its manifest requests (an LL-HLS or TS-HLS playlist, the MPD): one viewer per
//! client address and user agent, for as long as it asked within [`WINDOW`]. The client address
//! is the first of `X-Forwarded-For` when there is one (a proxy, or another node relaying),
//! else the connection's peer: the same player has the same key whichever way it came.
//! Manifests only: CMAF segments serve HLS and DASH alike, and every player reloads its
//! manifest at least every 10 s (our MPD's `minimumUpdatePeriod` is 2–10 s).

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
    seen: Mutex<Seen>,
    keys: std::collections::hash_map::RandomState,
}

#[derive(Debug, Default)]
struct Seen {
    players: HashMap<u64, (Output, Instant)>,
    /// When a full map was last swept: a flood of made-up players costs one sweep a second,
    /// not one per request.
    swept: Option<Instant>,
}

impl Audience {
    /// The key of the player whose request came from `peer` with `forwarded`
    /// (`X-Forwarded-For`, possibly empty) and `agent`.
    pub fn who(&self, peer: Option<IpAddr>, forwarded: &[u8], agent: &[u8]) -> u64 {
        let first = forwarded
            .split(|&b| b == b',')
            .next()
            .map(<[u8]>::trim_ascii)
            .filter(|f| !f.is_empty());
        match first {
            Some(client) => self.keys.hash_one((client, agent)),
            None => self.keys.hash_one((
                peer.map(|p| p.to_string()).unwrap_or_default().as_bytes(),
                agent,
            )),
        }
    }

    /// `who` asked for a manifest of `output` at `now`.
    pub fn seen(&self, who: u64, output: Output, now: Instant) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.players.len() >= MOST && !seen.players.contains_key(&who) {
            let due = seen
                .swept
                .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1));
            if due {
                seen.swept = Some(now);
                seen.players
                    .retain(|_, (_, at)| now.saturating_duration_since(*at) < WINDOW);
            }
            if seen.players.len() >= MOST {
                return;
            }
        }
        seen.players.insert(who, (output, now));
    }

    /// The players that asked within [`WINDOW`] of `now`, by output (the others are forgotten).
    pub fn count(&self, now: Instant) -> Counted {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.players
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < WINDOW);
        let mut c = Counted::default();
        for (output, _) in seen.players.values() {
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
        // The same player through the proxy, or relayed by another node that appends the
        // proxy's address: one key.
        let node = Some(IpAddr::from([10, 0, 0, 2]));
        assert_eq!(a.who(node, b"198.51.100.7, 192.0.2.1", b"Chrome"), behind);
        // With no proxy header, a relayed request names the peer it came from.
        assert_eq!(a.who(node, b"192.0.2.1", b"Safari"), safari);
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
        // Once they expire, room again (one sweep a second at most).
        a.seen(u64::MAX, Output::Dash, t + WINDOW);
        assert_eq!(a.count(t + WINDOW).dash, 1);
    }
}
