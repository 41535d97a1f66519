//! Publish names: `rtmp://HOST:PORT/in/{id}?{token}` as one URL (ffmpeg: app `in`, key
//! `{id}?{token}`) or split the OBS way (server `rtmp://HOST:PORT/in`, key `{id}?{token}`);
//! `{id}b` is the backup input. Sans-IO.

/// The only application name we publish under.
pub const APP: &str = "in";
/// Longer keys are refused before any parsing (a real one is ~45 bytes).
pub const MAX_KEY_BYTES: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("application must be `{APP}`")]
    App,
    #[error("publish name longer than {MAX_KEY_BYTES} bytes")]
    TooLong,
    #[error("publish name is not `{{id}}?{{token}}`")]
    Malformed,
}

pub use crate::ingest::PublishTarget as PublishKey;

pub fn parse(app: &str, key: &str) -> Result<PublishKey, KeyError> {
    if app.trim_end_matches('/') != APP {
        return Err(KeyError::App);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLong);
    }
    let (name, params) = key.split_once('?').ok_or(KeyError::Malformed)?;
    // The token is `token=T` wherever it stands, else the first parameter; the others are
    // the publisher's own (for the authorization hook).
    let parts: Vec<&str> = params.split('&').collect();
    let at = parts
        .iter()
        .position(|p| p.starts_with("token="))
        .unwrap_or(0);
    let token = parts[at].strip_prefix("token=").unwrap_or(parts[at]);
    let query = parts
        .iter()
        .enumerate()
        .filter(|(i, p)| *i != at && !p.is_empty())
        .map(|(_, p)| *p)
        .collect::<Vec<_>>()
        .join("&");
    if !crate::ingest::plain_query(&query) {
        return Err(KeyError::Malformed);
    }
    let mut target = crate::ingest::parse_target(name, token).ok_or(KeyError::Malformed)?;
    target.query = query;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Slot;

    #[test]
    fn accepted_forms() {
        let k = parse("in", "42?abc123").unwrap();
        assert_eq!(
            (k.stream_id, k.slot, k.token.as_str()),
            (42, Slot::Main, "abc123")
        );
        let k = parse("in/", "42b?token=abc").unwrap();
        assert_eq!((k.stream_id, k.slot), (42, Slot::Backup));
        // The publisher's own parameters, for the authorization hook.
        let k = parse("in", "42?abc&user=7&sig=x_y").unwrap();
        assert_eq!(
            (k.token.as_str(), k.query.as_str()),
            ("abc", "user=7&sig=x_y")
        );
        let k = parse("in", "42?user=7&token=abc").unwrap();
        assert_eq!((k.token.as_str(), k.query.as_str()), ("abc", "user=7"));
        assert_eq!(parse("in", "42?abc").unwrap().query, "");
    }

    #[test]
    fn refused_forms() {
        for (app, key) in [
            ("live", "42?abc"),
            ("in/sub", "42?abc"),
            ("in", "42"),
            ("in", "?abc"),
            ("in", "042?abc"),
            ("in", "4x2?abc"),
            ("in", "42?"),
            ("in", "../42?abc"),
            ("in", "42?ab\0c"),
            ("in", "42?a/../b"),
            ("in", "99999999999999999999?abc"),
            ("in", "42?abc&a b"),
            ("in", "42?abc&x=\u{7f}"),
        ] {
            assert!(parse(app, key).is_err(), "{app} {key}");
        }
        assert_eq!(parse("in", &"1".repeat(1000)), Err(KeyError::TooLong));
    }
}
