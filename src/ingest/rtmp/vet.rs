//! A read-only shadow of the RTMP chunk stream (Adobe RTMP spec §5.3) that vets every byte before
//! `rml_rtmp` parses it. rml_rtmp 0.8 trusts the peer: an AMF0 value nested a few thousand deep
//! overflows the stack and aborts the process, an interleaved message or a short command panics,
//! and any declared message length is reserved up front. This guard refuses all of those with an
//! error, so the connection is closed cleanly instead. Sans-IO: bytes in, verdict out.

use std::collections::HashMap;

/// §5.4.1: chunk size 1..=2^31−1 is legal, but nothing real uses more than 64 KiB (ffmpeg and OBS
/// send 4096); beyond it a peer only makes us buffer whole messages.
pub const MAX_CHUNK_SIZE: u32 = 65_536;
/// Largest audio/video message: a 4K keyframe at a high bitrate fits easily.
pub const DEFAULT_MAX_MEDIA_MESSAGE: u32 = 8 * 1024 * 1024;
/// Largest command/metadata/control message: real ones are a few hundred bytes.
pub const MAX_CONTROL_MESSAGE: u32 = 64 * 1024;
/// AMF0 nesting deeper than this is refused (real commands nest 2 or 3 levels).
pub const DEFAULT_MAX_AMF_DEPTH: usize = 32;
/// Chunk stream ids are unbounded in principle (up to 65599); a publisher uses a handful.
pub const MAX_CHUNK_STREAMS: usize = 64;

const MSG_SET_CHUNK_SIZE: u8 = 1;
const MSG_AUDIO: u8 = 8;
const MSG_VIDEO: u8 = 9;
const MSG_DATA_AMF3: u8 = 15;
const MSG_COMMAND_AMF3: u8 = 17;
const MSG_DATA_AMF0: u8 = 18;
const MSG_COMMAND_AMF0: u8 = 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("chunk size {0} outside 1..={MAX_CHUNK_SIZE}")]
    ChunkSize(u32),
    #[error("message of type {kind} declares {len} bytes (limit {limit})")]
    MessageTooLong { kind: u8, len: u32, limit: u32 },
    #[error("chunk of type {0} on chunk stream {1} without a preceding full header")]
    NoPreviousHeader(u8, u32),
    #[error("a new message starts on chunk stream {0} while another is incomplete")]
    Interleaved(u32),
    #[error("message length changes in the middle of a message on chunk stream {0}")]
    LengthChanged(u32),
    #[error("extended timestamp {0:#x} below 0xFFFFFF")]
    ExtendedTimestamp(u32),
    #[error("more than {MAX_CHUNK_STREAMS} chunk streams")]
    TooManyChunkStreams,
    #[error("AMF0: {0}")]
    Amf(&'static str),
}

#[derive(Debug, Clone, Copy, Default)]
struct StreamState {
    length: u32,
    kind: u8,
    extended: bool,
    /// Bytes of the current message still to come (0 = between messages).
    remaining: u32,
}

/// The configurable bounds (the rest are protocol constants above).
#[derive(Debug, Clone, Copy)]
pub struct GuardLimits {
    /// Declared length of an audio or video message.
    pub max_media_message: u32,
    /// Nesting of AMF0 objects and arrays in commands and metadata.
    pub max_amf_depth: usize,
}

impl Default for GuardLimits {
    fn default() -> Self {
        GuardLimits {
            max_media_message: DEFAULT_MAX_MEDIA_MESSAGE,
            max_amf_depth: DEFAULT_MAX_AMF_DEPTH,
        }
    }
}

#[derive(Debug)]
pub struct ChunkGuard {
    limits: GuardLimits,
    chunk_size: u32,
    streams: HashMap<u32, StreamState>,
    /// Unparsed tail of the input (an incomplete chunk).
    pending: Vec<u8>,
    /// The chunk stream whose message is incomplete, if any.
    open: Option<u32>,
    /// Payload being collected for a control/command message (to vet its AMF).
    collecting: Vec<u8>,
}

impl Default for ChunkGuard {
    fn default() -> Self {
        ChunkGuard {
            limits: GuardLimits::default(),
            chunk_size: 128, // §5.4.1: "The maximum chunk size defaults to 128 bytes"
            streams: HashMap::new(),
            pending: Vec::new(),
            open: None,
            collecting: Vec::new(),
        }
    }
}

impl ChunkGuard {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_limits(limits: GuardLimits) -> Self {
        ChunkGuard {
            limits,
            ..Self::default()
        }
    }

    /// Vets `input` (the bytes about to go to rml_rtmp). An error means: close the connection.
    pub fn check(&mut self, input: &[u8]) -> Result<(), GuardError> {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(input);
        let mut pos = 0;
        let verdict = loop {
            match self.chunk(&buf[pos..]) {
                Ok(Some(used)) => pos += used,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        buf.drain(..pos);
        self.pending = buf;
        verdict
    }

    /// Parses one chunk at the start of `buf`: `None` if it is not complete yet.
    fn chunk(&mut self, buf: &[u8]) -> Result<Option<usize>, GuardError> {
        let Some(&b0) = buf.first() else {
            return Ok(None);
        };
        let fmt = b0 >> 6;
        let (csid, mut at) = match b0 & 0x3f {
            0 => match buf.get(1) {
                Some(&b) => (64 + u32::from(b), 2),
                None => return Ok(None),
            },
            1 => match (buf.get(1), buf.get(2)) {
                (Some(&lo), Some(&hi)) => (64 + u32::from(lo) + 256 * u32::from(hi), 3),
                _ => return Ok(None),
            },
            id => (u32::from(id), 1),
        };
        let header_len = [11, 7, 3, 0][fmt as usize];
        let Some(header) = buf.get(at..at + header_len) else {
            return Ok(None);
        };
        at += header_len;
        let known = self.streams.get(&csid).copied();
        if known.is_none() && self.streams.len() >= MAX_CHUNK_STREAMS {
            return Err(GuardError::TooManyChunkStreams);
        }
        let mut st = match (fmt, known) {
            (0, prev) => prev.unwrap_or_default(),
            (_, Some(prev)) => prev,
            (_, None) => return Err(GuardError::NoPreviousHeader(fmt, csid)),
        };
        let u24 = |b: &[u8]| u32::from_be_bytes([0, b[0], b[1], b[2]]);
        let starts_message = st.remaining == 0;
        if fmt <= 2 {
            st.extended = u24(&header[0..3]) == 0x00ff_ffff;
        }
        if fmt <= 1 {
            let length = u24(&header[3..6]);
            if !starts_message && length != st.length {
                return Err(GuardError::LengthChanged(csid));
            }
            st.length = length;
            st.kind = header[6];
        }
        if st.extended {
            let Some(ext) = buf.get(at..at + 4) else {
                return Ok(None);
            };
            let value = u32::from_be_bytes([ext[0], ext[1], ext[2], ext[3]]);
            if fmt != 0 && value < 0x00ff_ffff {
                return Err(GuardError::ExtendedTimestamp(value));
            }
            at += 4;
        }
        if starts_message {
            if self.open.is_some_and(|o| o != csid) {
                return Err(GuardError::Interleaved(csid));
            }
            let limit = match st.kind {
                MSG_AUDIO | MSG_VIDEO => self.limits.max_media_message,
                _ => MAX_CONTROL_MESSAGE,
            };
            if st.length > limit {
                return Err(GuardError::MessageTooLong {
                    kind: st.kind,
                    len: st.length,
                    limit,
                });
            }
            st.remaining = st.length;
            self.collecting.clear();
        } else if fmt <= 1 && self.open != Some(csid) {
            return Err(GuardError::Interleaved(csid));
        }
        let take = st.remaining.min(self.chunk_size) as usize;
        let Some(payload) = buf.get(at..at + take) else {
            return Ok(None);
        };
        at += take;
        st.remaining -= take as u32;
        let collect = !matches!(st.kind, MSG_AUDIO | MSG_VIDEO);
        if collect {
            self.collecting.extend_from_slice(payload);
        }
        if st.remaining == 0 {
            self.open = None;
            if collect {
                let message = std::mem::take(&mut self.collecting);
                self.message(st.kind, &message)?;
            }
        } else {
            self.open = Some(csid);
        }
        self.streams.insert(csid, st);
        Ok(Some(at))
    }

    fn message(&mut self, kind: u8, payload: &[u8]) -> Result<(), GuardError> {
        let depth = self.limits.max_amf_depth;
        match kind {
            MSG_SET_CHUNK_SIZE => {
                let bytes: [u8; 4] = payload
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or(GuardError::ChunkSize(0))?;
                let size = u32::from_be_bytes(bytes) & 0x7fff_ffff;
                if size == 0 || size > MAX_CHUNK_SIZE || bytes[0] & 0x80 != 0 {
                    return Err(GuardError::ChunkSize(u32::from_be_bytes(bytes)));
                }
                self.chunk_size = size;
            }
            MSG_COMMAND_AMF0 => check_amf0(payload, 3, depth)?,
            // AMF3 command messages start with one format byte, then AMF0 values.
            MSG_COMMAND_AMF3 => check_amf0(payload.get(1..).unwrap_or_default(), 3, depth)?,
            MSG_DATA_AMF0 => check_amf0(payload, 0, depth)?,
            MSG_DATA_AMF3 => check_amf0(payload.get(1..).unwrap_or_default(), 0, depth)?,
            _ => {}
        }
        Ok(())
    }
}

/// Walks AMF0 values (AMF0 spec §2) without building them: bounded depth, bounded counts, and at
/// least `min_values` top-level values.
pub fn check_amf0(mut buf: &[u8], min_values: usize, max_depth: usize) -> Result<(), GuardError> {
    let mut count = 0;
    while !buf.is_empty() {
        buf = skip_value(buf, max_depth)?;
        count += 1;
    }
    if count < min_values {
        return Err(GuardError::Amf("too few values in command"));
    }
    Ok(())
}

fn take(buf: &[u8], n: usize) -> Result<&[u8], GuardError> {
    buf.get(n..).ok_or(GuardError::Amf("truncated value"))
}

fn skip_utf8(buf: &[u8]) -> Result<&[u8], GuardError> {
    let len = buf.get(..2).ok_or(GuardError::Amf("truncated string"))?;
    take(buf, 2 + usize::from(u16::from_be_bytes([len[0], len[1]])))
}

/// Skips `key: value` pairs up to the object-end marker (00 00 09); `depth` levels may follow.
fn skip_properties(mut buf: &[u8], depth: usize) -> Result<&[u8], GuardError> {
    loop {
        if buf.starts_with(&[0, 0, 9]) {
            return Ok(&buf[3..]);
        }
        buf = skip_utf8(buf)?;
        buf = skip_value(buf, depth - 1)?;
    }
}

/// Skips one value; `depth` is how many levels of nesting are still allowed.
fn skip_value(buf: &[u8], depth: usize) -> Result<&[u8], GuardError> {
    if depth == 0 {
        return Err(GuardError::Amf("nesting too deep"));
    }
    let (&marker, rest) = buf
        .split_first()
        .ok_or(GuardError::Amf("truncated value"))?;
    match marker {
        0x00 => take(rest, 8),                          // number
        0x01 => take(rest, 1),                          // boolean
        0x02 => skip_utf8(rest),                        // string
        0x03 => skip_properties(rest, depth),           // object
        0x05 | 0x06 | 0x0d => Ok(rest),                 // null, undefined, unsupported
        0x07 => take(rest, 2),                          // reference
        0x08 => skip_properties(take(rest, 4)?, depth), // ECMA array: count is advisory
        0x0a => {
            // Strict array: the count is peer-controlled, so it must fit in what was sent
            // (each value is at least one byte).
            let n = rest.get(..4).ok_or(GuardError::Amf("truncated array"))?;
            let n = u32::from_be_bytes([n[0], n[1], n[2], n[3]]) as usize;
            let mut rest = &rest[4..];
            if n > rest.len() {
                return Err(GuardError::Amf("array count larger than the message"));
            }
            for _ in 0..n {
                rest = skip_value(rest, depth - 1)?;
            }
            Ok(rest)
        }
        0x0b => take(rest, 10), // date
        0x0c | 0x0f => {
            // long string, XML document
            let n = rest.get(..4).ok_or(GuardError::Amf("truncated string"))?;
            take(
                rest,
                4 + u32::from_be_bytes([n[0], n[1], n[2], n[3]]) as usize,
            )
        }
        0x10 => skip_properties(skip_utf8(rest)?, depth), // typed object
        _ => Err(GuardError::Amf("unknown marker")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header0(csid: u8, len: u32, kind: u8) -> Vec<u8> {
        let l = len.to_be_bytes();
        vec![csid, 0, 0, 0, l[1], l[2], l[3], kind, 1, 0, 0, 0]
    }

    fn amf_string(s: &str) -> Vec<u8> {
        let mut v = vec![2];
        v.extend_from_slice(&(s.len() as u16).to_be_bytes());
        v.extend_from_slice(s.as_bytes());
        v
    }

    fn command(values: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = values.concat();
        let mut m = header0(3, body.len() as u32, MSG_COMMAND_AMF0);
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn accepts_a_normal_connect_split_anywhere() {
        let connect = command(&[
            amf_string("connect"),
            vec![0, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0],
            [
                vec![3],
                amf_string("app")[1..].to_vec(),
                amf_string("in"),
                vec![0, 0, 9],
            ]
            .concat(),
        ]);
        let mut g = ChunkGuard::new();
        for b in connect.chunks(5) {
            g.check(b).unwrap();
        }
        assert!(g.pending.is_empty());
    }

    #[test]
    fn refuses_deep_nesting_and_short_commands() {
        let deep = [[0x0a, 0, 0, 0, 1].repeat(5000), vec![5]].concat();
        let mut g = ChunkGuard::new();
        let mut set_size = header0(2, 4, MSG_SET_CHUNK_SIZE);
        set_size.extend_from_slice(&65_535u32.to_be_bytes());
        g.check(&set_size).unwrap();
        let err = g
            .check(&command(&[amf_string("connect"), vec![0; 9], deep]))
            .unwrap_err();
        assert_eq!(err, GuardError::Amf("nesting too deep"));
        let mut g = ChunkGuard::new();
        assert_eq!(
            g.check(&command(&[amf_string("x")])),
            Err(GuardError::Amf("too few values in command"))
        );
        assert!(check_amf0(&[0x0a, 0xff, 0xff, 0xff, 0xff, 5], 0, DEFAULT_MAX_AMF_DEPTH).is_err());
    }

    #[test]
    fn refuses_bad_chunk_sizes() {
        for size in [0u32, 0x8000_0000, 0x7fff_ffff, MAX_CHUNK_SIZE + 1] {
            let mut g = ChunkGuard::new();
            let mut m = header0(2, 4, MSG_SET_CHUNK_SIZE);
            m.extend_from_slice(&size.to_be_bytes());
            assert!(g.check(&m).is_err(), "{size}");
        }
    }

    #[test]
    fn refuses_huge_and_interleaved_messages() {
        let mut g = ChunkGuard::new();
        assert!(matches!(
            g.check(&header0(4, 16 * 1024 * 1024 - 1, MSG_VIDEO)),
            Err(GuardError::MessageTooLong { .. })
        ));
        let mut g = ChunkGuard::new();
        let mut first = header0(4, 300, MSG_VIDEO);
        first.extend_from_slice(&[0; 128]);
        g.check(&first).unwrap();
        let mut second = header0(5, 10, MSG_AUDIO);
        second.extend_from_slice(&[0; 10]);
        assert_eq!(g.check(&second), Err(GuardError::Interleaved(5)));
        let mut g = ChunkGuard::new();
        assert_eq!(g.check(&[0xc7, 1]), Err(GuardError::NoPreviousHeader(3, 7)));
    }

    #[test]
    fn refuses_length_change_and_extended_timestamp_underflow() {
        let mut g = ChunkGuard::new();
        let mut first = header0(4, 300, MSG_VIDEO);
        first.extend_from_slice(&[0; 128]);
        g.check(&first).unwrap();
        // fmt 1 on the same stream mid-message with another length.
        assert_eq!(
            g.check(&[0x44, 0, 0, 1, 0, 1, 0, MSG_VIDEO]),
            Err(GuardError::LengthChanged(4))
        );
        let mut g = ChunkGuard::new();
        let mut m = header0(4, 1, MSG_VIDEO);
        m.push(0);
        g.check(&m).unwrap();
        // fmt 2 with timestamp delta field 0xFFFFFF and an extended value below it.
        assert_eq!(
            g.check(&[0x84, 0xff, 0xff, 0xff, 0, 0, 0, 5]),
            Err(GuardError::ExtendedTimestamp(5))
        );
    }
}
