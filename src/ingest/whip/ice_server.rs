//! The STUN/TURN servers offered to WHIP clients (`whip_ice_servers`): parsed from the
//! configuration (sans-IO) and rendered as the `Link` headers of RFC 9725 §4.6.

/// More servers than this is a configuration mistake; each becomes a header on every answer.
pub const MAX_ICE_SERVERS: usize = 16;
/// A URL or credential longer than this does not belong in an HTTP header line.
const MAX_PART: usize = 512;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IceServerError {
    #[error("not a stun:, stuns:, turn: or turns: URL")]
    Scheme,
    #[error("no host")]
    NoHost,
    #[error("bad port")]
    Port,
    #[error("the only query allowed is ?transport=udp or ?transport=tcp, on turn(s): URLs")]
    Query,
    #[error("a TURN server needs a username and credential (turn:user:credential@host:port)")]
    NoCredentials,
    #[error("STUN servers take no credentials")]
    StunCredentials,
    #[error("credentials must be non-empty printable ASCII without space, '\"' or '\\\\' (they are quoted in the Link header)")]
    BadCredentials,
    #[error("longer than {MAX_PART} bytes")]
    TooLong,
}

/// One server: its URL as sent to clients (RFC 7064/7065, without credentials) and, for TURN,
/// its long-term credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceServer {
    pub url: String,
    pub credentials: Option<(String, String)>,
}

fn header_safe(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
}

impl IceServer {
    /// `stun:host[:port]` or `turn[s]:user:credential@host[:port][?transport=udp|tcp]`: the
    /// credentials before the last `@`, the username up to the first `:`.
    pub fn parse(entry: &str) -> Result<IceServer, IceServerError> {
        let entry = entry.trim();
        if entry.len() > MAX_PART {
            return Err(IceServerError::TooLong);
        }
        let (scheme, rest) = entry.split_once(':').ok_or(IceServerError::Scheme)?;
        let scheme = scheme.to_ascii_lowercase();
        let turn = match scheme.as_str() {
            "stun" | "stuns" => false,
            "turn" | "turns" => true,
            _ => return Err(IceServerError::Scheme),
        };
        let (credentials, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => {
                let (user, credential) = userinfo
                    .split_once(':')
                    .ok_or(IceServerError::NoCredentials)?;
                if !header_safe(user) || !header_safe(credential) {
                    return Err(IceServerError::BadCredentials);
                }
                (Some((user.to_owned(), credential.to_owned())), rest)
            }
            None => (None, rest),
        };
        match (turn, credentials.is_some()) {
            (true, false) => return Err(IceServerError::NoCredentials),
            (false, true) => return Err(IceServerError::StunCredentials),
            _ => {}
        }
        let (hostport, query) = match rest.split_once('?') {
            Some((h, q)) => (h, Some(q)),
            None => (rest, None),
        };
        if let Some(q) = query {
            if !turn || !matches!(q, "transport=udp" | "transport=tcp") {
                return Err(IceServerError::Query);
            }
        }
        // An IPv6 literal is bracketed (RFC 7064 §3.1).
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (ip, after) = v6.split_once(']').ok_or(IceServerError::NoHost)?;
            ip.parse::<std::net::Ipv6Addr>()
                .map_err(|_| IceServerError::NoHost)?;
            (hostport, after.strip_prefix(':'))
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        let host_ok = !host.is_empty()
            && (host.starts_with('[')
                || host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'));
        if !host_ok {
            return Err(IceServerError::NoHost);
        }
        if let Some(p) = port {
            if p.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(IceServerError::Port);
            }
        }
        let url = match query {
            Some(q) => format!("{scheme}:{hostport}?{q}"),
            None => format!("{scheme}:{hostport}"),
        };
        Ok(IceServer { url, credentials })
    }

    /// The `Link` header value (RFC 9725 §4.6): `<url>; rel="ice-server"`, plus the TURN
    /// `username`, `credential` and `credential-type="password"` parameters.
    pub fn link(&self) -> String {
        match &self.credentials {
            None => format!("<{}>; rel=\"ice-server\"", self.url),
            Some((user, credential)) => format!(
                "<{}>; rel=\"ice-server\"; username=\"{user}\"; credential=\"{credential}\"; \
                 credential-type=\"password\"",
                self.url
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse_into_link_headers() {
        let stun = IceServer::parse(" stun:stun.example.net:3478 ").unwrap();
        assert_eq!(
            stun.link(),
            "<stun:stun.example.net:3478>; rel=\"ice-server\""
        );
        let turn = IceServer::parse("turn:alice:s3cr:et@turn.example.net?transport=udp").unwrap();
        assert_eq!(
            turn.link(),
            "<turn:turn.example.net?transport=udp>; rel=\"ice-server\"; username=\"alice\"; \
             credential=\"s3cr:et\"; credential-type=\"password\""
        );
        let v6 = IceServer::parse("turns:u:p@[2001:db8::1]:5349?transport=tcp").unwrap();
        assert_eq!(v6.url, "turns:[2001:db8::1]:5349?transport=tcp");
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        for (entry, want) in [
            ("http://x", IceServerError::Scheme),
            ("stun:", IceServerError::NoHost),
            ("stun:host:0", IceServerError::Port),
            ("stun:host:99999", IceServerError::Port),
            ("stun:host?transport=udp", IceServerError::Query),
            ("turn:u:p@host?x=1", IceServerError::Query),
            ("turn:host:3478", IceServerError::NoCredentials),
            ("turn:nocolon@host", IceServerError::NoCredentials),
            ("stun:u:p@host", IceServerError::StunCredentials),
            ("turn:u:\"p@host", IceServerError::BadCredentials),
            ("turn:u:p\\@host", IceServerError::BadCredentials),
            ("turn:u :p@host", IceServerError::BadCredentials),
            ("turn::p@host", IceServerError::BadCredentials),
            ("stun:ho st", IceServerError::NoHost),
            ("stun:[::1", IceServerError::NoHost),
        ] {
            assert_eq!(IceServer::parse(entry), Err(want), "{entry}");
        }
        assert_eq!(
            IceServer::parse(&format!("stun:{}", "a".repeat(600))),
            Err(IceServerError::TooLong)
        );
    }
}
