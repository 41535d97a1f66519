//! A publisher's side of a live stream: the slot it publishes to, its protocol, the permit a
//! successful check hands out, and the handle media is sent through.

use std::sync::{Arc, Weak};

use tokio::sync::mpsc;

use super::status::Counters;
use crate::db::StreamRow;
use crate::media::MediaMessage;

pub use crate::events::{Protocol, Slot};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PublishError {
    #[error("stream {0} does not exist")]
    UnknownStream(i64),
    #[error("wrong token for stream {0}")]
    WrongToken(i64),
    #[error("stream {0} is not active")]
    Inactive(i64),
    #[error("stream {0} is a PULL stream")]
    PullStream(i64),
    #[error("stream {0} is already live")]
    AlreadyLive(i64),
    /// The node transcodes all it can ([`crate::capacity`]); another node, or later, may not.
    #[error("stream {id}: the server is at capacity ({reason}): publish again later or elsewhere")]
    AtCapacity { id: i64, reason: String },
    /// A PULL stream left to a node with more room (it claims it).
    #[error("stream {id}: node {node} has more room and pulls it")]
    BetterPlaced { id: i64, node: String },
    /// Another daemon sharing the store serves the stream (`url`: where it is reached).
    #[error("stream {id} is live on node {node}")]
    LiveElsewhere { id: i64, node: String, url: String },
    #[error("store unavailable")]
    Store,
    /// The publish authorization hook did not let it in.
    #[error("stream {id}: publish {refusal}")]
    Hook {
        id: i64,
        refusal: super::publish_auth::HookRefusal,
    },
}

/// What a successful publish check grants: the record as it was checked, the slot and the
/// protocol, and the stream's lease held for it. [`super::Registry::start`] consumes it, so
/// nothing starts unchecked.
#[derive(Debug)]
pub struct PublishPermit {
    pub(super) row: StreamRow,
    pub(super) slot: Slot,
    pub(super) protocol: Protocol,
    pub(super) hold: LeaseHold,
    /// Where the node that served the stream last left its numbering (with several nodes).
    pub(super) numbering: Option<crate::package::Numbering>,
    /// The transcode's place on the node, held until the session has opened.
    pub(super) place: Admitted,
}

/// What the capacity check gave a publish: its place (if it starts a transcode), and what it
/// is transcoded to.
#[derive(Debug, Default)]
pub(super) struct Admitted {
    pub place: Option<crate::capacity::Reservation>,
    pub reduction: crate::capacity::Reduction,
}

/// A publish check's claim on the stream's lease, from before the lease is taken until the
/// session opens. While one is out the stream's lease is not given up (a linger that ends
/// during a handshake); one dropped unused (the handshake failed after the check, the session
/// could not open) gives the lease up unless this node still serves the stream.
#[derive(Debug)]
pub struct LeaseHold {
    registry: Weak<super::Registry>,
    id: i64,
    used: bool,
}

impl LeaseHold {
    pub(super) fn new(registry: &Arc<super::Registry>, id: i64) -> LeaseHold {
        registry.hold_taken(id);
        LeaseHold {
            registry: Arc::downgrade(registry),
            id,
            used: false,
        }
    }

    /// The session opened: it keeps the lease from now on.
    pub(super) fn used(mut self) {
        self.used = true;
    }
}

impl Drop for LeaseHold {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.hold_dropped(self.id, !self.used);
        }
    }
}

impl PublishPermit {
    /// The record as authorised (SRT reads its passphrase before the handshake answer).
    pub fn row(&self) -> &StreamRow {
        &self.row
    }

    pub fn slot(&self) -> Slot {
        self.slot
    }
}

/// A publisher's handle: media goes in through [`Publisher::send`]; dropping it ends the
/// publish (the pipeline drains and the grace period starts).
pub struct Publisher {
    pub stream_id: i64,
    tx: mpsc::Sender<MediaMessage>,
    pub dropped: u64,
    counters: Arc<Counters>,
}

impl Publisher {
    pub(super) fn new(
        stream_id: i64,
        tx: mpsc::Sender<MediaMessage>,
        counters: Arc<Counters>,
    ) -> Publisher {
        Publisher {
            stream_id,
            tx,
            dropped: 0,
            counters,
        }
    }

    /// Resolves when the server has ended this publish (eviction, deactivation, pipeline end),
    /// so a connection waiting for media can stop at once.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Never blocks the connection: a full queue drops the message and counts it.
    pub fn send(&mut self, msg: MediaMessage) -> bool {
        let frame = matches!(msg, MediaMessage::Frame(_));
        if frame {
            Counters::add(&self.counters.frames_received, 1);
        }
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped += 1;
                if frame {
                    Counters::add(&self.counters.frames_dropped, 1);
                }
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if self.dropped > 0 {
            tracing::warn!(
                stream = self.stream_id,
                dropped = self.dropped,
                "media messages dropped: the pipeline fell behind"
            );
        }
    }
}
