//! The FLV byte stream (FLV spec v10.1 annex E: a header, then tags each followed by the
//! previous tag's size), as GStreamer's `rtmp2src` hands out what an RTMP server plays to a
//! PULL. Sans-IO: bytes in, whole tags out; an RTMP push delivers tag bodies without this
//! framing. Either way the bodies go on to the RTMP adapter (`to_media`), the layer above.

use bytes::{Buf, Bytes, BytesMut};

/// E.2: "FLV" and version 1.
const SIGNATURE: &[u8; 4] = b"FLV\x01";
/// The header's own length; `DataOffset` may announce more (reserved for later versions).
const HEADER: usize = 9;
/// Bytes skipped after the header beyond its 9: a larger `DataOffset` is not a real stream.
const MAX_HEADER: usize = 1024;
/// E.4.1: TagType(1) DataSize(3) Timestamp(3) TimestampExtended(1) StreamID(3).
const TAG_HEADER: usize = 11;
/// The largest tag body taken, the same bound as an RTMP media message
/// (`rtmp_max_message_bytes`' default): DataSize is a 24-bit field (16 MiB).
pub const MAX_TAG: usize = super::vet::DEFAULT_MAX_MEDIA_MESSAGE as usize;

const TAG_AUDIO: u8 = 8;
const TAG_VIDEO: u8 = 9;
const TAG_SCRIPT: u8 = 18;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlvTag {
    Audio {
        timestamp: u32,
        body: Bytes,
    },
    Video {
        timestamp: u32,
        body: Bytes,
    },
    /// Script data (AMF0), e.g. `onMetaData`.
    Script {
        body: Bytes,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlvStreamError {
    #[error("not an FLV stream (no `FLV` version 1 header)")]
    NotFlv,
    #[error("FLV tag of {0} bytes (more than {MAX_TAG})")]
    TagTooLarge(usize),
    #[error("encrypted FLV tags are not supported")]
    Encrypted,
}

/// Reassembles tags from arbitrary splits of the stream.
#[derive(Debug, Default)]
pub struct FlvReader {
    buf: BytesMut,
    /// Header and PreviousTagSize0 read.
    started: bool,
}

impl FlvReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; complete tags go to `out` (other tag types are skipped).
    pub fn push(&mut self, data: &[u8], out: &mut Vec<FlvTag>) -> Result<(), FlvStreamError> {
        self.buf.extend_from_slice(data);
        if !self.started {
            let head = &self.buf[..self.buf.len().min(HEADER)];
            if !SIGNATURE.starts_with(&head[..head.len().min(4)]) {
                return Err(FlvStreamError::NotFlv);
            }
            if self.buf.len() < HEADER {
                return Ok(());
            }
            let offset = u32::from_be_bytes([self.buf[5], self.buf[6], self.buf[7], self.buf[8]]);
            let offset = usize::try_from(offset).unwrap_or(usize::MAX);
            if !(HEADER..=MAX_HEADER).contains(&offset) {
                return Err(FlvStreamError::NotFlv);
            }
            // The header, then PreviousTagSize0 (always 0).
            if self.buf.len() < offset + 4 {
                return Ok(());
            }
            self.buf.advance(offset + 4);
            self.started = true;
        }
        while self.buf.len() >= TAG_HEADER {
            let h = &self.buf[..TAG_HEADER];
            // E.4.1: Reserved(2) Filter(1) TagType(5).
            if h[0] & 0x20 != 0 {
                return Err(FlvStreamError::Encrypted);
            }
            let kind = h[0] & 0x1f;
            let size = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
            if size > MAX_TAG {
                return Err(FlvStreamError::TagTooLarge(size));
            }
            // Timestamp(24) with TimestampExtended as its upper 8 bits: milliseconds.
            let timestamp = u32::from_be_bytes([h[7], h[4], h[5], h[6]]);
            if self.buf.len() < TAG_HEADER + size + 4 {
                break;
            }
            self.buf.advance(TAG_HEADER);
            let body = self.buf.split_to(size).freeze();
            self.buf.advance(4); // PreviousTagSize
            match kind {
                TAG_AUDIO => out.push(FlvTag::Audio { timestamp, body }),
                TAG_VIDEO => out.push(FlvTag::Video { timestamp, body }),
                TAG_SCRIPT => out.push(FlvTag::Script { body }),
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An FLV stream of `tags` (kind, timestamp, body) as a muxer writes it.
    pub fn flv(tags: &[(u8, u32, &[u8])]) -> Vec<u8> {
        let mut v = b"FLV\x01\x05\x00\x00\x00\x09\x00\x00\x00\x00".to_vec();
        for &(kind, ts, body) in tags {
            let size = body.len() as u32;
            v.push(kind);
            v.extend_from_slice(&size.to_be_bytes()[1..]);
            v.extend_from_slice(&ts.to_be_bytes()[1..]);
            v.push((ts >> 24) as u8);
            v.extend_from_slice(&[0, 0, 0]);
            v.extend_from_slice(body);
            v.extend_from_slice(&(size + 11).to_be_bytes());
        }
        v
    }

    #[test]
    fn tags_from_any_split() {
        let stream = flv(&[
            (18, 0, b"meta"),
            (9, 0, &[0x17, 0, 0, 0, 0]),
            (8, 0x0100_0002, &[0xaf, 1, 7]),
            (5, 0, b"unknown"),
            (8, 23, &[0xaf, 1, 8]),
        ]);
        for split in [1, 2, 7, 13, 50, stream.len()] {
            let mut r = FlvReader::new();
            let mut out = Vec::new();
            for chunk in stream.chunks(split) {
                r.push(chunk, &mut out).unwrap();
            }
            assert_eq!(out.len(), 4, "split {split}");
            assert_eq!(
                out[0],
                FlvTag::Script {
                    body: Bytes::from_static(b"meta")
                }
            );
            // The extended timestamp byte is the top 8 bits.
            assert_eq!(
                out[2],
                FlvTag::Audio {
                    timestamp: 0x0100_0002,
                    body: Bytes::from_static(&[0xaf, 1, 7])
                }
            );
        }
    }

    #[test]
    fn refusals() {
        let mut out = Vec::new();
        assert_eq!(
            FlvReader::new().push(b"GET / HTTP/1.1\r\n", &mut out),
            Err(FlvStreamError::NotFlv)
        );
        assert_eq!(FlvReader::new().push(b"FL", &mut out), Ok(()));
        let mut huge_offset = flv(&[]);
        huge_offset[5..9].copy_from_slice(&100_000u32.to_be_bytes());
        assert_eq!(
            FlvReader::new().push(&huge_offset, &mut out),
            Err(FlvStreamError::NotFlv)
        );
        let mut big = flv(&[]);
        big.extend_from_slice(&[9, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            FlvReader::new().push(&big, &mut out),
            Err(FlvStreamError::TagTooLarge(0xff_ffff))
        );
        let mut encrypted = flv(&[]);
        encrypted.extend_from_slice(&[0x29, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            FlvReader::new().push(&encrypted, &mut out),
            Err(FlvStreamError::Encrypted)
        );
    }
}
