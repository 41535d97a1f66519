//! Sans-IO checks of a WHIP offer before any WebRTC state exists: size, shape and the codecs we
//! can ingest (H.264 packetization-mode 1 and Opus). The same reader checks our answer, which
//! rejects a section (port 0) when the WebRTC stack found no codec in common.

/// Largest offer accepted (HTTP 413 beyond). Browser offers are 4–8 KiB; OBS's are smaller.
pub const DEFAULT_MAX_SDP_BYTES: usize = 128 * 1024;
/// Media sections allowed in one offer: a WHIP publisher sends one audio and one video track
/// (RFC 9725 §4.2); a few more are tolerated, a thousand are refused before parsing further.
pub const MAX_MEDIA_SECTIONS: usize = 8;
/// Longest SDP line considered (an `a=fingerprint` or `a=ssrc` line is < 200 bytes).
const MAX_LINE: usize = 4096;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SdpError {
    #[error("the offer is not UTF-8 text")]
    NotText,
    #[error("the offer does not start with v=0")]
    NoVersion,
    #[error("line {0} is not `<letter>=<value>`")]
    Malformed(usize),
    #[error("line {0} is longer than {MAX_LINE} bytes")]
    LineTooLong(usize),
    #[error("more than {MAX_MEDIA_SECTIONS} media sections")]
    TooManySections,
    #[error("no media section")]
    NoMedia,
    #[error("m= line {0} is malformed")]
    BadMediaLine(usize),
    /// Parsable, but nothing we can ingest: HTTP 406.
    #[error("the offer has no {0} track we can use (H.264 needs packetization-mode=1; WHIP ingest also needs Opus audio)")]
    Unsupported(&'static str),
}

impl SdpError {
    /// The HTTP status a WHIP client gets for this offer.
    pub fn status(&self) -> u16 {
        match self {
            SdpError::Unsupported(_) => 406,
            _ => 400,
        }
    }
}

/// What one media section offers.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Section {
    pub kind: String,
    pub port: u16,
    /// Payload type → `name/rate[/channels]` from `a=rtpmap`.
    rtpmaps: Vec<(u8, String)>,
    /// Payload type → parameters from `a=fmtp`.
    fmtps: Vec<(u8, String)>,
    payload_types: Vec<u8>,
}

impl Section {
    fn fmtp(&self, pt: u8) -> &str {
        self.fmtps
            .iter()
            .find(|(p, _)| *p == pt)
            .map_or("", |(_, f)| f.as_str())
    }

    fn codec_pts<'a>(&'a self, name: &'a str) -> impl Iterator<Item = u8> + 'a {
        self.rtpmaps
            .iter()
            .filter(move |(pt, map)| {
                self.payload_types.contains(pt)
                    && map
                        .split('/')
                        .next()
                        .is_some_and(|n| n.eq_ignore_ascii_case(name))
            })
            .map(|(pt, _)| *pt)
    }

    /// H.264 we can depacketize: FU-A/STAP-A need packetization-mode=1 (RFC 6184 §6.2).
    pub fn has_h264(&self) -> bool {
        self.kind == "video"
            && self.codec_pts("H264").any(|pt| {
                self.fmtp(pt)
                    .split(';')
                    .any(|p| p.trim().eq_ignore_ascii_case("packetization-mode=1"))
            })
    }

    pub fn has_opus(&self) -> bool {
        self.kind == "audio" && self.codec_pts("opus").next().is_some()
    }
}

/// Reads the media sections of an SDP (RFC 8866 §5: `<type>=<value>` lines).
pub fn sections(sdp: &[u8]) -> Result<Vec<Section>, SdpError> {
    let text = std::str::from_utf8(sdp).map_err(|_| SdpError::NotText)?;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    if lines.next().map(|(_, l)| l.trim_end()) != Some("v=0") {
        return Err(SdpError::NoVersion);
    }
    let mut out: Vec<Section> = Vec::new();
    for (n, line) in lines {
        if line.len() > MAX_LINE {
            return Err(SdpError::LineTooLong(n));
        }
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let (key, value) = line.split_once('=').ok_or(SdpError::Malformed(n))?;
        if key.len() != 1 || !key.as_bytes()[0].is_ascii_lowercase() {
            return Err(SdpError::Malformed(n));
        }
        match key {
            "m" => {
                if out.len() == MAX_MEDIA_SECTIONS {
                    return Err(SdpError::TooManySections);
                }
                out.push(media_line(value).ok_or(SdpError::BadMediaLine(n))?);
            }
            "a" => {
                let Some(section) = out.last_mut() else {
                    continue; // session-level attributes: nothing we check
                };
                if let Some(rest) = value.strip_prefix("rtpmap:") {
                    if let Some((pt, map)) = pt_and_value(rest) {
                        section.rtpmaps.push((pt, map.to_owned()));
                    }
                } else if let Some(rest) = value.strip_prefix("fmtp:") {
                    if let Some((pt, params)) = pt_and_value(rest) {
                        section.fmtps.push((pt, params.to_owned()));
                    }
                }
            }
            _ => {}
        }
    }
    if out.is_empty() {
        return Err(SdpError::NoMedia);
    }
    Ok(out)
}

fn media_line(value: &str) -> Option<Section> {
    let mut fields = value.split(' ');
    let kind = fields.next().filter(|k| !k.is_empty())?.to_owned();
    let port = fields.next()?.split('/').next()?.parse().ok()?;
    let _proto = fields.next()?;
    let payload_types = fields.filter_map(|f| f.parse().ok()).collect();
    Some(Section {
        kind,
        port,
        payload_types,
        ..Section::default()
    })
}

fn pt_and_value(rest: &str) -> Option<(u8, &str)> {
    let (pt, value) = rest.split_once(' ')?;
    Some((pt.parse().ok()?, value.trim()))
}

/// Checks an offer: parsable, bounded, and with an H.264 video and an Opus audio section.
pub fn check_offer(sdp: &[u8]) -> Result<Vec<Section>, SdpError> {
    let sections = sections(sdp)?;
    require_codecs(&sections, |_| true)?;
    Ok(sections)
}

/// Checks our answer: the H.264 and Opus sections were accepted (a rejected one has port 0).
pub fn check_answer(sdp: &[u8]) -> Result<(), SdpError> {
    require_codecs(&sections(sdp)?, |s| s.port != 0)
}

fn require_codecs(
    sections: &[Section],
    accepted: impl Fn(&Section) -> bool,
) -> Result<(), SdpError> {
    if !sections.iter().any(|s| accepted(s) && s.has_h264()) {
        return Err(SdpError::Unsupported("H.264 video"));
    }
    if !sections.iter().any(|s| accepted(s) && s.has_opus()) {
        return Err(SdpError::Unsupported("Opus audio"));
    }
    Ok(())
}

/// The answer's candidates as clients must see them. Our host candidates name the address the
/// driver bound; with the muxes that is an ephemeral socket the runtime dropped, so `bound` maps
/// it to the shared address. Behind 1:1 NAT each `nat_ips` entry of the candidate's family is
/// announced instead (same port), one line per IP with a distinct foundation (RFC 8445 §5.1.1.3:
/// candidates of different addresses have different foundations). `tcptype active` candidates
/// are dropped: we only listen (RFC 6544 §4.5, a server behind a firewall cannot dial browsers),
/// and their port 9 only confuses clients. Other lines pass unchanged.
pub fn advertise(
    answer: &str,
    bound: &[(std::net::SocketAddr, std::net::SocketAddr)],
    nat_ips: &[std::net::IpAddr],
) -> String {
    use std::net::{IpAddr, SocketAddr};
    let mut out = String::with_capacity(answer.len());
    for line in answer.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        let eol = &line[body.len()..];
        let Some(candidate) = body.strip_prefix("a=candidate:") else {
            out.push_str(line);
            continue;
        };
        // foundation component transport priority address port typ type [extensions]
        let f: Vec<&str> = candidate.split(' ').collect();
        if f.len() < 8 || f[6] != "typ" || f[7] != "host" {
            out.push_str(line);
            continue;
        }
        if f.windows(2).any(|w| w == ["tcptype", "active"]) {
            continue;
        }
        let (Ok(ip), Ok(port)) = (f[4].parse::<IpAddr>(), f[5].parse::<u16>()) else {
            out.push_str(line);
            continue;
        };
        let ours = SocketAddr::new(ip, port);
        let shared = bound
            .iter()
            .find(|(key, _)| *key == ours)
            .map_or(ours, |(_, shared)| *shared);
        let nat: Vec<IpAddr> = nat_ips
            .iter()
            .copied()
            .filter(|n| n.is_ipv4() == shared.is_ipv4())
            .collect();
        let ips = if nat.is_empty() {
            vec![shared.ip()]
        } else {
            nat
        };
        for (i, ip) in ips.iter().enumerate() {
            let foundation = if i == 0 {
                f[0].to_owned()
            } else {
                format!("{}{i}", f[0])
            };
            let (ip, port) = (ip.to_string(), shared.port().to_string());
            let mut g = f.clone();
            g[0] = &foundation;
            g[4] = &ip;
            g[5] = &port;
            out.push_str("a=candidate:");
            out.push_str(&g.join(" "));
            out.push_str(eol);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The shape of a Chromium offer (trimmed): Opus audio, then H.264 among other codecs.
    pub const BROWSER_OFFER: &str = "v=0\r\n\
o=- 4611731400430051336 2 IN IP4 127.0.0.1\r\n\
s=-\r\n\
t=0 0\r\n\
a=group:BUNDLE 0 1\r\n\
a=msid-semantic: WMS\r\n\
m=audio 9 UDP/TLS/RTP/SAVPF 111 63\r\n\
c=IN IP4 0.0.0.0\r\n\
a=ice-ufrag:abcd\r\n\
a=ice-pwd:abcdefghijklmnopqrstuvwx\r\n\
a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r\n\
a=setup:actpass\r\n\
a=mid:0\r\n\
a=sendonly\r\n\
a=rtcp-mux\r\n\
a=rtpmap:111 opus/48000/2\r\n\
a=fmtp:111 minptime=10;useinbandfec=1\r\n\
a=rtpmap:63 red/48000/2\r\n\
m=video 9 UDP/TLS/RTP/SAVPF 96 102 103\r\n\
c=IN IP4 0.0.0.0\r\n\
a=mid:1\r\n\
a=sendonly\r\n\
a=rtpmap:96 VP8/90000\r\n\
a=rtpmap:102 H264/90000\r\n\
a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f\r\n\
a=rtpmap:103 H264/90000\r\n\
a=fmtp:103 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42001f\r\n";

    #[test]
    fn a_browser_offer_passes() {
        let s = check_offer(BROWSER_OFFER.as_bytes()).unwrap();
        assert_eq!(s.len(), 2);
        assert!(s[0].has_opus() && !s[0].has_h264());
        assert!(s[1].has_h264());
    }

    #[test]
    fn missing_codecs_are_406() {
        let vp8_only = BROWSER_OFFER
            .replace("a=rtpmap:102 H264/90000", "a=rtpmap:102 VP9/90000")
            .replace("packetization-mode=1", "packetization-mode=0");
        let e = check_offer(vp8_only.as_bytes()).unwrap_err();
        assert_eq!(e, SdpError::Unsupported("H.264 video"));
        assert_eq!(e.status(), 406);
        let no_audio = BROWSER_OFFER.replace("opus/48000/2", "PCMU/8000");
        assert_eq!(
            check_offer(no_audio.as_bytes()).unwrap_err(),
            SdpError::Unsupported("Opus audio")
        );
        // A codec listed by rtpmap but not on the m= line is not offered.
        let unlisted = BROWSER_OFFER.replace(
            "m=audio 9 UDP/TLS/RTP/SAVPF 111 63",
            "m=audio 9 UDP/TLS/RTP/SAVPF 63",
        );
        assert_eq!(check_offer(unlisted.as_bytes()).unwrap_err().status(), 406);
    }

    #[test]
    fn junk_is_400() {
        for bad in [
            &b"\xff\xfe"[..],
            b"hello",
            b"v=0\r\nthis is not sdp\r\n",
            b"v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\n",
            b"v=0\r\nm=video\r\n",
            b"v=0\r\nm=video x UDP 96\r\n",
            b"",
        ] {
            let e = sections(bad).unwrap_err();
            assert_eq!(e.status(), 400, "{e}");
        }
        let many = format!(
            "v=0\r\n{}",
            "m=video 9 UDP/TLS/RTP/SAVPF 96\r\n".repeat(1000)
        );
        assert_eq!(
            sections(many.as_bytes()).unwrap_err(),
            SdpError::TooManySections
        );
        let long = format!("v=0\r\na={}\r\n", "x".repeat(MAX_LINE + 1));
        assert_eq!(
            sections(long.as_bytes()).unwrap_err(),
            SdpError::LineTooLong(2)
        );
    }

    #[test]
    fn a_rejected_section_fails_the_answer_check() {
        let answer = BROWSER_OFFER.replace("m=video 9 ", "m=video 0 ");
        assert_eq!(
            check_answer(answer.as_bytes()).unwrap_err(),
            SdpError::Unsupported("H.264 video")
        );
        assert!(check_answer(BROWSER_OFFER.as_bytes()).is_ok());
    }

    #[test]
    fn candidates_are_advertised_at_the_shared_port_or_the_nat_ips() {
        let answer = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n\
            a=candidate:1 1 udp 2130706431 10.0.0.5 40001 typ host\r\n\
            a=candidate:2 1 tcp 2124414975 10.0.0.5 40002 typ host tcptype passive\r\n\
            a=candidate:2 1 tcp 2128609279 10.0.0.5 9 typ host tcptype active\r\n\
            a=candidate:3 1 udp 1 203.0.113.9 5000 typ srflx raddr 10.0.0.5 rport 40001\r\n\
            a=candidate:4 1 udp 2130706431 fd00::5 40003 typ host\r\n\
            a=end-of-candidates\r\n";
        let bound = [
            (
                "10.0.0.5:40001".parse().unwrap(),
                "10.0.0.5:8189".parse().unwrap(),
            ),
            (
                "10.0.0.5:40002".parse().unwrap(),
                "10.0.0.5:8189".parse().unwrap(),
            ),
        ];
        let muxed = advertise(answer, &bound, &[]);
        assert!(muxed.contains("a=candidate:1 1 udp 2130706431 10.0.0.5 8189 typ host\r\n"));
        assert!(muxed
            .contains("a=candidate:2 1 tcp 2124414975 10.0.0.5 8189 typ host tcptype passive\r\n"));
        assert!(!muxed.contains("tcptype active"), "{muxed}");
        assert!(
            muxed.contains("203.0.113.9 5000 typ srflx"),
            "other types untouched"
        );
        assert!(
            muxed.contains("fd00::5 40003"),
            "unmapped host kept: {muxed}"
        );
        assert!(muxed.ends_with("a=end-of-candidates\r\n"));
        let nat = [
            "198.51.100.1".parse().unwrap(),
            "198.51.100.2".parse().unwrap(),
        ];
        let natted = advertise(answer, &bound, &nat);
        assert!(natted.contains("a=candidate:1 1 udp 2130706431 198.51.100.1 8189 typ host\r\n"));
        assert!(natted.contains("a=candidate:11 1 udp 2130706431 198.51.100.2 8189 typ host\r\n"));
        assert!(!natted.contains("10.0.0.5 8189"), "{natted}");
        // No IPv6 NAT address given: the IPv6 candidate keeps its own.
        assert!(natted.contains("fd00::5 40003"), "{natted}");
        // Per-session mode (nothing bound): the NAT IPs replace the host IPs, ports kept.
        let per_session = advertise(answer, &[], &nat[..1]);
        assert!(
            per_session.contains("198.51.100.1 40001 typ host"),
            "{per_session}"
        );
    }
}
