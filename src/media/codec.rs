//! Codec configuration records shared by every ingest adapter: the H.264 `avcC`, the HEVC
//! `hvcC` and the AAC `AudioSpecificConfig`, parsed from what (Enhanced) FLV carries or built
//! from what MPEG-TS carries (in-band parameter sets, ADTS headers).

use bytes::Bytes;

use super::{AacConfig, VideoCodec, VideoConfig};

mod av1;
pub use av1::parse_av1c;

/// Largest coded picture side we accept; beyond it the SPS is corrupt or hostile.
const MAX_PICTURE_SIDE: u32 = 8192;
/// A parameter set longer than this is not real (x264 writes < 100 bytes; avcC lengths are u16).
const MAX_PARAMETER_SET: usize = 4096;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("invalid AVC decoder configuration: {0}")]
    Avc(String),
    #[error("invalid HEVC decoder configuration: {0}")]
    Hevc(String),
    #[error("invalid AV1 decoder configuration: {0}")]
    Av1(String),
    #[error("invalid AAC AudioSpecificConfig")]
    Aac,
}

/// Checks an AVCDecoderConfigurationRecord and reads the coded size from its first SPS.
pub fn parse_avcc(avcc: Bytes) -> Result<VideoConfig, CodecError> {
    use h264_reader::avcc::AvcDecoderConfigurationRecord;
    let err = |e: String| CodecError::Avc(e);
    check_parameter_set_lengths(&avcc).map_err(|e| err(e.into()))?;
    let record = AvcDecoderConfigurationRecord::try_from(avcc.as_ref())
        .map_err(|e| err(format!("{e:?}")))?;
    let ctx = record.create_context().map_err(|e| err(format!("{e:?}")))?;
    let sps = ctx.sps().next().ok_or_else(|| err("no SPS".into()))?;
    let (width, height) = sps.pixel_dimensions().map_err(|e| err(format!("{e:?}")))?;
    check_size(width, height).map_err(err)?;
    Ok(VideoConfig {
        codec: VideoCodec::H264,
        record: avcc,
        width,
        height,
    })
}

fn check_size(width: u32, height: u32) -> Result<(), String> {
    if width == 0 || height == 0 || width > MAX_PICTURE_SIDE || height > MAX_PICTURE_SIDE {
        return Err(format!("implausible size {width}x{height}"));
    }
    Ok(())
}

/// Walks the SPS and PPS lists of an avcC record (ISO 14496-15 §5.3.3.1.2): every parameter set
/// must be non-empty and inside the record. h264-reader panics on an empty one (found by the
/// `flv_tags` fuzz target), so this runs first.
fn check_parameter_set_lengths(avcc: &[u8]) -> Result<(), &'static str> {
    parameter_set_ranges(avcc).map(drop)
}

/// Where each SPS, then each PPS, of an avcC record is.
fn parameter_set_ranges(avcc: &[u8]) -> Result<Vec<std::ops::Range<usize>>, &'static str> {
    let mut at = 5;
    let mut out = Vec::new();
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
            out.push(at - len..at);
        }
    }
    Ok(out)
}

/// The SPS and PPS NAL units of an avcC record (SPSs first), as senders repeat them in band
/// before each keyframe (RTP, MPEG-TS).
pub fn avcc_parameter_sets(avcc: &Bytes) -> Result<Vec<Bytes>, CodecError> {
    let ranges = parameter_set_ranges(avcc).map_err(|e| CodecError::Avc(e.into()))?;
    Ok(ranges.into_iter().map(|r| avcc.slice(r)).collect())
}

/// Where each NAL unit of an hvcC record's arrays is (§8.3.3.1.2: VPS, SPS, PPS, SEI), with
/// its array's NAL unit type.
fn hvcc_nal_ranges(hvcc: &[u8]) -> Result<Vec<(u8, std::ops::Range<usize>)>, &'static str> {
    let arrays = *hvcc.get(22).ok_or("truncated")?;
    let mut at = 23;
    let mut out = Vec::new();
    for _ in 0..arrays {
        let header = hvcc.get(at..at + 3).ok_or("truncated")?;
        let nal_type = header[0] & 0x3f;
        let count = u16::from_be_bytes([header[1], header[2]]);
        at += 3;
        for _ in 0..count {
            let len = hvcc
                .get(at..at + 2)
                .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
                .ok_or("truncated")?;
            if at + 2 + len > hvcc.len() {
                return Err("parameter set past the end");
            }
            out.push((nal_type, at + 2..at + 2 + len));
            at += 2 + len;
        }
    }
    Ok(out)
}

/// The parameter set NAL units of an hvcC record (VPS, SPS, PPS in its order), as senders
/// repeat them in band before each keyframe.
pub fn hvcc_parameter_sets(hvcc: &Bytes) -> Result<Vec<Bytes>, CodecError> {
    let ranges = hvcc_nal_ranges(hvcc).map_err(|e| CodecError::Hevc(e.into()))?;
    Ok(ranges.into_iter().map(|(_, r)| hvcc.slice(r)).collect())
}

/// Where each NAL unit of a frame in 4-byte length framing is ([`super::Frame`]'s H.264 and
/// HEVC); `None` when a length runs past the end.
pub fn nal_unit_ranges(data: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let len = data.get(at..at + 4)?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        at += 4;
        let end = at.checked_add(len).filter(|&e| e <= data.len())?;
        out.push(at..end);
        at = end;
    }
    Some(out)
}

/// Builds an AVCDecoderConfigurationRecord (ISO 14496-15 §5.3.3.1.2) from one SPS and one PPS
/// NAL unit (with their 1-byte headers, without start codes), as an MPEG-TS stream carries them
/// in band, and checks it like one read from FLV.
pub fn avcc_from_parameter_sets(sps: &[u8], pps: &[u8]) -> Result<VideoConfig, CodecError> {
    let err = |e: &str| CodecError::Avc(e.to_string());
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
            .map_err(|e| CodecError::Avc(format!("{e:?}")))?;
        let c = &parsed.chroma_info;
        v.push(0xfc | (c.chroma_format.to_u32() & 3) as u8);
        v.push(0xf8 | (c.bit_depth_luma_minus8 & 7));
        v.push(0xf8 | (c.bit_depth_chroma_minus8 & 7));
        v.push(0);
    }
    parse_avcc(Bytes::from(v))
}

/// HEVC NAL unit types (ITU-T H.265 table 7-1) the framer acts on.
mod hevc_nal {
    pub const IRAP: std::ops::RangeInclusive<u8> = 16..=23;
    pub const VPS: u8 = 32;
    pub const SPS: u8 = 33;
    pub const PPS: u8 = 34;
    pub const AUD: u8 = 35;
    pub const EOS: u8 = 36;
    pub const EOB: u8 = 37;
    pub const FD: u8 = 38;
}

/// What a NAL unit is to the framer.
enum NalRole {
    /// A parameter set, at this index of the framer's set list (SPS, PPS / VPS, SPS, PPS).
    Parameters(usize),
    /// Not needed in length-prefixed framing (delimiters, filler, end of sequence).
    Skip,
    Picture {
        random_access: bool,
    },
}

/// The codecs carried as NAL units, which the Annex B framer handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NalCodec {
    H264,
    H265,
}

fn nal_role(codec: NalCodec, nal: &[u8]) -> NalRole {
    match codec {
        NalCodec::H264 => match nal[0] & 0x1f {
            7 => NalRole::Parameters(0),
            8 => NalRole::Parameters(1),
            9 | 12 => NalRole::Skip,
            t => NalRole::Picture {
                random_access: t == 5,
            },
        },
        NalCodec::H265 => match (nal[0] >> 1) & 0x3f {
            hevc_nal::VPS => NalRole::Parameters(0),
            hevc_nal::SPS => NalRole::Parameters(1),
            hevc_nal::PPS => NalRole::Parameters(2),
            hevc_nal::AUD | hevc_nal::EOS | hevc_nal::EOB | hevc_nal::FD => NalRole::Skip,
            t => NalRole::Picture {
                // IDR, CRA and BLA pictures: a decoder can start there (§3.73).
                random_access: hevc_nal::IRAP.contains(&t),
            },
        },
    }
}

/// Re-frames H.264 or HEVC access units carried as bare NAL units (MPEG-TS Annex B, RTP) into
/// the 4-byte length framing of [`super::Frame`], keeping the decoder config in step with the
/// in-band parameter sets.
#[derive(Debug)]
pub struct AnnexBFramer {
    codec: NalCodec,
    /// The parameter sets the current config was built from, in [`NalRole::Parameters`] order.
    params: Vec<Vec<u8>>,
    /// The current decoder config; `None` until every parameter set has been seen.
    pub config: Option<VideoConfig>,
}

impl Default for AnnexBFramer {
    fn default() -> Self {
        AnnexBFramer::new(NalCodec::H264)
    }
}

/// One picture in 4-byte length framing.
#[derive(Debug, PartialEq, Eq)]
pub struct AccessUnit {
    pub data: Vec<u8>,
    pub keyframe: bool,
}

impl AnnexBFramer {
    pub fn new(codec: NalCodec) -> Self {
        AnnexBFramer {
            codec,
            params: Vec::new(),
            config: None,
        }
    }

    pub fn codec(&self) -> NalCodec {
        self.codec
    }

    /// Frames one access unit's NAL units (headers included, no start codes). A changed set of
    /// parameter sets is pushed to `out` as a new config first. Returns `None` for a unit with
    /// no picture data (only parameter sets, delimiters or filler).
    pub fn frame<'a>(
        &mut self,
        nals: impl IntoIterator<Item = &'a [u8]>,
        out: &mut Vec<super::MediaMessage>,
    ) -> Result<Option<AccessUnit>, CodecError> {
        let mut unit = AccessUnit {
            data: Vec::new(),
            keyframe: false,
        };
        let count = match self.codec {
            NalCodec::H264 => 2,
            NalCodec::H265 => 3,
        };
        let mut sets: Vec<Option<&[u8]>> = vec![None; count];
        for nal in nals {
            // An HEVC NAL header is 2 bytes; a shorter unit carries nothing.
            if nal.len() < 2 {
                continue;
            }
            match nal_role(self.codec, nal) {
                NalRole::Parameters(i) => sets[i] = sets[i].or(Some(nal)),
                NalRole::Skip => {}
                NalRole::Picture { random_access } => {
                    unit.keyframe |= random_access;
                    unit.data
                        .extend_from_slice(&(nal.len() as u32).to_be_bytes());
                    unit.data.extend_from_slice(nal);
                }
            }
        }
        if let Some(sets) = sets.into_iter().collect::<Option<Vec<&[u8]>>>() {
            if sets
                .iter()
                .copied()
                .ne(self.params.iter().map(Vec::as_slice))
            {
                let config = match self.codec {
                    NalCodec::H264 => avcc_from_parameter_sets(sets[0], sets[1])?,
                    NalCodec::H265 => hvcc_from_parameter_sets(sets[0], sets[1], sets[2])?,
                };
                self.params = sets.iter().map(|s| s.to_vec()).collect();
                self.config = Some(config.clone());
                out.push(super::MediaMessage::VideoConfig(config));
            }
        }
        Ok((!unit.data.is_empty()).then_some(unit))
    }
}

/// What the HEVC decoder configuration record needs from a sequence parameter set.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HevcSps {
    /// The 12 bytes of `profile_tier_level`'s general part (H.265 §7.3.3), copied into hvcC.
    general_ptl: [u8; 12],
    max_sub_layers_minus1: u8,
    temporal_id_nesting: bool,
    chroma_format_idc: u8,
    bit_depth_luma_minus8: u8,
    bit_depth_chroma_minus8: u8,
    width: u32,
    height: u32,
}

/// Reads an HEVC SPS NAL unit (2-byte header included) up to the bit depths (H.265 §7.3.2.2.1):
/// enough for the hvcC fields and the cropped picture size.
fn parse_hevc_sps(nal: &[u8]) -> Result<HevcSps, String> {
    use h264_reader::rbsp::{BitRead, BitReader, ByteReader};
    if nal.len() < 16 || (nal[0] >> 1) & 0x3f != hevc_nal::SPS {
        return Err("not an SPS".into());
    }
    if nal.len() > MAX_PARAMETER_SET {
        return Err("SPS too large".into());
    }
    let skip = std::num::NonZeroUsize::new(2).expect("non-zero");
    let mut r = BitReader::new(ByteReader::skipping_bytes(nal, skip));
    let e = |e: h264_reader::rbsp::BitReaderError| format!("SPS: {e:?}");
    r.skip(4, "sps_video_parameter_set_id").map_err(e)?;
    let max_sub_layers_minus1: u8 = r.read::<3, u8>("sps_max_sub_layers_minus1").map_err(e)?;
    let temporal_id_nesting = r.read_bit("sps_temporal_id_nesting_flag").map_err(e)?;
    let mut general_ptl = [0u8; 12];
    for b in &mut general_ptl {
        *b = r.read::<8, u8>("general_profile_tier_level").map_err(e)?;
    }
    // §7.3.3: sub-layer presence flags, padding to 8 entries, then each sub-layer's fields.
    let mut present = Vec::new();
    for _ in 0..max_sub_layers_minus1 {
        let profile = r.read_bit("sub_layer_profile_present_flag").map_err(e)?;
        let level = r.read_bit("sub_layer_level_present_flag").map_err(e)?;
        present.push((profile, level));
    }
    if max_sub_layers_minus1 > 0 {
        r.skip(
            2 * (8 - u32::from(max_sub_layers_minus1)),
            "reserved_zero_2bits",
        )
        .map_err(e)?;
    }
    for (profile, level) in present {
        r.skip(
            if profile { 88 } else { 0 } + if level { 8 } else { 0 },
            "sub_layer_ptl",
        )
        .map_err(e)?;
    }
    let sps_id = r.read_ue("sps_seq_parameter_set_id").map_err(e)?;
    let chroma_format_idc = r.read_ue("chroma_format_idc").map_err(e)?;
    if sps_id > 15 || chroma_format_idc > 3 {
        return Err("SPS id or chroma format out of range".into());
    }
    if chroma_format_idc == 3 {
        r.skip(1, "separate_colour_plane_flag").map_err(e)?;
    }
    let coded_width = r.read_ue("pic_width_in_luma_samples").map_err(e)?;
    let coded_height = r.read_ue("pic_height_in_luma_samples").map_err(e)?;
    let (mut width, mut height) = (coded_width, coded_height);
    if r.read_bit("conformance_window_flag").map_err(e)? {
        // Table 6-1: offsets are in chroma sample units.
        let (sub_w, sub_h) = match chroma_format_idc {
            1 => (2u64, 2u64),
            2 => (2, 1),
            _ => (1, 1),
        };
        let mut offset = || r.read_ue("conf_win_offset").map_err(e);
        let (left, right, top, bottom) = (offset()?, offset()?, offset()?, offset()?);
        let crop_w = sub_w * (u64::from(left) + u64::from(right));
        let crop_h = sub_h * (u64::from(top) + u64::from(bottom));
        width = u64::from(coded_width)
            .checked_sub(crop_w)
            .and_then(|w| u32::try_from(w).ok())
            .ok_or("conformance window wider than the picture")?;
        height = u64::from(coded_height)
            .checked_sub(crop_h)
            .and_then(|h| u32::try_from(h).ok())
            .ok_or("conformance window taller than the picture")?;
    }
    let bit_depth_luma_minus8 = r.read_ue("bit_depth_luma_minus8").map_err(e)?;
    let bit_depth_chroma_minus8 = r.read_ue("bit_depth_chroma_minus8").map_err(e)?;
    if bit_depth_luma_minus8 > 8 || bit_depth_chroma_minus8 > 8 {
        return Err("bit depth out of range".into());
    }
    check_size(width, height)?;
    Ok(HevcSps {
        general_ptl,
        max_sub_layers_minus1,
        temporal_id_nesting,
        chroma_format_idc: chroma_format_idc as u8,
        bit_depth_luma_minus8: bit_depth_luma_minus8 as u8,
        bit_depth_chroma_minus8: bit_depth_chroma_minus8 as u8,
        width,
        height,
    })
}

/// Checks an HEVCDecoderConfigurationRecord (ISO 14496-15 §8.3.3.1.2) and reads the picture
/// size from its first SPS. Frames must use 4-byte NAL lengths (`lengthSizeMinusOne` = 3), as
/// every encoder that writes hvcC does.
pub fn parse_hvcc(hvcc: Bytes) -> Result<VideoConfig, CodecError> {
    let err = |e: String| CodecError::Hevc(e);
    if hvcc.len() < 23 {
        return Err(err("shorter than its 23-byte header".into()));
    }
    if hvcc[0] != 1 {
        return Err(err(format!("configurationVersion {}", hvcc[0])));
    }
    if hvcc[21] & 3 != 3 {
        return Err(err(format!(
            "{}-byte NAL lengths (only 4)",
            (hvcc[21] & 3) + 1
        )));
    }
    let sets = hvcc_nal_ranges(&hvcc).map_err(|e| err(e.into()))?;
    let sps = sets
        .iter()
        .find(|(nal_type, _)| *nal_type == hevc_nal::SPS)
        .map(|(_, r)| &hvcc[r.clone()]);
    let sps = parse_hevc_sps(sps.ok_or_else(|| err("no SPS".into()))?).map_err(err)?;
    Ok(VideoConfig {
        codec: VideoCodec::H265,
        width: sps.width,
        height: sps.height,
        record: hvcc,
    })
}

/// Builds an HEVCDecoderConfigurationRecord (ISO 14496-15 §8.3.3.1.2) from the VPS, SPS and
/// PPS an MPEG-TS stream carries in band (2-byte NAL headers, no start codes).
pub fn hvcc_from_parameter_sets(
    vps: &[u8],
    sps: &[u8],
    pps: &[u8],
) -> Result<VideoConfig, CodecError> {
    let err = |e: String| CodecError::Hevc(e);
    if [vps, sps, pps].iter().any(|p| p.len() > MAX_PARAMETER_SET) {
        return Err(err("parameter set too large".into()));
    }
    let s = parse_hevc_sps(sps).map_err(err)?;
    let mut v = Vec::with_capacity(64 + vps.len() + sps.len() + pps.len());
    v.push(1);
    v.extend_from_slice(&s.general_ptl);
    // min_spatial_segmentation_idc 0 and parallelismType 0 (unknown), reserved bits set.
    v.extend_from_slice(&[0xf0, 0x00, 0xfc]);
    v.push(0xfc | s.chroma_format_idc);
    v.push(0xf8 | s.bit_depth_luma_minus8);
    v.push(0xf8 | s.bit_depth_chroma_minus8);
    // avgFrameRate 0 (unspecified); constantFrameRate 0, numTemporalLayers,
    // temporalIdNested, lengthSizeMinusOne 3.
    v.extend_from_slice(&[0, 0]);
    v.push(((s.max_sub_layers_minus1 + 1) << 3) | (u8::from(s.temporal_id_nesting) << 2) | 3);
    v.push(3);
    for (nal_type, nal) in [
        (hevc_nal::VPS, vps),
        (hevc_nal::SPS, sps),
        (hevc_nal::PPS, pps),
    ] {
        // array_completeness 1: every parameter set of this type is in the record.
        v.push(0x80 | nal_type);
        v.extend_from_slice(&1u16.to_be_bytes());
        v.extend_from_slice(&(nal.len() as u16).to_be_bytes());
        v.extend_from_slice(nal);
    }
    parse_hvcc(Bytes::from(v))
}

/// Sampling frequencies by index (ISO 14496-3 table 1.18).
pub const AAC_RATES: [u32; 13] = [
    96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350,
];

/// Reads object type, rate and channels from an AudioSpecificConfig (ISO 14496-3 §1.6.2.1).
pub fn parse_asc(asc: Bytes) -> Result<AacConfig, CodecError> {
    let (&b0, &b1) = asc.first().zip(asc.get(1)).ok_or(CodecError::Aac)?;
    let object_type = b0 >> 3;
    let index = ((b0 & 0x07) << 1) | (b1 >> 7);
    if object_type == 0 || object_type == 31 {
        return Err(CodecError::Aac);
    }
    let (sample_rate, channel_byte) = if index == 15 {
        // Explicit 24-bit frequency follows the index.
        let bytes = asc.get(1..5).ok_or(CodecError::Aac)?;
        let raw = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        ((raw >> 7) & 0x00ff_ffff, asc.get(4).copied())
    } else {
        let rate = *AAC_RATES.get(index as usize).ok_or(CodecError::Aac)?;
        (rate, Some(b1))
    };
    let channels = channel_byte
        .map(|b| (b >> 3) & 0x0f)
        .ok_or(CodecError::Aac)?;
    if sample_rate == 0 || channels == 0 || channels > 8 {
        return Err(CodecError::Aac);
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

    /// x265 (via ffmpeg) at 1920x1080: VPS, SPS (coded 1920x1088, cropped by the conformance
    /// window) and PPS, and ffmpeg's own hvcC of them (its SEI array left out).
    pub const HEVC_VPS: &[u8] = &[
        0x40, 0x01, 0x0c, 0x01, 0xff, 0xff, 0x04, 0x08, 0x00, 0x00, 0x03, 0x00, 0x9e, 0x08, 0x00,
        0x00, 0x03, 0x00, 0x00, 0x78, 0x95, 0x98, 0x09,
    ];
    pub const HEVC_SPS: &[u8] = &[
        0x42, 0x01, 0x01, 0x04, 0x08, 0x00, 0x00, 0x03, 0x00, 0x9e, 0x08, 0x00, 0x00, 0x03, 0x00,
        0x00, 0x78, 0x90, 0x00, 0x78, 0x10, 0x02, 0x1c, 0xb2, 0xca, 0xcd, 0x24, 0x99, 0x5e, 0x02,
        0xdc, 0x08, 0x08, 0x00, 0x10, 0x00, 0x00, 0x03, 0x00, 0x10, 0x00, 0x00, 0x03, 0x01, 0x90,
        0x80,
    ];
    pub const HEVC_PPS: &[u8] = &[0x44, 0x01, 0xc1, 0x72, 0x86, 0x0c, 0x46, 0x24];
    pub const HVCC_1080P: &[u8] = &[
        0x01, 0x04, 0x08, 0x00, 0x00, 0x00, 0x9e, 0x08, 0x00, 0x00, 0x00, 0x00, 0x78, 0xf0, 0x00,
        0xfc, 0xff, 0xf8, 0xf8, 0x00, 0x00, 0x0f, 0x03, 0xa0, 0x00, 0x01, 0x00, 0x17, 0x40, 0x01,
        0x0c, 0x01, 0xff, 0xff, 0x04, 0x08, 0x00, 0x00, 0x03, 0x00, 0x9e, 0x08, 0x00, 0x00, 0x03,
        0x00, 0x00, 0x78, 0x95, 0x98, 0x09, 0xa1, 0x00, 0x01, 0x00, 0x2e, 0x42, 0x01, 0x01, 0x04,
        0x08, 0x00, 0x00, 0x03, 0x00, 0x9e, 0x08, 0x00, 0x00, 0x03, 0x00, 0x00, 0x78, 0x90, 0x00,
        0x78, 0x10, 0x02, 0x1c, 0xb2, 0xca, 0xcd, 0x24, 0x99, 0x5e, 0x02, 0xdc, 0x08, 0x08, 0x00,
        0x10, 0x00, 0x00, 0x03, 0x00, 0x10, 0x00, 0x00, 0x03, 0x01, 0x90, 0x80, 0xa2, 0x00, 0x01,
        0x00, 0x08, 0x44, 0x01, 0xc1, 0x72, 0x86, 0x0c, 0x46, 0x24,
    ];

    #[test]
    fn hvcc_read_and_rebuilt_from_in_band_parameter_sets() {
        let ffmpeg = parse_hvcc(Bytes::from_static(HVCC_1080P)).unwrap();
        assert_eq!(
            (ffmpeg.codec, ffmpeg.width, ffmpeg.height),
            (VideoCodec::H265, 1920, 1080)
        );
        let ours = hvcc_from_parameter_sets(HEVC_VPS, HEVC_SPS, HEVC_PPS).unwrap();
        assert_eq!((ours.width, ours.height), (1920, 1080));
        // Profile, tier, level, chroma format and bit depths as ffmpeg wrote them; 4-byte
        // lengths; the three arrays with one NAL unit each.
        assert_eq!(ours.record[..13], HVCC_1080P[..13]);
        assert_eq!(ours.record[16..19], HVCC_1080P[16..19]);
        assert_eq!(ours.record[21] & 3, 3);
        assert_eq!(ours.record[22..], HVCC_1080P[22..]);
        // Re-parsing our record gives the same result.
        assert_eq!(parse_hvcc(ours.record.clone()).unwrap(), ours);
    }

    #[test]
    fn broken_hvcc_and_sps_are_refused_not_panicked_on() {
        for cut in [0, 5, 22, 23, 30, 60, HVCC_1080P.len() - 1] {
            assert!(
                parse_hvcc(Bytes::copy_from_slice(&HVCC_1080P[..cut])).is_err(),
                "{cut}"
            );
        }
        let mut two_byte_lengths = HVCC_1080P.to_vec();
        two_byte_lengths[21] = (two_byte_lengths[21] & !3) | 1;
        assert!(parse_hvcc(Bytes::from(two_byte_lengths)).is_err());
        for cut in 2..HEVC_SPS.len() {
            let _ = hvcc_from_parameter_sets(HEVC_VPS, &HEVC_SPS[..cut], HEVC_PPS);
        }
        assert!(hvcc_from_parameter_sets(HEVC_VPS, HEVC_PPS, HEVC_PPS).is_err());
        // A conformance window larger than the picture.
        let mut sps = HEVC_SPS.to_vec();
        sps[20..].fill(0xff);
        assert!(hvcc_from_parameter_sets(HEVC_VPS, &sps, HEVC_PPS).is_err());
    }

    #[test]
    fn hevc_access_units_are_framed_with_their_config() {
        let mut framer = AnnexBFramer::new(NalCodec::H265);
        let mut out = Vec::new();
        let aud: &[u8] = &[0x46, 0x01, 0x10];
        let sei: &[u8] = &[0x4e, 0x01, 0x05, 0x01, 0x80];
        let idr: &[u8] = &[0x28, 0x01, 0xaf, 0x1d];
        let trail: &[u8] = &[0x02, 0x01, 0xd0];
        let unit = framer
            .frame([aud, HEVC_VPS, HEVC_SPS, HEVC_PPS, sei, idr], &mut out)
            .unwrap()
            .unwrap();
        assert!(unit.keyframe);
        assert_eq!(
            unit.data,
            [&[0, 0, 0, 5][..], sei, &[0, 0, 0, 4], idr].concat()
        );
        let [super::super::MediaMessage::VideoConfig(c)] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!((c.codec, c.height), (VideoCodec::H265, 1080));
        // The same parameter sets again: no new config; a trailing picture is not a keyframe.
        out.clear();
        framer
            .frame([HEVC_VPS, HEVC_SPS, HEVC_PPS, idr], &mut out)
            .unwrap();
        assert!(out.is_empty());
        let unit = framer.frame([trail], &mut out).unwrap().unwrap();
        assert!(!unit.keyframe);
        assert!(framer.frame([aud], &mut out).unwrap().is_none());
    }

    /// SVT-AV1's av1C (via ffmpeg's MP4 muxer) for 1280x720: the record header and one
    /// sequence header OBU.
    pub const AV1C_720P: &[u8] = &[
        0x81, 0x05, 0x0c, 0x00, 0x0a, 0x0b, 0x00, 0x00, 0x00, 0x2d, 0x4c, 0xff, 0xb3, 0xc0, 0x2f,
        0x80, 0x04,
    ];

    #[test]
    fn av1c_sequence_header_gives_the_frame_size() {
        let c = parse_av1c(Bytes::from_static(AV1C_720P)).unwrap();
        assert_eq!((c.codec, c.width, c.height), (VideoCodec::Av1, 1280, 720));
        for cut in 0..AV1C_720P.len() {
            assert!(
                parse_av1c(Bytes::copy_from_slice(&AV1C_720P[..cut])).is_err(),
                "{cut}"
            );
        }
        // No sequence header in configOBUs, a wrong marker, an OBU without a size field.
        assert!(parse_av1c(Bytes::from_static(&[0x81, 0x05, 0x0c, 0x00])).is_err());
        assert!(parse_av1c(Bytes::from_static(&AV1C_720P[..4])).is_err());
        let mut no_marker = AV1C_720P.to_vec();
        no_marker[0] = 0x01;
        assert!(parse_av1c(Bytes::from(no_marker)).is_err());
        let mut no_size = AV1C_720P.to_vec();
        no_size[4] = 0x08;
        assert!(parse_av1c(Bytes::from(no_size)).is_err());
        // A leb128 size that runs past the end, and one of 8 continuation bytes.
        let long = [&AV1C_720P[..5], &[0xff; 8][..]].concat();
        assert!(parse_av1c(Bytes::from(long)).is_err());
    }

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
    fn avcc_parameter_sets_are_its_sps_then_its_pps() {
        let sps = [0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9];
        let pps = [0x68, 0xeb, 0xe3, 0xcb];
        let mut v = vec![1, 0x64, 0, 0x1f, 0xff, 0xe1, 0, 6];
        v.extend_from_slice(&sps);
        v.extend_from_slice(&[1, 0, 4]);
        v.extend_from_slice(&pps);
        let sets = avcc_parameter_sets(&Bytes::from(v.clone())).unwrap();
        assert_eq!(sets, [&sps[..], &pps[..]]);
        v.truncate(v.len() - 1);
        assert!(avcc_parameter_sets(&Bytes::from(v)).is_err());
    }

    #[test]
    fn avcc_rebuilt_from_in_band_parameter_sets() {
        let sps = &AVCC_720P[8..8 + 0x1a];
        let pps = &AVCC_720P[8 + 0x1a + 3..8 + 0x1a + 3 + 6];
        let c = avcc_from_parameter_sets(sps, pps).unwrap();
        assert_eq!((c.width, c.height), (1280, 720));
        // x264's own record, byte for byte (it writes the High-profile extension too).
        assert_eq!(&c.record[..], AVCC_720P);
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
