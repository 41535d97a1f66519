//! HTTP: the listener shared by every server (`listener`), the control API (`api`) and
//! media delivery ([`delivery`]: playlists, parts, segments, MPD, screenshots, player page).

pub(crate) mod api;
pub mod body;
pub mod delivery;
pub(crate) mod listener;
pub(crate) mod peer_io;
pub(crate) mod router;
