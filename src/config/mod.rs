//! Configuration: defaults ← `livepack.toml` ← `LIVEPACK_*` environment ← command-line flags,
//! merged field by field and validated into one [`Config`]. Every setting is one row of the
//! table in [`table`] (file key, type, doc, default, check); the environment name is derived
//! from the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

use crate::db::DatabaseUrl;
use crate::ingest::{pull, rtmp, srt, whip};
use crate::package::PackagingConfig;

#[macro_use]
mod setting;
mod http;
mod ingest;
mod packaging;
pub mod reference;

mod table;

pub use http::{CdnResource, IngestRegion};
use setting::invalid;
pub use setting::{parse_addr, split_keys};
use table::Settings;
pub use table::{documented, Layer, KEYS};

pub const DEFAULT_CONFIG_FILE: &str = "livepack.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{origin}: invalid value {value:?} for {key}: {reason}")]
    Invalid {
        origin: &'static str,
        /// The file key, or the environment variable it was read from.
        key: String,
        value: String,
        reason: String,
    },
}

impl Layer {
    /// Reads a TOML file; a missing file is an empty layer only when `required` is false.
    pub fn from_file(path: &Path, required: bool) -> Result<Layer, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Layer::default())
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })
            }
        };
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })
    }
}

/// The validated configuration the daemon runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub http_addr: SocketAddr,
    /// The HTTPS listener's address, if any.
    pub https_addr: Option<SocketAddr>,
    /// Both or neither: without them HTTPS uses the RTMPS certificate (configured or
    /// self-signed).
    pub https_cert_file: Option<PathBuf>,
    pub https_key_file: Option<PathBuf>,
    pub rtmp_addr: SocketAddr,
    pub rtmps_addr: SocketAddr,
    pub srt_addr: SocketAddr,
    pub data_dir: PathBuf,
    /// The PostgreSQL database holding the records; `None`: SQLite in `data_dir`.
    pub database_url: Option<DatabaseUrl>,
    /// Empty means "generate one into the data dir" (done by the daemon at start).
    pub api_keys: Vec<String>,
    /// Base of every returned URL; `None` means derived from the bound HTTP address.
    pub public_url: Option<Url>,
    /// `None`: the host name.
    pub node_id: Option<String>,
    /// `None`: derived from the bound HTTP address.
    pub node_url: Option<Url>,
    /// `None`: generated into the PostgreSQL store (shared by the nodes), or per run on SQLite.
    pub node_secret: Option<crate::cluster::node_auth::NodeSecret>,
    pub node_dead_after: Duration,
    pub quality_sets_file: Option<PathBuf>,
    pub profile_templates_file: Option<PathBuf>,
    pub fastedge_app_domain: String,
    /// CDN resources streams may name in `cdn_id`.
    pub cdn_resources: Vec<CdnResource>,
    /// Ingest regions listed in each record's `multi_region_push_urls`.
    pub ingest_regions: Vec<IngestRegion>,
    pub http_max_connections: usize,
    pub http_header_timeout_secs: u64,
    pub http_max_connections_per_ip: usize,
    pub http_body_timeout: Duration,
    pub http_stall_timeout: Duration,
    pub trusted_proxies: crate::admission::TrustedProxies,
    /// Both or neither: without them RTMPS uses a self-signed certificate in the data dir.
    pub rtmps_cert_file: Option<PathBuf>,
    pub rtmps_key_file: Option<PathBuf>,
    pub packaging: PackagingConfig,
    /// Signed playback's key and the lifetime of the URLs records return; `None`: no key.
    pub playback: Option<crate::playback_auth::Signing>,
    /// The publish authorization hook (`publish_auth_*`); `None`: none.
    pub publish_auth: Option<crate::live::PublishAuthConfig>,
    pub grace_period: std::time::Duration,
    /// SIGTERM's bound: past it the daemon exits with what is not finished named in the log.
    pub shutdown_timeout: std::time::Duration,
    pub log_format: crate::logging::LogFormat,
    /// How many transcodes the node takes and what a publish past that gets.
    pub capacity: crate::capacity::CapacityConfig,
    /// The least time from SIGTERM to the listeners' close (balancers' health checks see
    /// `/readyz` fail meanwhile); below `shutdown_timeout`.
    pub shutdown_accept_grace: std::time::Duration,
    pub events_bus_capacity: usize,
    /// A main silent this long is failed over from (to a backup being pushed) or reported off.
    pub backup_switch: std::time::Duration,
    /// A recording whose input returns within this continues the same video.
    pub record_resume: std::time::Duration,
    /// A recording longer than this continues as a new video.
    pub record_max: std::time::Duration,
    /// The bytes all videos may hold; `None`: no quota.
    pub recordings_max_bytes: Option<u64>,
    /// Recording stops (and does not start) below this much free disk.
    pub recordings_min_free_bytes: u64,
    /// How often a live stream's source statistics are sampled.
    pub statistics_sample: std::time::Duration,
    /// Samples older than this are pruned.
    pub statistics_retention: std::time::Duration,
    pub rtmp: crate::ingest::rtmp::RtmpConfig,
    pub srt: crate::ingest::srt::SrtConfig,
    pub whip: crate::ingest::whip::WhipConfig,
    pub whep: crate::realtime::whep::WhepConfig,
    pub pull: crate::ingest::pull::PullConfig,
    /// `node_modules` of the npm install holding hls.js and dash.js for the player page.
    pub player_assets_dir: PathBuf,
    pub restream_ca_file: Option<PathBuf>,
    pub restreams_max_per_stream: u32,
    /// Where finished videos go (`storage_url` and its settings); `None`: local disk only.
    pub storage: Option<crate::storage::StorageSettings>,
    pub storage_local_retention: Duration,
    pub video_retention: Option<Duration>,
}

impl Config {
    pub fn from_layer(layer: Layer) -> Result<Config, ConfigError> {
        let s = Settings::resolve(layer)?;
        check_together(&s)?;
        let storage = storage(&s)?;
        let capacity = capacity(&s)?;
        Ok(Config {
            capacity,
            public_url: http::public_url(s.public_url.as_deref())?,
            node_id: http::node_id(s.node_id.as_deref())?,
            node_url: http::base_url("node_url", s.node_url.as_deref())?,
            node_secret: s
                .node_secret
                .clone()
                .filter(|v| !v.is_empty())
                .map(crate::cluster::node_auth::NodeSecret::new),
            node_dead_after: Duration::from_secs(s.node_dead_secs),
            packaging: packaging::config(&s)?,
            rtmp: ingest::rtmp(&s),
            srt: ingest::srt(&s),
            whip: ingest::whip(&s)?,
            whep: crate::realtime::whep::WhepConfig {
                max_sessions: s.whep_max_sessions,
                max_sessions_per_stream: s.whep_max_sessions_per_stream,
            },
            pull: ingest::pull(&s),
            http_addr: s.http_addr,
            https_addr: s.https_addr,
            https_cert_file: s.https_cert_file,
            https_key_file: s.https_key_file,
            rtmp_addr: s.rtmp_addr,
            rtmps_addr: s.rtmps_addr,
            srt_addr: s.srt_addr,
            database_url: database_url(s.database_url.as_deref())?,
            data_dir: s.data_dir,
            api_keys: s.api_keys,
            quality_sets_file: s.quality_sets_file,
            profile_templates_file: s.profile_templates_file,
            fastedge_app_domain: s.fastedge_app_domain,
            cdn_resources: s.cdn_resources,
            ingest_regions: s.ingest_regions,
            http_max_connections: s.http_max_connections,
            http_header_timeout_secs: s.http_header_timeout_secs,
            http_max_connections_per_ip: s.http_max_connections_per_ip,
            http_body_timeout: Duration::from_secs(s.http_body_timeout_secs),
            http_stall_timeout: Duration::from_secs(s.http_stall_timeout_secs),
            trusted_proxies: http::trusted_proxies(&s.trusted_proxies)?,
            rtmps_cert_file: s.rtmps_cert_file,
            rtmps_key_file: s.rtmps_key_file,
            grace_period: Duration::from_secs(s.grace_period_secs),
            shutdown_timeout: Duration::from_secs(s.shutdown_timeout_secs),
            log_format: crate::logging::LogFormat::parse(&s.log_format)
                .ok_or_else(|| invalid("log_format", s.log_format.clone(), "one of text, json"))?,
            shutdown_accept_grace: Duration::from_secs(s.shutdown_accept_grace_secs),
            events_bus_capacity: s.events_bus_capacity,
            backup_switch: Duration::from_secs(s.backup_switch_secs),
            record_resume: Duration::from_secs(s.record_resume_secs),
            record_max: Duration::from_secs(s.record_max_secs),
            recordings_max_bytes: s.recordings_max_bytes,
            recordings_min_free_bytes: s.recordings_min_free_bytes,
            statistics_sample: Duration::from_secs(s.statistics_sample_secs),
            statistics_retention: Duration::from_secs(s.statistics_retention_days * 86_400),
            player_assets_dir: s.player_assets_dir,
            restream_ca_file: s.restream_ca_file,
            restreams_max_per_stream: s.restreams_max_per_stream as u32,
            storage,
            storage_local_retention: Duration::from_secs(s.storage_local_retention_secs),
            video_retention: s
                .video_retention_days
                .map(|d| Duration::from_secs(d * 86_400)),
            playback: s
                .playback_signing_key
                .clone()
                .filter(|v| !v.is_empty())
                .map(|key| crate::playback_auth::Signing {
                    key: crate::playback_auth::Key::new(key),
                    ttl: Duration::from_secs(s.playback_token_ttl_secs),
                }),
            publish_auth: http::publish_auth(
                s.publish_auth_url.as_deref(),
                s.publish_auth_timeout_ms,
                s.publish_auth_cache_secs,
            )?,
        })
    }

    /// Every listener's connection caps, for [`crate::admission::Gates`].
    pub fn admission(&self) -> crate::admission::Limits {
        use crate::admission::Caps;
        let caps = |max, per_address| Caps { max, per_address };
        crate::admission::Limits {
            http: caps(self.http_max_connections, self.http_max_connections_per_ip),
            rtmp: caps(self.rtmp.max_connections, self.rtmp.max_connections_per_ip),
            srt: caps(self.srt.max_connections, self.srt.max_connections_per_ip),
            // A WHIP or WHEP session's candidate pairs may each open one.
            ice_tcp: caps(
                (self.whip.max_sessions + self.whep.max_sessions).saturating_mul(4),
                self.whip.tcp_max_connections_per_ip,
            ),
            trusted: self.trusted_proxies.clone(),
        }
    }
}

/// Absent or blank: SQLite. The value is echoed without credentials: it may hold a password.
/// `storage_url` and the settings that go with it; the URL checked now, not at first upload.
fn storage(s: &Settings) -> Result<Option<crate::storage::StorageSettings>, ConfigError> {
    let non_empty = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let Some(url) = non_empty(&s.storage_url) else {
        return Ok(None);
    };
    let parsed = url::Url::parse(&url).ok();
    if !parsed.is_some_and(|u| u.scheme() == "s3" && u.host_str().is_some_and(|h| !h.is_empty())) {
        return Err(invalid(
            "storage_url",
            "",
            "storage_url must be s3://bucket[/prefix]",
        ));
    }
    let endpoint = non_empty(&s.storage_endpoint);
    if let Some(e) = &endpoint {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            return Err(invalid(
                "storage_endpoint",
                "",
                "an http:// or https:// URL",
            ));
        }
    }
    Ok(Some(crate::storage::StorageSettings {
        url,
        endpoint,
        region: non_empty(&s.storage_region),
        access_key_id: non_empty(&s.storage_access_key_id),
        secret_access_key: non_empty(&s.storage_secret_access_key),
    }))
}

/// The checks that read more than one setting.
fn check_together(s: &Settings) -> Result<(), ConfigError> {
    if s.shutdown_accept_grace_secs >= s.shutdown_timeout_secs {
        return Err(invalid(
            "shutdown_accept_grace_secs",
            s.shutdown_accept_grace_secs.to_string(),
            "must be below shutdown_timeout_secs, or the stop never ends in time",
        ));
    }
    if s.https_cert_file.is_some() != s.https_key_file.is_some() {
        return Err(invalid(
            "https_cert_file",
            "",
            "https_cert_file and https_key_file go together",
        ));
    }
    if s.rtmps_cert_file.is_some() != s.rtmps_key_file.is_some() {
        return Err(invalid(
            "rtmps_cert_file",
            "",
            "rtmps_cert_file and rtmps_key_file go together",
        ));
    }
    let has_key = s
        .playback_signing_key
        .as_ref()
        .is_some_and(|k| !k.is_empty());
    if !has_key && s.cdn_resources.iter().any(|r| r.secure_playback) {
        return Err(invalid(
            "cdn_resources",
            "secure_playback",
            "a CDN resource with secure_playback needs playback_signing_key",
        ));
    }
    Ok(())
}

fn capacity(s: &Settings) -> Result<crate::capacity::CapacityConfig, ConfigError> {
    use crate::capacity::OverloadPolicy;
    let policy = OverloadPolicy::parse(&s.overload_policy).ok_or_else(|| {
        invalid(
            "overload_policy",
            s.overload_policy.clone(),
            "one of refuse, shed, passthrough",
        )
    })?;
    Ok(crate::capacity::CapacityConfig {
        max_transcodes: s.max_transcodes,
        cpu_percent: s.admission_cpu_percent as u32,
        policy,
    })
}

fn database_url(v: Option<&str>) -> Result<Option<DatabaseUrl>, ConfigError> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => DatabaseUrl::parse(v).map(Some).map_err(|reason| {
            // Not a URL (a libpq keyword string, say) may hold `password=`: not echoed.
            let shown = crate::url_policy::redact_url(v).unwrap_or_else(|| "<not a URL>".into());
            invalid("database_url", shown, reason)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = Config::from_layer(Layer::default()).unwrap();
        assert_eq!(c.http_addr.to_string(), table::DEFAULT_HTTP_ADDR);
        assert_eq!(c.rtmp_addr.port(), 1935);
        assert_eq!(c.srt_addr.port(), 5001);
        assert!(c.api_keys.is_empty());
        assert!(c.public_url.is_none());
    }

    #[test]
    fn flags_beat_env_beat_file() {
        let file: Layer = toml::from_str(
            "http_addr = \"127.0.0.1:1\"\nrtmp_addr = \"127.0.0.1:2\"\nsrt_addr = \"127.0.0.1:3\"",
        )
        .unwrap();
        let env = Layer::from_env(env(&[
            ("LIVEPACK_RTMP_ADDR", "127.0.0.1:20"),
            ("LIVEPACK_SRT_ADDR", "127.0.0.1:30"),
            ("LIVEPACK_API_KEYS", "a, b,,c,"),
        ]))
        .unwrap();
        let flags = Layer {
            srt_addr: Some("127.0.0.1:300".parse().unwrap()),
            ..Layer::default()
        };
        let c = Config::from_layer(flags.over(env.over(file))).unwrap();
        assert_eq!(c.http_addr.port(), 1);
        assert_eq!(c.rtmp_addr.port(), 20);
        assert_eq!(c.srt_addr.port(), 300);
        assert_eq!(c.api_keys, vec!["a", "b", "c"]);
    }

    #[test]
    fn bad_env_value_names_the_variable() {
        let err = Layer::from_env(env(&[("LIVEPACK_HTTP_ADDR", "localhost")])).unwrap_err();
        assert!(err.to_string().contains("LIVEPACK_HTTP_ADDR"), "{err}");
    }

    #[test]
    fn limits_come_from_the_configuration_and_are_range_checked() {
        let d = Config::from_layer(Layer::default()).unwrap();
        assert_eq!(d.rtmp.max_connections, 1024);
        assert_eq!(d.rtmp.handshake_timeout, Duration::from_secs(10));
        assert_eq!(d.rtmp.guard.max_media_message, 8 << 20);
        assert_eq!(d.rtmp.guard.max_amf_depth, 32);
        assert_eq!(d.whip.max_sdp_bytes, 128 << 10);
        assert_eq!(d.pull.max_held_bytes, 32 << 20);
        assert_eq!(d.pull.max_playlist_bytes, 4 << 20);
        assert_eq!(d.pull.max_segment_bytes, 128 << 20);
        assert_eq!(d.pull.first_data_timeout, Duration::from_secs(10));
        assert_eq!(d.pull.no_data_timeout, Duration::from_secs(5));
        assert_eq!(d.pull.cycle_pause, Duration::from_secs(2));
        let layer = Layer::from_env(env(&[
            ("LIVEPACK_RTMP_MAX_CONNECTIONS", "7"),
            ("LIVEPACK_INGEST_IDLE_TIMEOUT_SECS", "30"),
            ("LIVEPACK_INGEST_HANDSHAKE_TIMEOUT_SECS", "3"),
            ("LIVEPACK_WHIP_MAX_SDP_BYTES", "16384"),
            ("LIVEPACK_PULL_MAX_SEGMENT_BYTES", "2097152"),
            ("LIVEPACK_PULL_FIRST_DATA_TIMEOUT_MS", "1500"),
            ("LIVEPACK_PULL_CYCLE_PAUSE_MS", "0"),
        ]))
        .unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.rtmp.max_connections, 7);
        assert_eq!(c.srt.idle_timeout, Duration::from_secs(30));
        assert_eq!(c.whip.idle_timeout, Duration::from_secs(30));
        assert_eq!(c.whip.connect_timeout, Duration::from_secs(3));
        assert_eq!(c.whip.max_sdp_bytes, 16384);
        assert_eq!(c.pull.max_segment_bytes, 2 << 20);
        assert_eq!(c.pull.first_data_timeout, Duration::from_millis(1500));
        assert_eq!(c.pull.cycle_pause, Duration::ZERO);
        for (key, value) in [
            ("rtmp_max_amf_depth", "1000"),
            ("ingest_handshake_timeout_secs", "0"),
            ("rtmp_max_message_bytes", "100"),
            ("srt_max_connections", "0"),
            ("whip_max_sdp_bytes", "100000000"),
            ("pull_max_playlist_bytes", "1000"),
            ("pull_max_segment_bytes", "10000000000"),
            ("pull_no_data_timeout_ms", "100"),
        ] {
            let layer: Layer = toml::from_str(&format!("{key} = {value}")).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(value), "{err}");
        }
    }

    #[test]
    fn the_accept_grace_stays_below_the_shutdown_timeout() {
        assert_eq!(
            Config::from_layer(Layer::default())
                .unwrap()
                .shutdown_accept_grace,
            Duration::ZERO
        );
        let layer: Layer = toml::from_str("shutdown_accept_grace_secs = 10").unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.shutdown_accept_grace, Duration::from_secs(10));
        let layer: Layer =
            toml::from_str("shutdown_accept_grace_secs = 30\nshutdown_timeout_secs = 30").unwrap();
        let err = Config::from_layer(layer).unwrap_err().to_string();
        assert!(
            err.contains("shutdown_accept_grace_secs") && err.contains("below shutdown_timeout"),
            "{err}"
        );
    }

    #[test]
    fn capacity_settings_name_their_key() {
        use crate::capacity::OverloadPolicy;
        let d = Config::from_layer(Layer::default()).unwrap().capacity;
        assert_eq!(d, crate::capacity::CapacityConfig::default());
        let layer = Layer::from_env(env(&[
            ("LIVEPACK_MAX_TRANSCODES", "3"),
            ("LIVEPACK_ADMISSION_CPU_PERCENT", "100"),
            ("LIVEPACK_OVERLOAD_POLICY", "shed"),
        ]))
        .unwrap();
        let c = Config::from_layer(layer).unwrap().capacity;
        assert_eq!(
            (c.max_transcodes, c.cpu_percent, c.policy),
            (Some(3), 100, OverloadPolicy::Shed)
        );
        for (key, value) in [
            ("overload_policy", "\"drop\""),
            ("log_format", "\"xml\""),
            ("max_transcodes", "0"),
            ("admission_cpu_percent", "101"),
        ] {
            let layer: Layer = toml::from_str(&format!("{key} = {value}")).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn cdn_resources_and_ingest_regions_from_file_and_environment() {
        let file: Layer = toml::from_str(
            "[[cdn_resources]]\nid = 7\nbase_url = \"https://cdn.example.com/live/\"\n\
             [[ingest_regions]]\nname = \"eu\"\nhost = \"ingest-eu.example.com\"\n\
             [[ingest_regions]]\nname = \"v6\"\nhost = \"2001:db8::1\"\n",
        )
        .unwrap();
        let c = Config::from_layer(file).unwrap();
        assert_eq!(
            c.cdn_resources,
            [CdnResource {
                id: 7,
                base_url: "https://cdn.example.com/live".into(),
                secure_playback: false,
            }]
        );
        let hosts: Vec<&str> = c.ingest_regions.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(hosts, ["ingest-eu.example.com", "[2001:db8::1]"]);
        let env = Layer::from_env(env(&[
            (
                "LIVEPACK_CDN_RESOURCES",
                "7=https://a.example, 8=http://b.example:8080",
            ),
            (
                "LIVEPACK_INGEST_REGIONS",
                "eu=ingest-eu.example.com,us=10.0.0.1",
            ),
        ]))
        .unwrap();
        let c = Config::from_layer(env).unwrap();
        assert_eq!(c.cdn_resources.len(), 2);
        assert_eq!(c.cdn_resources[1].base_url, "http://b.example:8080");
        // A CDN resource whose streams all need signed playback: only with a key.
        let secure = [("LIVEPACK_CDN_RESOURCES", "7=https://a.example secure")];
        let layer = Layer::from_env(super::tests::env(&secure)).unwrap();
        assert!(Config::from_layer(layer).is_err(), "secure without a key");
        let keyed = [
            secure[0],
            ("LIVEPACK_PLAYBACK_SIGNING_KEY", "0123456789abcdef0123"),
        ];
        let k = Config::from_layer(Layer::from_env(super::tests::env(&keyed)).unwrap()).unwrap();
        assert!(k.cdn_resources[0].secure_playback);
        assert_eq!(k.cdn_resources[0].base_url, "https://a.example");
        assert_eq!(k.playback.unwrap().ttl.as_secs(), 86_400);
        let short = [("LIVEPACK_PLAYBACK_SIGNING_KEY", "short")];
        let e = Config::from_layer(Layer::from_env(super::tests::env(&short)).unwrap());
        assert!(e.is_err_and(|e| !e.to_string().contains("short")));
        assert_eq!(c.ingest_regions[1].host, "10.0.0.1");
        assert!(Layer::from_env(env_bad("LIVEPACK_CDN_RESOURCES", "https://a.example")).is_err());
        assert!(Layer::from_env(env_bad("LIVEPACK_CDN_RESOURCES", "x=https://a.example")).is_err());
        for (var, value) in [
            (
                "LIVEPACK_CDN_RESOURCES",
                "7=https://a.example,7=https://b.example",
            ),
            ("LIVEPACK_CDN_RESOURCES", "0=https://a.example"),
            ("LIVEPACK_CDN_RESOURCES", "7=ftp://a.example"),
            ("LIVEPACK_CDN_RESOURCES", "7=https://a.example/?token=1"),
            ("LIVEPACK_INGEST_REGIONS", "eu=a.example,eu=b.example"),
            ("LIVEPACK_INGEST_REGIONS", "e u=a.example"),
            ("LIVEPACK_INGEST_REGIONS", "eu=a.example:1935"),
            ("LIVEPACK_INGEST_REGIONS", "eu=http://a.example"),
        ] {
            let layer = Layer::from_env(env_bad(var, value)).unwrap();
            let err = Config::from_layer(layer)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            let key = var.trim_start_matches("LIVEPACK_").to_ascii_lowercase();
            assert!(err.contains(&key), "{value}: {err}");
        }
    }

    fn env_bad(var: &'static str, value: &'static str) -> impl Fn(&str) -> Option<String> {
        move |k| (k == var).then(|| value.to_owned())
    }

    #[test]
    fn database_url_selects_postgres_and_refuses_other_urls_without_echoing_passwords() {
        let d = Config::from_layer(Layer::default()).unwrap();
        assert!(d.database_url.is_none(), "SQLite unless told otherwise");
        for blank in ["", "  "] {
            let layer = Layer::from_env(env(&[("LIVEPACK_DATABASE_URL", blank)])).unwrap();
            assert!(Config::from_layer(layer).unwrap().database_url.is_none());
        }
        for (good, shown) in [
            (
                "postgres://livepack:pw@db.example:5433/livepack",
                "postgres://db.example:5433/livepack",
            ),
            (
                "postgresql://db.example/livepack?connect_timeout=3&password=pw",
                "postgres://db.example:5432/livepack",
            ),
            (
                "postgresql://u:pw@/livepack?host=/run/postgresql",
                "postgres:///run/postgresql/livepack",
            ),
            (
                "postgres://u:pw@[::1]:5433,10.0.0.2:5434/x",
                "postgres://[::1]:5433,10.0.0.2:5434/x",
            ),
        ] {
            let layer = Layer::from_env(env(&[("LIVEPACK_DATABASE_URL", good)])).unwrap();
            let url = Config::from_layer(layer).unwrap().database_url.unwrap();
            assert_eq!(url.redacted(), shown);
            assert!(!format!("{url:?}").contains("pw"), "{url:?}");
        }
        for bad in [
            "mysql://u:secret@db.example/x",
            "postgres://u:secret@db.example:notaport/x",
            "host=db.example password=secret",
            "sqlite:///var/lib/livepack.db",
        ] {
            let layer: Layer = toml::from_str(&format!("database_url = {bad:?}")).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(
                err.contains("database_url") && !err.contains("secret"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn node_secret_is_long_enough_and_never_echoed() {
        assert!(Config::from_layer(Layer::default())
            .unwrap()
            .node_secret
            .is_none());
        let layer = Layer::from_env(env(&[("LIVEPACK_NODE_SECRET", "tooshort-hunter2")])).unwrap();
        let err = Config::from_layer(layer).unwrap_err().to_string();
        assert!(
            err.contains("node_secret") && !err.contains("hunter2"),
            "{err}"
        );
        let good = "0123456789abcdef".repeat(2);
        let layer = Layer::from_env(env(&[("LIVEPACK_NODE_SECRET", &good)])).unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.node_secret.as_ref().map(|s| s.expose()), Some(&*good));
        assert!(!format!("{c:?}").contains(&good));
    }

    #[test]
    fn unknown_file_key_is_rejected() {
        assert!(toml::from_str::<Layer>("htp_addr = \"127.0.0.1:1\"").is_err());
    }

    #[test]
    fn public_url_must_be_http_with_host() {
        for bad in ["ftp://x", "http://", "not a url", "http://h/?q=1"] {
            let layer = Layer {
                public_url: Some(bad.into()),
                ..Layer::default()
            };
            assert!(Config::from_layer(layer).is_err(), "{bad} accepted");
        }
        let layer = Layer {
            public_url: Some("https://live.example.com/base".into()),
            ..Layer::default()
        };
        assert!(Config::from_layer(layer).is_ok());
    }

    #[test]
    fn the_publish_auth_hook_is_an_http_url_and_its_key_is_not_echoed() {
        let none = Config::from_layer(Layer::default()).unwrap();
        assert!(none.publish_auth.is_none());
        let layer = Layer::from_env(env(&[
            (
                "LIVEPACK_PUBLISH_AUTH_URL",
                "https://auth.example/check?key=s3cret",
            ),
            ("LIVEPACK_PUBLISH_AUTH_TIMEOUT_MS", "750"),
            ("LIVEPACK_PUBLISH_AUTH_CACHE_SECS", "0"),
        ]))
        .unwrap();
        let hook = Config::from_layer(layer).unwrap().publish_auth.unwrap();
        assert_eq!(hook.url.as_str(), "https://auth.example/check?key=s3cret");
        assert_eq!((hook.timeout.as_millis(), hook.cache.as_secs()), (750, 0));
        for bad in [
            "ftp://auth.example/?key=s3cret",
            "http://?key=s3cret",
            "nope key=s3cret",
        ] {
            let layer = Layer {
                publish_auth_url: Some(bad.into()),
                ..Layer::default()
            };
            let e = Config::from_layer(layer).unwrap_err().to_string();
            assert!(
                e.contains("publish_auth_url") && !e.contains("s3cret"),
                "{bad}: {e}"
            );
        }
        let layer = Layer {
            publish_auth_timeout_ms: Some(50),
            ..Layer::default()
        };
        assert!(Config::from_layer(layer).is_err());
    }

    #[test]
    fn whip_muxes_default_on_and_can_be_turned_off() {
        let d = Config::from_layer(Layer::default()).unwrap();
        assert_eq!(d.whip.udp_mux_addr, Some("0.0.0.0:8189".parse().unwrap()));
        assert_eq!(d.whip.tcp_mux_addr, Some("0.0.0.0:8189".parse().unwrap()));
        assert!(d.whip.ice_servers.is_empty() && d.whip.nat_ips.is_empty());
        let layer = Layer::from_env(env(&[
            ("LIVEPACK_WHIP_UDP_MUX_ADDR", "127.0.0.1:0"),
            ("LIVEPACK_WHIP_TCP_MUX_ADDR", "off"),
            ("LIVEPACK_WHIP_NAT_IPS", "203.0.113.7"),
            (
                "LIVEPACK_WHIP_ICE_SERVERS",
                "stun:stun.example.net:3478, turn:u:p@turn.example.net?transport=udp",
            ),
        ]))
        .unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.whip.udp_mux_addr, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(c.whip.tcp_mux_addr, None);
        assert_eq!(
            c.whip.nat_ips,
            vec!["203.0.113.7".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(c.whip.ice_servers.len(), 2);
        assert_eq!(
            c.whip.ice_servers[1].url,
            "turn:turn.example.net?transport=udp"
        );
        let file: Layer = toml::from_str("whip_udp_mux_addr = \"\"").unwrap();
        assert_eq!(Config::from_layer(file).unwrap().whip.udp_mux_addr, None);
    }

    #[test]
    fn bad_whip_ice_settings_name_their_key_and_hide_credentials() {
        for (toml_text, key) in [
            ("whip_udp_mux_addr = \"8189\"", "whip_udp_mux_addr"),
            ("whip_tcp_mux_addr = \"host:8189\"", "whip_tcp_mux_addr"),
            ("whip_nat_ips = [\"not-an-ip\"]", "whip_nat_ips"),
            ("whip_ice_servers = [\"http://x\"]", "whip_ice_servers"),
        ] {
            let layer: Layer = toml::from_str(toml_text).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
        let layer: Layer =
            toml::from_str("whip_ice_servers = [\"turn:alice:se\\\"cret@turn.example.net\"]")
                .unwrap();
        let err = Config::from_layer(layer).unwrap_err().to_string();
        assert!(
            err.contains("whip_ice_servers") && !err.contains("cret"),
            "{err}"
        );
    }

    #[test]
    fn every_setting_is_read_from_its_variable() {
        assert_eq!(setting::env_name("http_addr"), "LIVEPACK_HTTP_ADDR");
        for key in KEYS {
            let name = setting::env_name(key);
            // Numbers, addresses and flags refuse this, naming the variable; the rest take it.
            match Layer::from_env(env(&[(&name, "not a value")])) {
                Err(e) => assert!(e.to_string().contains(&name), "{e}"),
                Ok(layer) => assert!(
                    format!("{layer:?}").contains(&format!(" {key}: Some(")),
                    "{name}"
                ),
            }
        }
    }
}
