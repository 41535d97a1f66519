//! Configuration: defaults ← `livepack.toml` ← `LIVEPACK_*` environment ← command-line flags,
//! merged field by field and validated into one [`Config`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::package::PackagingConfig;

pub const DEFAULT_CONFIG_FILE: &str = "livepack.toml";
/// Loopback by default: the control API holds secrets, so exposing it is an explicit choice.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8080";
pub const DEFAULT_RTMP_ADDR: &str = "0.0.0.0:1935";
pub const DEFAULT_RTMPS_ADDR: &str = "0.0.0.0:1936";
pub const DEFAULT_SRT_ADDR: &str = "0.0.0.0:5001";
pub const DEFAULT_DATA_DIR: &str = "data";
/// Relative to the working directory, as `scripts/run` starts the daemon from the checkout.
pub const DEFAULT_PLAYER_ASSETS_DIR: &str = "node_modules";
pub const DEFAULT_FASTEDGE_APP_DOMAIN: &str = "fastedge.localhost";
/// Enough for any real deployment's control plane plus media players; more are refused at accept.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 4096;
/// A client that has not sent its full request head by then is cut off (slowloris).
pub const DEFAULT_HTTP_HEADER_TIMEOUT_SECS: u64 = 10;
pub const DEFAULT_SEGMENT_MS: u64 = 2000;
pub const DEFAULT_PART_MS: u64 = 500;
/// An ingest peer (RTMP/RTMPS/WHIP) that has not started publishing by then is closed.
pub const DEFAULT_INGEST_HANDSHAKE_TIMEOUT_SECS: u64 = 10;
/// A publisher (any protocol) that sends no media for this long is gone.
pub const DEFAULT_INGEST_IDLE_TIMEOUT_SECS: u64 = 10;
/// Outputs outlive a publisher disconnect by this much; a reconnect continues them.
pub const DEFAULT_GRACE_SECS: u64 = 60;

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
        key: &'static str,
        value: String,
        reason: String,
    },
}

/// Every setting optional: one layer of configuration (file, environment or flags).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    pub http_addr: Option<SocketAddr>,
    pub rtmp_addr: Option<SocketAddr>,
    pub rtmps_addr: Option<SocketAddr>,
    pub srt_addr: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub api_keys: Option<Vec<String>>,
    pub public_url: Option<String>,
    pub quality_sets_file: Option<PathBuf>,
    pub profile_templates_file: Option<PathBuf>,
    pub fastedge_app_domain: Option<String>,
    pub http_max_connections: Option<usize>,
    pub http_header_timeout_secs: Option<u64>,
    pub rtmps_cert_file: Option<PathBuf>,
    pub rtmps_key_file: Option<PathBuf>,
    pub segment_duration_ms: Option<u64>,
    pub part_duration_ms: Option<u64>,
    pub grace_period_secs: Option<u64>,
    pub backup_switch_secs: Option<u64>,
    pub whip_udp_addrs: Option<Vec<SocketAddr>>,
    pub whip_nat_ips: Option<Vec<String>>,
    /// `IP:PORT`, or `off`/empty for a UDP socket per session (on `whip_udp_addrs`).
    pub whip_udp_mux_addr: Option<String>,
    /// `IP:PORT`, or `off`/empty for no ICE-TCP.
    pub whip_tcp_mux_addr: Option<String>,
    pub whip_ice_servers: Option<Vec<String>>,
    pub pull_inactivity_secs: Option<u64>,
    pub pull_allow_link_local: Option<bool>,
    pub player_assets_dir: Option<PathBuf>,
    pub ingest_handshake_timeout_secs: Option<u64>,
    pub ingest_idle_timeout_secs: Option<u64>,
    pub rtmp_max_connections: Option<usize>,
    pub srt_max_connections: Option<usize>,
    pub whip_max_sessions: Option<usize>,
    pub rtmp_max_message_bytes: Option<u64>,
    pub rtmp_max_amf_depth: Option<usize>,
    pub whip_max_sdp_bytes: Option<usize>,
    pub pull_max_held_bytes: Option<usize>,
    pub pull_max_playlist_bytes: Option<usize>,
    pub pull_max_segment_bytes: Option<u64>,
}

impl Layer {
    /// Later layers win, field by field.
    pub fn over(self, lower: Layer) -> Layer {
        Layer {
            http_addr: self.http_addr.or(lower.http_addr),
            rtmp_addr: self.rtmp_addr.or(lower.rtmp_addr),
            rtmps_addr: self.rtmps_addr.or(lower.rtmps_addr),
            srt_addr: self.srt_addr.or(lower.srt_addr),
            data_dir: self.data_dir.or(lower.data_dir),
            api_keys: self.api_keys.or(lower.api_keys),
            public_url: self.public_url.or(lower.public_url),
            quality_sets_file: self.quality_sets_file.or(lower.quality_sets_file),
            profile_templates_file: self.profile_templates_file.or(lower.profile_templates_file),
            fastedge_app_domain: self.fastedge_app_domain.or(lower.fastedge_app_domain),
            http_max_connections: self.http_max_connections.or(lower.http_max_connections),
            http_header_timeout_secs: self
                .http_header_timeout_secs
                .or(lower.http_header_timeout_secs),
            rtmps_cert_file: self.rtmps_cert_file.or(lower.rtmps_cert_file),
            rtmps_key_file: self.rtmps_key_file.or(lower.rtmps_key_file),
            segment_duration_ms: self.segment_duration_ms.or(lower.segment_duration_ms),
            part_duration_ms: self.part_duration_ms.or(lower.part_duration_ms),
            grace_period_secs: self.grace_period_secs.or(lower.grace_period_secs),
            backup_switch_secs: self.backup_switch_secs.or(lower.backup_switch_secs),
            whip_udp_addrs: self.whip_udp_addrs.or(lower.whip_udp_addrs),
            whip_nat_ips: self.whip_nat_ips.or(lower.whip_nat_ips),
            whip_udp_mux_addr: self.whip_udp_mux_addr.or(lower.whip_udp_mux_addr),
            whip_tcp_mux_addr: self.whip_tcp_mux_addr.or(lower.whip_tcp_mux_addr),
            whip_ice_servers: self.whip_ice_servers.or(lower.whip_ice_servers),
            pull_inactivity_secs: self.pull_inactivity_secs.or(lower.pull_inactivity_secs),
            pull_allow_link_local: self.pull_allow_link_local.or(lower.pull_allow_link_local),
            player_assets_dir: self.player_assets_dir.or(lower.player_assets_dir),
            ingest_handshake_timeout_secs: self
                .ingest_handshake_timeout_secs
                .or(lower.ingest_handshake_timeout_secs),
            ingest_idle_timeout_secs: self
                .ingest_idle_timeout_secs
                .or(lower.ingest_idle_timeout_secs),
            rtmp_max_connections: self.rtmp_max_connections.or(lower.rtmp_max_connections),
            srt_max_connections: self.srt_max_connections.or(lower.srt_max_connections),
            whip_max_sessions: self.whip_max_sessions.or(lower.whip_max_sessions),
            rtmp_max_message_bytes: self.rtmp_max_message_bytes.or(lower.rtmp_max_message_bytes),
            rtmp_max_amf_depth: self.rtmp_max_amf_depth.or(lower.rtmp_max_amf_depth),
            whip_max_sdp_bytes: self.whip_max_sdp_bytes.or(lower.whip_max_sdp_bytes),
            pull_max_held_bytes: self.pull_max_held_bytes.or(lower.pull_max_held_bytes),
            pull_max_playlist_bytes: self
                .pull_max_playlist_bytes
                .or(lower.pull_max_playlist_bytes),
            pull_max_segment_bytes: self.pull_max_segment_bytes.or(lower.pull_max_segment_bytes),
        }
    }

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

    /// Reads the `LIVEPACK_*` variables through `get` (so tests need not touch the process env).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Layer, ConfigError> {
        const ORIGIN: &str = "environment";
        let addr = |key: &'static str| -> Result<Option<SocketAddr>, ConfigError> {
            get(key).map(|v| parse_addr(ORIGIN, key, &v)).transpose()
        };
        let number = |key: &'static str| -> Result<Option<u64>, ConfigError> {
            get(key)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|e| ConfigError::Invalid {
                        origin: ORIGIN,
                        key,
                        value: v.clone(),
                        reason: e.to_string(),
                    })
                })
                .transpose()
        };
        Ok(Layer {
            http_addr: addr("LIVEPACK_HTTP_ADDR")?,
            rtmp_addr: addr("LIVEPACK_RTMP_ADDR")?,
            rtmps_addr: addr("LIVEPACK_RTMPS_ADDR")?,
            srt_addr: addr("LIVEPACK_SRT_ADDR")?,
            data_dir: get("LIVEPACK_DATA_DIR").map(PathBuf::from),
            api_keys: get("LIVEPACK_API_KEYS").map(|v| split_keys(&v)),
            public_url: get("LIVEPACK_PUBLIC_URL"),
            quality_sets_file: get("LIVEPACK_QUALITY_SETS_FILE").map(PathBuf::from),
            profile_templates_file: get("LIVEPACK_PROFILE_TEMPLATES_FILE").map(PathBuf::from),
            fastedge_app_domain: get("LIVEPACK_FASTEDGE_APP_DOMAIN"),
            http_max_connections: number("LIVEPACK_HTTP_MAX_CONNECTIONS")?.map(|n| n as usize),
            http_header_timeout_secs: number("LIVEPACK_HTTP_HEADER_TIMEOUT_SECS")?,
            rtmps_cert_file: get("LIVEPACK_RTMPS_CERT_FILE").map(PathBuf::from),
            rtmps_key_file: get("LIVEPACK_RTMPS_KEY_FILE").map(PathBuf::from),
            segment_duration_ms: number("LIVEPACK_SEGMENT_DURATION_MS")?,
            part_duration_ms: number("LIVEPACK_PART_DURATION_MS")?,
            grace_period_secs: number("LIVEPACK_GRACE_PERIOD_SECS")?,
            backup_switch_secs: number("LIVEPACK_BACKUP_SWITCH_SECS")?,
            whip_udp_addrs: get("LIVEPACK_WHIP_UDP_ADDRS")
                .map(|v| {
                    split_keys(&v)
                        .iter()
                        .map(|a| parse_addr(ORIGIN, "LIVEPACK_WHIP_UDP_ADDRS", a))
                        .collect::<Result<Vec<_>, _>>()
                })
                .transpose()?,
            whip_nat_ips: get("LIVEPACK_WHIP_NAT_IPS").map(|v| split_keys(&v)),
            whip_udp_mux_addr: get("LIVEPACK_WHIP_UDP_MUX_ADDR"),
            whip_tcp_mux_addr: get("LIVEPACK_WHIP_TCP_MUX_ADDR"),
            // Comma-separated, so a credential given here cannot contain a comma.
            whip_ice_servers: get("LIVEPACK_WHIP_ICE_SERVERS").map(|v| split_keys(&v)),
            pull_inactivity_secs: number("LIVEPACK_PULL_INACTIVITY_SECS")?,
            pull_allow_link_local: get("LIVEPACK_PULL_ALLOW_LINK_LOCAL")
                .map(|v| match v.trim() {
                    "1" | "true" | "yes" => Ok(true),
                    "0" | "false" | "no" => Ok(false),
                    _ => Err(ConfigError::Invalid {
                        origin: ORIGIN,
                        key: "LIVEPACK_PULL_ALLOW_LINK_LOCAL",
                        value: v.clone(),
                        reason: "expected true or false".into(),
                    }),
                })
                .transpose()?,
            player_assets_dir: get("LIVEPACK_PLAYER_ASSETS_DIR").map(PathBuf::from),
            ingest_handshake_timeout_secs: number("LIVEPACK_INGEST_HANDSHAKE_TIMEOUT_SECS")?,
            ingest_idle_timeout_secs: number("LIVEPACK_INGEST_IDLE_TIMEOUT_SECS")?,
            rtmp_max_connections: number("LIVEPACK_RTMP_MAX_CONNECTIONS")?.map(|n| n as usize),
            srt_max_connections: number("LIVEPACK_SRT_MAX_CONNECTIONS")?.map(|n| n as usize),
            whip_max_sessions: number("LIVEPACK_WHIP_MAX_SESSIONS")?.map(|n| n as usize),
            rtmp_max_message_bytes: number("LIVEPACK_RTMP_MAX_MESSAGE_BYTES")?,
            rtmp_max_amf_depth: number("LIVEPACK_RTMP_MAX_AMF_DEPTH")?.map(|n| n as usize),
            whip_max_sdp_bytes: number("LIVEPACK_WHIP_MAX_SDP_BYTES")?.map(|n| n as usize),
            pull_max_held_bytes: number("LIVEPACK_PULL_MAX_HELD_BYTES")?.map(|n| n as usize),
            pull_max_playlist_bytes: number("LIVEPACK_PULL_MAX_PLAYLIST_BYTES")?
                .map(|n| n as usize),
            pull_max_segment_bytes: number("LIVEPACK_PULL_MAX_SEGMENT_BYTES")?,
        })
    }
}

/// Comma-separated keys; blanks are dropped so `a,,b` or a trailing comma is harmless.
pub fn split_keys(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect()
}

pub fn parse_addr(
    origin: &'static str,
    key: &'static str,
    v: &str,
) -> Result<SocketAddr, ConfigError> {
    v.trim()
        .parse()
        .map_err(|e: std::net::AddrParseError| ConfigError::Invalid {
            origin,
            key,
            value: v.to_owned(),
            reason: format!("{e} (expected IP:PORT, e.g. 127.0.0.1:8080)"),
        })
}

/// The validated configuration the daemon runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub http_addr: SocketAddr,
    pub rtmp_addr: SocketAddr,
    pub rtmps_addr: SocketAddr,
    pub srt_addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Empty means "generate one into the data dir" (done by the daemon at start).
    pub api_keys: Vec<String>,
    /// Base of every returned URL; `None` means derived from the bound HTTP address.
    pub public_url: Option<Url>,
    pub quality_sets_file: Option<PathBuf>,
    pub profile_templates_file: Option<PathBuf>,
    pub fastedge_app_domain: String,
    pub http_max_connections: usize,
    pub http_header_timeout_secs: u64,
    /// Both or neither: without them RTMPS uses a self-signed certificate in the data dir.
    pub rtmps_cert_file: Option<PathBuf>,
    pub rtmps_key_file: Option<PathBuf>,
    pub packaging: PackagingConfig,
    pub grace_period: std::time::Duration,
    /// A main silent this long is failed over from (to a backup being pushed) or reported off.
    pub backup_switch: std::time::Duration,
    pub rtmp: crate::ingest::rtmp::RtmpConfig,
    pub srt: crate::ingest::srt::SrtConfig,
    pub whip: crate::ingest::whip::WhipConfig,
    pub pull: crate::ingest::pull::PullConfig,
    /// `node_modules` of the npm install holding hls.js and dash.js for the player page.
    pub player_assets_dir: PathBuf,
}

impl Config {
    pub fn from_layer(layer: Layer) -> Result<Config, ConfigError> {
        const ORIGIN: &str = "configuration";
        let public_url = layer
            .public_url
            .filter(|u| !u.trim().is_empty())
            .map(|u| parse_public_url(&u))
            .transpose()?;
        let fastedge_app_domain = layer
            .fastedge_app_domain
            .unwrap_or_else(|| DEFAULT_FASTEDGE_APP_DOMAIN.to_owned());
        if fastedge_app_domain.is_empty()
            || !fastedge_app_domain
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return Err(ConfigError::Invalid {
                origin: ORIGIN,
                key: "fastedge_app_domain",
                value: fastedge_app_domain,
                reason: "must be a DNS name".into(),
            });
        }
        let http_max_connections = layer
            .http_max_connections
            .unwrap_or(DEFAULT_HTTP_MAX_CONNECTIONS);
        if http_max_connections == 0 {
            return Err(ConfigError::Invalid {
                origin: ORIGIN,
                key: "http_max_connections",
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        let http_header_timeout_secs = layer
            .http_header_timeout_secs
            .unwrap_or(DEFAULT_HTTP_HEADER_TIMEOUT_SECS);
        if !(1..=300).contains(&http_header_timeout_secs) {
            return Err(ConfigError::Invalid {
                origin: ORIGIN,
                key: "http_header_timeout_secs",
                value: http_header_timeout_secs.to_string(),
                reason: "must be 1..=300".into(),
            });
        }
        if layer.rtmps_cert_file.is_some() != layer.rtmps_key_file.is_some() {
            return Err(ConfigError::Invalid {
                origin: ORIGIN,
                key: "rtmps_cert_file",
                value: String::new(),
                reason: "rtmps_cert_file and rtmps_key_file go together".into(),
            });
        }
        let segment_ms = layer.segment_duration_ms.unwrap_or(DEFAULT_SEGMENT_MS);
        let part_ms = layer.part_duration_ms.unwrap_or(DEFAULT_PART_MS);
        if segment_ms % 1000 != 0 {
            return Err(ConfigError::Invalid {
                origin: ORIGIN,
                key: "segment_duration_ms",
                value: segment_ms.to_string(),
                reason: "must be whole seconds: 2000, 3000 or 4000".into(),
            });
        }
        let packaging =
            PackagingConfig::new(segment_ms, part_ms).map_err(|reason| ConfigError::Invalid {
                origin: ORIGIN,
                key: "segment_duration_ms/part_duration_ms",
                value: format!("{segment_ms}/{part_ms}"),
                reason,
            })?;
        let grace = layer.grace_period_secs.unwrap_or(DEFAULT_GRACE_SECS);
        if grace > 3600 {
            return Err(ConfigError::Invalid {
                origin: ORIGIN,
                key: "grace_period_secs",
                value: grace.to_string(),
                reason: "must be 0..=3600".into(),
            });
        }
        let switch = layer
            .backup_switch_secs
            .unwrap_or(crate::live::switch::DEFAULT_SWITCH_TIMEOUT.as_secs());
        if !crate::live::switch::SWITCH_TIMEOUT_RANGE_SECS.contains(&switch) {
            return Err(ConfigError::Invalid {
                origin: ORIGIN,
                key: "backup_switch_secs",
                value: switch.to_string(),
                reason: "must be 3..=10".into(),
            });
        }
        let mut whip = crate::ingest::whip::WhipConfig::default();
        if let Some(addrs) = layer.whip_udp_addrs {
            if addrs.is_empty() {
                return Err(ConfigError::Invalid {
                    origin: ORIGIN,
                    key: "whip_udp_addrs",
                    value: String::new(),
                    reason: "needs at least one IP:PORT".into(),
                });
            }
            whip.udp_addrs = addrs;
        }
        if let Some(ips) = layer.whip_nat_ips {
            whip.nat_ips = ips
                .iter()
                .map(|ip| {
                    ip.parse::<std::net::IpAddr>()
                        .map_err(|_| ConfigError::Invalid {
                            origin: ORIGIN,
                            key: "whip_nat_ips",
                            value: ip.clone(),
                            reason: "must be IP addresses".into(),
                        })
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(v) = layer.whip_udp_mux_addr {
            whip.udp_mux_addr = mux_addr("whip_udp_mux_addr", &v)?;
        }
        if let Some(v) = layer.whip_tcp_mux_addr {
            whip.tcp_mux_addr = mux_addr("whip_tcp_mux_addr", &v)?;
        }
        if let Some(servers) = layer.whip_ice_servers {
            if servers.len() > crate::ingest::whip::ice_server::MAX_ICE_SERVERS {
                return Err(ConfigError::Invalid {
                    origin: ORIGIN,
                    key: "whip_ice_servers",
                    value: servers.len().to_string(),
                    reason: format!(
                        "at most {} servers",
                        crate::ingest::whip::ice_server::MAX_ICE_SERVERS
                    ),
                });
            }
            whip.ice_servers = servers
                .iter()
                .map(|entry| {
                    crate::ingest::whip::ice_server::IceServer::parse(entry).map_err(|e| {
                        ConfigError::Invalid {
                            origin: ORIGIN,
                            key: "whip_ice_servers",
                            // Never echo a credential into the log.
                            value: entry.rsplit('@').next().unwrap_or_default().to_owned(),
                            reason: e.to_string(),
                        }
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        let mut pull = crate::ingest::pull::PullConfig::default();
        if let Some(secs) = layer.pull_inactivity_secs {
            if secs == 0 {
                return Err(ConfigError::Invalid {
                    origin: ORIGIN,
                    key: "pull_inactivity_secs",
                    value: "0".into(),
                    reason: "must be at least 1".into(),
                });
            }
            pull.inactivity = std::time::Duration::from_secs(secs);
        }
        pull.allow_link_local = layer.pull_allow_link_local.unwrap_or(false);
        pull.max_held_bytes = ranged(
            layer.pull_max_held_bytes,
            crate::ingest::pull::DEFAULT_MAX_HELD_BYTES,
            "pull_max_held_bytes",
            1 << 20..=1 << 30,
        )?;
        pull.max_playlist_bytes = ranged(
            layer.pull_max_playlist_bytes,
            crate::ingest::pull::gateway::DEFAULT_MAX_PLAYLIST_BYTES,
            "pull_max_playlist_bytes",
            16 << 10..=256 << 20,
        )?;
        pull.max_segment_bytes = ranged(
            layer.pull_max_segment_bytes,
            crate::ingest::pull::gateway::DEFAULT_MAX_SEGMENT_BYTES,
            "pull_max_segment_bytes",
            1 << 20..=4 << 30,
        )?;
        let handshake = Duration::from_secs(ranged(
            layer.ingest_handshake_timeout_secs,
            DEFAULT_INGEST_HANDSHAKE_TIMEOUT_SECS,
            "ingest_handshake_timeout_secs",
            1..=120,
        )?);
        let idle = Duration::from_secs(ranged(
            layer.ingest_idle_timeout_secs,
            DEFAULT_INGEST_IDLE_TIMEOUT_SECS,
            "ingest_idle_timeout_secs",
            2..=600,
        )?);
        let rtmp = crate::ingest::rtmp::RtmpConfig {
            max_connections: ranged(
                layer.rtmp_max_connections,
                crate::ingest::rtmp::listener::DEFAULT_MAX_CONNECTIONS,
                "rtmp_max_connections",
                1..=1_000_000,
            )?,
            handshake_timeout: handshake,
            idle_timeout: idle,
            guard: crate::ingest::rtmp::vet::GuardLimits {
                max_media_message: ranged(
                    layer.rtmp_max_message_bytes,
                    u64::from(crate::ingest::rtmp::vet::DEFAULT_MAX_MEDIA_MESSAGE),
                    "rtmp_max_message_bytes",
                    64 * 1024..=64 * 1024 * 1024,
                )? as u32,
                max_amf_depth: ranged(
                    layer.rtmp_max_amf_depth,
                    crate::ingest::rtmp::vet::DEFAULT_MAX_AMF_DEPTH,
                    "rtmp_max_amf_depth",
                    4..=256,
                )?,
            },
        };
        let srt = crate::ingest::srt::SrtConfig {
            max_connections: ranged(
                layer.srt_max_connections,
                crate::ingest::srt::listener::DEFAULT_MAX_CONNECTIONS,
                "srt_max_connections",
                1..=1_000_000,
            )?,
            idle_timeout: idle,
        };
        whip.max_sessions = ranged(
            layer.whip_max_sessions,
            crate::ingest::whip::DEFAULT_MAX_SESSIONS,
            "whip_max_sessions",
            1..=100_000,
        )?;
        whip.max_sdp_bytes = ranged(
            layer.whip_max_sdp_bytes,
            crate::ingest::whip::sdp::DEFAULT_MAX_SDP_BYTES,
            "whip_max_sdp_bytes",
            8 * 1024..=1024 * 1024,
        )?;
        whip.connect_timeout = handshake;
        whip.idle_timeout = idle;
        let default_addr = |s: &str| s.parse::<SocketAddr>().expect("valid default address");
        Ok(Config {
            http_addr: layer
                .http_addr
                .unwrap_or_else(|| default_addr(DEFAULT_HTTP_ADDR)),
            rtmp_addr: layer
                .rtmp_addr
                .unwrap_or_else(|| default_addr(DEFAULT_RTMP_ADDR)),
            rtmps_addr: layer
                .rtmps_addr
                .unwrap_or_else(|| default_addr(DEFAULT_RTMPS_ADDR)),
            srt_addr: layer
                .srt_addr
                .unwrap_or_else(|| default_addr(DEFAULT_SRT_ADDR)),
            data_dir: layer
                .data_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            api_keys: layer.api_keys.unwrap_or_default(),
            public_url,
            quality_sets_file: layer.quality_sets_file,
            profile_templates_file: layer.profile_templates_file,
            fastedge_app_domain,
            http_max_connections,
            http_header_timeout_secs,
            rtmps_cert_file: layer.rtmps_cert_file,
            rtmps_key_file: layer.rtmps_key_file,
            packaging,
            grace_period: std::time::Duration::from_secs(grace),
            backup_switch: std::time::Duration::from_secs(switch),
            rtmp,
            srt,
            whip,
            pull,
            player_assets_dir: layer
                .player_assets_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_PLAYER_ASSETS_DIR)),
        })
    }
}

/// A setting's value, or its default, checked against its range.
fn ranged<T>(
    value: Option<T>,
    default: T,
    key: &'static str,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ConfigError>
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    let v = value.unwrap_or(default);
    if range.contains(&v) {
        return Ok(v);
    }
    Err(ConfigError::Invalid {
        origin: "configuration",
        key,
        value: v.to_string(),
        reason: format!("must be {}..={}", range.start(), range.end()),
    })
}

/// A mux address: `IP:PORT`, or `off` (or empty) to go without the mux.
fn mux_addr(key: &'static str, v: &str) -> Result<Option<SocketAddr>, ConfigError> {
    let v = v.trim();
    if v.is_empty() || v.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    parse_addr("configuration", key, v)
        .map(Some)
        .map_err(|e| match e {
            ConfigError::Invalid {
                origin,
                key,
                value,
                reason,
            } => ConfigError::Invalid {
                origin,
                key,
                value,
                reason: format!("{reason}, or off"),
            },
            other => other,
        })
}

fn parse_public_url(u: &str) -> Result<Url, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        origin: "configuration",
        key: "public_url",
        value: u.to_owned(),
        reason,
    };
    let url = Url::parse(u.trim()).map_err(|e| invalid(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid("must be an http(s) URL with a host".into()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("must not carry a query or fragment".into()));
    }
    Ok(url)
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
        assert_eq!(c.http_addr.to_string(), DEFAULT_HTTP_ADDR);
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
        let layer = Layer::from_env(env(&[
            ("LIVEPACK_RTMP_MAX_CONNECTIONS", "7"),
            ("LIVEPACK_INGEST_IDLE_TIMEOUT_SECS", "30"),
            ("LIVEPACK_INGEST_HANDSHAKE_TIMEOUT_SECS", "3"),
            ("LIVEPACK_WHIP_MAX_SDP_BYTES", "16384"),
            ("LIVEPACK_PULL_MAX_SEGMENT_BYTES", "2097152"),
        ]))
        .unwrap();
        let c = Config::from_layer(layer).unwrap();
        assert_eq!(c.rtmp.max_connections, 7);
        assert_eq!(c.srt.idle_timeout, Duration::from_secs(30));
        assert_eq!(c.whip.idle_timeout, Duration::from_secs(30));
        assert_eq!(c.whip.connect_timeout, Duration::from_secs(3));
        assert_eq!(c.whip.max_sdp_bytes, 16384);
        assert_eq!(c.pull.max_segment_bytes, 2 << 20);
        for (key, value) in [
            ("rtmp_max_amf_depth", "1000"),
            ("ingest_handshake_timeout_secs", "0"),
            ("rtmp_max_message_bytes", "100"),
            ("srt_max_connections", "0"),
            ("whip_max_sdp_bytes", "100000000"),
            ("pull_max_playlist_bytes", "1000"),
            ("pull_max_segment_bytes", "10000000000"),
        ] {
            let layer: Layer = toml::from_str(&format!("{key} = {value}")).unwrap();
            let err = Config::from_layer(layer).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(value), "{err}");
        }
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
}
