//! Where a live stream's segment and discontinuity numbers start on the node serving it: from
//! the clock, and never below what the node that served it last left in the store.

/// Where a live stream's segment and discontinuity numbers start. A stream that moves to
/// another node (a rolling restart) or comes back after it ended goes on with higher numbers
/// than it had, so players follow it as one playlist — hls.js places the new segments where
/// their numbers say, with a new timestamp mapping from the new discontinuity number — and a
/// cache in front never confuses one node's parts with another's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Numbering {
    /// The next media sequence number (segments and their parts).
    pub next_msn: u64,
    /// The next discontinuity sequence number. Kept small: hls.js walks an array indexed by it
    /// on every playlist load, so a clock-derived value would freeze the page.
    pub next_discontinuity: u64,
    /// Where the node that served the stream before stopped, when it stopped cleanly (a
    /// rolling restart): the next node's playlists bridge from there ([`Handover`]).
    pub handover: Option<Handover>,
}

/// Where a stopping node left its viewers: the first segment number it did not use and the
/// wall-clock end of its newest part. The next node lists the numbers between that one and its
/// own first segment as gap segments (`EXT-X-GAP`) in the old node's discontinuity, spanning
/// from that end to its own first segment: a player that followed the old node finds the
/// segment after its last one, by number or by date, and skips the gap, where without them
/// it finds nothing to load after the hole in the timeline and stalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handover {
    pub first_msn: u64,
    /// Unix milliseconds.
    pub edge_ms: i64,
}

impl Numbering {
    /// A new package's numbering at `now`: segment numbers count the segments of `segment`
    /// since the Unix epoch, and never fall behind `before` (what the node that served the
    /// stream last left in the store); discontinuities go on from `before`. The clock alone
    /// covers a node that died without saying (as long as the segments were no shorter than
    /// `segment` on average, which the encoder's forced keyframes give). The handover `before`
    /// carries passes on.
    pub fn starting(
        now: std::time::SystemTime,
        segment: std::time::Duration,
        before: Option<Numbering>,
    ) -> Numbering {
        let since = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let clock = u64::try_from(since / segment.as_millis().max(1)).unwrap_or(0);
        let before = before.unwrap_or_default();
        Numbering {
            next_msn: clock.max(before.next_msn),
            ..before
        }
    }

    /// What a stopping node leaves for the node taking its stream over: past the segment its
    /// playlists' preload hint announced (players hold it as the next segment, and would see
    /// another node's segment under its number as a mismatch) and past one more that the
    /// drain of its pipelines may still begin. `edge`: the end of its newest part, for the
    /// [`Handover`].
    pub fn past_drain(self, edge: Option<time::OffsetDateTime>) -> Numbering {
        Numbering {
            next_msn: self.next_msn.saturating_add(2),
            next_discontinuity: self.next_discontinuity,
            handover: edge.map(|edge| Handover {
                first_msn: self.next_msn,
                edge_ms: i64::try_from(edge.unix_timestamp_nanos() / 1_000_000).unwrap_or(0),
            }),
        }
    }

    /// The higher of each number. A handover is where one node left its viewers, never a
    /// number to go on from: none.
    pub fn max(self, other: Numbering) -> Numbering {
        Numbering {
            next_msn: self.next_msn.max(other.next_msn),
            next_discontinuity: self.next_discontinuity.max(other.next_discontinuity),
            handover: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn numbering_counts_the_clock_s_segments_and_never_falls_behind_what_was_left() {
        let now = std::time::UNIX_EPOCH + Duration::from_millis(1_000_999);
        let two = Duration::from_secs(2);
        let fresh = Numbering::starting(now, two, None);
        assert_eq!((fresh.next_msn, fresh.next_discontinuity), (500, 0));
        let behind = Numbering {
            next_msn: 7,
            next_discontinuity: 3,
            handover: None,
        };
        assert_eq!(
            Numbering::starting(now, two, Some(behind)),
            Numbering {
                next_msn: 500,
                next_discontinuity: 3,
                handover: None,
            }
        );
        let ahead = Numbering {
            next_msn: 900,
            next_discontinuity: 4,
            handover: None,
        };
        assert_eq!(Numbering::starting(now, two, Some(ahead)), ahead);
    }
}
