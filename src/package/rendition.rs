//! One rendition's segment store: its init segments and a window of CMAF segments made of
//! parts (LL-HLS partial segments = LL-DASH chunks), its retention (live window or DVR), and the
//! target duration its segments imply. Sans-IO: parts in, what changed out.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use time::OffsetDateTime;

use super::config::PackagingConfig;

#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub data: Bytes,
    pub duration: Duration,
    /// Starts with an IDR frame (EXT-X-PART INDEPENDENT=YES).
    pub independent: bool,
}

#[derive(Debug, Clone)]
pub struct Segment {
    pub msn: u64,
    pub parts: Vec<Part>,
    pub pdt: OffsetDateTime,
    /// Which init segment (`init_{n}.mp4`) its fragments decode with.
    pub init_version: u32,
    /// First segment after a publisher reconnect or source switch.
    pub discontinuity: bool,
    /// The first sequence number of its pipeline epoch: media time restarts at 0 there (a
    /// publisher reconnect); a source switch within an epoch keeps media time going.
    pub epoch_msn: u64,
    pub complete: bool,
    /// Size once written to the data dir; its parts' bytes may then be dropped from memory.
    pub on_disk: Option<usize>,
}

impl Segment {
    pub fn duration(&self) -> Duration {
        self.parts.iter().map(|p| p.duration).sum()
    }

    pub fn bytes(&self) -> usize {
        self.on_disk
            .unwrap_or_else(|| self.parts.iter().map(|p| p.data.len()).sum())
    }

    /// Whether the bytes are still held in memory (recent segments and parts are).
    pub fn in_memory(&self) -> bool {
        self.on_disk.is_none() || self.parts.iter().any(|p| !p.data.is_empty())
    }

    /// (msn, the parts' bytes): what a disk write needs, without concatenating.
    pub fn chunks(&self) -> (u64, Vec<Bytes>) {
        (
            self.msn,
            self.parts.iter().map(|p| p.data.clone()).collect(),
        )
    }

    /// The whole segment from memory: the concatenation of its parts.
    pub fn data(&self) -> Bytes {
        match self.parts.as_slice() {
            [only] => only.data.clone(),
            parts => {
                let mut out = Vec::with_capacity(self.bytes());
                for p in parts {
                    out.extend_from_slice(&p.data);
                }
                Bytes::from(out)
            }
        }
    }
}

/// A segment start this close before a source switch counts as after it: the output frame grid
/// (videorate) may place the switch frame up to one frame earlier.
const DISCONTINUITY_SLACK: Duration = Duration::from_millis(50);

/// Newest segments whose bytes stay in memory after they are on disk: they hold the parts that
/// LL-HLS clients fetch at the live edge.
pub const MEMORY_SEGMENTS: usize = 4;

/// How much a rendition keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Retention {
    /// The live window plus a fetchable tail, by count.
    Segments(usize),
    /// DVR: complete segments covering this much media time.
    Media(Duration),
}

/// What a push changed, for the caller to mirror on disk outside the lock.
#[derive(Debug, Default)]
pub struct PushOutcome {
    /// The completed segment's number and its parts (shared, not copied) to write in order.
    pub completed: Option<(u64, Vec<Bytes>)>,
    pub evicted: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RenditionKind {
    Video {
        width: u32,
        height: u32,
        frame_rate: f64,
    },
    Audio {
        channels: u8,
        sample_rate: u32,
    },
}

/// A part as the pipeline delivers it.
#[derive(Debug, Clone)]
pub struct PartIn {
    /// First part of a new segment (a CMAF fragment start).
    pub starts_segment: bool,
    pub independent: bool,
    pub duration: Duration,
    /// Wall-clock time of the part's first sample (EXT-X-PROGRAM-DATE-TIME).
    pub pdt: OffsetDateTime,
    pub data: Bytes,
}

#[derive(Debug)]
pub struct Rendition {
    /// Path segment in URLs: `1080p`, `audio`.
    pub name: String,
    pub kind: RenditionKind,
    /// RFC 6381 codec string, e.g. `avc1.64001f`, `mp4a.40.2`.
    pub codecs: String,
    /// Configured bitrate in bits/s (a floor for BANDWIDTH before segments exist).
    pub nominal_bitrate: u64,
    /// Init segments by version, newest last; a new one comes with every pipeline epoch whose
    /// encoder headers differ, and older ones stay while segments still refer to them.
    inits: VecDeque<(u32, Bytes)>,
    segments: VecDeque<Segment>,
    next_msn: u64,
    pending_discontinuity: bool,
    /// First sequence number of the current epoch (see [`Segment::epoch_msn`]).
    epoch_msn: u64,
    /// The first segment starting at or after this time carries EXT-X-DISCONTINUITY.
    discontinuity_from: Option<OffsetDateTime>,
    /// Discontinuities among the segments dropped from the store; the renderer adds those among
    /// segments kept but no longer listed (EXT-X-DISCONTINUITY-SEQUENCE).
    discontinuity_sequence: u64,
    /// Where the node before left the stream's viewers, and this rendition's first segment
    /// number: the playlists bridge from one to the other while that segment is held.
    handover: Option<(super::Handover, u64)>,
}

impl Rendition {
    pub fn new(name: &str, kind: RenditionKind, codecs: &str, nominal_bitrate: u64) -> Self {
        Rendition {
            name: name.to_owned(),
            kind,
            codecs: codecs.to_owned(),
            nominal_bitrate,
            inits: VecDeque::new(),
            segments: VecDeque::new(),
            next_msn: 0,
            pending_discontinuity: false,
            epoch_msn: 0,
            discontinuity_from: None,
            discontinuity_sequence: 0,
            handover: None,
        }
    }

    /// Installs the init segment for the parts that follow; identical bytes keep the version.
    pub fn set_init(&mut self, init: Bytes) {
        if self.inits.back().is_some_and(|(_, b)| *b == init) {
            return;
        }
        let version = self.inits.back().map_or(0, |(v, _)| v + 1);
        self.inits.push_back((version, init));
        // Keep only versions still referenced by a held segment, plus the newest.
        let oldest_used = self.segments.front().map_or(version, |s| s.init_version);
        while self.inits.len() > 1 && self.inits.front().is_some_and(|(v, _)| *v < oldest_used) {
            self.inits.pop_front();
        }
    }

    pub fn init(&self, version: u32) -> Option<&Bytes> {
        self.inits
            .iter()
            .find(|(v, _)| *v == version)
            .map(|(_, b)| b)
    }

    /// The init segment new fragments decode with.
    pub fn current_init(&self) -> Option<&Bytes> {
        self.inits.back().map(|(_, b)| b)
    }

    pub fn has_init(&self) -> bool {
        !self.inits.is_empty()
    }

    pub(crate) fn current_init_version(&self) -> u32 {
        self.inits.back().map_or(0, |(v, _)| *v)
    }

    pub fn segments(&self) -> &VecDeque<Segment> {
        &self.segments
    }

    pub fn discontinuity_sequence(&self) -> u64 {
        self.discontinuity_sequence
    }

    /// The segment being produced, if its first part exists.
    pub fn open_segment(&self) -> Option<&Segment> {
        self.segments.back().filter(|s| !s.complete)
    }

    /// Segment `msn`, by its number: numbers are increasing but not contiguous. A publisher
    /// leaves mid-segment, so one rendition may have opened a segment that another had not;
    /// the next epoch starts after the highest number any used (`continue_after`), and the
    /// others skip one. Indexing by the offset from the front answered for the skipped number
    /// with its successor, and for the newest with nothing (dash.js's next segment 404s).
    pub fn segment(&self, msn: u64) -> Option<&Segment> {
        let i = self.segments.binary_search_by_key(&msn, |s| s.msn).ok()?;
        self.segments.get(i)
    }

    /// (msn, part index) of the newest part, if any.
    pub fn last_part(&self) -> Option<(u64, usize)> {
        self.segments
            .back()
            .map(|s| (s.msn, s.parts.len().saturating_sub(1)))
    }

    /// The newest complete segment's msn.
    pub fn last_complete_msn(&self) -> Option<u64> {
        self.segments
            .iter()
            .rev()
            .find(|s| s.complete)
            .map(|s| s.msn)
    }

    /// Whether part `part` of segment `msn` exists (or can no longer appear because the segment
    /// closed with fewer parts and a later one exists).
    pub fn part_settled(&self, msn: u64, part: usize) -> bool {
        match self.last_part() {
            None => false,
            Some((last_msn, last_idx)) => last_msn > msn || (last_msn == msn && last_idx >= part),
        }
    }

    /// Starts the next segment with EXT-X-DISCONTINUITY (publisher came back, source switched).
    pub fn mark_discontinuity(&mut self) {
        self.pending_discontinuity = true;
        self.close_open_segment();
    }

    /// Between epochs: the publisher left (or the pipeline is being rebuilt) and this
    /// rendition's next segment will open a new epoch; its current epoch has no more segments.
    pub fn awaiting_epoch(&self) -> bool {
        self.pending_discontinuity
    }

    /// Marks the first segment that starts at or after `pdt` (the source changed at that media
    /// time, within one frame): the open segment, already announced to players, is left as is.
    pub fn mark_discontinuity_from(&mut self, pdt: OffsetDateTime) {
        self.discontinuity_from = Some(pdt);
    }

    /// Closes the open segment (end of stream, or before a discontinuity).
    pub fn close_open_segment(&mut self) {
        if let Some(s) = self.segments.back_mut() {
            s.complete = true;
        }
    }

    /// Numbers the first segment and counts discontinuities from `from`: a stream that moved
    /// from another node goes on past that node's numbers ([`super::Numbering`]). Only before
    /// the first segment; later, see `continue_after`.
    pub fn start_numbering_at(&mut self, from: super::Numbering) {
        if self.segments.is_empty() && self.next_msn == 0 {
            self.next_msn = from.next_msn;
            self.epoch_msn = from.next_msn;
            self.discontinuity_sequence = from.next_discontinuity;
            self.handover = from.handover.map(|h| (h, from.next_msn));
        }
    }

    /// The handover to bridge from, while this rendition's first segment is held and starts
    /// no discontinuity of its own.
    pub fn handover(&self) -> Option<super::Handover> {
        let (handover, first_msn) = self.handover?;
        let front = self.segments.front()?;
        (front.msn == first_msn && !front.discontinuity).then_some(handover)
    }

    /// The discontinuity sequence number of the newest segment (its EXT-X-DISCONTINUITY-
    /// SEQUENCE had it been listed first).
    pub fn last_discontinuity(&self) -> u64 {
        let held = self.segments.iter().filter(|s| s.discontinuity).count();
        self.discontinuity_sequence + held as u64
    }

    /// Continues numbering after `msn` (a new epoch must never reuse a sequence number).
    pub fn continue_after(&mut self, msn: u64) {
        self.next_msn = self.next_msn.max(msn + 1);
    }

    pub fn next_msn(&self) -> u64 {
        self.next_msn
    }

    /// Appends a part. Returns the segment it completed (to be written to disk) and the
    /// sequence numbers dropped from the store (their files are to be deleted).
    pub fn push_part(&mut self, part: PartIn, retention: Retention) -> PushOutcome {
        let mut outcome = PushOutcome::default();
        let open = self.segments.back().is_some_and(|s| !s.complete);
        if part.starts_segment || !open {
            if open {
                self.close_open_segment();
                outcome.completed = self.segments.back().map(Segment::chunks);
            }
            let switched = self
                .discontinuity_from
                .take_if(|t| part.pdt + DISCONTINUITY_SLACK >= *t)
                .is_some();
            let new_epoch = std::mem::take(&mut self.pending_discontinuity);
            if new_epoch {
                self.epoch_msn = self.next_msn;
            }
            let discontinuity = new_epoch || switched;
            let init_version = self.current_init_version();
            self.segments.push_back(Segment {
                msn: self.next_msn,
                parts: Vec::new(),
                pdt: part.pdt,
                init_version,
                discontinuity,
                epoch_msn: self.epoch_msn,
                complete: false,
                on_disk: None,
            });
            self.next_msn += 1;
        }
        let seg = self.segments.back_mut().expect("just ensured");
        seg.parts.push(Part {
            data: part.data,
            duration: part.duration,
            independent: part.independent,
        });
        outcome.evicted = self.evict(retention);
        outcome
    }

    /// Drops segments beyond the retention (never the newest two).
    pub fn evict(&mut self, retention: Retention) -> Vec<u64> {
        let mut evicted = Vec::new();
        loop {
            let too_many = match retention {
                Retention::Segments(n) => self.segments.len() > n.max(2),
                Retention::Media(window) => {
                    // Keep the newest complete segments that fit the window (media time).
                    let held: Duration = self
                        .segments
                        .iter()
                        .filter(|s| s.complete)
                        .map(Segment::duration)
                        .sum();
                    let front = self
                        .segments
                        .front()
                        .map_or(Duration::ZERO, Segment::duration);
                    self.segments.len() > 2 && held.saturating_sub(front) >= window
                }
            };
            if !too_many {
                return evicted;
            }
            evicted.extend(self.drop_oldest());
        }
    }

    fn drop_oldest(&mut self) -> Option<u64> {
        let old = self.segments.pop_front()?;
        if old.discontinuity {
            self.discontinuity_sequence += 1;
        }
        Some(old.msn)
    }

    /// Bounds what a failing disk leaves in memory: the window is cut from the front until at
    /// most `max` complete segments are held in memory only. A playlist cannot skip a hole, so
    /// older segments on disk go with them; the newest two always stay.
    pub fn cap_unwritten(&mut self, max: usize) -> Vec<u64> {
        let mut evicted = Vec::new();
        while self.segments.len() > 2
            && self
                .segments
                .iter()
                .filter(|s| s.complete && s.on_disk.is_none())
                .count()
                > max
        {
            evicted.extend(self.drop_oldest());
        }
        evicted
    }

    /// Empties the window (DVR cleanup): every complete segment goes; the open one stays.
    pub fn clear_complete(&mut self) -> Vec<u64> {
        let mut removed = Vec::new();
        while self.segments.front().is_some_and(|s| s.complete) {
            removed.extend(self.drop_oldest());
        }
        removed
    }

    /// Records that segment `msn` is on disk, and releases the memory of on-disk segments older
    /// than the newest [`MEMORY_SEGMENTS`].
    pub fn mark_on_disk(&mut self, msn: u64, len: usize) {
        if let Some(i) = self.segments.iter().position(|s| s.msn == msn) {
            self.segments[i].on_disk = Some(len);
        }
        let keep_from = self.segments.len().saturating_sub(MEMORY_SEGMENTS);
        for s in self.segments.range_mut(..keep_from) {
            if s.on_disk.is_some() {
                for p in &mut s.parts {
                    p.data = Bytes::new();
                }
            }
        }
    }

    /// Peak bits/s over the complete segments held, or the nominal rate before there are any.
    pub fn peak_bitrate(&self) -> u64 {
        let measured = self
            .segments
            .iter()
            .filter(|s| s.complete && !s.duration().is_zero())
            .map(|s| (s.bytes() as f64 * 8.0 / s.duration().as_secs_f64()) as u64)
            .max()
            .unwrap_or(0);
        measured.max(self.nominal_bitrate)
    }

    pub fn average_bitrate(&self) -> u64 {
        let (bytes, secs) = self
            .segments
            .iter()
            .filter(|s| s.complete)
            .fold((0usize, 0f64), |(b, d), s| {
                (b + s.bytes(), d + s.duration().as_secs_f64())
            });
        if secs > 0.0 {
            (bytes as f64 * 8.0 / secs) as u64
        } else {
            self.nominal_bitrate
        }
    }
}

// Here rather than beside the struct: it reads segments, and the config module stays a leaf.
impl PackagingConfig {
    /// The target duration for a playlist holding `segments`: rfc8216bis §4.4.3.1 "The EXTINF
    /// duration of each Media Segment in a Playlist file, when rounded to the nearest integer,
    /// MUST be less than or equal to the Target Duration".
    pub fn target_duration_for<'a>(&self, segments: impl Iterator<Item = &'a Segment>) -> u64 {
        segments
            .map(|s| s.duration().as_secs_f64().round() as u64)
            .fold(self.target_duration_secs(), u64::max)
    }
}
