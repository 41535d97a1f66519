//! A recording on disk, laid out so that no crash can leave it unplayable: per track one media
//! file that starts with its init segment (ftyp+moov) and grows by whole CMAF fragments
//! (moof+mdat), and one append-only index whose every line is written — and synced — only
//! after the fragment it names is on disk. Recovery after `kill -9` or a power loss keeps
//! exactly what the index names and cuts the rest, so the newest complete fragment is the
//! worst loss (RPO ≤ one fragment) and nothing half-written survives.
//!
//! Files of a recording directory:
//! - `{track}.mp4`: init segment, then fragments; a valid fragmented MP4 at every index line.
//! - `index.log`: `init {track} {len}` once per track, then `frag {track} {offset} {len}
//!   {duration_ns} {pdt_unix_ms} {discontinuity 0|1}` per fragment.
//!
//! The writer does blocking I/O: it runs on a recorder's own thread, never on a streaming
//! thread or an async worker.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use time::OffsetDateTime;

use super::mp4;

const INDEX: &str = "index.log";
/// A track name is a rendition name (`720p`, `audio`, `source`): it names a file, so it is
/// checked, never taken from a request.
const MAX_TRACK_NAME: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum FragmentsError {
    #[error("recording I/O on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("track name {0:?} is not a plain name")]
    BadTrack(String),
    #[error("track {0} has no init segment yet")]
    NoInit(String),
    #[error("stopped: {0}")]
    NoSpace(#[from] super::budget::NoSpace),
    #[error("track {track}: {source}")]
    Mp4 {
        track: String,
        source: super::mp4::Mp4Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> FragmentsError + '_ {
    move |source| FragmentsError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One fragment as the index names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    pub offset: u64,
    pub len: u64,
    pub duration: Duration,
    /// Wall-clock time of its first sample, to the millisecond.
    pub pdt: OffsetDateTime,
    /// First fragment after a reconnect or a source switch.
    pub discontinuity: bool,
}

/// One track of a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Track {
    pub name: String,
    /// ftyp+moov: what `EXT-X-MAP` addresses.
    pub init_len: u64,
    /// Where the first fragment starts: after the init and the `free` box reserved for the
    /// `sidx` ([`super::mp4::SIDX_RESERVE`]).
    pub media_start: u64,
    pub fragments: Vec<Fragment>,
}

impl Track {
    pub fn duration(&self) -> Duration {
        self.fragments.iter().map(|f| f.duration).sum()
    }

    /// Bytes of the media file: init + fragments.
    pub fn size(&self) -> u64 {
        self.fragments
            .last()
            .map_or(self.media_start, |f| f.offset + f.len)
    }
}

/// What a recording directory holds (tracks by name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub tracks: BTreeMap<String, Track>,
}

impl Summary {
    /// The longest rendition's duration (its tracks one after the other): what a player of
    /// the recording shows.
    pub fn duration(&self) -> Duration {
        self.duration_of(|_| true)
    }

    /// The longest duration among the renditions whose tracks `keep` accepts (zero if none).
    pub fn duration_of(&self, keep: impl Fn(&Track) -> bool) -> Duration {
        self.renditions()
            .iter()
            .filter(|(_, tracks)| tracks.iter().all(|t| keep(t)))
            .map(|(_, tracks)| tracks.iter().map(|t| t.duration()).sum())
            .max()
            .unwrap_or_default()
    }

    /// The tracks by rendition, each rendition's in generation order (`720p`, `720p-2`, …);
    /// renditions by name.
    pub fn renditions(&self) -> Vec<(&str, Vec<&Track>)> {
        let mut by: BTreeMap<&str, Vec<(u32, &Track)>> = BTreeMap::new();
        for t in self.tracks.values() {
            let (base, generation) = rendition_of(&t.name);
            by.entry(base).or_default().push((generation, t));
        }
        by.into_iter()
            .map(|(base, mut tracks)| {
                tracks.sort_by_key(|(g, _)| *g);
                (base, tracks.into_iter().map(|(_, t)| t).collect())
            })
            .collect()
    }

    pub fn size(&self) -> u64 {
        self.tracks.values().map(Track::size).sum()
    }
}

fn check_track(name: &str) -> Result<(), FragmentsError> {
    let plain = !name.is_empty()
        && name.len() <= MAX_TRACK_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        Ok(())
    } else {
        Err(FragmentsError::BadTrack(name.to_owned()))
    }
}

/// A track's rendition and generation: `720p` → (`720p`, 1), `720p-2` → (`720p`, 2) (the
/// recorder's naming; a rendition name never ends in `-{digits}`).
pub fn rendition_of(track: &str) -> (&str, u32) {
    match track.rsplit_once('-') {
        Some((base, n)) if !base.is_empty() => match n.parse::<u32>() {
            Ok(g) if g >= 2 && !n.starts_with('0') => (base, g),
            _ => (track, 1),
        },
        _ => (track, 1),
    }
}

pub fn media_path(dir: &Path, track: &str) -> PathBuf {
    dir.join(format!("{track}.mp4"))
}

struct Open {
    file: File,
    len: u64,
    layout: mp4::InitLayout,
    /// The timeline epoch of its last fragment, and where that fragment ended (ns).
    epoch: usize,
    end_ns: Option<i128>,
}

/// Appends fragments to a recording directory.
pub struct Writer {
    dir: PathBuf,
    index: File,
    files: BTreeMap<String, Open>,
    summary: Summary,
    /// Per timeline epoch, what is added to decode times (ns). Epoch 0 starts the recording
    /// at 0 (its first fragment's time is subtracted, the same for every track: they share the
    /// live pipeline's clock, so they stay in sync). Each discontinuity (a reconnect restarts
    /// the pipeline's clock) opens the next epoch, placed where the furthest track ended.
    epochs: Vec<i128>,
}

impl Writer {
    /// Starts a new recording in `dir` (created; it must not hold one already).
    pub fn create(dir: &Path) -> Result<Writer, FragmentsError> {
        std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        let path = dir.join(INDEX);
        let index = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(io_at(&path))?;
        // The directory entry of the new index must survive a power loss too.
        sync_dir(dir)?;
        Ok(Writer {
            dir: dir.to_owned(),
            index,
            files: BTreeMap::new(),
            summary: Summary::default(),
            epochs: Vec::new(),
        })
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    fn append_index(&mut self, line: &str) -> Result<(), FragmentsError> {
        let path = self.dir.join(INDEX);
        self.index
            .write_all(line.as_bytes())
            .and_then(|()| self.index.sync_data())
            .map_err(io_at(&path))
    }

    /// Opens a track with its init segment. A track is opened once: a pipeline rebuilt with a
    /// new init starts a new track name (the caller numbers them).
    pub fn init(&mut self, track: &str, init: &[u8]) -> Result<(), FragmentsError> {
        check_track(track)?;
        let (init, layout) = mp4::prepare_init(init).map_err(|source| FragmentsError::Mp4 {
            track: track.to_owned(),
            source,
        })?;
        let path = media_path(&self.dir, track);
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(io_at(&path))?;
        file.write_all(&init)
            .and_then(|()| file.write_all(&mp4::reserve()))
            .and_then(|()| file.sync_data())
            .map_err(io_at(&path))?;
        sync_dir(&self.dir)?;
        let media_start = layout.init_len + mp4::SIDX_RESERVE as u64;
        self.append_index(&format!("init {track} {} {media_start}\n", layout.init_len))?;
        self.files.insert(
            track.to_owned(),
            Open {
                file,
                len: media_start,
                layout: layout.clone(),
                epoch: 0,
                end_ns: None,
            },
        );
        self.summary.tracks.insert(
            track.to_owned(),
            Track {
                name: track.to_owned(),
                init_len: layout.init_len,
                media_start,
                fragments: Vec::new(),
            },
        );
        Ok(())
    }

    /// Appends one fragment (its chunks in order) and then indexes it. A failure leaves the
    /// file longer than its index says; recovery cuts that tail.
    pub fn fragment(
        &mut self,
        track: &str,
        chunks: &[Bytes],
        duration: Duration,
        pdt: OffsetDateTime,
        discontinuity: bool,
    ) -> Result<&Fragment, FragmentsError> {
        let path = media_path(&self.dir, track);
        let furthest = self.files.values().filter_map(|o| o.end_ns).max();
        let open = self
            .files
            .get_mut(track)
            .ok_or_else(|| FragmentsError::NoInit(track.to_owned()))?;
        let offset = open.len;
        let layout = &open.layout;
        let rate = |track: u32| i128::from(layout.timescale_of(track).unwrap_or(1).max(1));
        // A fragment whose tfdt cannot be read is written as it came.
        let first_ns = chunks
            .first()
            .and_then(|c| mp4::fragment_decode_time(c).ok())
            .map(|(track, t)| i128::from(t) * 1_000_000_000 / rate(track));
        let rebased: Option<Vec<Bytes>> = first_ns.and_then(|first_ns| {
            if discontinuity && open.end_ns.is_some() {
                open.epoch += 1;
            }
            if self.epochs.len() <= open.epoch {
                self.epochs
                    .push(furthest.map_or(-first_ns, |end| end - first_ns));
            }
            let shift = self.epochs[open.epoch.min(self.epochs.len() - 1)];
            open.end_ns = Some(first_ns + shift + duration.as_nanos() as i128);
            chunks
                .iter()
                .map(|c| {
                    mp4::map_decode_times(c, |track, t| {
                        let shift_ticks = shift * rate(track) / 1_000_000_000;
                        (i128::from(t) + shift_ticks).clamp(0, i128::from(u64::MAX)) as u64
                    })
                    .ok()
                })
                .collect()
        });
        let mut len = 0u64;
        let mut write = |c: &[u8]| -> Result<(), FragmentsError> {
            open.file.write_all(c).map_err(io_at(&path))?;
            len += c.len() as u64;
            Ok(())
        };
        match &rebased {
            Some(chunks) => chunks.iter().try_for_each(|c| write(c))?,
            None => chunks.iter().try_for_each(|c| write(c))?,
        }
        open.file.sync_data().map_err(io_at(&path))?;
        open.len += len;
        let pdt_ms = (pdt.unix_timestamp_nanos() / 1_000_000) as i64;
        self.append_index(&format!(
            "frag {track} {offset} {len} {} {pdt_ms} {}\n",
            duration.as_nanos(),
            u8::from(discontinuity)
        ))?;
        let fragments = &mut self
            .summary
            .tracks
            .get_mut(track)
            .expect("opened with its file")
            .fragments;
        fragments.push(Fragment {
            offset,
            len,
            duration,
            pdt: from_unix_ms(pdt_ms),
            discontinuity,
        });
        Ok(fragments.last().expect("just pushed"))
    }
}

fn from_unix_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), FragmentsError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(dir))
}

/// Reads a recording directory after an interruption (or to serve it): what the index names,
/// with every media file cut to its last indexed fragment. A torn last index line, a fragment
/// line past its file's end, or a track without its init line are dropped. Idempotent.
pub fn recover(dir: &Path) -> Result<Summary, FragmentsError> {
    let path = dir.join(INDEX);
    let (summary, valid_len) = read_index(dir)?;
    // Cut a torn tail of the index so the next append starts on a line.
    let index = OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(io_at(&path))?;
    index.set_len(valid_len).map_err(io_at(&path))?;
    for track in summary.tracks.values() {
        let media = media_path(dir, &track.name);
        let mut file = OpenOptions::new()
            .write(true)
            .open(&media)
            .map_err(io_at(&media))?;
        let len = file.seek(SeekFrom::End(0)).map_err(io_at(&media))?;
        if len > track.size() {
            file.set_len(track.size()).map_err(io_at(&media))?;
            file.sync_all().map_err(io_at(&media))?;
        }
    }
    Ok(summary)
}

/// What the index of a recording names, without changing anything on disk (to serve a
/// finished recording), and the length of its valid lines.
pub fn read_index(dir: &Path) -> Result<(Summary, u64), FragmentsError> {
    let path = dir.join(INDEX);
    let file = File::open(&path).map_err(io_at(&path))?;
    let mut summary = Summary::default();
    let mut valid_len = 0u64;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(io_at(&path))?;
        // A line without its newline was being written when the process stopped.
        if n == 0 || !line.ends_with('\n') {
            break;
        }
        if !apply(dir, &mut summary, line.trim_end()) {
            break;
        }
        valid_len += n as u64;
    }
    Ok((summary, valid_len))
}

/// Applies one index line; `false` stops the reading (nothing after a bad line is trusted).
fn apply(dir: &Path, summary: &mut Summary, line: &str) -> bool {
    let fields: Vec<&str> = line.split(' ').collect();
    match fields.as_slice() {
        ["init", track, len, start] => {
            let (Ok(()), Ok(len), Ok(start)) =
                (check_track(track), len.parse::<u64>(), start.parse::<u64>())
            else {
                return false;
            };
            let on_disk = std::fs::metadata(media_path(dir, track)).map_or(0, |m| m.len());
            if on_disk < start || start < len {
                return false;
            }
            summary.tracks.insert(
                (*track).to_owned(),
                Track {
                    name: (*track).to_owned(),
                    init_len: len,
                    media_start: start,
                    fragments: Vec::new(),
                },
            );
            true
        }
        ["frag", track, offset, len, duration, pdt, disc] => {
            let parsed = (
                offset.parse::<u64>(),
                len.parse::<u64>(),
                duration.parse::<u64>(),
                pdt.parse::<i64>(),
            );
            let (Ok(offset), Ok(len), Ok(duration), Ok(pdt)) = parsed else {
                return false;
            };
            let Some(t) = summary.tracks.get_mut(*track) else {
                return false;
            };
            let on_disk = std::fs::metadata(media_path(dir, track)).map_or(0, |m| m.len());
            if offset != t.size() || offset.saturating_add(len) > on_disk {
                return false;
            }
            t.fragments.push(Fragment {
                offset,
                len,
                duration: Duration::from_nanos(duration),
                pdt: from_unix_ms(pdt),
                discontinuity: *disc == "1",
            });
            true
        }
        _ => false,
    }
}

/// Writes the durations and the `sidx` of every track in place (see [`super::mp4`]): after a
/// normal end, and again after [`recover`] — the writes have fixed sizes, so repeating them is
/// harmless, and a crash during them leaves a file that still plays.
pub fn finalize(dir: &Path, summary: &Summary) -> Result<(), FragmentsError> {
    use std::os::unix::fs::FileExt;
    for track in summary.tracks.values() {
        let Some(first) = track.fragments.first() else {
            continue;
        };
        let path = media_path(dir, &track.name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_at(&path))?;
        let mp4_err = |source| FragmentsError::Mp4 {
            track: track.name.clone(),
            source,
        };
        let mut init = vec![0u8; track.init_len as usize];
        file.read_exact_at(&mut init, 0).map_err(io_at(&path))?;
        let layout = mp4::layout(&init).map_err(mp4_err)?;
        let mut head = vec![0u8; first.len.min(64 * 1024) as usize];
        file.read_exact_at(&mut head, first.offset)
            .map_err(io_at(&path))?;
        let (first_track, first_time) = mp4::fragment_decode_time(&head).map_err(mp4_err)?;
        // The sidx's earliest time is in its reference track's timescale.
        let (_, reference_rate) = layout.reference();
        let first_rate = layout
            .timescale_of(first_track)
            .unwrap_or(reference_rate)
            .max(1);
        let decode_time =
            (u128::from(first_time) * u128::from(reference_rate) / u128::from(first_rate)) as u64;
        let fragments: Vec<(u64, Duration)> = track
            .fragments
            .iter()
            .map(|f| (f.len, f.duration))
            .collect();
        for (at, bytes) in mp4::finalize(&layout, &fragments, decode_time).map_err(mp4_err)? {
            file.write_all_at(&bytes, at).map_err(io_at(&path))?;
        }
        file.sync_data().map_err(io_at(&path))?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A box: 32-bit size, type, payload (for the torn-write tests' own fragments).
    fn mp4_box(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut b = ((payload.len() + 8) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(payload);
        b
    }

    fn fragment(n: u8) -> Vec<Bytes> {
        vec![
            Bytes::from(mp4_box(b"moof", &[n; 24])),
            Bytes::from(mp4_box(b"mdat", &[n; 100])),
        ]
    }

    /// Real cmafmux output for `seconds` of 640x360 25 fps H.264 in 2 s fragments: the init
    /// segment and each fragment's buffers with its duration.
    pub(crate) fn cmaf(seconds: u32) -> (Bytes, Vec<(Vec<Bytes>, Duration)>) {
        cmaf_of(&format!(
            "videotestsrc num-buffers={} ! video/x-raw,width=640,height=360,framerate=25/1,format=I420 \
             ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=50 ! h264parse",
            seconds * 25
        ))
    }

    /// The same for `seconds` of 48 kHz stereo AAC.
    pub(crate) fn cmaf_audio(seconds: u32) -> (Bytes, Vec<(Vec<Bytes>, Duration)>) {
        cmaf_audio_frames(seconds * 48_000 / 1024)
    }

    /// The same for `frames` of 1024 samples of 48 kHz stereo AAC.
    pub(crate) fn cmaf_audio_frames(frames: u32) -> (Bytes, Vec<(Vec<Bytes>, Duration)>) {
        cmaf_of(&format!(
            "audiotestsrc num-buffers={frames} samplesperbuffer=1024 \
             ! audio/x-raw,rate=48000,channels=2 ! avenc_aac ! aacparse"
        ))
    }

    fn cmaf_of(source: &str) -> (Bytes, Vec<(Vec<Bytes>, Duration)>) {
        use gstreamer as gst;
        use gstreamer::prelude::*;
        crate::pipeline::init().unwrap();
        let desc = format!(
            "{source} ! cmafmux fragment-duration=2000000000 ! appsink name=out sync=false buffer-list=true"
        );
        let pipeline = gst::parse::launch(&desc)
            .unwrap()
            .downcast::<gst::Pipeline>()
            .unwrap();
        let sink = pipeline
            .by_name("out")
            .unwrap()
            .downcast::<gstreamer_app::AppSink>()
            .unwrap();
        pipeline.set_state(gst::State::Playing).unwrap();
        let (mut init, mut fragments) = (None, Vec::<(Vec<Bytes>, Duration)>::new());
        while let Ok(sample) = sink.pull_sample() {
            let list = sample.buffer_list().unwrap();
            for b in list.iter() {
                let data = Bytes::copy_from_slice(&b.map_readable().unwrap());
                let flags = b.flags();
                if flags.contains(gst::BufferFlags::HEADER | gst::BufferFlags::DISCONT) {
                    init = Some(data);
                } else if flags.contains(gst::BufferFlags::HEADER) {
                    let d = Duration::from_nanos(b.duration().unwrap().nseconds());
                    fragments.push((vec![data], d));
                } else {
                    fragments.last_mut().unwrap().0.push(data);
                }
            }
        }
        pipeline.set_state(gst::State::Null).unwrap();
        (init.unwrap(), fragments)
    }

    /// Top-level box types of a file, refusing a box that runs past the end.
    fn boxes(path: &Path) -> Vec<String> {
        let data = std::fs::read(path).unwrap();
        let mut at = 0;
        let mut out = Vec::new();
        while at < data.len() {
            let size = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
            assert!(size >= 8 && at + size <= data.len(), "torn box at {at}");
            out.push(String::from_utf8_lossy(&data[at + 4..at + 8]).into_owned());
            at += size;
        }
        out
    }

    /// Two tracks of synthetic fragments behind a real init segment.
    fn write(dir: &Path, fragments: u8) -> Summary {
        let (init, _) = cmaf(1);
        let mut w = Writer::create(dir).unwrap();
        let t0 = OffsetDateTime::now_utc();
        w.init("720p", &init).unwrap();
        w.init("audio", &init).unwrap();
        for n in 0..fragments {
            let pdt = t0 + Duration::from_secs(2 * u64::from(n));
            for track in ["720p", "audio"] {
                w.fragment(track, &fragment(n), Duration::from_secs(2), pdt, n == 2)
                    .unwrap();
            }
        }
        w.summary().clone()
    }

    /// ffprobe's JSON of `entries` for a file (the tests' independent reader).
    pub(crate) fn ffprobe(path: &Path, entries: &str) -> serde_json::Value {
        let out = std::process::Command::new("ffprobe")
            .args(["-v", "error", "-of", "json", "-show_entries", entries])
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// A file's duration as ffprobe reads it, in seconds.
    pub(crate) fn probed_secs(path: &Path) -> f64 {
        let probed = ffprobe(path, "format=duration");
        probed["format"]["duration"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no duration: {probed}"))
    }

    #[test]
    fn what_was_written_is_what_recovery_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let written = write(tmp.path(), 4);
        let read = recover(tmp.path()).unwrap();
        assert_eq!(read, written);
        assert_eq!(read.duration(), Duration::from_secs(8));
        let video = &read.tracks["720p"];
        assert!(video.fragments[2].discontinuity && !video.fragments[1].discontinuity);
        assert_eq!(
            boxes(&media_path(tmp.path(), "720p")),
            [
                "ftyp", "moov", "free", "moof", "mdat", "moof", "mdat", "moof", "mdat", "moof",
                "mdat"
            ]
        );
        assert_eq!(
            std::fs::metadata(media_path(tmp.path(), "720p"))
                .unwrap()
                .len(),
            video.size()
        );
    }

    #[test]
    fn a_torn_fragment_and_a_torn_index_line_are_cut_at_recovery() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), 3);
        // The process died mid-fragment: half a moof in the file, half a line in the index.
        let media = media_path(tmp.path(), "720p");
        let mut f = OpenOptions::new().append(true).open(&media).unwrap();
        f.write_all(&fragment(9)[0][..13]).unwrap();
        let mut idx = OpenOptions::new()
            .append(true)
            .open(tmp.path().join(INDEX))
            .unwrap();
        idx.write_all(b"frag 720p 999 1").unwrap();
        let read = recover(tmp.path()).unwrap();
        assert_eq!(read.tracks["720p"].fragments.len(), 3);
        assert_eq!(read.duration(), Duration::from_secs(6));
        assert_eq!(boxes(&media).len(), 3 + 3 * 2, "the torn moof is gone");
        // Recovery is idempotent, and the index ends on a line again.
        assert_eq!(recover(tmp.path()).unwrap(), read);
        let text = std::fs::read_to_string(tmp.path().join(INDEX)).unwrap();
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn an_index_line_naming_bytes_that_never_reached_the_disk_ends_the_recording_there() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), 3);
        // Power loss: the index line survived but the file lost its last fragment.
        let media = media_path(tmp.path(), "audio");
        let len = std::fs::metadata(&media).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&media)
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        let read = recover(tmp.path()).unwrap();
        // Lines are in time order: nothing after the first bad line is trusted.
        assert_eq!(read.tracks["audio"].fragments.len(), 2);
        assert_eq!(read.tracks["720p"].fragments.len(), 3);
        assert_eq!(boxes(&media).len(), 3 + 2 * 2);
    }

    #[test]
    fn track_names_are_plain_and_fragments_need_an_init() {
        let (init, _) = cmaf(1);
        let tmp = tempfile::tempdir().unwrap();
        let mut w = Writer::create(tmp.path()).unwrap();
        for bad in ["", "../x", "a b", "a/b", &"x".repeat(40)] {
            assert!(matches!(
                w.init(bad, &init),
                Err(FragmentsError::BadTrack(_))
            ));
        }
        let t0 = OffsetDateTime::now_utc();
        assert!(matches!(
            w.fragment("720p", &fragment(0), Duration::from_secs(2), t0, false),
            Err(FragmentsError::NoInit(_))
        ));
        assert!(
            Writer::create(tmp.path()).is_err(),
            "one recording per directory"
        );
    }

    /// A reconnect restarts the live pipeline's clock: the fragments after it (flagged
    /// discontinuity) carry decode times from 0 again; the recording's timeline continues
    /// where it was, so the file plays 12 s straight through.
    #[test]
    fn a_restarted_clock_continues_the_recording_timeline() {
        let (init, fragments) = cmaf(6);
        let tmp = tempfile::tempdir().unwrap();
        let t0 = OffsetDateTime::now_utc();
        let mut w = Writer::create(tmp.path()).unwrap();
        w.init("720p", &init).unwrap();
        for pass in 0..2 {
            for (i, (chunks, d)) in fragments.iter().enumerate() {
                w.fragment("720p", chunks, *d, t0, pass == 1 && i == 0)
                    .unwrap();
            }
        }
        let summary = w.summary().clone();
        finalize(tmp.path(), &summary).unwrap();
        let media = media_path(tmp.path(), "720p");
        let probed = ffprobe(&media, "format=start_time,duration");
        let num = |k: &str| -> f64 { probed["format"][k].as_str().unwrap().parse().unwrap() };
        assert!(num("start_time").abs() < 0.05);
        assert!((num("duration") - 12.0).abs() < 0.1, "{probed}");
        let out = std::process::Command::new("ffprobe")
            .args([
                "-v",
                "error",
                "-select_streams",
                "v",
                "-show_entries",
                "packet=dts_time",
            ])
            .args(["-of", "csv=p=0"])
            .arg(&media)
            .output()
            .unwrap();
        let dts: Vec<f64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim_end_matches(',').parse().unwrap())
            .collect();
        assert_eq!(dts.len(), 300);
        let back: Vec<(usize, f64, f64)> = dts
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[1] <= w[0])
            .map(|(i, w)| (i, w[0], w[1]))
            .collect();
        assert!(back.is_empty(), "decode times go back: {back:?}");
    }

    /// Real fragments, a crash after the fourth (half of the fifth written), recovery, then
    /// finalisation: ffprobe reads the duration of the four from the header and decodes a
    /// frame after seeking into the last one.
    #[test]
    fn a_recovered_and_finalised_recording_plays_with_its_duration() {
        let (init, fragments) = cmaf(10);
        assert!(fragments.len() >= 5);
        let tmp = tempfile::tempdir().unwrap();
        let t0 = OffsetDateTime::now_utc();
        let mut w = Writer::create(tmp.path()).unwrap();
        w.init("720p", &init).unwrap();
        for (chunks, d) in &fragments[..4] {
            w.fragment("720p", chunks, *d, t0, false).unwrap();
        }
        let media = media_path(tmp.path(), "720p");
        let half = fragments[4].0.concat();
        OpenOptions::new()
            .append(true)
            .open(&media)
            .unwrap()
            .write_all(&half[..half.len() / 2])
            .unwrap();
        drop(w);
        // Playable before finalisation (readers skip the reserved free box), but only by
        // walking every fragment.
        let before = ffprobe(&media, "stream=codec_name");
        assert_eq!(before["streams"][0]["codec_name"], "h264");
        let summary = recover(tmp.path()).unwrap();
        let expected: Duration = fragments[..4].iter().map(|(_, d)| *d).sum();
        assert_eq!(summary.duration(), expected);
        finalize(tmp.path(), &summary).unwrap();
        finalize(tmp.path(), &summary).unwrap(); // repeatable
        let kinds = boxes(&media);
        assert_eq!(&kinds[..4], ["ftyp", "moov", "sidx", "free"]);
        // ffmpeg walks every moof of a file without an index; with the sidx it reads one
        // and takes the duration from the header (its trace names each box it parses).
        let moofs_parsed = |path: &Path| {
            let out = std::process::Command::new("ffprobe")
                .args(["-v", "trace", "-show_entries", "format=duration"])
                .arg(path)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stderr)
                .matches("type:'moof'")
                .count()
        };
        assert_eq!(moofs_parsed(&media), 1);
        let secs = probed_secs(&media);
        assert!(
            (secs - expected.as_secs_f64()).abs() < 0.1,
            "ffprobe {secs} s, recorded {expected:?}"
        );
        let seek = std::process::Command::new("ffmpeg")
            .args(["-v", "error", "-ss"])
            .arg(format!("{:.1}", expected.as_secs_f64() - 1.0))
            .arg("-i")
            .arg(&media)
            .args(["-frames:v", "1", "-f", "null", "-"])
            .output()
            .unwrap();
        assert!(
            seek.status.success(),
            "{}",
            String::from_utf8_lossy(&seek.stderr)
        );
    }
}
