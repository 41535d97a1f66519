//! How one node vouches for a request it relays to another: HMAC-SHA256 with the secret every
//! node shares (`node_secret`, or one generated into the store) over the method, path and query,
//! the relaying node, a timestamp, a nonce and the body's SHA-256. Inputs: a request's parts
//! and the wall clock; outputs: the headers to send, or at the receiver what they prove.
//!
//! The user was authenticated by the first node; the serving node accepts the relayed request
//! on the signature alone, so the user's `Authorization` never crosses between nodes. A
//! signature is good for [`WINDOW`] either side of the receiver's clock (the nodes' clocks must
//! agree that well: NTP). Within that window a captured GET or HEAD could be sent again — it
//! reads what the capture already showed — but a change (any other method) is accepted once:
//! its signature is remembered until it could no longer be fresh.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use hyper::header::{HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};

/// The relaying node's id; its presence alone marks a request as relayed (never relayed again).
pub const NODE: &str = "x-livepack-relayed-by";
/// Seconds since the Unix epoch when the request was signed.
pub const TIME: &str = "x-livepack-time";
/// Random per request, so two identical changes sent in one second are two requests.
pub const NONCE: &str = "x-livepack-nonce";
/// Hex SHA-256 of the body as relayed (the API checks it when it reads the body).
pub const BODY_SHA256: &str = "x-livepack-body-sha256";
/// Hex HMAC-SHA256 of [`signed_text`].
pub const SIGNATURE: &str = "x-livepack-signature";
/// Every header that claims a relay: a request carrying any of them must prove all.
const CLAIMS: [&str; 5] = [NODE, TIME, NONCE, BODY_SHA256, SIGNATURE];

/// How far a signature's time may be from the receiver's clock, either way.
pub const WINDOW: Duration = Duration::from_secs(30);
/// Changes remembered against replay (each for `2 × WINDOW`): relayed control-API writes, a
/// handful a second at most; a node that signs more than this is refused until some expire.
const MAX_REMEMBERED: usize = 10_000;
/// Generated secrets: 32 random bytes, hex.
const SECRET_BYTES: usize = 32;
/// Shortest `node_secret` accepted: 128 bits written as hex.
pub const MIN_SECRET_LEN: usize = 32;
/// Where a generated secret is kept in the store's settings.
pub const STORE_KEY: &str = "node_secret";

/// A shared secret; never shown (`Debug` hides it).
#[derive(Clone, PartialEq, Eq)]
pub struct NodeSecret(String);

impl NodeSecret {
    pub fn new(secret: String) -> NodeSecret {
        NodeSecret(secret)
    }

    /// A fresh random secret.
    pub fn generate() -> NodeSecret {
        let mut bytes = [0u8; SECRET_BYTES];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut bytes);
        NodeSecret(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for NodeSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeSecret(<hidden>)")
    }
}

/// Why a request that claims to be relayed is not accepted.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeAuthError {
    #[error("relayed request without a valid {0} header")]
    Missing(&'static str),
    #[error("relayed request signed {skew_secs} s away from this node's clock (limit 30 s)")]
    Stale { skew_secs: i64 },
    #[error("relayed request with a wrong signature")]
    BadSignature,
    #[error("relayed request already accepted once (replay)")]
    Replayed,
    #[error("too many relayed changes in the last minute")]
    Busy,
    #[error("relayed body does not match its signed digest")]
    BodyMismatch,
}

/// What a valid signature proves, kept in the request's extensions for the handlers.
#[derive(Debug, Clone)]
pub struct Relayed {
    pub node: String,
    body_sha256: [u8; 32],
}

impl Relayed {
    /// The body read is the body signed.
    pub fn check_body(&self, body: &[u8]) -> Result<(), NodeAuthError> {
        let digest: [u8; 32] = Sha256::digest(body).into();
        match subtle::ConstantTimeEq::ct_eq(&digest[..], &self.body_sha256[..]).into() {
            true => Ok(()),
            false => Err(NodeAuthError::BodyMismatch),
        }
    }
}

/// Signs what this node relays and checks what others relay to it.
pub struct NodeAuth {
    secret: NodeSecret,
    /// Signatures of accepted changes and when they may be forgotten.
    seen: Mutex<HashMap<[u8; 32], Instant>>,
}

/// The text a signature covers, one field a line: nothing in it can contain a newline (a
/// method, a request target, a node id, digits and hex).
fn signed_text(method: &str, path: &str, node: &str, time: i64, nonce: &str, body: &str) -> String {
    format!("livepack-relay-v1\n{method}\n{path}\n{node}\n{time}\n{nonce}\n{body}")
}

fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl NodeAuth {
    pub fn new(secret: NodeSecret) -> NodeAuth {
        NodeAuth {
            secret,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn mac(&self, text: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.secret.expose().as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(text.as_bytes());
        mac
    }

    /// The headers that vouch for a request `node` relays.
    pub fn sign(
        &self,
        method: &str,
        path: &str,
        node: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Vec<(&'static str, String)> {
        let time = unix_secs(now);
        let mut nonce = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut nonce);
        let nonce = hex(&nonce);
        let body = hex(&Sha256::digest(body));
        let text = signed_text(method, path, node, time, &nonce, &body);
        let signature = hex(&self.mac(&text).finalize().into_bytes());
        vec![
            (NODE, node.to_owned()),
            (TIME, time.to_string()),
            (NONCE, nonce),
            (BODY_SHA256, body),
            (SIGNATURE, signature),
        ]
    }

    /// `None`: the request does not claim to be relayed. Otherwise what its headers prove, or
    /// why they do not.
    pub fn verify(
        &self,
        method: &str,
        path: &str,
        headers: &HeaderMap,
        now: SystemTime,
        at: Instant,
    ) -> Option<Result<Relayed, NodeAuthError>> {
        if !CLAIMS.iter().any(|h| headers.contains_key(*h)) {
            return None;
        }
        Some(self.check(method, path, headers, now, at))
    }

    fn check(
        &self,
        method: &str,
        path: &str,
        headers: &HeaderMap,
        now: SystemTime,
        at: Instant,
    ) -> Result<Relayed, NodeAuthError> {
        let one = |name: &'static str| {
            let mut all = headers.get_all(name).iter();
            match (all.next().map(HeaderValue::to_str), all.next()) {
                (Some(Ok(v)), None) => Ok(v),
                _ => Err(NodeAuthError::Missing(name)),
            }
        };
        let node = one(NODE)?;
        let time: i64 = one(TIME)?
            .parse()
            .map_err(|_| NodeAuthError::Missing(TIME))?;
        let nonce = one(NONCE)?;
        let body = one(BODY_SHA256)?;
        let body_sha256 = unhex32(body).ok_or(NodeAuthError::Missing(BODY_SHA256))?;
        let signature = unhex32(one(SIGNATURE)?).ok_or(NodeAuthError::Missing(SIGNATURE))?;
        // The signature first: an unsigned request learns nothing from the other checks.
        let text = signed_text(method, path, node, time, nonce, body);
        self.mac(&text)
            .verify_slice(&signature)
            .map_err(|_| NodeAuthError::BadSignature)?;
        let skew_secs = unix_secs(now) - time;
        if skew_secs.unsigned_abs() > WINDOW.as_secs() {
            return Err(NodeAuthError::Stale { skew_secs });
        }
        if !matches!(method, "GET" | "HEAD") {
            self.remember(signature, at)?;
        }
        Ok(Relayed {
            node: node.to_owned(),
            body_sha256,
        })
    }

    /// A change's signature, once: until it could no longer be fresh (`2 × WINDOW` after it
    /// was accepted, whatever the clocks said).
    fn remember(&self, signature: [u8; 32], at: Instant) -> Result<(), NodeAuthError> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_REMEMBERED {
            seen.retain(|_, until| *until > at);
        }
        if seen.contains_key(&signature) {
            return Err(NodeAuthError::Replayed);
        }
        if seen.len() >= MAX_REMEMBERED {
            return Err(NodeAuthError::Busy);
        }
        seen.insert(signature, at + 2 * WINDOW);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(signed: &[(&'static str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in signed {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_signature_holds_for_its_request_within_the_window_only() {
        let auth = NodeAuth::new(NodeSecret::new("k".repeat(32)));
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let at = Instant::now();
        let h = headers(&auth.sign("GET", "/cmaf/7/x?y=1", "a", b"", t0));
        let ok = auth.verify("GET", "/cmaf/7/x?y=1", &h, t0 + WINDOW, at);
        assert_eq!(ok.unwrap().unwrap().node, "a");
        assert!(auth
            .verify("GET", "/cmaf/7/x?y=1", &h, t0, at)
            .unwrap()
            .is_ok());
        assert_eq!(
            auth.verify(
                "GET",
                "/cmaf/7/x?y=1",
                &h,
                t0 + WINDOW + Duration::from_secs(1),
                at
            )
            .unwrap()
            .unwrap_err(),
            NodeAuthError::Stale { skew_secs: 31 }
        );
        assert_eq!(
            auth.verify("GET", "/cmaf/7/x?y=2", &h, t0, at)
                .unwrap()
                .unwrap_err(),
            NodeAuthError::BadSignature
        );
        assert_eq!(
            auth.verify("HEAD", "/cmaf/7/x?y=1", &h, t0, at)
                .unwrap()
                .unwrap_err(),
            NodeAuthError::BadSignature
        );
        let other = NodeAuth::new(NodeSecret::new("j".repeat(32)));
        assert_eq!(
            other
                .verify("GET", "/cmaf/7/x?y=1", &h, t0, at)
                .unwrap()
                .unwrap_err(),
            NodeAuthError::BadSignature
        );
        assert!(auth.verify("GET", "/", &HeaderMap::new(), t0, at).is_none());
        let mut partial = HeaderMap::new();
        partial.insert(NODE, HeaderValue::from_static("a"));
        assert_eq!(
            auth.verify("GET", "/", &partial, t0, at)
                .unwrap()
                .unwrap_err(),
            NodeAuthError::Missing("x-livepack-time")
        );
    }

    #[test]
    fn a_change_is_accepted_once_and_its_body_is_the_signed_one() {
        let auth = NodeAuth::new(NodeSecret::generate());
        let now = SystemTime::now();
        let at = Instant::now();
        let h = headers(&auth.sign("PATCH", "/streaming/streams/7", "a", b"{}", now));
        let relayed = auth
            .verify("PATCH", "/streaming/streams/7", &h, now, at)
            .unwrap()
            .unwrap();
        assert_eq!(relayed.check_body(b"{}"), Ok(()));
        assert_eq!(
            relayed.check_body(b"{\"x\":1}"),
            Err(NodeAuthError::BodyMismatch)
        );
        assert_eq!(
            auth.verify("PATCH", "/streaming/streams/7", &h, now, at)
                .unwrap()
                .unwrap_err(),
            NodeAuthError::Replayed
        );
        // The same change signed again is another request (its own nonce).
        let again = headers(&auth.sign("PATCH", "/streaming/streams/7", "a", b"{}", now));
        assert!(auth
            .verify("PATCH", "/streaming/streams/7", &again, now, at)
            .unwrap()
            .is_ok());
        assert!(!format!("{:?}", NodeSecret::new("hunter2".into())).contains("hunter2"));
    }
}
