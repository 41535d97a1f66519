//! Ingest: protocol listeners that authenticate publishers against the stream records and turn
//! what they receive into `media` messages for the registry. Never imports the pipeline.

pub mod listeners;
pub mod mpegts;
pub mod pull;
pub mod rtmp;
pub mod srt;
pub mod whip;

use crate::live::Slot;

/// Which input of which stream a publisher asks for, with the token it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishTarget {
    pub stream_id: i64,
    pub slot: Slot,
    pub token: String,
    /// The publisher's other parameters, `k=v&…`, for the publish authorization hook.
    pub query: String,
}

/// A publish target as every protocol names it: `{id}` (main) or `{id}b` (backup), a positive
/// decimal stream id, and the stream's token (ASCII letters and digits). Sans-IO.
pub fn parse_target(name: &str, token: &str) -> Option<PublishTarget> {
    let (digits, slot) = match name.strip_suffix('b') {
        Some(d) => (d, Slot::Backup),
        None => (name, Slot::Main),
    };
    let valid_id = !digits.is_empty()
        && digits.len() <= 18
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    let valid_token = !token.is_empty()
        && token.len() <= MAX_TOKEN_BYTES
        && token.bytes().all(|b| b.is_ascii_alphanumeric());
    if !valid_id || !valid_token {
        return None;
    }
    Some(PublishTarget {
        stream_id: digits.parse().ok()?,
        slot,
        token: token.to_owned(),
        query: String::new(),
    })
}

/// Whether `query` may go to the authorization hook as it is: printable ASCII, no spaces.
pub fn plain_query(query: &str) -> bool {
    query.bytes().all(|b| b.is_ascii_graphic())
}

/// Tokens are 32 hex characters; anything much longer is not one.
pub const MAX_TOKEN_BYTES: usize = 128;
