//! The cluster's nodes as their heartbeats in the store tell: alive, missing (silent past
//! `node_dead_secs`, its streams moved) or gone — for `GET /streaming/nodes`, the
//! `livepack_cluster_nodes` gauge and the alert on a missing node.

use std::time::Duration;

use super::Cluster;
use crate::db::NodeRow;

/// A node silent this long no longer counts as missing (an alert that fired an hour is
/// enough): it was taken out of the cluster without signing off.
pub const GONE_AFTER: Duration = Duration::from_secs(3600);

/// What a node's heartbeats say of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Its heartbeat is younger than `dead_after`.
    Alive,
    /// Silent past `dead_after`, for less than [`GONE_AFTER`]: its streams moved, a
    /// person should look.
    Missing,
    Gone,
}

impl NodeState {
    pub const ALL: [NodeState; 3] = [NodeState::Alive, NodeState::Missing, NodeState::Gone];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Alive => "alive",
            NodeState::Missing => "missing",
            NodeState::Gone => "gone",
        }
    }
}

/// `node`'s state when a node silent `dead_after` is dead.
fn of(node: &NodeRow, dead_after: Duration) -> NodeState {
    // A node that signed off has a heartbeat of 0: silent since 1970.
    if node.silent >= GONE_AFTER {
        NodeState::Gone
    } else if node.silent >= dead_after {
        NodeState::Missing
    } else {
        NodeState::Alive
    }
}

impl Cluster {
    /// Whether `node` beats, went missing, or is gone (signed off, or missing for long).
    pub fn node_state(&self, node: &NodeRow) -> NodeState {
        of(node, self.config.dead_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(silent_secs: u64, dead_after: Duration) -> NodeState {
        let node = NodeRow {
            id: "n".into(),
            url: String::new(),
            started_at: time::OffsetDateTime::UNIX_EPOCH,
            silent: Duration::from_secs(silent_secs),
            headroom: None,
        };
        of(&node, dead_after)
    }

    #[test]
    fn alive_until_dead_after_missing_for_an_hour_then_gone() {
        let dead = Duration::from_secs(10);
        assert_eq!(state(0, dead), NodeState::Alive);
        assert_eq!(state(9, dead), NodeState::Alive);
        assert_eq!(state(10, dead), NodeState::Missing);
        assert_eq!(state(3599, dead), NodeState::Missing);
        assert_eq!(state(3600, dead), NodeState::Gone);
        // Signed off: a heartbeat of 0, silent since 1970.
        assert_eq!(state(1_800_000_000, dead), NodeState::Gone);
    }
}
