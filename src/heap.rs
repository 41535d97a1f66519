//! Memory a finished stream freed: the binary sets its allocator's hook ([`on_release`]; glibc's
//! `malloc_trim` in `main.rs`), which runs off the async threads after each pipeline's teardown
//! and after each forgotten stream's package is dropped.

use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Sets the hook; the first call wins (the library itself stays free of unsafe code).
pub fn on_release(hook: fn()) {
    let _ = HOOK.set(hook);
}

/// A pipeline or a stream's package was just dropped.
pub(crate) fn released() {
    if let Some(&hook) = HOOK.get() {
        drop(tokio::task::spawn_blocking(hook));
    }
}
