use std::iter::Iterator;

use super::SeqNumber;

/// Iterator for compressing loss lists
pub struct CompressLossList<I> {
    /// Underlying iterator
    iterator: I,

    /// The next item
    next: Option<SeqNumber>,

    /// Some if looping
    last_in_loop: Option<SeqNumber>,
}

impl<I> Iterator for CompressLossList<I>
where
    I: Iterator<Item = SeqNumber>,
{
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        // if we're at the start, assign a next
        if self.next.is_none() {
            self.next = Some(self.iterator.next()?)
        }

        loop {
            // The state right here is
            // neither this nor next have been returned, and we need to figure out if this is
            // a) already in a loop and we continue on with that loop
            // b) already in a loop and need to break out
            // c) not in a loop and need to start one
            // d) not in a loop and doesn't need to start one

            let this = self.next?;
            match self.iterator.next() {
                Some(i) => self.next = Some(i),
                None => {
                    // invalidate next, so it None will be returned next time
                    self.next = None;

                    // return the one we have
                    return Some(this.as_raw());
                }
            };

            // the list must be sorted
            assert!(this < self.next?, "error: {}!<{}", this.0, self.next?.0);

            if let Some(last_in_loop) = self.last_in_loop {
                if last_in_loop + 2 == self.next? {
                    // continue with the loop
                    self.last_in_loop = Some(last_in_loop + 1);

                    continue;
                } else {
                    // break out of the loop
                    self.last_in_loop = None;

                    return Some(this.as_raw());
                }
            } else if this + 1 == self.next? {
                // create a loop
                self.last_in_loop = Some(this);

                // set the first bit to 1
                return Some(this.as_raw() | 1 << 31);
            } else {
                // no looping necessary
                return Some(this.as_raw());
            }
        }
    }
}

// keep in mind loss_list must be sorted
// takes in a list of u32, which is the loss list
pub fn compress_loss_list<I>(loss_list: I) -> CompressLossList<I>
where
    I: Iterator<Item = SeqNumber>,
{
    CompressLossList {
        iterator: loss_list,
        next: None,
        last_in_loop: None,
    }
}

/// Iterates the ranges of a compressed loss list as (first, last) inclusive pairs, without
/// expanding them.
///
/// PATCHED (hardening): the loss list comes straight from a remote NAK packet. Previously
/// decompression panicked on an unterminated range ("unterminated loop while decompressing loss
/// list"), overflowed `u32` (debug panic) on a range end with the top bit set, and looped up to
/// 2^32 times for an inverted range (end < start). Now:
/// * an unterminated range yields just its first sequence number,
/// * the range end is truncated to 31 bits like every other sequence number,
/// * an inverted range (end before start in modular order) yields just its first number,
///   so a range is never longer than `SeqNumber::MAX_DIFF`.
pub struct LossRanges<I> {
    iterator: I,
}

impl<I: Iterator<Item = u32>> Iterator for LossRanges<I> {
    type Item = (SeqNumber, SeqNumber);

    fn next(&mut self) -> Option<Self::Item> {
        let first = self.iterator.next()?;
        if first & (1 << 31) == 0 {
            let single = SeqNumber::new_truncate(first);
            return Some((single, single));
        }
        // set the first bit to zero
        let start = SeqNumber::new_truncate(first & !(1 << 31));
        match self.iterator.next() {
            Some(last) => {
                let end = SeqNumber::new_truncate(last & !(1 << 31));
                if end < start {
                    Some((start, start))
                } else {
                    Some((start, end))
                }
            }
            None => Some((start, start)),
        }
    }
}

pub fn loss_ranges<I: Iterator<Item = u32>>(loss_list: I) -> LossRanges<I> {
    LossRanges {
        iterator: loss_list,
    }
}

pub struct DecompressLossList<I> {
    ranges: LossRanges<I>,

    // next sequence number to yield, and how many more follow it in the current range
    loop_next_remaining: Option<(SeqNumber, u32)>,
}

impl<I: Iterator<Item = u32>> Iterator for DecompressLossList<I> {
    type Item = SeqNumber;

    fn next(&mut self) -> Option<SeqNumber> {
        let (next, remaining) = match self.loop_next_remaining {
            Some(state) => state,
            None => {
                let (start, end) = self.ranges.next()?;
                (start, end - start)
            }
        };
        self.loop_next_remaining = if remaining == 0 {
            None
        } else {
            Some((next + 1, remaining - 1))
        };
        Some(next)
    }
}

pub fn decompress_loss_list<I: Iterator<Item = u32>>(loss_list: I) -> DecompressLossList<I> {
    DecompressLossList {
        ranges: loss_ranges(loss_list),
        loop_next_remaining: None,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    const ONE: u32 = 1 << 31;

    #[test]
    fn loss_compression_test() {
        macro_rules! test_comp_decomp {
            ($x:expr, $y:expr) => {{
                assert_eq!(
                    compress_loss_list($x.iter().cloned().map(SeqNumber::new_truncate))
                        .collect::<Vec<_>>(),
                    $y.iter().cloned().collect::<Vec<_>>(),
                    "Compressed wasn't same as given"
                );
                assert_eq!(
                    decompress_loss_list($y.iter().cloned()).collect::<Vec<_>>(),
                    $x.iter()
                        .cloned()
                        .map(SeqNumber::new_truncate)
                        .collect::<Vec<_>>(),
                    "Decompressed not same as given"
                );
            }};
        }

        test_comp_decomp!([13, 14, 15, 16, 17, 18, 19], [13 | ONE, 19]);

        test_comp_decomp!(
            [1, 2, 3, 4, 5, 9, 11, 12, 13, 16, 17],
            [1 | ONE, 5, 9, 11 | ONE, 13, 16 | ONE, 17]
        );

        test_comp_decomp!([15, 16], [15 | ONE, 16]);

        test_comp_decomp!(
            [1_687_761_238, 1_687_761_239],
            [1_687_761_238 | ONE, 1_687_761_239]
        );
    }

    #[test]
    #[should_panic(expected = "error: 10!<1")]
    fn invalid_ordering() {
        let _ = compress_loss_list([10, 1].iter().copied().map(SeqNumber::new_truncate))
            .collect::<Vec<_>>();
    }

    // PATCHED (hardening): this used to be `#[should_panic(expected = "unterminated loop")]`;
    // a remote NAK must not be able to panic, the dangling range start is kept as a single loss.
    #[test]
    fn unterminated_loop() {
        assert_eq!(
            decompress_loss_list([10 | ONE].iter().copied()).collect::<Vec<_>>(),
            [SeqNumber::new_truncate(10)]
        );
    }

    #[test]
    fn hostile_ranges_are_bounded() {
        // end with the top bit set: truncated to 31 bits
        assert_eq!(
            decompress_loss_list([5 | ONE, 7 | ONE].iter().copied()).collect::<Vec<_>>(),
            [5, 6, 7].map(SeqNumber::new_truncate)
        );
        // inverted range: only the start
        assert_eq!(
            decompress_loss_list([10 | ONE, 2].iter().copied()).collect::<Vec<_>>(),
            [SeqNumber::new_truncate(10)]
        );
        // wrapping range is still fine
        assert_eq!(
            decompress_loss_list([(SeqNumber::MAX - 1) | ONE, 1].iter().copied())
                .collect::<Vec<_>>(),
            [SeqNumber::MAX - 1, 0, 1].map(SeqNumber::new_truncate)
        );
        assert_eq!(
            loss_ranges([0 | ONE, 0x7fff_ffff].iter().copied()).collect::<Vec<_>>(),
            [(SeqNumber::new_truncate(0), SeqNumber::new_truncate(0))]
        );
    }
}
