//! SRT stream ids (SRTO_STREAMID). Publishing: `{id}#{token}` / `{id}b#{token}` as our push URLs
//! carry them, or the SRT access-control syntax `#!::r={id},m=publish,t={token}` (Haivision's
//! "SRT Access Control" guidelines; `r` = resource, `m` = mode). Reading: `play:{id}` (the
//! default rung), `play:{id}/{rung}`, `play:{id}/origin`, with a signed-playback grant right
//! after the id as in the HTTP paths (`play:{id}/t/{expires}/{token}/…`), or the same resource
//! as `#!::r={id}[/…],m=request`. Any form may be percent-encoded (`1%23TOKEN`, as URL-minded
//! tools write it since `#` starts a URL fragment): it is decoded once, then read by the same
//! rules. Sans-IO.

use crate::playback_auth::Grant;

/// SRT limits the stream id to 512 bytes (SRT RFC draft §3.2.1.3, `SRTO_STREAMID`).
pub const MAX_STREAM_ID_BYTES: usize = 512;
/// Keys in an access-control stream id; more is not a real caller.
const MAX_KEYS: usize = 16;
/// Rung names are the quality set's short names (`720p`, `hd_low`); longer is not one.
const MAX_RUNG_BYTES: usize = 32;
/// The prefix of a reader's stream id.
const PLAY: &str = "play:";
/// The rendition name that means the source as received.
pub const ORIGIN: &str = "origin";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamIdError {
    #[error("no stream id (use streamid={{id}}#{{token}} to publish, play:{{id}} to read)")]
    Missing,
    #[error("stream id longer than {MAX_STREAM_ID_BYTES} bytes")]
    TooLong,
    #[error("stream id is neither `{{id}}#{{token}}`, `play:{{id}}[/{{rung}}]` nor `#!::r=…,m=publish|request`")]
    Malformed,
    #[error("stream id has an invalid percent-encoding")]
    BadEncoding,
    #[error("mode `{0}` is not supported: only m=publish or m=request")]
    Mode(String),
}

pub use crate::ingest::PublishTarget as Target;

/// What a caller asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Publish(Target),
    Play(PlayTarget),
}

/// A reader's stream, rendition and (signed playback) grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayTarget {
    pub stream_id: i64,
    pub rendition: Rendition,
    pub grant: Option<Grant>,
}

/// Which of a stream's media a reader gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendition {
    /// The real-time readers' default rung ([`crate::hub::default_rung`]).
    Default,
    /// A rung by name.
    Rung(String),
    /// The source as received, remuxed.
    Origin,
}

pub fn parse(raw: Option<&str>) -> Result<Request, StreamIdError> {
    let raw = raw
        .filter(|s| !s.is_empty())
        .ok_or(StreamIdError::Missing)?;
    let decoded = percent_decode(raw)?;
    let raw = decoded.as_ref();
    if raw.len() > MAX_STREAM_ID_BYTES {
        return Err(StreamIdError::TooLong);
    }
    if let Some(resource) = raw.strip_prefix(PLAY) {
        return play(resource).map(Request::Play);
    }
    let (name, token, query) = match raw.strip_prefix("#!::") {
        Some(pairs) => match access_control(pairs)? {
            AccessControl::Publish(name, token, query) => (name, token, query),
            AccessControl::Request(resource) => return play(resource).map(Request::Play),
        },
        None => {
            let (name, token) = raw.split_once('#').ok_or(StreamIdError::Malformed)?;
            (name, token, String::new())
        }
    };
    if !super::super::plain_query(&query) {
        return Err(StreamIdError::Malformed);
    }
    let mut target = super::super::parse_target(name, token).ok_or(StreamIdError::Malformed)?;
    target.query = query;
    Ok(Request::Publish(target))
}

/// `{id}[/t/{expires}/{token}][/{rung}|/origin]`: the id, the grant where the HTTP paths carry
/// it (right after the id), the rendition.
fn play(resource: &str) -> Result<PlayTarget, StreamIdError> {
    let mut segments = resource.split('/');
    let id = segments.next().unwrap_or_default();
    let valid_id = !id.is_empty()
        && id.len() <= 18
        && !id.starts_with('0')
        && id.bytes().all(|b| b.is_ascii_digit());
    let stream_id = valid_id
        .then(|| id.parse().ok())
        .flatten()
        .ok_or(StreamIdError::Malformed)?;
    let mut rest: Vec<&str> = segments.collect();
    let mut grant = None;
    if rest.first() == Some(&"t") {
        let (expires, token) = rest
            .get(1)
            .zip(rest.get(2))
            .ok_or(StreamIdError::Malformed)?;
        grant = Some(crate::playback_auth::grant(expires, token).ok_or(StreamIdError::Malformed)?);
        rest.drain(..3);
    }
    let rendition = match rest.as_slice() {
        [] => Rendition::Default,
        [ORIGIN] => Rendition::Origin,
        [rung] if valid_rung(rung) => Rendition::Rung((*rung).to_owned()),
        _ => return Err(StreamIdError::Malformed),
    };
    Ok(PlayTarget {
        stream_id,
        rendition,
        grant,
    })
}

fn valid_rung(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_RUNG_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Decodes `%XX` escapes once (RFC 3986 §2.1). A `%` not followed by two hex digits, or
/// escapes that decode to invalid UTF-8, make the id unreadable rather than taken literally.
fn percent_decode(raw: &str) -> Result<std::borrow::Cow<'_, str>, StreamIdError> {
    if !raw.contains('%') {
        return Ok(raw.into());
    }
    let bytes = raw.as_bytes();
    let escapes_ok = bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if !escapes_ok {
        return Err(StreamIdError::BadEncoding);
    }
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| StreamIdError::BadEncoding)
}

/// What an access-control stream id asks for.
enum AccessControl<'a> {
    /// The resource, the token, and the caller's other keys as `k=v&…` for the authorization
    /// hook.
    Publish(&'a str, &'a str, String),
    /// The resource, read as `play:` reads what follows it.
    Request(&'a str),
}

/// `key=value` pairs separated by commas: `r` (resource) is required, `m` (mode) is `publish`
/// (the default) or `request`; publishing requires `t` (token). The other keys (standard `u`,
/// `h`, `s`, or the caller's own) go to the authorization hook when publishing.
fn access_control(pairs: &str) -> Result<AccessControl<'_>, StreamIdError> {
    let (mut resource, mut token, mut request) = (None, None, false);
    let mut others = Vec::new();
    for (n, pair) in pairs.split(',').enumerate() {
        if n >= MAX_KEYS {
            return Err(StreamIdError::Malformed);
        }
        let (k, v) = pair.split_once('=').ok_or(StreamIdError::Malformed)?;
        match (k, v) {
            ("r", _) => resource = Some(v),
            ("t", _) => token = Some(v),
            ("m", "publish") => request = false,
            ("m", "request") => request = true,
            ("m", _) => return Err(StreamIdError::Mode(v.to_owned())),
            _ => others.push(pair),
        }
    }
    let resource = resource.ok_or(StreamIdError::Malformed)?;
    if request {
        // A reader's grant travels in its resource, as in the HTTP paths; a token key here
        // would be a publish token sent to the wrong place.
        if token.is_some() {
            return Err(StreamIdError::Malformed);
        }
        return Ok(AccessControl::Request(resource));
    }
    let token = token.ok_or(StreamIdError::Malformed)?;
    Ok(AccessControl::Publish(resource, token, others.join("&")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Slot;

    /// A publish target, or why not.
    fn publish(raw: Option<&str>) -> Result<Target, StreamIdError> {
        match parse(raw)? {
            Request::Publish(t) => Ok(t),
            Request::Play(p) => panic!("{raw:?} read as a play request: {p:?}"),
        }
    }

    #[test]
    fn both_syntaxes() {
        let t = publish(Some("42#abc123")).unwrap();
        assert_eq!(
            (t.stream_id, t.slot, t.token.as_str()),
            (42, Slot::Main, "abc123")
        );
        let t = publish(Some("42b#abc123")).unwrap();
        assert_eq!(t.slot, Slot::Backup);
        let t = publish(Some("#!::r=42b,m=publish,t=abc123")).unwrap();
        assert_eq!(
            (t.stream_id, t.slot, t.token.as_str()),
            (42, Slot::Backup, "abc123")
        );
        // Order free, mode optional, the other keys kept for the authorization hook.
        let t = publish(Some("#!::u=obs,t=abc123,r=7,s=x")).unwrap();
        assert_eq!((t.stream_id, t.slot), (7, Slot::Main));
        assert_eq!(t.query, "u=obs&s=x");
        assert_eq!(publish(Some("42#abc123")).unwrap().query, "");
        assert!(publish(Some("#!::r=7,t=abc123,u=a b")).is_err());
    }

    #[test]
    fn percent_encoded_ids_are_decoded_once() {
        let t = publish(Some("42%23abc123")).unwrap();
        assert_eq!(
            (t.stream_id, t.slot, t.token.as_str()),
            (42, Slot::Main, "abc123")
        );
        let t = publish(Some("42b%23abc123")).unwrap();
        assert_eq!(t.slot, Slot::Backup);
        // Lower-case hex, and the access-control form with every separator encoded.
        let t = publish(Some("%23%21%3a%3Ar%3D42%2Cm%3Dpublish%2Ct%3Dabc123")).unwrap();
        assert_eq!((t.stream_id, t.token.as_str()), (42, "abc123"));
        // Once only: `%2523` decodes to `%23`, which is not a separator.
        assert_eq!(
            publish(Some("42%2523abc123")),
            Err(StreamIdError::Malformed)
        );
        for bad in ["42%2", "42%zz%23abc", "42%23abc%", "42%ff%23abc"] {
            assert_eq!(publish(Some(bad)), Err(StreamIdError::BadEncoding), "{bad}");
        }
        // The bound applies to the decoded form: 682 encoded bytes decode to 242.
        let long = format!("#!::r=42,t={},u={}", "%61".repeat(120), "%75".repeat(100));
        assert!(long.len() > MAX_STREAM_ID_BYTES);
        assert_eq!(publish(Some(&long)).unwrap().token, "a".repeat(120));
        let too_long = format!("42%23{}", "a".repeat(600));
        assert_eq!(publish(Some(&too_long)), Err(StreamIdError::TooLong));
    }

    #[test]
    fn refusals() {
        assert_eq!(publish(None), Err(StreamIdError::Missing));
        assert_eq!(publish(Some("")), Err(StreamIdError::Missing));
        assert_eq!(publish(Some(&"1".repeat(513))), Err(StreamIdError::TooLong));
        for bad in [
            "42",
            "42#",
            "#abc",
            "x#abc",
            "042#abc",
            "42#ab c",
            "42c#abc",
            "-1#abc",
            "42#abc#def",
            "#!::",
            "#!::r=42",
            "#!::t=abc",
            "#!::r=42,t=abc,x",
            "#!::r=../1,t=a",
            "99999999999999999999#abc",
        ] {
            assert!(publish(Some(bad)).is_err(), "{bad} accepted");
        }
        assert_eq!(
            publish(Some("#!::r=42,m=bidirectional,t=abc")),
            Err(StreamIdError::Mode("bidirectional".into()))
        );
        let many = format!("#!::r=1,t=a{}", ",u=x".repeat(20));
        assert_eq!(publish(Some(&many)), Err(StreamIdError::Malformed));
    }

    fn play(raw: &str) -> Result<PlayTarget, StreamIdError> {
        match parse(Some(raw))? {
            Request::Play(p) => Ok(p),
            Request::Publish(t) => panic!("{raw:?} read as a publish: {t:?}"),
        }
    }

    #[test]
    fn play_forms() {
        let tok = crate::playback_auth::token("k", "s7", 1_700_000_000);
        let grant = Some(crate::playback_auth::Grant {
            expires: 1_700_000_000,
            token: tok.clone(),
        });
        let rung = |r: &str| Rendition::Rung(r.to_owned());
        let cases: Vec<(String, i64, Rendition, Option<crate::playback_auth::Grant>)> = vec![
            ("play:7".into(), 7, Rendition::Default, None),
            ("play:7/480p".into(), 7, rung("480p"), None),
            ("play:7/origin".into(), 7, Rendition::Origin, None),
            ("play:7/hd_low-2".into(), 7, rung("hd_low-2"), None),
            (
                format!("play:7/t/1700000000/{tok}"),
                7,
                Rendition::Default,
                grant.clone(),
            ),
            (
                format!("play:7/t/1700000000/{tok}/360p"),
                7,
                rung("360p"),
                grant.clone(),
            ),
            ("#!::r=7,m=request".into(), 7, Rendition::Default, None),
            ("#!::m=request,r=7/720p".into(), 7, rung("720p"), None),
            (
                "#!::r=7/origin,m=request,u=alice".into(),
                7,
                Rendition::Origin,
                None,
            ),
            (
                format!("#!::r=7/t/1700000000/{tok}/origin,m=request"),
                7,
                Rendition::Origin,
                grant.clone(),
            ),
            // Percent-encoded as URL-minded tools write it, decoded once.
            ("play%3A7%2F480p".into(), 7, rung("480p"), None),
            (
                "%23%21%3a%3Ar%3D7%2F480p%2Cm%3Drequest".into(),
                7,
                rung("480p"),
                None,
            ),
            (
                "play:123456789012345678".into(),
                123_456_789_012_345_678,
                Rendition::Default,
                None,
            ),
        ];
        for (raw, id, rendition, grant) in cases {
            let want = PlayTarget {
                stream_id: id,
                rendition,
                grant,
            };
            assert_eq!(play(&raw), Ok(want), "{raw}");
        }
    }

    #[test]
    fn play_refusals() {
        let tok = crate::playback_auth::token("k", "s7", 1);
        for bad in [
            "play:".to_owned(),
            "play:07".into(),
            "play:x".into(),
            "play:-1".into(),
            "play:1234567890123456789".into(),
            "play:7/".into(),
            "play:7//480p".into(),
            "play:7/480p/extra".into(),
            "play:7/../1".into(),
            "play:7/48 0p".into(),
            format!("play:7/{}", "a".repeat(33)),
            "play:7/t".into(),
            "play:7/t/1".into(),
            "play:7/t/1/short".into(),
            format!("play:7/t/x/{tok}"),
            format!("play:7/t/1/{tok}/480p/x"),
            "play:7#token".into(),
            "#!::m=request".into(),
            "#!::r=7,m=request,t=abc".into(),
            "#!::r=7/x/y,m=request".into(),
            "#!::r=play:7,m=request".into(),
        ] {
            assert!(parse(Some(&bad)).is_err(), "{bad} accepted");
        }
        assert_eq!(parse(Some("play%3A7%2")), Err(StreamIdError::BadEncoding));
        // Publishing's mode is still the default and still needs its token.
        assert!(matches!(
            parse(Some("#!::r=7,t=abc")),
            Ok(Request::Publish(_))
        ));
        assert_eq!(
            parse(Some("#!::r=7,m=publish")),
            Err(StreamIdError::Malformed)
        );
    }
}
