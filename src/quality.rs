//! Quality sets (ABR ladders) loaded from `pipelines/quality_sets.toml` or an operator's file;
//! the API lists them and the pipeline builds one rendition per rung.

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Store setting holding the id of the default live quality set (changed through the API).
pub const DEFAULT_QUALITY_SET_KEY: &str = "default_quality_set";

/// The shipped ladders, embedded so the binary runs from any directory.
pub const BUILTIN_QUALITY_SETS: &str = include_str!("../pipelines/quality_sets.toml");

/// Sanity limits for an operator's file: more rungs than this is a typo, not a ladder.
const MAX_SETS: usize = 256;
const MAX_RUNGS: usize = 16;
const MIN_HEIGHT: u32 = 64;
const MAX_HEIGHT: u32 = 4320;

#[derive(Debug, thiserror::Error)]
pub enum QualityError {
    #[error("cannot read quality sets file {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("quality sets: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("quality sets: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quality {
    pub id: i64,
    pub name: String,
    pub height: u32,
    pub video_bitrate_kbps: u32,
    pub audio_bitrate_kbps: u32,
    pub video_codec: String,
    pub audio_codec: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualitySet {
    pub id: i64,
    pub name: String,
    /// The file's initial default; the live default is a store setting the API can change.
    #[serde(default)]
    pub default: bool,
    pub qualities: Vec<Quality>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct QualityFile {
    live: Vec<QualitySet>,
}

/// The validated catalogue of live quality sets.
#[derive(Debug, Clone)]
pub struct QualitySets {
    sets: Vec<QualitySet>,
}

impl QualitySets {
    pub fn builtin() -> QualitySets {
        QualitySets::parse(BUILTIN_QUALITY_SETS).expect("shipped quality sets are valid")
    }

    pub fn load(path: Option<&Path>) -> Result<QualitySets, QualityError> {
        match path {
            None => Ok(QualitySets::builtin()),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| QualityError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                QualitySets::parse(&text)
            }
        }
    }

    pub fn parse(text: &str) -> Result<QualitySets, QualityError> {
        let file: QualityFile = toml::from_str(text)?;
        let invalid = |m: String| Err(QualityError::Invalid(m));
        if file.live.is_empty() || file.live.len() > MAX_SETS {
            return invalid(format!("between 1 and {MAX_SETS} live sets are needed"));
        }
        if file.live.iter().filter(|s| s.default).count() != 1 {
            return invalid("exactly one live set must have default = true".into());
        }
        let mut set_ids = HashSet::new();
        let mut quality_ids = HashSet::new();
        for set in &file.live {
            if !set_ids.insert(set.id) || set.id < 1 {
                return invalid(format!("set id {} is duplicated or not positive", set.id));
            }
            if set.qualities.is_empty() || set.qualities.len() > MAX_RUNGS {
                return invalid(format!("set {} needs 1..={MAX_RUNGS} qualities", set.id));
            }
            for q in &set.qualities {
                if !quality_ids.insert(q.id) || q.id < 1 {
                    return invalid(format!("quality id {} is duplicated or not positive", q.id));
                }
                if !(MIN_HEIGHT..=MAX_HEIGHT).contains(&q.height) || q.height % 2 != 0 {
                    return invalid(format!(
                        "quality {}: height must be even and within {MIN_HEIGHT}..={MAX_HEIGHT}",
                        q.id
                    ));
                }
                if q.video_bitrate_kbps == 0 || q.audio_bitrate_kbps == 0 {
                    return invalid(format!("quality {}: bitrates must be positive", q.id));
                }
                if q.video_codec != "h264" || q.audio_codec != "aac" {
                    return invalid(format!(
                        "quality {}: only video_codec \"h264\" and audio_codec \"aac\" are produced",
                        q.id
                    ));
                }
            }
        }
        Ok(QualitySets { sets: file.live })
    }

    pub fn get(&self, id: i64) -> Option<&QualitySet> {
        self.sets.iter().find(|s| s.id == id)
    }

    pub fn file_default_id(&self) -> i64 {
        self.sets
            .iter()
            .find(|s| s.default)
            .map(|s| s.id)
            .expect("validated: one default")
    }

    /// The default set: the stored choice (the [`DEFAULT_QUALITY_SET_KEY`] setting) when it still
    /// names a set, else the file's default.
    pub fn default_id(&self, stored: Option<&str>) -> i64 {
        stored
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|id| self.get(*id).is_some())
            .unwrap_or_else(|| self.file_default_id())
    }

    /// The set a stream transcodes with: the one its record names while it exists, else the
    /// default (`stored` as in [`QualitySets::default_id`]).
    pub fn resolve(&self, requested: Option<i64>, stored: Option<&str>) -> &QualitySet {
        requested
            .and_then(|id| self.get(id))
            .or_else(|| self.get(self.default_id(stored)))
            .expect("default_id names a loaded set")
    }

    /// The sets with `default` reflecting `default_id` (the store's current choice).
    pub fn listing(&self, default_id: i64) -> Vec<QualitySet> {
        self.sets
            .iter()
            .map(|s| QualitySet {
                default: s.id == default_id,
                ..s.clone()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_default_is_the_four_rung_ladder() {
        let sets = QualitySets::builtin();
        let default = sets.get(sets.file_default_id()).unwrap();
        let heights: Vec<u32> = default.qualities.iter().map(|q| q.height).collect();
        assert_eq!(heights, [1080, 720, 480, 360]);
    }

    #[test]
    fn rejects_broken_files() {
        let two_defaults = BUILTIN_QUALITY_SETS.replace("default = false", "default = true");
        assert!(QualitySets::parse(&two_defaults).is_err());
        let odd = BUILTIN_QUALITY_SETS.replace("height = 360", "height = 361");
        assert!(QualitySets::parse(&odd).is_err());
        let dup = BUILTIN_QUALITY_SETS.replace("id = 7", "id = 6");
        assert!(QualitySets::parse(&dup).is_err());
        assert!(QualitySets::parse("live = []").is_err());
    }

    #[test]
    fn a_stream_gets_its_set_else_the_stored_default_else_the_files() {
        let sets = QualitySets::builtin();
        let file_default = sets.file_default_id();
        let other = sets
            .listing(file_default)
            .iter()
            .find(|s| s.id != file_default)
            .unwrap()
            .id;
        assert_eq!(sets.resolve(Some(other), None).id, other);
        assert_eq!(sets.resolve(Some(9999), None).id, file_default);
        assert_eq!(sets.resolve(None, Some(&other.to_string())).id, other);
        assert_eq!(sets.resolve(None, Some("garbage")).id, file_default);
        assert_eq!(sets.resolve(None, None).id, file_default);
    }

    #[test]
    fn listing_moves_the_default_flag() {
        let sets = QualitySets::builtin();
        let listing = sets.listing(2);
        assert!(listing.iter().all(|s| s.default == (s.id == 2)));
    }
}
