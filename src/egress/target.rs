//! A restream's target as the record names it (`uri`): checked by the one outbound URL policy
//! (schemes `rtmp`, `rtmps`, `srt`; link-local and metadata addresses refused), read into what
//! its sender needs, and shown without its secret (the stream key in an RTMP path, an SRT
//! stream id and passphrase) wherever it is displayed or logged.

use super::rtmp::{RtmpTarget, TargetError};
use super::srt::{SrtTarget, SrtTargetError};
use crate::url_policy::{self, Purpose, UrlPolicyError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Rtmp(RtmpTarget),
    Srt(SrtTarget),
}

#[derive(Debug, thiserror::Error)]
pub enum BadTarget {
    #[error(transparent)]
    Policy(#[from] UrlPolicyError),
    #[error(transparent)]
    Rtmp(#[from] TargetError),
    #[error(transparent)]
    Srt(#[from] SrtTargetError),
}

impl Target {
    pub fn parse(uri: &str) -> Result<Target, BadTarget> {
        let url = url_policy::parse(uri, Purpose::Restream)?;
        url_policy::check(&url, Purpose::Restream, false)?;
        Ok(match url.scheme() {
            "srt" => Target::Srt(SrtTarget::parse(&url)?),
            _ => Target::Rtmp(RtmpTarget::parse(&url)?),
        })
    }

    /// The target without its secret, for the API and the log.
    pub fn shown(&self) -> String {
        match self {
            Target::Rtmp(t) => format!("{t:?}"),
            Target::Srt(t) => format!("{t:?}"),
        }
    }
}

/// How a stored `uri` is shown: its parts without the secret, or nothing of it if it does not
/// read as a target (never echo what might hold a key).
pub fn shown(uri: &str) -> String {
    Target::parse(uri).map_or_else(|_| "<invalid target>".to_owned(), |t| t.shown())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_checked_by_the_url_policy_and_shown_without_their_secret() {
        assert_eq!(
            shown("rtmp://a.rtmp.youtube.com/live2/xxxx-yyyy-zzzz"),
            "rtmp://a.rtmp.youtube.com:1935/live2/****"
        );
        assert_eq!(
            shown("srt://ingest.example:9000?streamid=publish:KEY&passphrase=0123456789ab"),
            "srt://ingest.example:9000?streamid=****"
        );
        for refused in [
            "rtmp://169.254.169.254/app/key",
            "https://example.com/app/key",
            "rtmp://example.com/key",
            "srt://example.com:9000?passphrase=short",
        ] {
            assert!(Target::parse(refused).is_err(), "{refused}");
        }
        assert_eq!(
            shown("rtmp://169.254.169.254/app/secret"),
            "<invalid target>"
        );
    }
}
