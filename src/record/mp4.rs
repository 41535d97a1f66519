//! The ISO BMFF (ISO/IEC 14496-12) edits that make a recording's fragmented MP4 play and seek
//! well in `<video>`, ffmpeg and VLC, done without ever rewriting media: at the start the init
//! segment gains an `mehd` box and is followed by a `free` box reserved for the `sidx`; at the
//! end (or after a crash, on the recovered file) the `mvhd` and `mehd` durations and the `sidx`
//! are written in place, each the same size as what it replaces, so finalising can be repeated.
//! A file is playable before finalisation too: readers skip `free` boxes.

use std::time::Duration;

use bytes::Bytes;

/// `sidx` entries reserved per file: one per fragment (2 s segments; 16384 covers 9 hours,
/// more than `record_max_secs`' 4 h default at any fragment length ≥ 1 s).
pub const MAX_SIDX_ENTRIES: usize = 16384;
/// `sidx` v1: box header 12, reference_ID 4, timescale 4, earliest time 8, first_offset 8,
/// reserved 2, count 2; then 12 bytes per reference (§8.16.3.2).
const SIDX_FIXED: usize = 40;
const SIDX_ENTRY: usize = 12;
/// The `free` box that holds the place of the `sidx` (and of the `free` after a shorter one).
pub const SIDX_RESERVE: usize = SIDX_FIXED + SIDX_ENTRY * MAX_SIDX_ENTRIES + 8;
/// `mehd` v1: header 12 + fragment_duration 8 (§8.8.2.2).
const MEHD_LEN: usize = 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Mp4Error {
    #[error("init segment: {0}")]
    Init(&'static str),
    #[error("fragment: {0}")]
    Fragment(&'static str),
    #[error("{0} fragments exceed the {MAX_SIDX_ENTRIES} reserved sidx entries")]
    TooManyFragments(usize),
}

/// A box found at `start`: its type, header length and total length.
#[derive(Debug, Clone, Copy)]
struct BoxAt {
    kind: [u8; 4],
    start: usize,
    header: usize,
    len: usize,
}

impl BoxAt {
    fn body(&self) -> std::ops::Range<usize> {
        self.start + self.header..self.start + self.len
    }
}

/// The boxes in `data[range]`, refusing any that runs past it (sizes are peer-independent
/// here — our own muxer wrote them — but a short read must not panic).
fn children(data: &[u8], range: std::ops::Range<usize>) -> Option<Vec<BoxAt>> {
    let mut at = range.start;
    let mut out = Vec::new();
    while at < range.end {
        let head = data.get(at..at + 8)?;
        let size32 = u32::from_be_bytes(head[..4].try_into().ok()?) as usize;
        let kind: [u8; 4] = head[4..8].try_into().ok()?;
        let (header, len) = match size32 {
            1 => {
                let large = data.get(at + 8..at + 16)?;
                (16, u64::from_be_bytes(large.try_into().ok()?) as usize)
            }
            0 => (8, range.end - at),
            n => (8, n),
        };
        if len < header || at + len > range.end {
            return None;
        }
        out.push(BoxAt {
            kind,
            start: at,
            header,
            len,
        });
        at += len;
    }
    Some(out)
}

fn find(boxes: &[BoxAt], kind: &[u8; 4]) -> Option<BoxAt> {
    boxes.iter().find(|b| &b.kind == kind).copied()
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn be64(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

/// Where [`finalize`] writes, learnt from the prepared init segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitLayout {
    /// Length of ftyp+moov (what `EXT-X-MAP` addresses).
    pub init_len: u64,
    /// Offset of the mvhd duration field, and whether it is 64-bit.
    mvhd_duration: (usize, bool),
    movie_timescale: u32,
    /// Offset of the mehd fragment_duration field (64-bit).
    mehd_duration: usize,
    track_id: u32,
    media_timescale: u32,
    /// (track_ID, media timescale) of every track, for the `tfdt`s of multi-track fragments.
    timescales: Vec<(u32, u32)>,
}

/// Prepares a muxer's init segment (ftyp + moov with one track and mvex) for a recording:
/// inserts `mehd` into `mvex` (sizes of mvex and moov adjusted) unless it has one. Returns the
/// bytes to write — then [`SIDX_RESERVE`] bytes of `free` from [`reserve`] — and the layout.
pub fn prepare_init(init: &[u8]) -> Result<(Vec<u8>, InitLayout), Mp4Error> {
    let err = Mp4Error::Init;
    let top = children(init, 0..init.len()).ok_or(err("truncated box"))?;
    let moov = find(&top, b"moov").ok_or(err("no moov"))?;
    if moov.header != 8 {
        return Err(err("64-bit moov size"));
    }
    let inner = children(init, moov.body()).ok_or(err("truncated moov"))?;
    let mvex = find(&inner, b"mvex").ok_or(err("no mvex: not a fragmented MP4"))?;
    let has_mehd = children(init, mvex.body())
        .ok_or(err("truncated mvex"))?
        .iter()
        .any(|b| &b.kind == b"mehd");
    let mut out = init.to_vec();
    if !has_mehd {
        let mut mehd = Vec::with_capacity(MEHD_LEN);
        mehd.extend_from_slice(&(MEHD_LEN as u32).to_be_bytes());
        mehd.extend_from_slice(b"mehd");
        mehd.extend_from_slice(&[1, 0, 0, 0]);
        mehd.extend_from_slice(&0u64.to_be_bytes());
        let at = mvex.start + mvex.header;
        out.splice(at..at, mehd);
        for b in [moov, mvex] {
            let size = u32::try_from(b.len + MEHD_LEN).map_err(|_| err("moov too large"))?;
            out[b.start..b.start + 4].copy_from_slice(&size.to_be_bytes());
        }
    }
    let layout = layout(&out)?;
    Ok((out, layout))
}

/// The `free` box written after the prepared init.
pub fn reserve() -> Vec<u8> {
    let mut free = vec![0u8; SIDX_RESERVE];
    free[..4].copy_from_slice(&(SIDX_RESERVE as u32).to_be_bytes());
    free[4..8].copy_from_slice(b"free");
    free
}

/// Reads the layout of a prepared init segment (also after a restart, from the file).
pub fn layout(init: &[u8]) -> Result<InitLayout, Mp4Error> {
    let err = Mp4Error::Init;
    let top = children(init, 0..init.len()).ok_or(err("truncated box"))?;
    let moov = find(&top, b"moov").ok_or(err("no moov"))?;
    let inner = children(init, moov.body()).ok_or(err("truncated moov"))?;
    let mvhd = find(&inner, b"mvhd").ok_or(err("no mvhd"))?;
    let body = mvhd.start + mvhd.header;
    let long = *init.get(body).ok_or(err("short mvhd"))? == 1;
    // version/flags 4, then creation and modification times (8 each in v1, 4 in v0).
    let timescale_at = body + 4 + if long { 16 } else { 8 };
    let movie_timescale = be32(init, timescale_at).ok_or(err("short mvhd"))?;
    let mvhd_duration = (timescale_at + 4, long);
    let mvex = find(&inner, b"mvex").ok_or(err("no mvex"))?;
    let mvex_children = children(init, mvex.body()).ok_or(err("truncated mvex"))?;
    let mehd = find(&mvex_children, b"mehd").ok_or(err("no mehd: not prepared"))?;
    if mehd.len != MEHD_LEN || init.get(mehd.start + 8) != Some(&1) {
        return Err(err("mehd is not version 1"));
    }
    let trex = find(&mvex_children, b"trex").ok_or(err("no trex"))?;
    let track_id = be32(init, trex.start + 12).ok_or(err("short trex"))?;
    let trak = find(&inner, b"trak").ok_or(err("no trak"))?;
    let mdia = find(
        &children(init, trak.body()).ok_or(err("truncated trak"))?,
        b"mdia",
    )
    .ok_or(err("no mdia"))?;
    let mdhd = find(
        &children(init, mdia.body()).ok_or(err("truncated mdia"))?,
        b"mdhd",
    )
    .ok_or(err("no mdhd"))?;
    let mbody = mdhd.start + mdhd.header;
    let mlong = *init.get(mbody).ok_or(err("short mdhd"))? == 1;
    let media_timescale =
        be32(init, mbody + 4 + if mlong { 16 } else { 8 }).ok_or(err("short mdhd"))?;
    if movie_timescale == 0 || media_timescale == 0 {
        return Err(err("zero timescale"));
    }
    let mut timescales = Vec::new();
    for trak in inner.iter().filter(|b| &b.kind == b"trak") {
        let boxes = children(init, trak.body()).ok_or(err("truncated trak"))?;
        let tkhd = find(&boxes, b"tkhd").ok_or(err("no tkhd"))?;
        let tbody = tkhd.start + tkhd.header;
        let tlong = *init.get(tbody).ok_or(err("short tkhd"))? == 1;
        let id = be32(init, tbody + 4 + if tlong { 16 } else { 8 }).ok_or(err("short tkhd"))?;
        let mdia = find(&boxes, b"mdia").ok_or(err("no mdia"))?;
        let mdhd = find(
            &children(init, mdia.body()).ok_or(err("truncated mdia"))?,
            b"mdhd",
        )
        .ok_or(err("no mdhd"))?;
        let body = mdhd.start + mdhd.header;
        let long = *init.get(body).ok_or(err("short mdhd"))? == 1;
        let ts = be32(init, body + 4 + if long { 16 } else { 8 }).ok_or(err("short mdhd"))?;
        if ts == 0 {
            return Err(err("zero timescale"));
        }
        timescales.push((id, ts));
    }
    Ok(InitLayout {
        init_len: moov.start as u64 + moov.len as u64,
        mvhd_duration,
        movie_timescale,
        mehd_duration: mehd.start + 12,
        track_id,
        media_timescale,
        timescales,
    })
}

/// The track and base media decode time of a fragment's first `traf` (`tfhd` track_ID,
/// `tfdt`, §8.8.7 and §8.8.12), from the fragment's head.
pub fn fragment_decode_time(fragment: &[u8]) -> Result<(u32, u64), Mp4Error> {
    let err = Mp4Error::Fragment;
    // The moof is the first box after an optional styp; the caller may pass only the
    // fragment's head, so the boxes after the moof are not walked.
    let mut at = 0;
    let moof = loop {
        let size = be32(fragment, at).ok_or(err("no moof"))? as usize;
        let kind = fragment.get(at + 4..at + 8).ok_or(err("no moof"))?;
        if size < 8 {
            return Err(err("bad box size"));
        }
        if kind == b"moof" {
            let boxes = children(fragment, at..at + size).ok_or(err("truncated moof"))?;
            break boxes[0];
        }
        at += size;
    };
    let traf = find(
        &children(fragment, moof.body()).ok_or(err("truncated moof"))?,
        b"traf",
    )
    .ok_or(err("no traf"))?;
    let boxes = children(fragment, traf.body()).ok_or(err("truncated traf"))?;
    let tfhd = find(&boxes, b"tfhd").ok_or(err("no tfhd"))?;
    let track = be32(fragment, tfhd.start + tfhd.header + 4).ok_or(err("short tfhd"))?;
    let tfdt = find(&boxes, b"tfdt").ok_or(err("no tfdt"))?;
    let body = tfdt.start + tfdt.header;
    let time = match fragment.get(body) {
        Some(1) => be64(fragment, body + 4).ok_or(err("short tfdt"))?,
        Some(0) => be32(fragment, body + 4)
            .map(u64::from)
            .ok_or(err("short tfdt"))?,
        _ => return Err(err("bad tfdt version")),
    };
    Ok((track, time))
}

impl InitLayout {
    /// A track's media timescale (ticks per second of its `tfdt`s).
    pub fn timescale_of(&self, track_id: u32) -> Option<u32> {
        self.timescales
            .iter()
            .find(|(id, _)| *id == track_id)
            .map(|(_, ts)| *ts)
    }

    /// The `sidx` reference track and its timescale.
    pub fn reference(&self) -> (u32, u32) {
        (self.track_id, self.media_timescale)
    }
}

/// A chunk with every `tfdt` in its moofs mapped by `f` — a same-size edit of the headers.
/// A chunk is what a muxer hands over: it may hold whole boxes (styp, moof, mdat), start with
/// the moof and end inside the mdat, or be sample data only; only moofs that start it (after
/// any styp/prft/emsg) are edited, and a chunk without one is returned as is (no copy).
pub fn map_decode_times(chunk: &Bytes, f: impl Fn(u32, u64) -> u64) -> Result<Bytes, Mp4Error> {
    let err = Mp4Error::Fragment;
    let mut out: Option<Vec<u8>> = None;
    let mut at = 0;
    while let (Some(size), Some(kind)) = (be32(chunk, at), chunk.get(at + 4..at + 8)) {
        let size = size as usize;
        let leading: [&[u8]; 4] = [b"styp", b"moof", b"prft", b"emsg"];
        if !leading.contains(&kind) || size < 8 || at + size > chunk.len() {
            break;
        }
        if kind == b"moof" {
            let bytes = out.get_or_insert_with(|| chunk.to_vec());
            for traf in children(chunk, at + 8..at + size)
                .ok_or(err("truncated moof"))?
                .iter()
                .filter(|b| &b.kind == b"traf")
            {
                let boxes = children(chunk, traf.body()).ok_or(err("truncated traf"))?;
                let tfhd = find(&boxes, b"tfhd").ok_or(err("no tfhd"))?;
                let track = be32(chunk, tfhd.start + tfhd.header + 4).ok_or(err("short tfhd"))?;
                let tfdt = find(&boxes, b"tfdt").ok_or(err("no tfdt"))?;
                let body = tfdt.start + tfdt.header;
                match chunk.get(body) {
                    Some(1) => {
                        let t = be64(chunk, body + 4).ok_or(err("short tfdt"))?;
                        bytes[body + 4..body + 12].copy_from_slice(&f(track, t).to_be_bytes());
                    }
                    Some(0) => {
                        let t = u64::from(be32(chunk, body + 4).ok_or(err("short tfdt"))?);
                        let mapped =
                            u32::try_from(f(track, t)).map_err(|_| err("tfdt over 32 bits"))?;
                        bytes[body + 4..body + 8].copy_from_slice(&mapped.to_be_bytes());
                    }
                    _ => return Err(err("bad tfdt version")),
                }
            }
        }
        at += size;
    }
    Ok(out.map_or_else(|| chunk.clone(), Bytes::from))
}

fn ticks(d: Duration, timescale: u32) -> u64 {
    (d.as_nanos() * u128::from(timescale) / 1_000_000_000) as u64
}

/// The in-place writes that finalise a file: (offset, bytes) each. `fragments` are the
/// (length, duration) of every fragment in order; `first_decode_time` is the first one's tfdt.
pub fn finalize(
    layout: &InitLayout,
    fragments: &[(u64, Duration)],
    first_decode_time: u64,
) -> Result<Vec<(u64, Vec<u8>)>, Mp4Error> {
    if fragments.len() > MAX_SIDX_ENTRIES {
        return Err(Mp4Error::TooManyFragments(fragments.len()));
    }
    let total: Duration = fragments.iter().map(|(_, d)| *d).sum();
    let mut writes = Vec::new();
    let movie = ticks(total, layout.movie_timescale);
    let (at, long) = layout.mvhd_duration;
    writes.push((
        at as u64,
        if long {
            movie.to_be_bytes().to_vec()
        } else {
            u32::try_from(movie)
                .unwrap_or(u32::MAX)
                .to_be_bytes()
                .to_vec()
        },
    ));
    writes.push((layout.mehd_duration as u64, movie.to_be_bytes().to_vec()));
    // sidx, then a free box filling the rest of the reserve; first_offset skips that free.
    let sidx_len = SIDX_FIXED + SIDX_ENTRY * fragments.len();
    let rest = SIDX_RESERVE - sidx_len;
    let mut sidx = Vec::with_capacity(SIDX_RESERVE);
    sidx.extend_from_slice(&(sidx_len as u32).to_be_bytes());
    sidx.extend_from_slice(b"sidx");
    sidx.extend_from_slice(&[1, 0, 0, 0]);
    sidx.extend_from_slice(&layout.track_id.to_be_bytes());
    sidx.extend_from_slice(&layout.media_timescale.to_be_bytes());
    sidx.extend_from_slice(&first_decode_time.to_be_bytes());
    sidx.extend_from_slice(&(rest as u64).to_be_bytes());
    sidx.extend_from_slice(&0u16.to_be_bytes());
    sidx.extend_from_slice(&(fragments.len() as u16).to_be_bytes());
    // Durations in media ticks from cumulative times, so rounding never accumulates.
    let mut elapsed = Duration::ZERO;
    for (len, duration) in fragments {
        let from = ticks(elapsed, layout.media_timescale);
        elapsed += *duration;
        let span = ticks(elapsed, layout.media_timescale) - from;
        let size = u32::try_from(*len)
            .ok()
            .filter(|s| s >> 31 == 0)
            .ok_or(Mp4Error::Fragment("a fragment over 2 GiB"))?;
        sidx.extend_from_slice(&size.to_be_bytes());
        sidx.extend_from_slice(&u32::try_from(span).unwrap_or(u32::MAX).to_be_bytes());
        // starts_with_SAP = 1, SAP_type = 1 (every fragment opens on a keyframe), delta 0.
        sidx.extend_from_slice(&0x9000_0000u32.to_be_bytes());
    }
    sidx.extend_from_slice(&(rest as u32).to_be_bytes());
    sidx.extend_from_slice(b"free");
    sidx.resize(SIDX_RESERVE, 0);
    writes.push((layout.init_len, sidx));
    Ok(writes)
}

/// What a VOD master playlist says of a track, read from its init segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackInfo {
    pub audio: bool,
    /// RFC 6381 codecs string.
    pub codecs: String,
    pub width: u32,
    pub height: u32,
}

/// Reads [`TrackInfo`] from an init segment: the handler type (`hdlr`), the picture size
/// (`tkhd`, 16.16 fixed point, §8.3.2) and the codec (`avcC` profile/compat/level → `avc1.PPCCLL`
/// as RFC 6381 §3.3 says; AAC as `mp4a.40.2`, the only audio the ladder encodes).
pub fn describe(init: &[u8]) -> Result<TrackInfo, Mp4Error> {
    let err = Mp4Error::Init;
    let top = children(init, 0..init.len()).ok_or(err("truncated box"))?;
    let moov = find(&top, b"moov").ok_or(err("no moov"))?;
    let inner = children(init, moov.body()).ok_or(err("truncated moov"))?;
    let trak = find(&inner, b"trak").ok_or(err("no trak"))?;
    let trak_children = children(init, trak.body()).ok_or(err("truncated trak"))?;
    let tkhd = find(&trak_children, b"tkhd").ok_or(err("no tkhd"))?;
    let end = tkhd.start + tkhd.len;
    let width = be32(init, end - 8).ok_or(err("short tkhd"))? >> 16;
    let height = be32(init, end - 4).ok_or(err("short tkhd"))? >> 16;
    let mdia = find(&trak_children, b"mdia").ok_or(err("no mdia"))?;
    let hdlr = find(
        &children(init, mdia.body()).ok_or(err("truncated mdia"))?,
        b"hdlr",
    )
    .ok_or(err("no hdlr"))?;
    // version/flags 4, pre_defined 4, then handler_type.
    let handler = init
        .get(hdlr.start + hdlr.header + 8..hdlr.start + hdlr.header + 12)
        .ok_or(err("short hdlr"))?;
    let audio = handler == b"soun";
    let codecs = if audio {
        "mp4a.40.2".to_owned()
    } else {
        let at = init
            .windows(4)
            .position(|w| w == b"avcC")
            .ok_or(err("no avcC: not H.264"))?
            + 4;
        let b = init.get(at + 1..at + 4).ok_or(err("short avcC"))?;
        format!("avc1.{:02x}{:02x}{:02x}", b[0], b[1], b[2])
    };
    Ok(TrackInfo {
        audio,
        codecs,
        width,
        height,
    })
}
