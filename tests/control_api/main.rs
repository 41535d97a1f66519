//! End-to-end tests of the control API: the real binary on 127.0.0.1, real HTTP, real SQLite.

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod broadcasts;
mod fastedge;
mod lifecycle;
mod openapi;
mod overlays;
mod streams;
mod webhooks;
