//! SRT stream ids (SRTO_STREAMID): `{id}#{token}` / `{id}b#{token}` as our push URLs carry them,
//! or the SRT access-control syntax `#!::r={id},m=publish,t={token}` (Haivision's
//! "SRT Access Control" guidelines; `r` = resource, `m` = mode). Either may be percent-encoded
//! (`1%23TOKEN`, as URL-minded tools write it since `#` starts a URL fragment): it is decoded
//! once, then read by the same rules. Sans-IO.

/// SRT limits the stream id to 512 bytes (SRT RFC draft §3.2.1.3, `SRTO_STREAMID`).
pub const MAX_STREAM_ID_BYTES: usize = 512;
/// Keys in an access-control stream id; more is not a real publisher.
const MAX_KEYS: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamIdError {
    #[error("no stream id (use streamid={{id}}#{{token}})")]
    Missing,
    #[error("stream id longer than {MAX_STREAM_ID_BYTES} bytes")]
    TooLong,
    #[error("stream id is neither `{{id}}#{{token}}` nor `#!::r={{id}},m=publish,t={{token}}`")]
    Malformed,
    #[error("stream id has an invalid percent-encoding")]
    BadEncoding,
    #[error("mode `{0}` is not supported: only m=publish")]
    Mode(String),
}

pub use crate::ingest::PublishTarget as Target;

pub fn parse(raw: Option<&str>) -> Result<Target, StreamIdError> {
    let raw = raw
        .filter(|s| !s.is_empty())
        .ok_or(StreamIdError::Missing)?;
    let decoded = percent_decode(raw)?;
    let raw = decoded.as_ref();
    if raw.len() > MAX_STREAM_ID_BYTES {
        return Err(StreamIdError::TooLong);
    }
    let (name, token, query) = match raw.strip_prefix("#!::") {
        Some(pairs) => access_control(pairs)?,
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
    Ok(target)
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

/// `key=value` pairs separated by commas; `r` and `t` are required, `m` must be `publish` when
/// given, other standard keys (`u`, `h`, `s`) are ignored.
/// `r` (resource), `t` (token), `m` (mode: publish only); the other keys are the caller's own,
/// returned as `k=v&…` for the authorization hook.
fn access_control(pairs: &str) -> Result<(&str, &str, String), StreamIdError> {
    let (mut resource, mut token) = (None, None);
    let mut others = Vec::new();
    for (n, pair) in pairs.split(',').enumerate() {
        if n >= MAX_KEYS {
            return Err(StreamIdError::Malformed);
        }
        let (k, v) = pair.split_once('=').ok_or(StreamIdError::Malformed)?;
        match k {
            "r" => resource = Some(v),
            "t" => token = Some(v),
            "m" if v != "publish" => return Err(StreamIdError::Mode(v.to_owned())),
            "m" => {}
            _ => others.push(pair),
        }
    }
    let (resource, token) = resource.zip(token).ok_or(StreamIdError::Malformed)?;
    Ok((resource, token, others.join("&")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Slot;

    #[test]
    fn both_syntaxes() {
        let t = parse(Some("42#abc123")).unwrap();
        assert_eq!(
            (t.stream_id, t.slot, t.token.as_str()),
            (42, Slot::Main, "abc123")
        );
        let t = parse(Some("42b#abc123")).unwrap();
        assert_eq!(t.slot, Slot::Backup);
        let t = parse(Some("#!::r=42b,m=publish,t=abc123")).unwrap();
        assert_eq!(
            (t.stream_id, t.slot, t.token.as_str()),
            (42, Slot::Backup, "abc123")
        );
        // Order free, mode optional, the other keys kept for the authorization hook.
        let t = parse(Some("#!::u=obs,t=abc123,r=7,s=x")).unwrap();
        assert_eq!((t.stream_id, t.slot), (7, Slot::Main));
        assert_eq!(t.query, "u=obs&s=x");
        assert_eq!(parse(Some("42#abc123")).unwrap().query, "");
        assert!(parse(Some("#!::r=7,t=abc123,u=a b")).is_err());
    }

    #[test]
    fn percent_encoded_ids_are_decoded_once() {
        let t = parse(Some("42%23abc123")).unwrap();
        assert_eq!(
            (t.stream_id, t.slot, t.token.as_str()),
            (42, Slot::Main, "abc123")
        );
        let t = parse(Some("42b%23abc123")).unwrap();
        assert_eq!(t.slot, Slot::Backup);
        // Lower-case hex, and the access-control form with every separator encoded.
        let t = parse(Some("%23%21%3a%3Ar%3D42%2Cm%3Dpublish%2Ct%3Dabc123")).unwrap();
        assert_eq!((t.stream_id, t.token.as_str()), (42, "abc123"));
        // Once only: `%2523` decodes to `%23`, which is not a separator.
        assert_eq!(parse(Some("42%2523abc123")), Err(StreamIdError::Malformed));
        for bad in ["42%2", "42%zz%23abc", "42%23abc%", "42%ff%23abc"] {
            assert_eq!(parse(Some(bad)), Err(StreamIdError::BadEncoding), "{bad}");
        }
        // The bound applies to the decoded form: 682 encoded bytes decode to 242.
        let long = format!("#!::r=42,t={},u={}", "%61".repeat(120), "%75".repeat(100));
        assert!(long.len() > MAX_STREAM_ID_BYTES);
        assert_eq!(parse(Some(&long)).unwrap().token, "a".repeat(120));
        let too_long = format!("42%23{}", "a".repeat(600));
        assert_eq!(parse(Some(&too_long)), Err(StreamIdError::TooLong));
    }

    #[test]
    fn refusals() {
        assert_eq!(parse(None), Err(StreamIdError::Missing));
        assert_eq!(parse(Some("")), Err(StreamIdError::Missing));
        assert_eq!(parse(Some(&"1".repeat(513))), Err(StreamIdError::TooLong));
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
            assert!(parse(Some(bad)).is_err(), "{bad} accepted");
        }
        assert_eq!(
            parse(Some("#!::r=42,m=request,t=abc")),
            Err(StreamIdError::Mode("request".into()))
        );
        let many = format!("#!::r=1,t=a{}", ",u=x".repeat(20));
        assert_eq!(parse(Some(&many)), Err(StreamIdError::Malformed));
    }
}
