//! Playlist rewriting for the PULL gateway (sans-IO, fuzzed): every reference in an HLS
//! playlist or DASH manifest that could take GStreamer's downloader to another origin is
//! rewritten to the gateway, or the whole playlist is refused. It fails closed: anything read
//! differently by GStreamer's parsers than by this one (odd encodings, DTD entities, markup
//! inside a `BaseURL`, unterminated quotes, unparseable absolute references) is an error, never
//! passed through.

use url::Url;

use crate::url_policy::Purpose;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlaylistKind {
    Hls,
    Dash,
}

impl PlaylistKind {
    /// The caps GStreamer's demuxers take it as.
    pub fn caps(self) -> &'static str {
        match self {
            PlaylistKind::Hls => "application/x-hls",
            PlaylistKind::Dash => "application/dash+xml",
        }
    }
}

/// How a response's first bytes are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    Playlist(PlaylistKind),
    Media,
    /// Text in an encoding other than UTF-8 (a BOM or NULs around a `<`): an XML parser would
    /// read it, this rewriter does not.
    Refused,
}

/// Whether `first` holds nothing but a UTF-8 BOM and whitespace (so far).
pub fn blank(first: &[u8]) -> bool {
    let body = first.strip_prefix(b"\xef\xbb\xbf").unwrap_or(first);
    body.iter().all(u8::is_ascii_whitespace)
}

/// Anything that could be a playlist is one, and the body says which (the demuxers ignore the
/// content type): a first character of `#` is HLS, `<` is DASH (after a UTF-8 BOM and
/// whitespace). Media segments start otherwise (TS `G`, ISO BMFF box sizes, ADTS sync words);
/// XML that is not an MPD (TTML) just passes the rewriter. A playlist content type on a body
/// that is neither, and the byte patterns libxml2 reads as other encodings (UTF-16/32, UCS-4,
/// EBCDIC), are refused.
pub fn sniff(content_type: &str, first: &[u8]) -> Sniffed {
    const OTHER_ENCODINGS: [&[u8]; 9] = [
        b"\xff\xfe",
        b"\xfe\xff",
        b"\0\0\xfe\xff",
        b"<\0",
        b"\0<",
        b"\0\0\0<\0\0\0",
        b"\0\0<\0",
        b"\0<\0\0",
        b"\x4c\x6f\xa7\x94",
    ];
    if OTHER_ENCODINGS.iter().any(|p| first.starts_with(p)) {
        return Sniffed::Refused;
    }
    let body = first.strip_prefix(b"\xef\xbb\xbf").unwrap_or(first);
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'#') => Sniffed::Playlist(PlaylistKind::Hls),
        Some(b'<') => Sniffed::Playlist(PlaylistKind::Dash),
        _ if ["mpegurl", "xml"].iter().any(|t| content_type.contains(t)) => Sniffed::Refused,
        _ => Sniffed::Media,
    }
}

/// Maps an upstream URL to its loopback URL, or says why it may not be fetched.
pub type Mapper<'a> = dyn FnMut(&Url) -> Result<String, MapError> + 'a;

/// Why the mapper refused a reference; its own error type (the gateway's), kept whole.
pub type MapError = Box<dyn std::error::Error + Send + Sync>;

/// Why a playlist or manifest is refused whole.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// Text another parser could read differently than we do; the message says where.
    #[error("{0}")]
    Syntax(std::borrow::Cow<'static, str>),
    /// A reference the mapper refused.
    #[error(transparent)]
    Refused(MapError),
}

impl From<&'static str> for RewriteError {
    fn from(s: &'static str) -> Self {
        RewriteError::Syntax(s.into())
    }
}

impl From<String> for RewriteError {
    fn from(s: String) -> Self {
        RewriteError::Syntax(s.into())
    }
}

/// Schemes a playlist may name that no downloader fetches (inline keys, FairPlay key ids).
const INERT_SCHEMES: [&str; 3] = ["data", "skd", "urn"];

/// The scheme of an absolute reference (`scheme:` as RFC 3986 and `gst_uri_is_valid` read it).
fn scheme_of(reference: &str) -> Option<&str> {
    let (scheme, _) = reference.split_once(':')?;
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

/// Whether a reference would be read as absolute or scheme-relative (inert schemes aside).
fn absolute(raw: &str) -> bool {
    let r = raw.trim().trim_matches('"').trim();
    match scheme_of(r) {
        Some(s) => !INERT_SCHEMES.iter().any(|i| s.eq_ignore_ascii_case(i)),
        None => r.replace('\\', "/").starts_with("//"),
    }
}

/// One reference: `Ok(None)` keeps it (relative: it resolves through the origin's mirrored
/// paths), `Ok(Some)` replaces it, `Err` refuses the playlist. Absolute and scheme-relative
/// references are mapped when they are HTTP(S) and refused when they cannot be read.
fn reference(raw: &str, base: &Url, map: &mut Mapper<'_>) -> Result<Option<String>, RewriteError> {
    if !absolute(raw) {
        return Ok(None);
    }
    let r = raw.trim().trim_matches('"').trim();
    let url = base
        .join(r)
        .map_err(|e| format!("unreadable reference {:?}: {e}", truncate(r)))?;
    if !Purpose::PullHttpHop.schemes().contains(&url.scheme()) {
        return Err(format!("reference with scheme `{}`", url.scheme()).into());
    }
    map(&url).map(Some).map_err(RewriteError::Refused)
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(80) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A live HLS media playlist listing fewer than two whole segments: its target duration (the
/// wait for the next one), else `None` (a master playlist, VOD, an event that ended, or two or
/// more segments). GStreamer 1.22's hlsdemux2 matches a refreshed playlist against every segment
/// of the previous one but its first (`for (idx = len - 1; idx; idx--)`), so after a one-segment
/// playlist it loses sync, its seek back to the live edge fails and the stream never resumes.
pub fn short_live_playlist(text: &str) -> Option<std::time::Duration> {
    let mut target = None;
    let mut segments = 0;
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("#EXT-X-TARGETDURATION:") {
            target = v.trim().parse::<u64>().ok();
        } else if line.starts_with("#EXTINF:") {
            segments += 1;
        } else if line == "#EXT-X-ENDLIST" || line == "#EXT-X-PLAYLIST-TYPE:VOD" {
            return None;
        }
    }
    let target = target?;
    (segments < 2).then(|| std::time::Duration::from_secs(target.clamp(1, 30)))
}

/// HLS: URI lines and the `URI` attribute of every tag (keys, maps, media, i-frame playlists,
/// parts, preload hints, rendition reports), attribute lists tokenised as hlsdemux2 does
/// (quoted values may hold commas; unquoted ones end at the next comma).
pub fn rewrite_m3u8(text: &str, base: &Url, map: &mut Mapper<'_>) -> Result<String, RewriteError> {
    // Lines end at LF (CRLF included); a lone CR or a NUL could split lines for another parser.
    if text.contains('\0') || text.replace("\r\n", "\n").contains('\r') {
        return Err("a lone CR or a NUL in a playlist".into());
    }
    let mut out = String::with_capacity(text.len() + 256);
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        let ending = &line[body.len()..];
        let t = body.trim();
        if t.is_empty() {
            out.push_str(body);
        } else if let Some(tag) = t.strip_prefix('#') {
            out.push('#');
            match tag.split_once(':') {
                // EXTINF's title is free text, never fetched.
                Some((name, list)) if !name.eq_ignore_ascii_case("EXTINF") => {
                    out.push_str(name);
                    out.push(':');
                    out.push_str(&rewrite_attributes(list, base, map)?);
                }
                _ => out.push_str(tag),
            }
        } else {
            match reference(t, base, map)? {
                Some(r) => out.push_str(&r),
                None => out.push_str(t),
            }
        }
        out.push_str(ending);
    }
    Ok(out)
}

fn rewrite_attributes(
    list: &str,
    base: &Url,
    map: &mut Mapper<'_>,
) -> Result<String, RewriteError> {
    let mut out = String::with_capacity(list.len());
    let mut rest = list;
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim();
        // hlsdemux2 reads quotes anywhere in a value and names without `=`: only the plain
        // NAME=VALUE / NAME="VALUE" grammar is read the same way by both.
        if name.contains([',', '"']) {
            return Err(format!("attribute name {:?}", truncate(name)).into());
        }
        out.push_str(&rest[..=eq]);
        rest = &rest[eq + 1..];
        let (value, quoted, after) = match rest.strip_prefix('"') {
            Some(r) => {
                let end = r.find('"').ok_or("unterminated quoted attribute")?;
                (&r[..end], true, &r[end + 1..])
            }
            None => {
                let end = rest.find(',').unwrap_or(rest.len());
                if rest[..end].contains('"') {
                    return Err("a quote inside an unquoted attribute value".into());
                }
                (&rest[..end], false, &rest[end..])
            }
        };
        if !(after.is_empty() || after.starts_with(',')) {
            return Err("text after a quoted attribute value".into());
        }
        let new = if name.eq_ignore_ascii_case("URI") {
            reference(value, base, map)?
        } else {
            None
        };
        if quoted {
            out.push('"');
        }
        out.push_str(new.as_deref().unwrap_or(value));
        if quoted {
            out.push('"');
        }
        let next = after.find(',').map_or(after.len(), |i| i + 1);
        out.push_str(&after[..next]);
        rest = &after[next..];
    }
    out.push_str(rest);
    Ok(out)
}

/// DASH: the text of `BaseURL`, `Location` and `PatchLocation`, the URL-valued attributes
/// (`media`, `initialization`, `index`, `sourceURL`, `href`) and UTCTiming's `value` (its time
/// server is fetched). Namespaces, scheme ids and other attributes are left alone. Refused:
/// non-UTF-8 encodings, DTDs and entities (which could spell a URL), markup inside a URL
/// element, malformed tags.
pub fn rewrite_mpd(text: &str, base: &Url, map: &mut Mapper<'_>) -> Result<String, RewriteError> {
    const TEXT_ELEMENTS: [&str; 3] = ["BaseURL", "Location", "PatchLocation"];
    let mut out = String::with_capacity(text.len() + 256);
    let mut rest = text;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        rest = &rest[lt..];
        // Comments, CDATA and processing instructions end where libxml2 ends them.
        let skipped = if let Some(body) = rest.strip_prefix("<!--") {
            Some(body.find("-->").map(|i| 4 + i + 3))
        } else if let Some(body) = rest.strip_prefix("<![CDATA[") {
            Some(body.find("]]>").map(|i| 9 + i + 3))
        } else if rest.starts_with("<?") {
            Some(rest.find("?>").map(|i| i + 2))
        } else {
            None
        };
        if let Some(n) = skipped {
            let n = n.ok_or("unterminated comment, CDATA or declaration")?;
            let piece = &rest[..n];
            if piece.starts_with("<?") {
                check_encoding(piece)?;
            }
            out.push_str(piece);
            rest = &rest[n..];
            continue;
        }
        if rest.starts_with("<!") {
            return Err("a DTD or entity declaration in a manifest".into());
        }
        let tag_len = tag_end(rest).ok_or("unterminated tag")?;
        let tag = &rest[..tag_len];
        rest = &rest[tag_len..];
        if tag.starts_with("</") {
            out.push_str(tag);
            continue;
        }
        let name_len = tag[1..]
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .unwrap_or(tag.len() - 1);
        let name = local(&tag[1..1 + name_len]);
        out.push_str(&tag[..1 + name_len]);
        let (attrs, tail) = attributes(&tag[1 + name_len..])?;
        for a in &attrs {
            out.push_str(a.lead);
            out.push(a.quote);
            match rewrite_attribute(name, a, &attrs, base, map)? {
                Some(v) => out.push_str(&xml_escape(&v)),
                None => out.push_str(a.raw),
            }
            out.push(a.quote);
        }
        out.push_str(tail);
        if TEXT_ELEMENTS.contains(&name) && !tag.ends_with("/>") {
            let n = rest.find('<').ok_or("unterminated URL element")?;
            if !rest[n..].starts_with("</") {
                return Err(format!("markup inside <{name}>").into());
            }
            let value = &rest[..n];
            match reference(&xml_unescape(value)?, base, map)? {
                Some(r) => out.push_str(&xml_escape(&r)),
                None => out.push_str(value),
            }
            rest = &rest[n..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// One attribute of a start tag: the text before its opening quote, its local name, its quote
/// and raw (escaped) value.
struct Attribute<'a> {
    lead: &'a str,
    name: &'a str,
    quote: char,
    raw: &'a str,
}

/// The attributes of a start tag (after its name) and what follows them (`>` or `/>`).
fn attributes(mut attrs: &str) -> Result<(Vec<Attribute<'_>>, &str), RewriteError> {
    let mut list = Vec::new();
    while let Some(eq) = attrs.find('=') {
        let q = eq
            + 1
            + attrs[eq + 1..]
                .find(|c: char| !c.is_whitespace())
                .ok_or("malformed attribute")?;
        let quote = attrs.as_bytes()[q];
        if !matches!(quote, b'"' | b'\'') {
            return Err("unquoted attribute".into());
        }
        let len = attrs[q + 1..]
            .find(quote as char)
            .ok_or("unterminated attribute")?;
        let name = attrs[..eq]
            .trim()
            .rsplit(char::is_whitespace)
            .next()
            .unwrap_or("");
        // Namespace declarations keep their full name: libxml2 never reads them as attributes.
        let xmlns = name == "xmlns" || name.starts_with("xmlns:");
        list.push(Attribute {
            lead: &attrs[..q],
            name: if xmlns { name } else { local(name) },
            quote: quote as char,
            raw: &attrs[q + 1..q + 1 + len],
        });
        attrs = &attrs[q + 2 + len..];
    }
    if !attrs
        .trim_end_matches('>')
        .trim_end_matches('/')
        .trim()
        .is_empty()
    {
        return Err("malformed tag".into());
    }
    Ok((list, attrs))
}

/// The new value of one attribute (`None` keeps it).
fn rewrite_attribute(
    element: &str,
    a: &Attribute<'_>,
    all: &[Attribute<'_>],
    base: &Url,
    map: &mut Mapper<'_>,
) -> Result<Option<String>, RewriteError> {
    let value = xml_unescape(a.raw)?;
    match (element, a.name) {
        // Substituted into templates by `$RepresentationID$`: no character that could make
        // a relative template absolute.
        ("Representation", "id") => {
            let safe = |c: char| c.is_ascii_alphanumeric() || "._~=+-".contains(c);
            if !value.chars().all(safe) {
                return Err(format!("Representation id {:?}", truncate(&value)).into());
            }
            Ok(None)
        }
        ("UTCTiming", "value") => {
            // Every attribute that could be read as the scheme counts (prefixed ones too).
            let schemes = all
                .iter()
                .filter(|o| o.name == "schemeIdUri")
                .map(|o| xml_unescape(o.raw))
                .collect::<Result<Vec<_>, _>>()?;
            // NTP/SNTP go out over UDP, past the gateway.
            if let Some(ntp) = schemes.iter().find(|s| s.contains("ntp")) {
                return Err(format!("UTCTiming {ntp}").into());
            }
            if !schemes.iter().any(|s| s.contains(":http-")) {
                return Ok(None);
            }
            // A space-separated list of time servers, used as they are (not resolved).
            let mut servers = Vec::new();
            for item in value.split_whitespace() {
                servers.push(
                    reference(item, base, map)?
                        .ok_or_else(|| format!("relative time server {:?}", truncate(item)))?,
                );
            }
            Ok(Some(servers.join(" ")))
        }
        (_, "media" | "initialization" | "index") => {
            let mapped = reference(&value, base, map)?;
            // A relative template must stay relative whatever its identifiers become.
            if mapped.is_none()
                && [substitute(&value, ""), substitute(&value, "a")]
                    .iter()
                    .any(|t| absolute(t))
            {
                return Err(format!("template {:?}", truncate(&value)).into());
            }
            Ok(mapped)
        }
        (_, "sourceURL" | "href") => reference(&value, base, map),
        _ => Ok(None),
    }
}

/// A segment template with every `$identifier$` replaced (`$$` is a literal `$`).
fn substitute(template: &str, with: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut parts = template.split('$');
    out.push_str(parts.next().unwrap_or(""));
    let mut inside = true;
    for part in parts {
        if inside {
            out.push_str(if part.is_empty() { "$" } else { with });
        } else {
            out.push_str(part);
        }
        inside = !inside;
    }
    out
}

fn check_encoding(declaration: &str) -> Result<(), RewriteError> {
    let lower = declaration.to_ascii_lowercase();
    let Some(at) = lower.find("encoding") else {
        return Ok(());
    };
    let value: String = lower[at + 8..]
        .trim_start_matches([' ', '=', '"', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    if value == "utf-8" || value == "utf8" {
        Ok(())
    } else {
        Err(format!("manifest encoding `{value}` (only UTF-8 is read)").into())
    }
}

/// A name without its namespace prefix.
fn local(name: &str) -> &str {
    name.rsplit(':').next().unwrap_or(name)
}

/// The length of the tag at the start of `s` (up to its `>`, quotes respected).
fn tag_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// XML's five named entities and character references; any other entity is refused (without
/// a DTD, libxml2 would refuse the document too).
fn xml_unescape(s: &str) -> Result<String, RewriteError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let semi = rest[amp..].find(';').ok_or("unterminated entity")?;
        let entity = &rest[amp + 1..amp + semi];
        let c = match entity {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = match entity.strip_prefix("#x").or(entity.strip_prefix("#X")) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => entity.strip_prefix('#').and_then(|d| d.parse().ok()),
                };
                code.and_then(char::from_u32)
                    .ok_or_else(|| format!("entity &{};", truncate(entity)))?
            }
        };
        out.push(c);
        rest = &rest[amp + semi + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Maps to a loopback URL naming the host (so tests see where a reference went); refuses
    /// the metadata address as the gateway's guard would.
    fn mapper(calls: &mut Vec<String>) -> impl FnMut(&Url) -> Result<String, MapError> + '_ {
        |u: &Url| {
            calls.push(u.to_string());
            if u.host_str() == Some("169.254.169.254") {
                return Err("blocked".into());
            }
            Ok(format!("http://127.0.0.1:1{}", u.path()))
        }
    }

    fn hls(text: &str) -> (Result<String, RewriteError>, Vec<String>) {
        let base = Url::parse("https://cdn.example/live/master.m3u8?token=1").unwrap();
        let mut calls = Vec::new();
        let out = rewrite_m3u8(text, &base, &mut mapper(&mut calls));
        (out, calls)
    }

    #[test]
    fn only_a_live_media_playlist_of_fewer_than_two_segments_is_short() {
        let head = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:6\n#EXT-X-MEDIA-SEQUENCE:0\n";
        let seg = |n: usize| {
            (0..n)
                .map(|i| format!("#EXTINF:6.0,\nseg{i}.ts\n"))
                .collect::<String>()
        };
        let six = Some(std::time::Duration::from_secs(6));
        assert_eq!(short_live_playlist(head), six);
        assert_eq!(short_live_playlist(&format!("{head}{}", seg(1))), six);
        assert_eq!(short_live_playlist(&format!("{head}{}", seg(2))), None);
        // An LL-HLS playlist whose first segment is still in parts: short.
        let parts = "#EXT-X-PART:DURATION=0.5,URI=\"p0.m4s\"\n#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p1.m4s\"\n";
        assert_eq!(
            short_live_playlist(&format!("{head}{}{parts}", seg(1))),
            six
        );
        // Ended, VOD, or a master playlist: never held.
        assert_eq!(
            short_live_playlist(&format!("{head}{}#EXT-X-ENDLIST\n", seg(1))),
            None
        );
        assert_eq!(
            short_live_playlist(&format!("#EXT-X-PLAYLIST-TYPE:VOD\n{head}{}", seg(1))),
            None
        );
        assert_eq!(
            short_live_playlist("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\na.m3u8\n"),
            None
        );
        // A target duration of 0 or 3600 still gives a bounded wait.
        let odd = |t: &str| short_live_playlist(&format!("#EXTM3U\n#EXT-X-TARGETDURATION:{t}\n"));
        assert_eq!(odd("0"), Some(std::time::Duration::from_secs(1)));
        assert_eq!(odd("3600"), Some(std::time::Duration::from_secs(30)));
    }

    fn mpd(text: &str) -> (Result<String, RewriteError>, Vec<String>) {
        let base = Url::parse("https://cdn.example/live/manifest.mpd").unwrap();
        let mut calls = Vec::new();
        let out = rewrite_mpd(text, &base, &mut mapper(&mut calls));
        (out, calls)
    }

    #[test]
    fn hls_references_that_leave_the_origin_are_rewritten() {
        let master = "#EXTM3U\r\n\
            #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a,b\",NAME=\"en\",URI=\"https://audio.example/a/index.m3u8\"\r\n\
            #EXT-X-STREAM-INF:BANDWIDTH=2000000,AUDIO=\"a,b\"\r\n\
            https://other.example/hi/index.m3u8?sig=x\r\n\
            #EXT-X-STREAM-INF:BANDWIDTH=800000,AUDIO=\"a,b\"\r\n\
            lo/index.m3u8\r\n\
            #EXT-X-STREAM-INF:BANDWIDTH=400000,AUDIO=\"a,b\"\r\n\
            //third.example/x/index.m3u8\r\n";
        let (out, calls) = hls(master);
        let out = out.unwrap();
        assert_eq!(
            calls,
            [
                "https://audio.example/a/index.m3u8",
                "https://other.example/hi/index.m3u8?sig=x",
                "https://third.example/x/index.m3u8",
            ]
        );
        let Ok((_, m3u8_rs::Playlist::MasterPlaylist(m))) = m3u8_rs::parse_playlist(out.as_bytes())
        else {
            panic!("not a master playlist:\n{out}");
        };
        let uris: Vec<_> = m.variants.iter().map(|v| v.uri.as_str()).collect();
        assert_eq!(
            uris,
            [
                "http://127.0.0.1:1/hi/index.m3u8",
                "lo/index.m3u8",
                "http://127.0.0.1:1/x/index.m3u8"
            ]
        );
        assert_eq!(
            m.alternatives[0].uri.as_deref(),
            Some("http://127.0.0.1:1/a/index.m3u8")
        );
        assert_eq!(m.alternatives[0].group_id, "a,b");
        assert!(out.contains("\r\n"), "line endings kept");

        let media = "#EXTM3U\n#EXT-X-TARGETDURATION:2\n\
            #EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"skd://key\",KEYFORMAT=\"com.apple.streamingkeydelivery\"\n\
            #EXT-X-MAP:URI=\"init.mp4\"\n\
            #EXTINF:2,a title naming URI=\"http://title.example/\"\n\
            seg1.m4s\n\
            #EXT-X-PART:DURATION=0.5,URI=\"https://parts.example/p.m4s\"\n\
            #EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"data:text/plain,x\"\n";
        let (out, calls) = hls(media);
        let out = out.unwrap();
        assert_eq!(calls, ["https://parts.example/p.m4s"]);
        for kept in [
            "URI=\"skd://key\"",
            "#EXT-X-MAP:URI=\"init.mp4\"\n",
            "\nseg1.m4s\n",
            "title.example",
            "URI=\"data:text/plain,x\"",
        ] {
            assert!(out.contains(kept), "{kept}:\n{out}");
        }
        assert!(out.contains("URI=\"http://127.0.0.1:1/p.m4s\""), "{out}");
    }

    #[test]
    fn hls_references_another_parser_could_fetch_are_rewritten_or_refused() {
        // Rewritten, whatever their spelling.
        for (line, host) in [
            (
                "#EXT-X-KEY:METHOD=AES-128,URI=http://keys.example/k",
                "keys.example",
            ),
            (
                "#EXT-X-MAP:URI=\"HTTP://maps.example/i.mp4\"",
                "maps.example",
            ),
            (
                "#EXT-X-KEY:METHOD=AES-128,X-A=\"URI=\",URI=\"https://k2.example/k\"",
                "k2.example",
            ),
            ("  https://indented.example/a.ts  ", "indented.example"),
            ("\\\\back.example/a.ts", "back.example"),
            ("/\\mixed.example/a.ts", "mixed.example"),
            ("\"https://quoted.example/a.ts\"", "quoted.example"),
        ] {
            let (out, calls) = hls(&format!("#EXTM3U\n#EXTINF:2,\n{line}\n"));
            let out = out.unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(calls.iter().any(|c| c.contains(host)), "{line}: {calls:?}");
            assert!(!out.contains(host), "{line} left in:\n{out}");
        }
        // Refused: a blocked host (however hidden), what cannot be read, what is not HTTP.
        for line in [
            "#EXT-X-KEY:METHOD=AES-128,X-A=\"URI=\",URI=\"http://169.254.169.254/k\"",
            "#EXT-X-KEY:METHOD=AES-128,URI=http://169.254.169.254/k",
            "http://[fe80::1%25eth0]/x.ts",
            "file:///etc/passwd",
            "#EXT-X-MAP:URI=\"gopher://x/\"",
            "#EXT-X-KEY:METHOD=AES-128,URI=\"https://k.example/k",
            "a.ts\rhttp://cr.example/x.ts",
            "a.ts\0",
            // hlsdemux2 reads quotes anywhere: these hide a URI from a NAME="VALUE" reader.
            "#EXT-X-KEY:METHOD=AES-128,X=a\"b,Y=\"c,URI=http://k.example/key1,\"",
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"x\",URI=x\"http://m.example/a.m3u8\"",
            "#EXT-X-MAP:X=1,junk,URI=http://map.example/i.mp4",
            "#EXT-X-MAP:URI=\"init.mp4\"x,Y=1",
        ] {
            let (out, _) = hls(&format!("#EXTM3U\n#EXTINF:2,\n{line}\n"));
            assert!(out.is_err(), "{line:?} accepted: {out:?}");
        }
    }

    #[test]
    fn dash_urls_are_rewritten_and_namespaces_left_alone() {
        let text = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- <BaseURL>https://comment.example/</BaseURL> -->
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" xmlns:xlink="http://www.w3.org/1999/xlink" type="dynamic">
  <BaseURL>https://edge.example/live/</BaseURL>
  <Location>manifest.mpd</Location>
  <Period id="p0" xlink:href="&#104;ttps://periods.example/p1" xlink:actuate="onLoad">
    <AdaptationSet mimeType="video/mp4">
      <Role schemeIdUri="urn:mpeg:dash:role:2011" value="main"/>
      <EssentialProperty schemeIdUri="http://dashif.org/guidelines/trickmode" value="http://not.fetched/"/>
      <SegmentTemplate initialization='//init.example/i.mp4?a=1&amp;b=2' media="$Number$.m4s" startNumber="1"/>
      <Representation id="v" bandwidth="1000"><BaseURL>v/</BaseURL></Representation>
    </AdaptationSet>
  </Period>
  <UTCTiming schemeIdUri="urn:mpeg:dash:utc:http-xsdate:2014" value="https://time.example/now  https://time2.example/t"/>
  <UTCTiming schemeIdUri="urn:mpeg:dash:utc:direct:2014" value="2026-11-23T18:00:00Z"/>
</MPD>"#;
        let (out, calls) = mpd(text);
        let out = out.unwrap();
        assert_eq!(
            calls,
            [
                "https://edge.example/live/",
                "https://periods.example/p1",
                "https://init.example/i.mp4?a=1&b=2",
                "https://time.example/now",
                "https://time2.example/t",
            ]
        );
        for kept in [
            "<!-- <BaseURL>https://comment.example/</BaseURL> -->",
            r#"xmlns:xlink="http://www.w3.org/1999/xlink""#,
            r#"value="http://not.fetched/""#,
            "<Location>manifest.mpd</Location>",
            r#"media="$Number$.m4s""#,
            "<BaseURL>v/</BaseURL>",
        ] {
            assert!(out.contains(kept), "{kept} changed:\n{out}");
        }
        for rewritten in [
            "<BaseURL>http://127.0.0.1:1/live/</BaseURL>",
            r#"xlink:href="http://127.0.0.1:1/p1""#,
            "initialization='http://127.0.0.1:1/i.mp4'",
            r#"value="http://127.0.0.1:1/now http://127.0.0.1:1/t""#,
            r#"value="2026-11-23T18:00:00Z""#,
        ] {
            assert!(out.contains(rewritten), "no {rewritten}:\n{out}");
        }
    }

    #[test]
    fn dash_forms_another_parser_reads_differently_are_refused() {
        for text in [
            "<MPD><BaseURL>http://169.254.169.254/</BaseURL></MPD>",
            "<!DOCTYPE MPD [<!ENTITY e \"http://evil.example/\">]><MPD><BaseURL>&e;</BaseURL></MPD>",
            "<MPD><BaseURL><![CDATA[http://evil.example/]]></BaseURL></MPD>",
            "<MPD><BaseURL><!---->http://evil.example/</BaseURL></MPD>",
            "<MPD><BaseURL><x/>http://evil.example/</BaseURL></MPD>",
            "<?xml version=\"1.0\" encoding=\"UTF-7\"?><MPD/>",
            "<MPD><S media=http://evil.example/x/></MPD>",
            "<MPD><S media=\"http://evil.example/x></MPD>",
            "<MPD><BaseURL>http://evil.example/",
            "<MPD><BaseURL>&bogus;</BaseURL></MPD>",
            // $RepresentationID$ and the other identifiers cannot make a template absolute.
            "<MPD><Representation id=\"http://evil.example/x\"/></MPD>",
            "<MPD><SegmentTemplate media=\"/$RepresentationID$/evil.example/x\"/></MPD>",
            "<MPD><SegmentTemplate media=\"$RepresentationID$://evil.example/x\"/></MPD>",
            // Time servers: NTP leaves over UDP; http-* values are lists used as they are.
            "<MPD><UTCTiming schemeIdUri=\"urn:mpeg:dash:utc:ntp:2014\" value=\"time.example\"/></MPD>",
            "<MPD><UTCTiming value=\"now\" schemeIdUri=\"urn:mpeg:dash:utc:http-xsdate:2014\"/></MPD>",
            "<MPD><UTCTiming x:schemeIdUri=\"urn:x:direct\" schemeIdUri=\"urn:mpeg:dash:utc:ntp:2014\" value=\"t.example\"/></MPD>",
        ] {
            let (out, _) = mpd(text);
            assert!(out.is_err(), "{text} accepted: {out:?}");
        }
        // Comments and processing instructions end where libxml2 ends them, so what it reads
        // as a BaseURL is rewritten.
        for text in [
            "<MPD><!--> <![CDATA[ --> <BaseURL>http://evil.example/</BaseURL> <!-- ]]> --></MPD>",
            "<MPD><?foo \"?><BaseURL>http://evil.example/</BaseURL><?bar \"?></MPD>",
        ] {
            let (out, calls) = mpd(text);
            assert!(!out.unwrap().contains("evil"), "{text}");
            assert_eq!(calls, ["http://evil.example/"]);
        }
        // A namespace declaration named like an attribute hides nothing.
        let (out, calls) = mpd("<MPD><UTCTiming xmlns:schemeIdUri=\"urn:x:direct\" schemeIdUri=\"urn:mpeg:dash:utc:http-xsdate:2014\" value=\"http://evil.example/t\"/></MPD>");
        assert!(!out.unwrap().contains("evil"));
        assert_eq!(calls, ["http://evil.example/t"]);
        // Truncated or odd markup never panics.
        for odd in [
            "<MPD",
            "<MPD a=\"x",
            "<<>>",
            "<!--",
            "<a b=c>",
            "<é\u{301}=\"é\">",
            "&#xD800;",
        ] {
            let _ = mpd(odd);
        }
    }

    #[test]
    fn anything_that_could_be_a_playlist_is_one() {
        let hls = Sniffed::Playlist(PlaylistKind::Hls);
        let dash = Sniffed::Playlist(PlaylistKind::Dash);
        assert_eq!(sniff("text/plain", b"\xef\xbb\xbf #EXTM3U\n"), hls);
        assert_eq!(sniff("", b"<?xml version=\"1.0\"?>\n<MPD "), dash);
        assert_eq!(sniff("", b"\n\n<!-- 5 KiB of comment first"), dash);
        assert_eq!(sniff("", b"\xff\xfe<\0M\0P\0D\0"), Sniffed::Refused);
        assert_eq!(sniff("", b"<\0M\0P\0D\0"), Sniffed::Refused);
        assert_eq!(sniff("video/mp2t", b"G\x40\x00\x10"), Sniffed::Media);
        assert_eq!(sniff("", b"\0\0\0\x18stypmsdh"), Sniffed::Media);
        assert_eq!(
            sniff("", b"\0\0\0<stypmsdh"),
            Sniffed::Media,
            "a 60-byte box"
        );
        assert_eq!(sniff("", b"\0\0\0<\0\0\0M"), Sniffed::Refused, "UCS-4");
        assert_eq!(sniff("", b"\x4c\x6f\xa7\x94"), Sniffed::Refused, "EBCDIC");
        // The body decides: the demuxers never look at the content type.
        assert_eq!(sniff("text/xml", b"#EXTM3U\n"), hls);
        assert_eq!(sniff("application/vnd.apple.mpegurl", b"<MPD>"), dash);
        assert_eq!(sniff("application/dash+xml", b"G@"), Sniffed::Refused);
    }
}
