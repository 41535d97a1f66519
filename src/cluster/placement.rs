//! Where a PULL stream is pulled: by the node with the most spare transcoding capacity. Each
//! heartbeat states the node's headroom and reads its live peers'; a node asked to claim a
//! stream while a peer has clearly more room leaves it to that peer for a while, then claims it
//! anyway (a peer that has room but does not pull, say of an older version, never strands it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::db::NodeRow;

/// How much more room (‰ of a node's capacity) a peer needs for this node to leave it a stream:
/// below it, the measures' noise would have the nodes defer to each other in turn.
pub const MARGIN: i64 = 100;

#[derive(Debug, Default)]
pub struct Placement {
    /// The live peers' headroom at the last heartbeat (those that state one).
    peers: Mutex<Vec<(String, i64)>>,
    /// Streams left to a peer, since when.
    deferred: Mutex<HashMap<i64, Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Placement {
    /// The nodes as the heartbeat read them: the live ones other than `me` are the peers.
    pub fn heard(&self, nodes: &[NodeRow], me: &str, dead_after: Duration) {
        *lock(&self.peers) = nodes
            .iter()
            .filter(|n| n.id != me && n.silent < dead_after)
            .filter_map(|n| Some((n.id.clone(), n.headroom?)))
            .collect();
    }

    /// The peer to leave stream `id` to: one with [`MARGIN`] more room than `mine`, while the
    /// stream has been left for less than `patience`. `None`: claim it here.
    pub fn better_placed(&self, id: i64, mine: Option<i64>, patience: Duration) -> Option<String> {
        let now = Instant::now();
        let mine = mine.unwrap_or(0);
        let best = lock(&self.peers)
            .iter()
            .filter(|(_, h)| *h >= mine + MARGIN)
            .max_by_key(|(_, h)| *h)
            .map(|(node, _)| node.clone());
        let mut deferred = lock(&self.deferred);
        deferred.retain(|_, since| now.duration_since(*since) < patience * 4);
        let Some(node) = best else {
            deferred.remove(&id);
            return None;
        };
        let since = *deferred.entry(id).or_insert(now);
        (now.duration_since(since) < patience).then_some(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, silent_s: u64, headroom: Option<i64>) -> NodeRow {
        NodeRow {
            id: id.into(),
            url: format!("http://{id}"),
            started_at: time::OffsetDateTime::UNIX_EPOCH,
            silent: Duration::from_secs(silent_s),
            headroom,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_is_left_to_the_roomiest_live_peer_for_a_while() {
        let p = Placement::default();
        let patience = Duration::from_secs(6);
        let dead = Duration::from_secs(10);
        p.heard(
            &[
                node("me", 0, Some(300)),
                node("b", 1, Some(800)),
                node("c", 1, Some(900)),
                node("dead", 30, Some(1000)),
                node("old", 1, None),
            ],
            "me",
            dead,
        );
        assert_eq!(p.better_placed(1, Some(300), patience), Some("c".into()));
        // Within the margin: claimed here.
        assert_eq!(p.better_placed(2, Some(850), patience), None);
        tokio::time::sleep(patience).await;
        // The roomier peer did not take it in time: claimed here after all.
        assert_eq!(p.better_placed(1, Some(300), patience), None);
        // No peer states a headroom: nothing to defer to.
        p.heard(&[node("old", 1, None)], "me", dead);
        assert_eq!(p.better_placed(3, None, patience), None);
    }
}
