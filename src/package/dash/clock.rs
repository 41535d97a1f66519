//! The MPD's clock when the encoder falls behind real time. A `$Number$` template times each
//! segment from its Period's start: segment k is announced at start + (k − first + 1) × d − ato.
//! An epoch's first Period starts where the ingest's clock puts the epoch, so an encoder that
//! runs below real time makes segments later and later than announced, and players aim at a live
//! edge that has no media (they wait on held requests, catch up into nothing, and report the
//! encoder's delay as their own latency). An MPD update must not move a Period's start or the
//! availability start time (ISO 23009-1 §5.4), so the clock moves the only way it may: the
//! numbers not announced yet continue in a new Period, started where the encoder is. Sans-IO:
//! the time a segment began comes in, anchors go out.

use std::time::Duration;

use time::OffsetDateTime;

/// A new Period within epoch `epoch`: its numbers from `msn` on are timed from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    pub epoch: u64,
    pub msn: u64,
    pub start: OffsetDateTime,
}

/// The Periods the clock started after their epochs' own, oldest first.
#[derive(Debug, Default)]
pub struct Clock {
    anchors: Vec<Anchor>,
}

/// Where segment `msn` of an epoch sits on the clock in force for it.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The first number timed from `start`.
    pub first: u64,
    pub start: OffsetDateTime,
    /// Every template's segment duration.
    pub d: Duration,
    /// The part duration: a segment is announced once its first part could exist.
    pub part: Duration,
}

impl Timing {
    /// When the MPD lets players ask for `msn`: start + (msn − first) × d + part (an
    /// `availabilityTimeOffset` of all of the segment but its first part).
    pub fn announced_at(&self, msn: u64) -> Option<OffsetDateTime> {
        let k = u32::try_from(msn.checked_sub(self.first)?).ok()?;
        Some(self.start + self.d * k + self.part)
    }

    /// The newest number announced at `now`, if any.
    pub fn announced(&self, now: OffsetDateTime) -> Option<u64> {
        let since = Duration::try_from(now - self.start - self.part).ok()?;
        let whole = since.as_nanos() / self.d.as_nanos().max(1);
        Some(self.first + u64::try_from(whole).ok()?)
    }
}

impl Clock {
    /// The anchors of `epoch`, oldest first.
    pub fn of(&self, epoch: u64) -> impl Iterator<Item = &Anchor> {
        self.anchors.iter().filter(move |a| a.epoch == epoch)
    }

    /// Segment `msn` of `epoch` began (its first part exists) at `now`; `timing` is the clock in
    /// force for it. Began more than a segment after the MPD announced it, the numbers after
    /// those already announced (and the next, which a player refetching the MPD every segment
    /// may see announced before it learns of the change) are timed from a new Period, whose
    /// first is announced when it begins if the encoder keeps real time from now. Timed any
    /// later, a player at the old Period's end would wait for media that is already there
    /// (an encoder working off a backlog runs faster than real time); timed too early, it waits
    /// no longer than the encoder makes it, and the clock moves again. Until that Period has
    /// begun no other is started.
    pub fn segment_began(&mut self, epoch: u64, msn: u64, now: OffsetDateTime, timing: Timing) {
        if self.of(epoch).any(|a| a.msn > msn) {
            return;
        }
        let Some(due) = timing.announced_at(msn) else {
            return;
        };
        if now <= due + timing.d {
            return;
        }
        let Some(shown) = timing.announced(now) else {
            return;
        };
        let first = shown.max(msn) + 2;
        let Ok(ahead) = u32::try_from(first - msn) else {
            return;
        };
        self.anchors.push(Anchor {
            epoch,
            msn: first,
            start: now + timing.d * ahead - timing.part,
        });
    }

    /// Keeps what the MPD may still list: anchors of the epochs in `epochs` (with the oldest
    /// number each holds), except one superseded by a later anchor at or before that number.
    pub fn retain(&mut self, epochs: &[(u64, u64)]) {
        let oldest = |epoch: u64| epochs.iter().find(|(e, _)| *e == epoch).map(|(_, m)| *m);
        let superseded: Vec<bool> = (0..self.anchors.len())
            .map(|i| {
                let a = self.anchors[i];
                let next = self.anchors[i + 1..].iter().find(|b| b.epoch == a.epoch);
                match (oldest(a.epoch), next) {
                    (None, _) => true,
                    (Some(m), Some(b)) => b.msn <= m,
                    (Some(_), None) => false,
                }
            })
            .collect();
        let mut keep = superseded.iter().map(|s| !s);
        self.anchors.retain(|_| keep.next().unwrap_or(true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(t0: OffsetDateTime) -> Timing {
        Timing {
            first: 0,
            start: t0,
            d: Duration::from_secs(2),
            part: Duration::from_millis(500),
        }
    }

    /// Segment 3 is announced at 6.5 s. Begun at 8.4 s (late, within a segment) the clock
    /// stays; begun at 9 s, numbers 4 (announced at 8.5 s) and 5 (at 10.5 s) keep the old
    /// clock and 6 starts a Period of its own at 14.5 s: begun then at real time, it is
    /// announced at 15 s, when its first part can be there.
    #[test]
    fn a_segment_a_segment_late_moves_the_numbers_not_announced_yet() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut clock = Clock::default();
        clock.segment_began(0, 3, at(8_400), timing(t0));
        assert_eq!(clock.of(0).count(), 0);
        clock.segment_began(0, 3, at(9_000), timing(t0));
        let a = *clock.of(0).next().unwrap();
        assert_eq!(
            a,
            Anchor {
                epoch: 0,
                msn: 6,
                start: at(14_500)
            }
        );
        let new = Timing {
            first: a.msn,
            start: a.start,
            ..timing(t0)
        };
        assert_eq!(new.announced_at(6), Some(at(15_000)));
        // The old Period ends (at 12 s, before 6) before the new one starts: the gap is how
        // late segment 3 began.
        assert_eq!(a.start - at(12_000), time::Duration::milliseconds(2_500));
        // Until that Period begins, the clock does not move again.
        clock.segment_began(0, 4, at(20_000), timing(t0));
        assert_eq!(clock.of(0).count(), 1);
    }

    #[test]
    fn anchors_go_with_their_epoch_or_once_a_later_one_covers_the_window() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let anchor = |epoch, msn| Anchor {
            epoch,
            msn,
            start: t0,
        };
        let mut clock = Clock {
            anchors: vec![anchor(0, 6), anchor(0, 12), anchor(20, 26)],
        };
        clock.retain(&[(0, 8), (20, 20)]);
        assert_eq!(clock.anchors.len(), 3, "8 is still on the anchor at 6");
        clock.retain(&[(0, 12), (20, 21)]);
        assert_eq!(clock.anchors, [anchor(0, 12), anchor(20, 26)]);
        clock.retain(&[(20, 21)]);
        assert_eq!(clock.anchors, [anchor(20, 26)]);
    }
}
