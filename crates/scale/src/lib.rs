//! livepack's picture-plane scaler, one 8-bit plane at a time: 2×2 box halvings while the ratio
//! is 2 or more, then 2-tap linear interpolation, vertical pass first; the horizontal pass
//! gathers with SSSE3.
//!
//! Why our own: GStreamer 1.22's `videoscale` runs its horizontal 2-tap pass through ORC's
//! `ldreslinb`, which has no SIMD rule on x86, so the scalar fallback ran: 0.78 ms a 720p → 480p
//! picture here, 5 % of a transcoded stream's CPU. This pass gathers the two taps of 8 outputs
//! with one `pshufb` (8 outputs of a ratio below 2 span at most 16 input bytes) and weighs them
//! with one `pmaddubsw`. Positions are pixel centres, weights 6-bit (1/64 px steps: at most one
//! level of error at a full-scale edge); a 2:1 step is exactly the 2×2 box.

#![forbid(unsafe_code)]

#[cfg(all(target_arch = "x86_64", target_feature = "ssse3"))]
use safe_arch::{
    add_i16_m128i, load_unaligned_m128i, m128i, mul_u8i8_add_horizontal_saturating_m128i,
    pack_i16_to_u8_m128i, prefetch_t0, set_splat_i16_m128i, shr_imm_u16_m128i,
    shuffle_av_i8z_all_m128i,
};

/// Weight scale: the two taps' weights sum to this.
const ONE: u16 = 64;
/// Outputs per SIMD group in the horizontal pass.
const GROUP: usize = 8;
/// Bytes read past a row's last pixel by a group's 16-byte load.
const PAD: usize = 16;
/// Output rows ahead whose input rows are prefetched.
const AHEAD: usize = 2;

/// A plane in memory: `rows` rows of `width` bytes, `stride` apart, from the start of `data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub width: usize,
    pub rows: usize,
    pub stride: usize,
}

impl Shape {
    fn row<'a>(&self, data: &'a [u8], y: usize) -> &'a [u8] {
        &data[y * self.stride..y * self.stride + self.width]
    }
}

/// One axis of a 2-tap interpolation: output `i` reads inputs `first[i]` and `first[i] + 1`
/// (the latter clamped to the last input) with weights `ONE - frac[i]` and `frac[i]`.
#[derive(Debug)]
struct Axis {
    first: Vec<u32>,
    frac: Vec<u8>,
}

impl Axis {
    fn new(inputs: usize, outputs: usize) -> Self {
        let ratio = inputs as f64 / outputs as f64;
        let last = inputs.saturating_sub(1) as f64;
        let (first, frac) = (0..outputs)
            .map(|i| {
                // The output pixel's centre, in input pixels, clamped to the outer centres.
                let c = ((i as f64 + 0.5) * ratio - 0.5).clamp(0.0, last);
                let mut f = c.floor();
                let mut w = ((c - f) * f64::from(ONE)).round() as u16;
                if w == ONE {
                    f += 1.0;
                    w = 0;
                }
                (f as u32, w as u8)
            })
            .unzip();
        Axis { first, frac }
    }
}

/// The horizontal pass's gather plan for one output width: per group of 8 outputs, where its
/// 16-byte window starts, which window bytes feed each output, and their weights.
#[derive(Debug)]
struct Groups {
    base: Vec<u32>,
    shuffle: Vec<[i8; 16]>,
    weights: Vec<[i8; 16]>,
    /// Outputs covered by whole groups (the rest, fewer than 8, are done one by one).
    covered: usize,
}

impl Groups {
    fn new(axis: &Axis, inputs: usize) -> Self {
        let mut groups = Groups {
            base: Vec::new(),
            shuffle: Vec::new(),
            weights: Vec::new(),
            covered: 0,
        };
        for chunk in 0..axis.first.len() / GROUP {
            let range = chunk * GROUP..(chunk + 1) * GROUP;
            let base = axis.first[range.start] as usize;
            let (mut shuffle, mut weights) = ([0i8; 16], [0i8; 16]);
            for (j, i) in range.enumerate() {
                let a = axis.first[i] as usize - base;
                let b = (axis.first[i] as usize + 1).min(inputs - 1) - base;
                if b > 15 {
                    // A ratio of 2 or more never gets here (halvings come first).
                    return groups;
                }
                shuffle[2 * j] = a as i8;
                shuffle[2 * j + 1] = b as i8;
                weights[2 * j] = (ONE - u16::from(axis.frac[i])) as i8;
                weights[2 * j + 1] = axis.frac[i] as i8;
            }
            groups.base.push(base as u32);
            groups.shuffle.push(shuffle);
            groups.weights.push(weights);
            groups.covered += GROUP;
        }
        groups
    }
}

/// Scales planes, keeping a plan per size pair it has met (positions, weights, gather masks,
/// scratch planes for the halvings): made when a size is first seen, not for every picture. A
/// 1080p source's halvings would otherwise take a fresh half-megabyte plane per picture (above
/// glibc's mmap threshold: page faults on every write).
#[derive(Default)]
pub struct Scaler {
    plans: Vec<Plan>,
}

impl Scaler {
    /// Forgets every plan (new caps: the sizes they were made for may not come again).
    pub fn clear(&mut self) {
        self.plans.clear();
    }

    /// Scales one plane: `src` (shape `from`) into `dst` (shape `to`). Returns false, touching
    /// nothing, when a shape is empty or a buffer is shorter than its shape says.
    pub fn scale(&mut self, src: &[u8], from: Shape, dst: &mut [u8], to: Shape) -> bool {
        let empty = |s: Shape| s.width == 0 || s.rows == 0;
        if !fits(src.len(), from) || !fits(dst.len(), to) || empty(from) || empty(to) {
            return false;
        }
        let key = [from.width, from.rows, to.width, to.rows];
        let i = match self.plans.iter().position(|p| p.key == key) {
            Some(i) => i,
            None => {
                self.plans.push(Plan::new(key));
                self.plans.len() - 1
            }
        };
        self.plans[i].run(src, from, dst, to);
        true
    }
}

/// [`Scaler::scale`] with a plan made for this one call.
pub fn scale(src: &[u8], from: Shape, dst: &mut [u8], to: Shape) -> bool {
    Scaler::default().scale(src, from, dst, to)
}

/// How one size pair is scaled: 2:1 halvings while a ratio is 2 or more (the 2-tap step then
/// never skips input pixels), then the 2-tap interpolation unless the last halving already
/// gave the output size (an exact 2:1, the 360p rung of 720p: the box is the whole job).
struct Plan {
    /// Input width and rows, output width and rows.
    key: [usize; 4],
    /// Each halving: along x, along y, and the tight shape it makes.
    halvings: Vec<(bool, bool, Shape)>,
    /// Where each halving but a last one that lands in the output writes.
    scratch: Vec<Vec<u8>>,
    interpolation: Option<Interpolation>,
}

impl Plan {
    fn new([width, rows, to_width, to_rows]: [usize; 4]) -> Self {
        let mut shape = Shape {
            width,
            rows,
            stride: width,
        };
        let (mut halvings, mut scratch) = (Vec::new(), Vec::new());
        while shape.width >= 2 * to_width || shape.rows >= 2 * to_rows {
            let (x, y) = (shape.width >= 2 * to_width, shape.rows >= 2 * to_rows);
            let w = if x { shape.width / 2 } else { shape.width };
            let h = if y { shape.rows / 2 } else { shape.rows };
            shape = Shape {
                width: w,
                rows: h,
                stride: w,
            };
            halvings.push((x, y, shape));
            if (w, h) == (to_width, to_rows) {
                break;
            }
            scratch.push(vec![0u8; w * h]);
        }
        let interpolation = (scratch.len() == halvings.len())
            .then(|| Interpolation::new(shape.width, shape.rows, to_width, to_rows));
        Plan {
            key: [width, rows, to_width, to_rows],
            halvings,
            scratch,
            interpolation,
        }
    }

    fn run(&mut self, src: &[u8], from: Shape, dst: &mut [u8], to: Shape) {
        for (i, &(x, y, shape)) in self.halvings.iter().enumerate() {
            let (done, rest) = self.scratch.split_at_mut(i);
            let (input, in_shape) = match done.last() {
                Some(plane) => (&plane[..], self.halvings[i - 1].2),
                None => (src, from),
            };
            match rest.first_mut() {
                Some(out) => halve(input, in_shape, out, shape, x, y),
                None => halve(input, in_shape, dst, to, x, y),
            }
        }
        if let Some(interpolation) = &mut self.interpolation {
            let (input, shape) = match (self.scratch.last(), self.halvings.last()) {
                (Some(plane), Some(&(_, _, shape))) => (&plane[..], shape),
                _ => (src, from),
            };
            interpolation.run(input, shape, dst, to);
        }
    }
}

fn fits(len: usize, s: Shape) -> bool {
    s.rows == 0 || (s.stride >= s.width && (s.rows - 1) * s.stride + s.width <= len)
}

/// 2:1 box along the axes asked for (odd trailing pixels dropped: a ratio of 2 or more has more
/// input than the halving needs).
fn halve(src: &[u8], from: Shape, dst: &mut [u8], to: Shape, x: bool, y: bool) {
    for oy in 0..to.rows {
        let ahead = if y { 2 * (oy + AHEAD) } else { oy + AHEAD };
        prefetch_row(src, from, ahead);
        if y {
            prefetch_row(src, from, ahead + 1);
        }
        let (r0, r1) = if y {
            (from.row(src, 2 * oy), from.row(src, 2 * oy + 1))
        } else {
            (from.row(src, oy), from.row(src, oy))
        };
        let out = &mut dst[oy * to.stride..oy * to.stride + to.width];
        if x {
            let done = box_simd(r0, r1, out);
            let (r0, r1) = (&r0[2 * done..], &r1[2 * done..]);
            for ((o, a), b) in out[done..]
                .iter_mut()
                .zip(r0.chunks_exact(2))
                .zip(r1.chunks_exact(2))
            {
                let sum = u16::from(a[0]) + u16::from(a[1]) + u16::from(b[0]) + u16::from(b[1]);
                *o = ((sum + 2) >> 2) as u8;
            }
        } else {
            for ((o, &a), &b) in out.iter_mut().zip(r0).zip(r1) {
                *o = ((u16::from(a) + u16::from(b) + 1) >> 1) as u8;
            }
        }
    }
}

/// The 2×2 box of two rows, 8 outputs from 16 input bytes of each at a time (pairs summed by
/// `pmaddubsw` with weights of 1); returns how many outputs it wrote.
#[cfg(all(target_arch = "x86_64", target_feature = "ssse3"))]
fn box_simd(r0: &[u8], r1: &[u8], out: &mut [u8]) -> usize {
    let (ones, round) = (safe_arch::set_splat_i8_m128i(1), set_splat_i16_m128i(2));
    let mut done = 0;
    for ((a, b), out) in r0
        .chunks_exact(16)
        .zip(r1.chunks_exact(16))
        .zip(out.chunks_exact_mut(GROUP))
    {
        let a: &[u8; 16] = a.try_into().expect("16 bytes");
        let b: &[u8; 16] = b.try_into().expect("16 bytes");
        let top = mul_u8i8_add_horizontal_saturating_m128i(load_unaligned_m128i(a), ones);
        let bottom = mul_u8i8_add_horizontal_saturating_m128i(load_unaligned_m128i(b), ones);
        let sums = add_i16_m128i(add_i16_m128i(top, bottom), round);
        let scaled = shr_imm_u16_m128i::<2>(sums);
        let bytes: [u8; 16] = pack_i16_to_u8_m128i(scaled, scaled).into();
        out.copy_from_slice(&bytes[..GROUP]);
        done += GROUP;
    }
    done
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "ssse3")))]
fn box_simd(_r0: &[u8], _r1: &[u8], _out: &mut [u8]) -> usize {
    0
}

/// 2-tap interpolation, both ratios below 2: each output row is first interpolated between two
/// input rows at full input width (vectorised by the compiler), then across.
struct Interpolation {
    rows: Axis,
    cols: Axis,
    groups: Groups,
    /// One row after the vertical pass, padded for the last group's 16-byte load.
    line: Vec<u8>,
}

impl Interpolation {
    fn new(width: usize, rows: usize, to_width: usize, to_rows: usize) -> Self {
        let cols = Axis::new(width, to_width);
        Interpolation {
            rows: Axis::new(rows, to_rows),
            groups: Groups::new(&cols, width),
            cols,
            line: vec![0u8; width + PAD],
        }
    }

    fn run(&mut self, src: &[u8], from: Shape, dst: &mut [u8], to: Shape) {
        let line = &mut self.line;
        for oy in 0..to.rows {
            if let Some(&ahead) = self.rows.first.get(oy + AHEAD) {
                prefetch_row(src, from, ahead as usize);
                prefetch_row(src, from, ahead as usize + 1);
            }
            let y0 = self.rows.first[oy] as usize;
            let y1 = (y0 + 1).min(from.rows - 1);
            let f = self.rows.frac[oy];
            let (r0, r1) = (from.row(src, y0), from.row(src, y1));
            if f == 0 {
                line[..from.width].copy_from_slice(r0);
            } else {
                for ((o, &a), &b) in line.iter_mut().zip(r0).zip(r1) {
                    *o = lerp(a, b, f);
                }
            }
            // Past the row's end the window reads copies of its last pixel (weighted 0).
            let last = line[from.width - 1];
            line[from.width..].fill(last);
            let out = &mut dst[oy * to.stride..oy * to.stride + to.width];
            let done = across_simd(line, &self.groups, out);
            across_scalar(line, from.width, &self.cols, done, out);
        }
    }
}

/// Asks the cache for input row `y` (if there is one) a little before it is read. The source
/// picture comes cold from the decoder, one 4 KiB page every three 720p rows, and the hardware
/// prefetcher stops at page boundaries: without this, the loads stalled the 2:1 box on memory.
#[cfg(all(target_arch = "x86_64", target_feature = "ssse3"))]
fn prefetch_row(data: &[u8], s: Shape, y: usize) {
    if y < s.rows {
        for byte in s.row(data, y).iter().step_by(64) {
            prefetch_t0(byte);
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "ssse3")))]
fn prefetch_row(_data: &[u8], _s: Shape, _y: usize) {}

/// `a` and `b` weighed `ONE - f` and `f`, rounded: the arithmetic of both passes, and of the
/// SIMD one's `pmaddubsw` (the sum stays below 2^14, so it never saturates).
#[inline]
fn lerp(a: u8, b: u8, f: u8) -> u8 {
    let f = u16::from(f);
    ((u16::from(a) * (ONE - f) + u16::from(b) * f + ONE / 2) >> 6) as u8
}

/// Outputs `from..` of one row, one by one: the SIMD pass's exact arithmetic.
fn across_scalar(line: &[u8], width: usize, cols: &Axis, from: usize, out: &mut [u8]) {
    for (i, o) in out.iter_mut().enumerate().skip(from) {
        let a = cols.first[i] as usize;
        *o = lerp(line[a], line[(a + 1).min(width - 1)], cols.frac[i]);
    }
}

/// The groups' outputs of one row; returns how many outputs it wrote.
#[cfg(all(target_arch = "x86_64", target_feature = "ssse3"))]
fn across_simd(line: &[u8], groups: &Groups, out: &mut [u8]) -> usize {
    let round = set_splat_i16_m128i((ONE / 2) as i16);
    let iter = groups
        .base
        .iter()
        .zip(&groups.shuffle)
        .zip(&groups.weights)
        .zip(out.chunks_exact_mut(GROUP));
    for (((&base, shuffle), weights), out) in iter {
        let base = base as usize;
        let window: &[u8; 16] = line[base..base + 16].try_into().expect("16 bytes");
        let pairs = shuffle_av_i8z_all_m128i(load_unaligned_m128i(window), m128i::from(*shuffle));
        let sums = mul_u8i8_add_horizontal_saturating_m128i(pairs, m128i::from(*weights));
        let scaled = shr_imm_u16_m128i::<6>(add_i16_m128i(sums, round));
        let bytes: [u8; 16] = pack_i16_to_u8_m128i(scaled, scaled).into();
        out.copy_from_slice(&bytes[..GROUP]);
    }
    groups.covered
}

/// Without SSSE3 at compile time every output takes the scalar path.
#[cfg(not(all(target_arch = "x86_64", target_feature = "ssse3")))]
fn across_simd(_line: &[u8], _groups: &Groups, _out: &mut [u8]) -> usize {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(width: usize, rows: usize) -> Shape {
        Shape {
            width,
            rows,
            stride: width,
        }
    }

    /// A deterministic picture with detail at every scale (xorshift noise over a gradient).
    fn picture(width: usize, rows: usize, stride: usize) -> Vec<u8> {
        let mut state = 0x9e37_79b9u32;
        let mut out = vec![0u8; stride * rows];
        for y in 0..rows {
            for x in 0..width {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let gradient = (x * 255 / width.max(1) + y * 64 / rows.max(1)) as u32;
                out[y * stride + x] = ((gradient + (state & 31)) % 256) as u8;
            }
        }
        out
    }

    /// The reference: the same positions and 2-tap weights in floating point, no SIMD, no
    /// fixed point, and the box halvings written out from the definition.
    fn reference(src: &[u8], from: Shape, to: Shape) -> Vec<f64> {
        let mut plane: Vec<f64> = (0..from.rows)
            .flat_map(|y| from.row(src, y).iter().map(|&p| f64::from(p)))
            .collect();
        let (mut w, mut h) = (from.width, from.rows);
        while w >= 2 * to.width || h >= 2 * to.rows {
            let (hx, hy) = (w >= 2 * to.width, h >= 2 * to.rows);
            let (nw, nh) = (if hx { w / 2 } else { w }, if hy { h / 2 } else { h });
            let at = |p: &Vec<f64>, x: usize, y: usize| p[y * w + x];
            let mut next = vec![0.0; nw * nh];
            for y in 0..nh {
                for x in 0..nw {
                    let cols: Vec<usize> = if hx { vec![2 * x, 2 * x + 1] } else { vec![x] };
                    let rows: Vec<usize> = if hy { vec![2 * y, 2 * y + 1] } else { vec![y] };
                    let sum: f64 = rows
                        .iter()
                        .flat_map(|&r| cols.iter().map(move |&c| (c, r)))
                        .map(|(c, r)| at(&plane, c, r))
                        .sum();
                    next[y * nw + x] = (sum / (cols.len() * rows.len()) as f64).round();
                }
            }
            plane = next;
            w = nw;
            h = nh;
        }
        let sample = |n: usize, i: usize, m: usize| -> (usize, usize, f64) {
            let c = ((i as f64 + 0.5) * n as f64 / m as f64 - 0.5).clamp(0.0, (n - 1) as f64);
            let a = c.floor() as usize;
            (a, (a + 1).min(n - 1), c - a as f64)
        };
        let mut out = vec![0.0; to.width * to.rows];
        for y in 0..to.rows {
            let (y0, y1, fy) = sample(h, y, to.rows);
            for x in 0..to.width {
                let (x0, x1, fx) = sample(w, x, to.width);
                let row = |r: usize| plane[r * w + x0] * (1.0 - fx) + plane[r * w + x1] * fx;
                out[y * to.width + x] = row(y0) * (1.0 - fy) + row(y1) * fy;
            }
        }
        out
    }

    /// Largest and mean difference from the floating-point reference, in levels.
    fn errors(from: Shape, to: Shape) -> (f64, f64) {
        let src = picture(from.width, from.rows, from.stride);
        let mut dst = vec![0u8; to.stride * to.rows];
        assert!(scale(&src, from, &mut dst, to));
        let want = reference(&src, from, to);
        let diffs: Vec<f64> = (0..to.rows)
            .flat_map(|y| (0..to.width).map(move |x| (x, y)))
            .map(|(x, y)| (f64::from(dst[y * to.stride + x]) - want[y * to.width + x]).abs())
            .collect();
        let worst = diffs.iter().copied().fold(0.0, f64::max);
        (worst, diffs.iter().sum::<f64>() / diffs.len() as f64)
    }

    #[test]
    fn every_ladder_step_matches_the_floating_point_reference() {
        // Down by 1.5 (720p → 480p, with chroma), 2 (→ 360p), 3 (1080p → 360p), 2.25, one axis
        // halved only, up, odd sizes, strides wider than the rows. Each of the two passes may
        // be off by a level at a full-scale edge (1/64-pixel positions; the picture's gradient
        // wraps) and rounds once: 3 levels, and float slop.
        for (from, to) in [
            (shape(1280, 720), shape(854, 480)),
            (shape(640, 360), shape(427, 240)),
            (shape(1280, 720), shape(640, 360)),
            (shape(1920, 1080), shape(640, 360)),
            (shape(1920, 1080), shape(854, 480)),
            (shape(640, 360), shape(1280, 720)),
            (shape(33, 17), shape(21, 11)),
            (shape(1280, 720), shape(600, 700)),
            (shape(640, 720), shape(600, 300)),
            (
                Shape {
                    width: 854,
                    rows: 480,
                    stride: 856,
                },
                Shape {
                    width: 427,
                    rows: 240,
                    stride: 432,
                },
            ),
        ] {
            let (worst, mean) = errors(from, to);
            assert!(worst <= 3.5, "{from:?} → {to:?}: off by {worst} levels");
            assert!(
                mean <= 0.5,
                "{from:?} → {to:?}: off by {mean} levels on average"
            );
        }
    }

    #[test]
    fn the_simd_and_scalar_paths_agree_bit_for_bit() {
        let (from, to) = (shape(1280, 720), shape(854, 480));
        let src = picture(from.width, from.rows, from.stride);
        let mut dst = vec![0u8; to.width * to.rows];
        assert!(scale(&src, from, &mut dst, to));
        let cols = Axis::new(from.width, to.width);
        let rows = Axis::new(from.rows, to.rows);
        let mut line = vec![0u8; from.width + PAD];
        for oy in [0, 1, 239, 479] {
            let (y0, f) = (rows.first[oy] as usize, rows.frac[oy]);
            let y1 = (y0 + 1).min(from.rows - 1);
            for x in 0..from.width {
                line[x] = lerp(src[y0 * from.width + x], src[y1 * from.width + x], f);
            }
            let mut want = vec![0u8; to.width];
            across_scalar(&line, from.width, &cols, 0, &mut want);
            assert_eq!(
                &dst[oy * to.width..(oy + 1) * to.width],
                &want[..],
                "row {oy}"
            );
        }
        #[cfg(all(target_arch = "x86_64", target_feature = "ssse3"))]
        assert_eq!(
            Groups::new(&cols, from.width).covered,
            848,
            "the SIMD path ran"
        );
    }

    #[test]
    fn an_exact_half_is_the_two_by_two_box_and_a_flat_plane_stays_flat() {
        let src: Vec<u8> = (0..16u8).collect(); // 4×4: rows 0-3, 4-7, 8-11, 12-15
        let mut dst = [0u8; 4];
        assert!(scale(&src, shape(4, 4), &mut dst, shape(2, 2)));
        // (0+1+4+5)/4 = 2.5 → 3, (2+3+6+7)/4 = 4.5 → 5, …
        assert_eq!(dst, [3, 5, 11, 13]);
        let flat = vec![77u8; 1280 * 720];
        let mut out = vec![0u8; 854 * 480];
        assert!(scale(&flat, shape(1280, 720), &mut out, shape(854, 480)));
        assert!(out.iter().all(|&p| p == 77));
    }

    #[test]
    fn a_kept_plan_gives_what_a_fresh_one_gives() {
        // The second picture through one scaler reuses the plan and its scratch planes.
        for (from, to) in [
            (shape(1920, 1080), shape(854, 480)),
            (shape(1280, 720), shape(640, 360)),
        ] {
            let mut scaler = Scaler::default();
            let first = picture(from.width, from.rows, from.stride);
            let second: Vec<u8> = first.iter().map(|p| p.wrapping_mul(7)).collect();
            let mut out = vec![0u8; to.width * to.rows];
            assert!(scaler.scale(&first, from, &mut out, to));
            assert!(scaler.scale(&second, from, &mut out, to));
            let mut fresh = vec![0u8; to.width * to.rows];
            assert!(scale(&second, from, &mut fresh, to));
            assert!(out == fresh, "{from:?} → {to:?}");
            assert_eq!(scaler.plans.len(), 1);
        }
    }

    #[test]
    fn short_buffers_are_refused_not_read_past() {
        let src = vec![0u8; 100];
        let mut dst = vec![0u8; 100];
        assert!(!scale(&src, shape(20, 10), &mut dst, shape(10, 5)));
        assert!(!scale(&src, shape(10, 10), &mut dst, shape(20, 10)));
        assert!(!scale(
            &src,
            Shape {
                width: 10,
                rows: 2,
                stride: 5
            },
            &mut dst,
            shape(5, 1)
        ));
        assert!(!scale(&src, shape(10, 10), &mut dst, shape(0, 5)));
    }
}
