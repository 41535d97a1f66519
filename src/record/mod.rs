//! Recordings of live streams (work in progress toward the recording issue): the crash-safe
//! on-disk layout ([`fragments`]) and its VOD playlists ([`vod`]). The recorder that feeds it
//! from a package observer, the videos API and the finaliser on start come next.

pub mod fragments;
pub mod manager;
pub mod mp4;
pub mod policy;
pub mod recorder;
pub mod vod;
