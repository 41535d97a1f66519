//! The packaging section: segment and part durations, checked together by [`PackagingConfig`].

use super::{invalid, ConfigError, PackagingConfig, Settings};

/// Segments are offered as 2, 3 or 4 whole seconds; named here before `PackagingConfig` checks
/// the range, so a fraction gets the message that lists them.
pub(super) fn whole_seconds(key: &'static str, ms: u64) -> Result<u64, ConfigError> {
    if !ms.is_multiple_of(1000) {
        return Err(invalid(
            key,
            ms.to_string(),
            "must be whole seconds: 2000, 3000 or 4000",
        ));
    }
    Ok(ms)
}

pub(super) fn config(s: &Settings) -> Result<PackagingConfig, ConfigError> {
    let (segment_ms, part_ms) = (s.segment_duration_ms, s.part_duration_ms);
    let mut config = PackagingConfig::new(segment_ms, part_ms).map_err(|reason| {
        invalid(
            "segment_duration_ms/part_duration_ms",
            format!("{segment_ms}/{part_ms}"),
            reason,
        )
    })?;
    config.mpegts_idle =
        (s.mpegts_idle_secs > 0).then(|| std::time::Duration::from_secs(s.mpegts_idle_secs));
    Ok(config)
}
