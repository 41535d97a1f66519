//! The AV1 codec configuration record (`av1C`) and the frame size its sequence header OBU
//! declares.

use bytes::Bytes;

use super::{check_size, CodecError, MAX_PARAMETER_SET};
use crate::media::{VideoCodec, VideoConfig};

/// AV1 `obu_type` of a sequence header (AV1 spec §6.2.2).
const OBU_SEQUENCE_HEADER: u8 = 1;

/// Checks an AV1CodecConfigurationRecord (AV1-ISOBMFF §2.3.3: marker 1, version 1, then the
/// configOBUs) and reads the maximum frame size from the sequence header OBU it carries.
pub fn parse_av1c(av1c: Bytes) -> Result<VideoConfig, CodecError> {
    let err = |e: &str| CodecError::Av1(e.to_string());
    if av1c.len() < 4 || av1c[0] != 0x81 {
        return Err(err("not an av1C record (marker and version 1)"));
    }
    if av1c.len() > MAX_PARAMETER_SET {
        return Err(err("record too large"));
    }
    let mut obus = &av1c[4..];
    while !obus.is_empty() {
        let (obu_type, payload, rest) = split_obu(obus).ok_or_else(|| err("truncated OBU"))?;
        if obu_type == OBU_SEQUENCE_HEADER {
            let (width, height) = av1_frame_size(payload).map_err(|e| err(&e))?;
            check_size(width, height).map_err(|e| err(&e))?;
            return Ok(VideoConfig {
                codec: VideoCodec::Av1,
                record: av1c,
                width,
                height,
            });
        }
        obus = rest;
    }
    Err(err("no sequence header OBU in configOBUs"))
}

/// One low-overhead OBU (§5.3): its type, payload and what follows. `None` if it does not fit
/// or has no size field (configOBUs must carry sizes).
fn split_obu(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let header = *data.first()?;
    let obu_type = (header >> 3) & 0x0f;
    let extension = header & 0x04 != 0;
    if header & 0x02 == 0 {
        return None;
    }
    let mut at = 1 + usize::from(extension);
    // leb128 (§4.10.5): at most 8 bytes, the value fits 32 bits.
    let mut size: u64 = 0;
    for i in 0..8 {
        let b = *data.get(at)?;
        at += 1;
        size |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            break;
        }
    }
    let end = at.checked_add(usize::try_from(size).ok()?)?;
    Some((obu_type, data.get(at..end)?, data.get(end..)?))
}

/// `max_frame_width_minus_1 + 1` and the height from a sequence header OBU payload (§5.5.1).
fn av1_frame_size(payload: &[u8]) -> Result<(u32, u32), String> {
    use h264_reader::rbsp::{BitRead, BitReader};
    let mut r = BitReader::new(payload);
    let e = |e: h264_reader::rbsp::BitReaderError| format!("sequence header: {e:?}");
    r.skip(4, "seq_profile, still_picture").map_err(e)?;
    let reduced = r.read_bit("reduced_still_picture_header").map_err(e)?;
    if reduced {
        r.skip(5, "seq_level_idx").map_err(e)?;
    } else {
        let mut decoder_model_info = false;
        let mut buffer_delay_length = 0u32;
        if r.read_bit("timing_info_present_flag").map_err(e)? {
            r.skip(64, "num_units_in_display_tick, time_scale")
                .map_err(e)?;
            if r.read_bit("equal_picture_interval").map_err(e)? {
                // uvlc() (§4.10.3): leading zeros, then that many bits.
                let mut zeros = 0;
                while !r.read_bit("uvlc").map_err(e)? {
                    zeros += 1;
                    if zeros >= 32 {
                        return Err("uvlc too long".into());
                    }
                }
                r.skip(zeros, "uvlc value").map_err(e)?;
            }
            decoder_model_info = r.read_bit("decoder_model_info_present_flag").map_err(e)?;
            if decoder_model_info {
                buffer_delay_length =
                    r.read::<5, u32>("buffer_delay_length_minus_1").map_err(e)? + 1;
                r.skip(32 + 5 + 5, "decoder_model_info").map_err(e)?;
            }
        }
        let display_delay = r
            .read_bit("initial_display_delay_present_flag")
            .map_err(e)?;
        let points = r
            .read::<5, u32>("operating_points_cnt_minus_1")
            .map_err(e)?
            + 1;
        for _ in 0..points {
            r.skip(12, "operating_point_idc").map_err(e)?;
            if r.read::<5, u32>("seq_level_idx").map_err(e)? > 7 {
                r.skip(1, "seq_tier").map_err(e)?;
            }
            if decoder_model_info && r.read_bit("decoder_model_present_for_this_op").map_err(e)? {
                r.skip(2 * buffer_delay_length + 1, "operating_parameters_info")
                    .map_err(e)?;
            }
            if display_delay
                && r.read_bit("initial_display_delay_present_for_this_op")
                    .map_err(e)?
            {
                r.skip(4, "initial_display_delay_minus_1").map_err(e)?;
            }
        }
    }
    let width_bits = r.read::<4, u32>("frame_width_bits_minus_1").map_err(e)? + 1;
    let height_bits = r.read::<4, u32>("frame_height_bits_minus_1").map_err(e)? + 1;
    let width: u32 = r
        .read_var(width_bits, "max_frame_width_minus_1")
        .map_err(e)?;
    let height: u32 = r
        .read_var(height_bits, "max_frame_height_minus_1")
        .map_err(e)?;
    Ok((width + 1, height + 1))
}
