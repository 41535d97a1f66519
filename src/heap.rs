//! Memory a finished stream freed: the binary sets its allocator's hook ([`on_release`]; glibc's
//! `malloc_trim` in `main.rs`), which runs off the async threads after each pipeline's teardown,
//! after each forgotten stream's package is dropped and after each PULL attempt.

use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Sets the hook; the first call wins (the library itself stays free of unsafe code).
pub fn on_release(hook: fn()) {
    let _ = HOOK.set(hook);
}

/// A pipeline, a stream's package or a PULL attempt's buffers were just dropped.
pub(crate) fn released() {
    if let Some(&hook) = HOOK.get() {
        drop(tokio::task::spawn_blocking(hook));
    }
}
