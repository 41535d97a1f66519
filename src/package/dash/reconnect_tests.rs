//! The MPD across a publisher reconnect, checked the way a player reads it: every `$Number$`
//! whose availability start time has passed (ISO 23009-1 §5.3.9.5) must be a segment of that
//! Period's epoch in every representation of its set — or, in the live Period, the one being
//! produced, which the server holds the request for.

use std::time::Duration;

use time::OffsetDateTime;

use super::{render_mpd, DashClient};
use crate::package::state::tests::{part, stereo_audio, video_720p};
use crate::package::{PackageState, PackagingConfig};

const VIDEO: usize = 0;
const AUDIO: usize = 1;

fn secs(v: &str) -> f64 {
    let v = v.strip_prefix("PT").and_then(|v| v.strip_suffix('S'));
    v.expect("PTnS").parse().expect("seconds")
}

fn date(v: &str) -> OffsetDateTime {
    let f = time::format_description::well_known::Rfc3339;
    OffsetDateTime::parse(v, &f).expect("xs:dateTime")
}

/// What `mpd` announces as available at `now`, as (Period id, representation, number), each
/// checked against the store: panics on one that does not exist and never will.
fn check_announced(pkg: &PackageState, mpd: &str, now: OffsetDateTime) -> Vec<(u64, String, u64)> {
    let doc = roxmltree::Document::parse(mpd).expect("MPD is XML");
    let root = doc.root_element();
    let ast = date(root.attribute("availabilityStartTime").unwrap());
    let depth = secs(root.attribute("timeShiftBufferDepth").unwrap());
    let now = (now - ast).as_seconds_f64();
    let periods: Vec<_> = root
        .children()
        .filter(|n| n.has_tag_name("Period"))
        .collect();
    let mut announced = Vec::new();
    for (i, period) in periods.iter().enumerate() {
        let epoch: u64 = period.attribute("id").unwrap().parse().unwrap();
        let start = secs(period.attribute("start").unwrap());
        let end = match (period.attribute("duration"), periods.get(i + 1)) {
            (Some(d), _) => start + secs(d),
            (None, Some(next)) => secs(next.attribute("start").unwrap()),
            (None, None) => f64::INFINITY,
        };
        let live = end.is_infinite();
        for set in period
            .children()
            .filter(|n| n.has_tag_name("AdaptationSet"))
        {
            let t = set
                .children()
                .find(|n| n.has_tag_name("SegmentTemplate"))
                .unwrap();
            let num = |a: &str| t.attribute(a).unwrap().parse::<f64>().unwrap();
            let d = num("duration") / num("timescale");
            let ato = num("availabilityTimeOffset");
            let first = num("startNumber") as u64;
            for rep in set.children().filter(|n| n.has_tag_name("Representation")) {
                let name = rep.attribute("id").unwrap();
                let r = pkg.rendition(name).unwrap();
                for k in first.. {
                    let seg_start = start + (k - first) as f64 * d;
                    if seg_start >= end || start + (k - first + 1) as f64 * d - ato > now {
                        break; // past the Period, or not available yet
                    }
                    if start + (k - first + 1) as f64 * d < now - depth {
                        continue; // left the time-shift buffer
                    }
                    let held = r.segment(k).filter(|s| s.epoch_msn == epoch);
                    let growing = live && k == r.next_msn() && !pkg.ended();
                    assert!(
                        held.is_some() || growing,
                        "{name}/seg_{k}.m4s is announced in Period {epoch} at {now:.3} s but \
                         will never exist there (next {})\n{mpd}",
                        r.next_msn()
                    );
                    announced.push((epoch, name.to_owned(), k));
                }
            }
        }
    }
    announced
}

fn mpd_at(pkg: &PackageState, now: OffsetDateTime) -> String {
    render_mpd(pkg, now, "http://h/time", DashClient::LowLatency).expect("an MPD")
}

/// Pushes `parts` 500 ms parts of one track from `t`, a segment every four.
fn push(pkg: &mut PackageState, r: usize, t: OffsetDateTime, parts: std::ops::Range<u64>) {
    for i in parts {
        let at = t + Duration::from_millis(500 * i);
        pkg.push_part(r, part(i % 4 == 0, 500, at));
    }
}

/// The publisher leaves (the lifecycle's `mark_discontinuity`), then a new pipeline installs
/// its renditions, numbered after the highest sequence number any of them used.
fn reconnect(pkg: &mut PackageState) {
    for r in pkg.list_mut(crate::package::Output::Cmaf).unwrap() {
        r.mark_discontinuity();
    }
    let next = pkg.renditions().iter().map(|r| r.next_msn()).max().unwrap();
    for r in pkg.list_mut(crate::package::Output::Cmaf).unwrap() {
        r.continue_after(next - 1);
    }
}

/// A reconnect that lost a segment: the publisher left just after a segment boundary, so the video opened
/// segment 4 (one part) and the audio, whose last frames ended before it, did not. The new
/// epoch is numbered from 5; the old Period, with no end, announced `audio/seg_4.m4s` — which
/// dash.js asked for again and again (404) — and, until the new Period began, numbers of the
/// new epoch as its own. Then the new epoch starts with its audio a part behind the video.
#[test]
fn no_number_is_announced_that_will_not_exist_across_a_reconnect() {
    let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let mut pkg = PackageState::new(
        PackagingConfig::default(),
        vec![video_720p(3_000_000), stereo_audio(128_000)],
    );
    push(&mut pkg, VIDEO, t0, 0..17);
    push(&mut pkg, AUDIO, t0, 0..16);
    reconnect(&mut pkg);
    assert_eq!(pkg.renditions()[AUDIO].next_msn(), 5);
    let gap = |ms: u64| t0 + Duration::from_millis(8500 + ms);
    let mut seen = Vec::new();
    // While the publisher is away, and across the new epoch's first segments.
    for ms in (0..3000).step_by(100) {
        seen.extend(check_announced(&pkg, &mpd_at(&pkg, gap(ms)), gap(ms)));
    }
    let t1 = gap(3000);
    for i in 0..12u64 {
        let at = t1 + Duration::from_millis(500 * i);
        pkg.push_part(VIDEO, part(i % 4 == 0, 500, at));
        let before = mpd_at(&pkg, at + Duration::from_millis(250));
        seen.extend(check_announced(
            &pkg,
            &before,
            at + Duration::from_millis(250),
        ));
        // The audio of the new epoch comes a part later than its video.
        if i > 0 {
            let j = i - 1;
            let audio_at = t1 + Duration::from_millis(500 * j);
            pkg.push_part(AUDIO, part(j % 4 == 0, 500, audio_at));
        }
        let after = mpd_at(&pkg, at + Duration::from_millis(499));
        seen.extend(check_announced(
            &pkg,
            &after,
            at + Duration::from_millis(499),
        ));
    }
    // The checks did check something: both epochs' segments were announced in their Periods.
    for (epoch, name, k) in [
        (0, "audio", 3),
        (0, "720p", 3),
        (5, "audio", 5),
        (5, "720p", 6),
    ] {
        assert!(
            seen.contains(&(epoch, name.to_owned(), k)),
            "{name}/seg_{k} in Period {epoch} never announced"
        );
    }
    let mpd = mpd_at(&pkg, t1 + Duration::from_secs(6));
    for needle in [
        "<Period id=\"0\" start=\"PT0.000S\" duration=\"PT8.000S\">",
        "<Period id=\"5\" start=\"PT11.500S\">",
        "minimumUpdatePeriod=\"PT10.000S\"",
    ] {
        assert!(mpd.contains(needle), "missing {needle} in\n{mpd}");
    }
}

/// Between epochs the ended Period says so (where its media ends, not at a whole segment) and
/// players look for the next one every segment;
/// the new Period is announced only once every rendition has begun it.
#[test]
fn the_new_period_waits_for_every_rendition() {
    let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let mut pkg = PackageState::new(
        PackagingConfig::default(),
        vec![video_720p(3_000_000), stereo_audio(128_000)],
    );
    // The publisher leaves 1.5 s into segment 3: the Period ends where its media does.
    push(&mut pkg, VIDEO, t0, 0..15);
    push(&mut pkg, AUDIO, t0, 0..15);
    reconnect(&mut pkg);
    let t1 = t0 + Duration::from_secs(10);
    let away = mpd_at(&pkg, t1);
    assert!(away.contains("minimumUpdatePeriod=\"PT2.000S\""), "{away}");
    assert!(away.contains("duration=\"PT7.500S\">"), "{away}");
    push(&mut pkg, VIDEO, t1, 0..2);
    let video_only = mpd_at(&pkg, t1 + Duration::from_secs(1));
    assert_eq!(video_only.matches("<Period ").count(), 1, "{video_only}");
    push(&mut pkg, AUDIO, t1, 0..1);
    let both = mpd_at(&pkg, t1 + Duration::from_secs(1));
    assert!(
        both.contains("<Period id=\"4\" start=\"PT10.000S\">"),
        "{both}"
    );
    assert!(both.contains("minimumUpdatePeriod=\"PT10.000S\""), "{both}");
    assert_eq!(both.matches("<SegmentTemplate").count(), 4, "{both}");
}
