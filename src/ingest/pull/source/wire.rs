//! What a source process tells the daemon on its stdout, one frame after another: a tag byte,
//! the payload's length (u32, big-endian), the payload. Sans-IO: [`encode`] appends a frame to a
//! buffer, [`decode`] takes one off the front of what was read so far.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::media::Tracks;

/// One message from a source process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The tracks the source's demuxer has exposed so far (see `SourceEvent::Tracks`).
    Tracks(Tracks),
    /// Re-muxed MPEG-TS, or an RTMP server's FLV as received.
    Data(Bytes),
    /// The pipeline failed or could not be built; the text is the log's reason.
    Failed(String),
    /// The source ended.
    Eos,
    /// An adaptive (HLS/DASH) demuxer was created, named by its factory: counted while its
    /// process lives.
    Demuxer(String),
}

const TAG_TRACKS: u8 = 1;
const TAG_DATA: u8 = 2;
const TAG_FAILED: u8 = 3;
const TAG_EOS: u8 = 4;
const TAG_DEMUXER: u8 = 5;

/// Tag byte and length.
const HEADER: usize = 5;
/// The largest payload read. A data frame is one appsink buffer: 1316 bytes of TS from
/// `mpegtsmux alignment=7`, or one FLV tag from `rtmp2src`, whose body is one RTMP message
/// (its length field is 24 bits: < 16 MiB, RTMP 1.0 §6.1.2.1) plus the 11-byte tag header and
/// 4-byte trailer.
pub const MAX_PAYLOAD: usize = (1 << 24) + 15;

/// Why the bytes from a source process cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("source process frame of {0} bytes (over {MAX_PAYLOAD})")]
    TooLong(usize),
    #[error("source process frame with unknown tag {0}")]
    UnknownTag(u8),
    #[error("source process frame tag {tag} with a {len}-byte payload")]
    BadPayload { tag: u8, len: usize },
}

/// Appends `frame` to `out`.
pub fn encode(frame: &Frame, out: &mut BytesMut) {
    let (tag, payload): (u8, &[u8]) = match frame {
        Frame::Tracks(t) => (TAG_TRACKS, track_bits(*t)),
        Frame::Data(d) => (TAG_DATA, d),
        Frame::Failed(text) => (TAG_FAILED, text.as_bytes()),
        Frame::Eos => (TAG_EOS, &[]),
        Frame::Demuxer(name) => (TAG_DEMUXER, name.as_bytes()),
    };
    // Only a failure text could be longer (see MAX_PAYLOAD); texts are read lossily, so a cut
    // inside a character is harmless.
    let payload = &payload[..payload.len().min(MAX_PAYLOAD)];
    out.reserve(HEADER + payload.len());
    out.put_u8(tag);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
}

fn track_bits(t: Tracks) -> &'static [u8] {
    match (t.video, t.audio) {
        (false, false) => &[0],
        (true, false) => &[1],
        (false, true) => &[2],
        (true, true) => &[3],
    }
}

/// Takes the first whole frame off `buf`; `Ok(None)` until one has arrived.
pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let tag = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(WireError::TooLong(len));
    }
    if buf.len() < HEADER + len {
        buf.reserve(HEADER + len - buf.len());
        return Ok(None);
    }
    buf.advance(HEADER);
    let payload = buf.split_to(len).freeze();
    let text = || String::from_utf8_lossy(&payload).into_owned();
    Ok(Some(match tag {
        TAG_TRACKS => match payload[..] {
            [bits] if bits <= 3 => Frame::Tracks(Tracks {
                video: bits & 1 != 0,
                audio: bits & 2 != 0,
            }),
            _ => return Err(WireError::BadPayload { tag, len }),
        },
        TAG_DATA => Frame::Data(payload),
        TAG_FAILED => Frame::Failed(text()),
        TAG_EOS if len == 0 => Frame::Eos,
        TAG_DEMUXER => Frame::Demuxer(text()),
        TAG_EOS => return Err(WireError::BadPayload { tag, len }),
        _ => return Err(WireError::UnknownTag(tag)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Frame> {
        vec![
            Frame::Tracks(Tracks {
                video: true,
                audio: false,
            }),
            Frame::Tracks(Tracks {
                video: true,
                audio: true,
            }),
            Frame::Data(Bytes::from(vec![0x47; 1316])),
            Frame::Data(Bytes::new()),
            Frame::Failed("souphttpsrc: Not Found (404)".into()),
            Frame::Eos,
            Frame::Demuxer("hlsdemux2".into()),
        ]
    }

    #[test]
    fn frames_come_back_as_sent_whatever_the_reads() {
        let mut wire = BytesMut::new();
        for f in all() {
            encode(&f, &mut wire);
        }
        // Every split of the byte stream into reads gives the same frames.
        for step in [1, 2, 5, 7, 1000, wire.len()] {
            let mut buf = BytesMut::new();
            let mut out = Vec::new();
            for chunk in wire.chunks(step) {
                buf.extend_from_slice(chunk);
                while let Some(f) = decode(&mut buf).unwrap() {
                    out.push(f);
                }
            }
            assert_eq!(out, all(), "reads of {step} bytes");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn unreadable_frames_are_refused() {
        let cases: [(&[u8], WireError); 5] = [
            (
                &[TAG_DATA, 0x01, 0x00, 0x00, 0x10],
                WireError::TooLong((1 << 24) + 16),
            ),
            (&[9, 0, 0, 0, 0], WireError::UnknownTag(9)),
            (
                &[TAG_TRACKS, 0, 0, 0, 1, 4],
                WireError::BadPayload { tag: 1, len: 1 },
            ),
            (
                &[TAG_TRACKS, 0, 0, 0, 0],
                WireError::BadPayload { tag: 1, len: 0 },
            ),
            (
                &[TAG_EOS, 0, 0, 0, 1, 0],
                WireError::BadPayload { tag: 4, len: 1 },
            ),
        ];
        for (bytes, error) in cases {
            let mut buf = BytesMut::from(bytes);
            assert_eq!(decode(&mut buf), Err(error), "{bytes:?}");
        }
    }

    #[test]
    fn the_largest_payload_passes() {
        let mut wire = BytesMut::new();
        encode(&Frame::Data(Bytes::from(vec![1; MAX_PAYLOAD])), &mut wire);
        let Some(Frame::Data(d)) = decode(&mut wire).unwrap() else {
            panic!("no data frame");
        };
        assert_eq!(d.len(), MAX_PAYLOAD);
    }
}
