//! Codec configuration records shared by every ingest adapter: the H.264 `avcC` and the AAC
//! `AudioSpecificConfig`, parsed from what FLV carries or built from what MPEG-TS carries
//! (in-band SPS/PPS, ADTS headers).

use bytes::Bytes;

use super::{AacConfig, H264Config};

/// Largest coded picture side we accept; beyond it the SPS is corrupt or hostile.
const MAX_PICTURE_SIDE: u32 = 8192;
/// A parameter set longer than this is not real (x264 writes < 100 bytes; avcC lengths are u16).
const MAX_PARAMETER_SET: usize = 4096;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("invalid AVC decoder configuration: {0}")]
    AvcConfig(String),
    #[error("invalid AAC AudioSpecificConfig")]
    AacConfig,
}

/// Checks an AVCDecoderConfigurationRecord and reads the coded size from its first SPS.
pub fn parse_avcc(avcc: Bytes) -> Result<H264Config, CodecError> {
    use h264_reader::avcc::AvcDecoderConfigurationRecord;
    let err = |e: String| CodecError::AvcConfig(e);
    check_parameter_set_lengths(&avcc).map_err(|e| err(e.into()))?;
    let record = AvcDecoderConfigurationRecord::try_from(avcc.as_ref())
        .map_err(|e| err(format!("{e:?}")))?;
    let ctx = record.create_context().map_err(|e| err(format!("{e:?}")))?;
    let sps = ctx.sps().next().ok_or_else(|| err("no SPS".into()))?;
    let (width, height) = sps.pixel_dimensions().map_err(|e| err(format!("{e:?}")))?;
    if width == 0 || height == 0 || width > MAX_PICTURE_SIDE || height > MAX_PICTURE_SIDE {
        return Err(err(format!("implausible size {width}x{height}")));
    }
    Ok(H264Config {
        avcc,
        width,
        height,
    })
}

/// Walks the SPS and PPS lists of an avcC record (ISO 14496-15 §5.3.3.1.2): every parameter set
/// must be non-empty and inside the record. h264-reader panics on an empty one (found by the
/// `flv_tags` fuzz target), so this runs first.
fn check_parameter_set_lengths(avcc: &[u8]) -> Result<(), &'static str> {
    let mut at = 5;
    for count_mask in [0x1f, 0xff] {
        let count = avcc.get(at).ok_or("truncated avcC")? & count_mask;
        at += 1;
        for _ in 0..count {
            let len = avcc.get(at..at + 2).ok_or("truncated avcC")?;
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            if len == 0 {
                return Err("empty parameter set in avcC");
            }
            at += 2 + len;
            if at > avcc.len() {
                return Err("parameter set past the end of avcC");
            }
        }
    }
    Ok(())
}

/// Builds an AVCDecoderConfigurationRecord (ISO 14496-15 §5.3.3.1.2) from one SPS and one PPS
/// NAL unit (with their 1-byte headers, without start codes), as an MPEG-TS stream carries them
/// in band, and checks it like one read from FLV.
pub fn avcc_from_parameter_sets(sps: &[u8], pps: &[u8]) -> Result<H264Config, CodecError> {
    let err = |e: &str| CodecError::AvcConfig(e.to_string());
    if sps.len() < 4 || pps.len() < 2 {
        return Err(err("truncated SPS or PPS"));
    }
    if sps.len() > MAX_PARAMETER_SET || pps.len() > MAX_PARAMETER_SET {
        return Err(err("parameter set too large"));
    }
    let profile = sps[1];
    let mut v = Vec::with_capacity(16 + sps.len() + pps.len());
    // version, profile, compatibility, level, 6 reserved bits + lengthSizeMinusOne = 3.
    v.extend_from_slice(&[1, profile, sps[2], sps[3], 0xfc | 3]);
    v.push(0xe0 | 1);
    v.extend_from_slice(&(sps.len() as u16).to_be_bytes());
    v.extend_from_slice(sps);
    v.push(1);
    v.extend_from_slice(&(pps.len() as u16).to_be_bytes());
    v.extend_from_slice(pps);
    // §5.3.3.1.2: the chroma and bit-depth fields follow for the High profiles.
    if matches!(profile, 100 | 110 | 122 | 144) {
        use h264_reader::nal::{sps::SeqParameterSet, Nal, RefNal};
        let parsed = SeqParameterSet::from_bits(RefNal::new(sps, &[], true).rbsp_bits())
            .map_err(|e| CodecError::AvcConfig(format!("{e:?}")))?;
        let c = &parsed.chroma_info;
        v.push(0xfc | (c.chroma_format.to_u32() & 3) as u8);
        v.push(0xf8 | (c.bit_depth_luma_minus8 & 7));
        v.push(0xf8 | (c.bit_depth_chroma_minus8 & 7));
        v.push(0);
    }
    parse_avcc(Bytes::from(v))
}

/// Re-frames H.264 access units carried as bare NAL units (MPEG-TS Annex B, RTP) into the avcC
/// framing of [`super::Frame`], keeping the decoder config in step with in-band SPS/PPS.
#[derive(Debug, Default)]
pub struct AnnexBFramer {
    sps: Vec<u8>,
    pps: Vec<u8>,
    /// The current decoder config; `None` until an SPS and a PPS have been seen.
    pub config: Option<H264Config>,
}

/// One picture in avcC framing (4-byte lengths).
#[derive(Debug, PartialEq, Eq)]
pub struct AccessUnit {
    pub data: Vec<u8>,
    pub keyframe: bool,
}

impl AnnexBFramer {
    /// Frames one access unit's NAL units (headers included, no start codes). A changed SPS/PPS
    /// pair is pushed to `out` as a new config first. Returns `None` for a unit with no picture
    /// data (only parameter sets, delimiters or filler).
    pub fn frame<'a>(
        &mut self,
        nals: impl IntoIterator<Item = &'a [u8]>,
        out: &mut Vec<super::MediaMessage>,
    ) -> Result<Option<AccessUnit>, CodecError> {
        let mut unit = AccessUnit {
            data: Vec::new(),
            keyframe: false,
        };
        let (mut sps, mut pps) = (None, None);
        for nal in nals {
            let Some(&header) = nal.first() else { continue };
            match header & 0x1f {
                7 => sps = sps.or(Some(nal)),
                8 => pps = pps.or(Some(nal)),
                9 | 12 => {} // access unit delimiter, filler: not needed in avcC framing
                t => {
                    unit.keyframe |= t == 5;
                    unit.data
                        .extend_from_slice(&(nal.len() as u32).to_be_bytes());
                    unit.data.extend_from_slice(nal);
                }
            }
        }
        if let (Some(sps), Some(pps)) = (sps, pps) {
            if sps != self.sps.as_slice() || pps != self.pps.as_slice() {
                let config = avcc_from_parameter_sets(sps, pps)?;
                self.sps = sps.to_vec();
                self.pps = pps.to_vec();
                self.config = Some(config.clone());
                out.push(super::MediaMessage::VideoConfig(config));
            }
        }
        Ok((!unit.data.is_empty()).then_some(unit))
    }
}

/// Sampling frequencies by index (ISO 14496-3 table 1.18).
pub const AAC_RATES: [u32; 13] = [
    96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350,
];

/// Reads object type, rate and channels from an AudioSpecificConfig (ISO 14496-3 §1.6.2.1).
pub fn parse_asc(asc: Bytes) -> Result<AacConfig, CodecError> {
    let (&b0, &b1) = asc.first().zip(asc.get(1)).ok_or(CodecError::AacConfig)?;
    let object_type = b0 >> 3;
    let index = ((b0 & 0x07) << 1) | (b1 >> 7);
    if object_type == 0 || object_type == 31 {
        return Err(CodecError::AacConfig);
    }
    let (sample_rate, channel_byte) = if index == 15 {
        // Explicit 24-bit frequency follows the index.
        let bytes = asc.get(1..5).ok_or(CodecError::AacConfig)?;
        let raw = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        ((raw >> 7) & 0x00ff_ffff, asc.get(4).copied())
    } else {
        let rate = *AAC_RATES.get(index as usize).ok_or(CodecError::AacConfig)?;
        (rate, Some(b1))
    };
    let channels = channel_byte
        .map(|b| (b >> 3) & 0x0f)
        .ok_or(CodecError::AacConfig)?;
    if sample_rate == 0 || channels == 0 || channels > 8 {
        return Err(CodecError::AacConfig);
    }
    Ok(AacConfig {
        asc,
        sample_rate,
        channels,
    })
}

/// The 2-byte AudioSpecificConfig for an ADTS header's fields (ISO 14496-3 §1.6.2.1: object
/// type = ADTS profile + 1).
pub fn asc_from_adts(profile: u8, rate_index: u8, channels: u8) -> Result<AacConfig, CodecError> {
    let object_type = u16::from(profile & 3) + 1;
    let v =
        (object_type << 11) | (u16::from(rate_index & 0x0f) << 7) | (u16::from(channels & 7) << 3);
    parse_asc(Bytes::copy_from_slice(&v.to_be_bytes()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// avcC of a 1280x720 High-profile stream written by x264.
    pub const AVCC_720P: &[u8] = &[
        0x01, 0x64, 0x00, 0x1f, 0xff, 0xe1, 0x00, 0x1a, 0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40,
        0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00, 0x03, 0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0xc0,
        0xf1, 0x83, 0x19, 0x60, 0x01, 0x00, 0x06, 0x68, 0xeb, 0xe3, 0xcb, 0x22, 0xc0, 0xfd, 0xf8,
        0xf8, 0x00,
    ];

    #[test]
    fn empty_or_overlong_parameter_sets_are_refused_not_panicked_on() {
        // One SPS of length 0 (the fuzz find), then a PPS.
        let empty_sps = [1, 0x64, 0, 0x1f, 0xff, 0xe1, 0, 0, 1, 0, 1, 0x68];
        assert!(parse_avcc(Bytes::copy_from_slice(&empty_sps)).is_err());
        let empty_pps = [&AVCC_720P[..34], &[1, 0, 0]].concat();
        assert!(parse_avcc(Bytes::from(empty_pps)).is_err());
        let past_end = [&AVCC_720P[..7], &[0xff]].concat();
        assert!(parse_avcc(Bytes::from(past_end)).is_err());
        assert!(parse_avcc(Bytes::from_static(AVCC_720P)).is_ok());
    }

    #[test]
    fn avcc_rebuilt_from_in_band_parameter_sets() {
        let sps = &AVCC_720P[8..8 + 0x1a];
        let pps = &AVCC_720P[8 + 0x1a + 3..8 + 0x1a + 3 + 6];
        let c = avcc_from_parameter_sets(sps, pps).unwrap();
        assert_eq!((c.width, c.height), (1280, 720));
        // x264's own record, byte for byte (it writes the High-profile extension too).
        assert_eq!(&c.avcc[..], AVCC_720P);
        assert!(avcc_from_parameter_sets(&sps[..3], pps).is_err());
        assert!(avcc_from_parameter_sets(&[0x67, 0x64, 0, 0x1f, 0xff], pps).is_err());
    }

    #[test]
    fn asc_from_adts_fields() {
        // AAC-LC (profile 1), 48 kHz (index 3), stereo.
        let c = asc_from_adts(1, 3, 2).unwrap();
        assert_eq!(&c.asc[..], &[0x11, 0x90]);
        assert_eq!((c.sample_rate, c.channels), (48000, 2));
        assert!(asc_from_adts(1, 13, 2).is_err(), "reserved rate index");
        assert!(asc_from_adts(1, 3, 0).is_err(), "channel config in the PCE");
    }

    #[test]
    fn asc_edge_cases() {
        assert!(
            parse_asc(Bytes::from_static(&[0x17, 0x90])).is_err(),
            "rate index 15 without explicit rate"
        );
        assert!(parse_asc(Bytes::from_static(&[0x12])).is_err());
        assert_eq!(
            parse_asc(Bytes::from_static(&[0x12, 0x10]))
                .unwrap()
                .sample_rate,
            44100
        );
    }
}
