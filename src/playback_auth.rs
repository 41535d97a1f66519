//! Signed playback: a token bound to one resource (a stream `s{id}`, a video `v{id}`) and an
//! expiry, computed by the customer's backend from the daemon's `playback_signing_key`. It
//! travels in the path, right after the resource's id —
//! `/cmaf/{id}/t/{expires}/{token}/master.m3u8` — so the relative URLs of playlists and MPDs
//! carry it without any player configuration.
//!
//! The formula is the one nginx's `secure_link` module checks, so a cache in front validates
//! the same token (`deploy/nginx-livepack.conf`):
//! `token = base64url(MD5("{expires}:{resource}:{key}"))` without padding, `expires` in unix
//! seconds. The key comes last, so MD5's length extension gains nothing. Sans-IO.

use std::borrow::Cow;

use base64::Engine;
use md5::{Digest, Md5};

/// The path segment that starts a grant: `…/{id}/t/{expires}/{token}/…`.
const MARKER: &str = "t";
/// An MD5 in base64url without padding.
const TOKEN_LEN: usize = 22;

/// The signing key; never shown (`Debug` hides it).
#[derive(Clone, PartialEq, Eq)]
pub struct Key(String);

impl Key {
    pub fn new(key: String) -> Key {
        Key(key)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<hidden>)")
    }
}

/// The daemon's signing: its key, and how long the URLs it hands out stay valid.
#[derive(Debug, Clone)]
pub struct Signing {
    pub key: Key,
    pub ttl: std::time::Duration,
}

impl Signing {
    /// `t/{expires}/{token}` for `resource`, valid for the configured lifetime from `now`.
    pub fn grant_for(&self, resource: &str, now: i64) -> String {
        let expires = now.saturating_add(self.ttl.as_secs() as i64);
        grant_segments(self.key.expose(), resource, expires)
    }

    pub fn verify(&self, resource: &str, grant: &Grant, now: i64) -> bool {
        verify(self.key.expose(), resource, grant, now)
    }
}

/// What a signed path carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub expires: i64,
    pub token: String,
}

/// The token for `resource` until `expires`.
pub fn token(key: &str, resource: &str, expires: i64) -> String {
    let digest = Md5::digest(format!("{expires}:{resource}:{key}").as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
}

/// The path segments that grant `resource` until `expires`: `t/{expires}/{token}`.
pub fn grant_segments(key: &str, resource: &str, expires: i64) -> String {
    format!("{MARKER}/{expires}/{}", token(key, resource, expires))
}

/// `path` with its grant taken out, and the grant: the first `t/{expires}/{token}` after the
/// resource's kind and id — `/cmaf/7/t/{e}/{tok}/720p/index.m3u8` → `/cmaf/7/720p/index.m3u8`,
/// `/player/videos/7_ab/t/{e}/{tok}` → `/player/videos/7_ab`. A path without one is returned
/// as it is; so is a marker followed by something that is not a grant (it then names nothing).
pub fn split(path: &str) -> (Cow<'_, str>, Option<Grant>) {
    // Every media request passes here; most carry no grant.
    if !path.contains("/t/") {
        return (Cow::Borrowed(path), None);
    }
    let segments: Vec<&str> = path.split('/').take(MAX_SEGMENTS).collect();
    for at in 3..segments.len().saturating_sub(2) {
        if segments[at] != MARKER {
            continue;
        }
        if let Some(grant) = grant(segments[at + 1], segments[at + 2]) {
            let mut rest = segments[..at].to_vec();
            rest.extend_from_slice(&segments[at + 3..]);
            return (Cow::Owned(rest.join("/")), Some(grant));
        }
    }
    (Cow::Borrowed(path), None)
}

/// Media paths are a few segments deep; anything longer names nothing anyway.
const MAX_SEGMENTS: usize = 16;

/// A grant from its two path segments, when both are well formed.
pub fn grant(expires: &str, token: &str) -> Option<Grant> {
    let well_formed = !expires.is_empty()
        && expires.len() <= 12
        && expires.bytes().all(|b| b.is_ascii_digit())
        && token.len() == TOKEN_LEN
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    Some(Grant {
        expires: well_formed.then(|| expires.parse().ok()).flatten()?,
        token: token.to_owned(),
    })
}

/// What a (grant-less) media path is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A live stream's outputs: `/cmaf|mpegts|screenshots|player/{id}…`.
    Stream(i64),
    /// A recorded video's files or page: `/videos/{id}_{slug}…`, `/player/videos/{id}_{slug}`.
    Video(i64),
}

impl Resource {
    pub fn of(path: &str) -> Option<Resource> {
        let mut segments = path.split('/').skip(1);
        let id = |s: Option<&str>| s?.parse::<i64>().ok().filter(|i| *i > 0);
        let video = |s: Option<&str>| id(s?.split_once('_').map(|(i, _)| i));
        match segments.next()? {
            "cmaf" | "mpegts" | "screenshots" => id(segments.next()).map(Resource::Stream),
            // The WHEP endpoint; a session's own URL (`/whep/{id}/{session}`) is its
            // capability and needs no grant.
            "whep" => id(segments.next())
                .filter(|_| segments.next().is_none())
                .map(Resource::Stream),
            "videos" => video(segments.next()).map(Resource::Video),
            "player" => match segments.next()? {
                "videos" => video(segments.next()).map(Resource::Video),
                other => id(Some(other)).map(Resource::Stream),
            },
            _ => None,
        }
    }

    /// The name tokens are computed over: `s{id}` or `v{id}`.
    pub fn name(self) -> String {
        match self {
            Resource::Stream(id) => format!("s{id}"),
            Resource::Video(id) => format!("v{id}"),
        }
    }
}

/// Whether `grant` is the key's token for `resource`, not expired at `now` (unix seconds).
pub fn verify(key: &str, resource: &str, grant: &Grant, now: i64) -> bool {
    grant.expires >= now
        && crate::secret::constant_time_eq(
            token(key, resource, grant.expires).as_bytes(),
            grant.token.as_bytes(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's worked example, computed apart from this code:
    /// `printf '1700000000:s7:example-signing-key' | openssl md5 -binary | base64 | tr '+/' '-_' | tr -d '='`
    #[test]
    fn the_documented_example() {
        assert_eq!(
            token("example-signing-key", "s7", 1_700_000_000),
            "shuEPgB6ff0dIWbcv1-KZA"
        );
    }

    #[test]
    fn a_grant_opens_its_resource_until_it_expires_and_nothing_else() {
        let g = Grant {
            expires: 2_000,
            token: token("k", "s7", 2_000),
        };
        assert!(verify("k", "s7", &g, 1_999));
        assert!(verify("k", "s7", &g, 2_000));
        assert!(!verify("k", "s7", &g, 2_001), "expired");
        assert!(!verify("k", "s8", &g, 1_000), "another stream");
        assert!(!verify("k", "v7", &g, 1_000), "a video, not the stream");
        assert!(!verify("other", "s7", &g, 1_000), "another key");
        let later = Grant {
            expires: 3_000,
            ..g
        };
        assert!(!verify("k", "s7", &later, 1_000), "the expiry is signed");
    }

    #[test]
    fn paths_name_their_resource() {
        for (path, r) in [
            ("/cmaf/7/master.m3u8", Some(Resource::Stream(7))),
            ("/mpegts/7/720p/index.m3u8", Some(Resource::Stream(7))),
            ("/screenshots/7/last.jpg", Some(Resource::Stream(7))),
            ("/player/7", Some(Resource::Stream(7))),
            ("/player/7/status.json", Some(Resource::Stream(7))),
            ("/videos/9_abc/master.m3u8", Some(Resource::Video(9))),
            ("/player/videos/9_abc", Some(Resource::Video(9))),
            ("/player/assets/hls.min.js", None),
            ("/player/broadcasts/3", None),
            ("/cmaf/0/master.m3u8", None),
            ("/videos/x_abc/master.m3u8", None),
        ] {
            assert_eq!(Resource::of(path), r, "{path}");
        }
        assert_eq!(Resource::Video(9).name(), "v9");
    }

    #[test]
    fn split_takes_the_grant_out_of_the_path() {
        let t = token("k", "s7", 1_700_000_000);
        let signed = format!("/cmaf/7/t/1700000000/{t}/720p/part_3_1.m4s");
        let (path, grant) = split(&signed);
        assert_eq!(path, "/cmaf/7/720p/part_3_1.m4s");
        assert_eq!(grant.unwrap().expires, 1_700_000_000);
        let page = format!("/player/7/t/5/{t}");
        let (path, grant) = split(&page);
        assert_eq!((path.as_ref(), grant.is_some()), ("/player/7", true));
        let video = format!("/player/videos/9_abc/t/5/{t}");
        assert_eq!(split(&video).0, "/player/videos/9_abc");
        for plain in [
            "/cmaf/7/master.m3u8",
            "/cmaf/7/t/master.m3u8",
            "/cmaf/7/t/12x/AAAAAAAAAAAAAAAAAAAAAA/master.m3u8",
            "/cmaf/7/t/12/short/master.m3u8",
            "/cmaf/7/t/12/AAAAAAAAAAAAAAAAAAAA.A/master.m3u8",
            "/cmaf/7/t/9999999999999/AAAAAAAAAAAAAAAAAAAAAA/master.m3u8",
        ] {
            let (path, grant) = split(plain);
            assert_eq!((path.as_ref(), grant), (plain, None), "{plain}");
        }
    }
}
