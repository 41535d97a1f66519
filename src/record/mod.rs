//! Recordings of live streams becoming videos: the crash-safe on-disk layout ([`fragments`],
//! [`mp4`]), the recorder that feeds it from a package observer ([`recorder`]), when to record
//! ([`policy`], [`manager`]), the disk budget ([`budget`]) and the VOD renderings ([`vod`]).

pub mod budget;
pub mod download;
mod finish;
pub mod fragments;
pub mod manager;
pub mod mp4;
pub mod policy;
pub mod recorder;
mod retention;
pub mod upload;
pub mod vod;
