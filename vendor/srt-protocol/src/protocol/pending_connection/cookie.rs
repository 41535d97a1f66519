use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher, Hash, Hasher},
    net::SocketAddr,
    sync::OnceLock,
    time::{SystemTime, UNIX_EPOCH},
};

// PATCHED (hardening): the cookie used to be `DefaultHasher::new()` (SipHash with fixed, public
// keys) over address + time, so anyone could compute the cookie for a spoofed source address
// and drive a listener session up to access control without seeing the induction response.
// It is now keyed with a per-process random secret.
static COOKIE_SECRET: OnceLock<RandomState> = OnceLock::new();

pub fn gen_cookie(saddr: &SocketAddr) -> i32 {
    let time_mins = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        // PATCHED (hardening): local clock only, but never panic in the listener task
        .unwrap_or_default()
        .as_secs()
        * 60;

    let mut hasher = COOKIE_SECRET.get_or_init(RandomState::new).build_hasher();
    saddr.hash(&mut hasher);
    time_mins.hash(&mut hasher);

    hasher.finish() as u32 as i32
}
