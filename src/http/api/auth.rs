//! API-key authentication: `Authorization: apikey <token>` (scheme case-insensitive), compared in
//! constant time. Nothing else authenticates: no query-string keys, no loopback exemption.

use hyper::header::AUTHORIZATION;
use hyper::HeaderMap;
use subtle::ConstantTimeEq;

use crate::secret::digest;

pub struct ApiKeys {
    /// Digests, so every comparison is over 32 bytes whatever the key lengths: the time taken
    /// tells nothing about how long a key is or how much of it matched.
    digests: Vec<[u8; 32]>,
}

impl ApiKeys {
    pub fn new(keys: &[String]) -> ApiKeys {
        ApiKeys {
            digests: keys.iter().map(|k| digest(k.as_bytes())).collect(),
        }
    }

    pub fn allows(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return false; // none, or ambiguous duplicates
        };
        let Some(token) = value.to_str().ok().and_then(parse_apikey) else {
            return false;
        };
        let presented = digest(token.as_bytes());
        // Check every key without an early exit.
        self.digests
            .iter()
            .fold(subtle::Choice::from(0), |acc, d| acc | d.ct_eq(&presented))
            .into()
    }
}

/// `apikey <token>` → token. The scheme word is case-insensitive (RFC 9110 §11.1); the token is
/// everything after the separating whitespace and must not be empty.
fn parse_apikey(value: &str) -> Option<&str> {
    let value = value.trim();
    let (scheme, rest) = value.split_once([' ', '\t'])?;
    if !scheme.eq_ignore_ascii_case("apikey") {
        return None;
    }
    let token = rest.trim();
    (!token.is_empty() && !token.contains([' ', '\t'])).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(AUTHORIZATION, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn accepts_any_case_of_the_scheme() {
        let keys = ApiKeys::new(&["s3cret$1".into(), "other".into()]);
        for v in [
            "apikey s3cret$1",
            "APIKey s3cret$1",
            "APIKEY   other",
            "apikey\tother",
        ] {
            assert!(keys.allows(&headers(&[v])), "{v}");
        }
    }

    #[test]
    fn refuses_everything_else() {
        let keys = ApiKeys::new(&["s3cret".into()]);
        for v in [
            &[][..],
            &["apikey"],
            &["apikey "],
            &["Bearer s3cret"],
            &["apikeys3cret"],
            &["apikey s3cre"],
            &["apikey s3cret2"],
            &["apikey s3cret extra"],
            &["apikey s3cret", "apikey s3cret"],
        ] {
            assert!(!keys.allows(&headers(v)), "{v:?}");
        }
        assert!(!ApiKeys::new(&[]).allows(&headers(&["apikey x"])));
    }
}
