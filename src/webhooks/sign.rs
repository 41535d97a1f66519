//! The signature of a webhook request, the scheme Stripe and others use: header
//! `Livepack-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`. The
//! receiver recomputes it over the raw body and refuses a `t` more than 5 minutes from its
//! clock (the README's advice; every attempt is signed anew), so a captured request cannot be
//! replayed later. `tests::verify` is what a receiver does.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header's name.
pub const HEADER: &str = "livepack-signature";

/// The header value for `body` sent at `unix_secs`.
pub fn header(secret: &str, unix_secs: i64, body: &[u8]) -> String {
    format!("t={unix_secs},v1={}", hex(&mac(secret, unix_secs, body)))
}

fn mac(secret: &str, unix_secs: i64, body: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(unix_secs.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How far from its own clock a receiver should accept `t` (documented for receivers; every
    /// attempt is signed anew, so a retry a day later carries a fresh `t`).
    const TOLERANCE_SECS: i64 = 300;

    /// Whether `header` signs `body` with `secret` at a `t` within the tolerance of `now`: what a
    /// receiver does (the tests' own receiver is independent of this).
    fn verify(secret: &str, header: &str, body: &[u8], now: i64) -> bool {
        let mut t = None;
        let mut signatures = Vec::new();
        for part in header.split(',') {
            match part.trim().split_once('=') {
                Some(("t", v)) => t = v.parse::<i64>().ok(),
                Some(("v1", v)) => signatures.push(v),
                _ => {}
            }
        }
        let Some(t) = t else { return false };
        if (now - t).abs() > TOLERANCE_SECS {
            return false;
        }
        let expected = hex(&mac(secret, t, body));
        signatures
            .iter()
            .any(|s| crate::secret::constant_time_eq(s.as_bytes(), expected.as_bytes()))
    }

    /// The worked example of the README, computed independently with
    /// `printf '1700000000.{"id":1}' | openssl dgst -sha256 -hmac whsec_test`.
    #[test]
    fn the_documented_example_signs_as_openssl_does() {
        let h = header("whsec_test", 1_700_000_000, br#"{"id":1}"#);
        assert_eq!(
            h,
            "t=1700000000,v1=2f441ba4b3b2d50d28a9ab9d9fd8880376ecd1eb5d0435401553f5d8d0a5dcf8"
        );
    }

    #[test]
    fn verify_accepts_its_own_signature_and_refuses_changes_and_stale_times() {
        let body = br#"{"id":7,"type":"live_started"}"#;
        let h = header("s3cret", 1_000, body);
        assert!(verify("s3cret", &h, body, 1_000));
        assert!(verify("s3cret", &h, body, 1_000 + TOLERANCE_SECS));
        assert!(!verify("s3cret", &h, body, 1_001 + TOLERANCE_SECS));
        assert!(!verify("other", &h, body, 1_000));
        assert!(!verify(
            "s3cret",
            &h,
            br#"{"id":8,"type":"live_started"}"#,
            1_000
        ));
        assert!(!verify("s3cret", "v1=00", body, 1_000));
    }
}
