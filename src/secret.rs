//! Comparison of secrets (API keys, stream tokens) whose time tells nothing about them: both
//! sides are hashed first, so the comparison is always over 32 bytes whatever their lengths.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Equality that takes the same time whatever the inputs (compares digests).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    digest(a).ct_eq(&digest(b)).into()
}

/// The SHA-256 of a secret, the form in which it is kept for comparisons.
pub fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}
