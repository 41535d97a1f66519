//! The daemon's log on stderr: text lines by default (a terminal, journald), or one JSON object
//! per line (`log_format = "json"`) for Loki, Elasticsearch and other collectors; `RUST_LOG`
//! filters both.

use std::sync::OnceLock;

/// The setting's variable: a PULL source process logs in its daemon's format (its stderr is the
/// daemon's), so the daemon hands the format down through it.
pub const FORMAT_ENV: &str = "LIVEPACK_LOG_FORMAT";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    /// `{"timestamp":"2026-11-29T10:00:00.123456Z","level":"INFO","message":"…","stream":7,
    /// "target":"livepack::…"}`: the event's fields beside the message, at the top level.
    Json,
}

impl LogFormat {
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// The format this process logs in (text until [`init`]).
pub fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or_default()
}

/// Log events to stderr in `format`, filtered by `RUST_LOG` (and [`QUIET`]). Once per process.
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let filter = tracing_subscriber::EnvFilter::new(filter(std::env::var("RUST_LOG").ok()));
    // Colours only on a terminal: in journald or a file the escape codes are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        // Spans are left out: the daemon's events carry their stream as a field.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}

/// Dependencies whose warnings are not ours to show: the WebRTC stack (crates `rtc*`) warns
/// about normal start-up races (SRTP packets before the DTLS keys, ICE checks before
/// candidates); srt-protocol warns once per packet still queued when a peer closes (thousands
/// of lines per disconnect), which the SRT listener reports in one line. Each stays at `error`
/// unless a directive of the filter names it.
const QUIET: &[&str] = &[
    "rtc",
    "rtc_ice",
    "rtc_dtls",
    "rtc_srtp",
    "webrtc",
    "srt_protocol",
    "srt_tokio",
];

fn filter(env: Option<String>) -> String {
    let mut filter = env
        .filter(|f| !f.trim().is_empty())
        .unwrap_or_else(|| "info".into());
    let named: Vec<String> = filter
        .split(',')
        .map(|d| d.split('=').next().unwrap_or("").trim().to_owned())
        .collect();
    for target in QUIET {
        let prefix = format!("{target}::");
        if !named.iter().any(|n| n == target || n.starts_with(&prefix)) {
            filter = format!("{filter},{target}=error");
        }
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noisy_dependencies_stay_quiet_unless_named() {
        let f = filter(None);
        assert!(
            f.starts_with("info,")
                && f.contains("webrtc=error")
                && f.contains("srt_protocol=error")
        );
        let f = filter(Some("debug,srt_protocol=trace".into()));
        assert!(f.contains("srt_protocol=trace") && !f.contains("srt_protocol=error"));
        assert!(f.contains("rtc_ice=error"));
        // Our own SRT module's target does not unquiet the srt-protocol crate.
        let f = filter(Some("livepack::ingest::srt=debug".into()));
        assert!(f.contains("srt_protocol=error"));
    }

    #[test]
    fn formats_are_named_as_the_setting_spells_them() {
        for f in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(LogFormat::parse(f.as_str()), Some(f));
        }
        assert_eq!(LogFormat::parse("JSON"), None);
    }
}
