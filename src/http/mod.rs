//! HTTP: the listener shared by every server (`listener`), the router, the one JSON error
//! shape (`error`), CORS (`cors`), body limits (`body`), the relay to other nodes (`relay`),
//! what the listener answered, for `/metrics` (`stats`), the control API (`api`) and media
//! delivery ([`delivery`]: playlists, parts, segments, MPD, screenshots, player page) and the
//! operator's console (`console`).

pub(crate) mod api;
pub mod body;
pub(crate) mod console;
pub(crate) mod cors;
pub mod delivery;
pub(crate) mod error;
pub(crate) mod listener;
pub(crate) mod peer_io;
pub(crate) mod playback_gate;
pub(crate) mod relay;
pub(crate) mod router;
pub(crate) mod server;
pub(crate) mod stats;
