//! The ingest sections: each protocol's config built from the settings, the shared handshake
//! and idle timeouts applied to every protocol that has them.

use std::net::SocketAddr;
use std::time::Duration;

use super::{invalid, parse_addr, pull, rtmp, srt, whip, ConfigError, Settings};

fn handshake(s: &Settings) -> Duration {
    Duration::from_secs(s.ingest_handshake_timeout_secs)
}

fn idle(s: &Settings) -> Duration {
    Duration::from_secs(s.ingest_idle_timeout_secs)
}

pub(super) fn rtmp(s: &Settings) -> rtmp::RtmpConfig {
    rtmp::RtmpConfig {
        max_connections: s.rtmp_max_connections,
        max_connections_per_ip: s.rtmp_max_connections_per_ip,
        handshake_timeout: handshake(s),
        idle_timeout: idle(s),
        guard: rtmp::vet::GuardLimits {
            // The table's range keeps it far below u32::MAX.
            max_media_message: s.rtmp_max_message_bytes as u32,
            max_amf_depth: s.rtmp_max_amf_depth,
        },
    }
}

pub(super) fn srt(s: &Settings) -> srt::SrtConfig {
    srt::SrtConfig {
        max_connections: s.srt_max_connections,
        max_connections_per_ip: s.srt_max_connections_per_ip,
        idle_timeout: idle(s),
    }
}

pub(super) fn pull(s: &Settings) -> pull::PullConfig {
    pull::PullConfig {
        inactivity: Duration::from_secs(s.pull_inactivity_secs),
        first_data_timeout: Duration::from_millis(s.pull_first_data_timeout_ms),
        no_data_timeout: Duration::from_millis(s.pull_no_data_timeout_ms),
        cycle_pause: Duration::from_millis(s.pull_cycle_pause_ms),
        allow_link_local: s.pull_allow_link_local,
        max_held_bytes: s.pull_max_held_bytes,
        max_playlist_bytes: s.pull_max_playlist_bytes,
        max_segment_bytes: s.pull_max_segment_bytes,
    }
}

/// Sessions without the UDP mux bind on these: an empty list would leave them nowhere.
pub(super) fn non_empty(
    key: &'static str,
    addrs: Vec<SocketAddr>,
) -> Result<Vec<SocketAddr>, ConfigError> {
    if addrs.is_empty() {
        return Err(invalid(key, "", "needs at least one IP:PORT"));
    }
    Ok(addrs)
}

pub(super) fn whip(s: &Settings) -> Result<whip::WhipConfig, ConfigError> {
    let mut whip = whip::WhipConfig::default();
    if let Some(addrs) = &s.whip_udp_addrs {
        whip.udp_addrs = addrs.clone();
    }
    if let Some(ips) = &s.whip_nat_ips {
        whip.nat_ips = ips
            .iter()
            .map(|ip| {
                ip.parse::<std::net::IpAddr>()
                    .map_err(|_| invalid("whip_nat_ips", ip.clone(), "must be IP addresses"))
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(v) = &s.whip_udp_mux_addr {
        whip.udp_mux_addr = mux_addr("whip_udp_mux_addr", v)?;
    }
    if let Some(v) = &s.whip_tcp_mux_addr {
        whip.tcp_mux_addr = mux_addr("whip_tcp_mux_addr", v)?;
    }
    if let Some(servers) = &s.whip_ice_servers {
        whip.ice_servers = ice_servers(servers)?;
    }
    whip.max_sessions = s.whip_max_sessions;
    whip.tcp_max_connections_per_ip = s.whip_tcp_max_connections_per_ip;
    whip.max_sdp_bytes = s.whip_max_sdp_bytes;
    whip.connect_timeout = handshake(s);
    whip.idle_timeout = idle(s);
    Ok(whip)
}

fn ice_servers(servers: &[String]) -> Result<Vec<whip::ice_server::IceServer>, ConfigError> {
    const KEY: &str = "whip_ice_servers";
    let max = whip::ice_server::MAX_ICE_SERVERS;
    if servers.len() > max {
        let reason = format!("at most {max} servers");
        return Err(invalid(KEY, servers.len().to_string(), reason));
    }
    servers
        .iter()
        .map(|entry| {
            whip::ice_server::IceServer::parse(entry).map_err(|e| {
                // Never echo a credential into the log.
                let host = entry.rsplit('@').next().unwrap_or_default();
                invalid(KEY, host, e.to_string())
            })
        })
        .collect()
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
