//! `/metrics`: the process and every stream the registry holds, in the Prometheus text format
//! (0.0.4), for scrapers, the load bench and the soak script.

use std::fmt::Write;

use crate::live::{Counters, Registry, StreamMetrics};

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What `/proc/self` says about the process; `None` where it cannot be read (not Linux).
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessStats {
    pub resident_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub threads: Option<u64>,
    /// PULL source processes and what they hold.
    pub pull: Option<crate::ingest::pull::source::Counts>,
}

impl ProcessStats {
    pub fn read() -> ProcessStats {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        // utime and stime are fields 14 and 15, counted after the parenthesised command name
        // (which may itself hold spaces); the kernel reports them in USER_HZ, fixed at 100.
        let cpu_seconds = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                let after = s.rsplit_once(')')?.1;
                let f: Vec<&str> = after.split_whitespace().collect();
                let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
                Some(ticks as f64 / 100.0)
            });
        ProcessStats {
            resident_bytes: field("VmRSS:").map(|kib| kib * 1024),
            cpu_seconds,
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as u64),
            threads: field("Threads:"),
            pull: Some(crate::ingest::pull::source::counts()),
        }
    }
}

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.out, "{name}{labels} {value}");
    }

    fn single(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        value: Option<impl std::fmt::Display>,
    ) {
        if let Some(v) = value {
            self.header(name, kind, help);
            self.sample(name, "", v);
        }
    }

    /// One family with a sample per stream; streams without a value are left out.
    fn per_stream<V: std::fmt::Display>(
        &mut self,
        streams: &[StreamMetrics],
        name: &str,
        kind: &str,
        help: &str,
        value: impl Fn(&StreamMetrics) -> Option<V>,
    ) {
        self.header(name, kind, help);
        for s in streams {
            if let Some(v) = value(s) {
                self.sample(name, &format!("{{stream=\"{}\"}}", s.id), v);
            }
        }
    }
}

/// The whole exposition.
pub fn render(streams: &[StreamMetrics], process: ProcessStats, tasks: Option<usize>) -> String {
    let mut out = String::with_capacity(1024 + streams.len() * 512);
    let mut f = Family { out: &mut out };
    process_families(&mut f, process, tasks, streams.len());
    stream_families(&mut f, streams);
    out
}

/// The process's own families, and how many streams it holds.
fn process_families(
    f: &mut Family<'_>,
    process: ProcessStats,
    tasks: Option<usize>,
    streams: usize,
) {
    f.single(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        process.resident_bytes,
    );
    f.single(
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time spent, in seconds.",
        process.cpu_seconds,
    );
    f.single(
        "process_open_fds",
        "gauge",
        "Open file descriptors (sockets, files, pipes).",
        process.open_fds,
    );
    f.single(
        "process_threads",
        "gauge",
        "OS threads (async workers, GStreamer streaming threads, blocking pool).",
        process.threads,
    );
    f.single(
        "livepack_tasks",
        "gauge",
        "Tokio tasks alive (connections, sessions, timers).",
        tasks,
    );
    let pull = process.pull;
    f.single(
        "livepack_pull_sources",
        "gauge",
        "PULL source processes alive (each fetches one source with GStreamer; stopping a source kills its process).",
        pull.map(|p| p.alive),
    );
    f.single(
        "livepack_pull_demuxers",
        "gauge",
        "Adaptive (HLS/DASH) demuxers held by PULL source processes alive; each ends with its process.",
        pull.map(|p| p.demuxers),
    );
    f.single(
        "livepack_pull_source_starts_total",
        "counter",
        "PULL source processes started (one per attempt on a source).",
        pull.map(|p| p.started),
    );
    f.single(
        "livepack_pull_source_crashes_total",
        "counter",
        "PULL source processes that died by a signal the daemon did not send (a GStreamer crash, contained).",
        pull.map(|p| p.crashed),
    );
    f.single(
        "livepack_streams",
        "gauge",
        "Streams with a live publisher or in their grace period.",
        Some(streams),
    );
}

/// One family per stream measure, a sample per stream.
fn stream_families(f: &mut Family<'_>, streams: &[StreamMetrics]) {
    source_and_viewer_families(f, streams);
    let flag = |b: bool| Some(u8::from(b));
    f.per_stream(
        streams,
        "livepack_stream_live",
        "gauge",
        "1 while the main input is receiving media.",
        |s| flag(s.status.live()),
    );
    f.per_stream(
        streams,
        "livepack_stream_backup_live",
        "gauge",
        "1 while the backup input is receiving media.",
        |s| flag(s.status.backup_live()),
    );
    f.per_stream(
        streams,
        "livepack_stream_transcoding_speed",
        "gauge",
        "Media time produced per wall time over the last 10 s (1 = real time).",
        |s| s.status.transcoding_speed(),
    );
    f.per_stream(
        streams,
        "livepack_stream_frame_rate",
        "gauge",
        "Measured source frame rate.",
        |s| s.status.frame_rate(),
    );
    f.per_stream(
        streams,
        "livepack_stream_frames_received_total",
        "counter",
        "Media frames received from the stream's publishers.",
        |s| Some(Counters::get(&s.counters.frames_received)),
    );
    f.per_stream(
        streams,
        "livepack_stream_frames_dropped_total",
        "counter",
        "Frames dropped because the pipeline fell behind real time (a full queue).",
        |s| Some(Counters::get(&s.counters.frames_dropped)),
    );
    f.per_stream(
        streams,
        "livepack_stream_hub_readers",
        "gauge",
        "Readers of the stream's media hub (the pipeline, real-time viewers, restreams).",
        |s| Some(s.hub_readers),
    );
    f.per_stream(
        streams,
        "livepack_stream_whep_viewers",
        "gauge",
        "WHEP (WebRTC) viewers receiving the stream now.",
        |s| Some(s.status.realtime_readers().0),
    );
    f.per_stream(
        streams,
        "livepack_stream_srt_readers",
        "gauge",
        "SRT readers (`play:{id}` on the SRT port) connected to the stream now.",
        |s| Some(s.status.realtime_readers().1),
    );
    f.per_stream(
        streams,
        "livepack_stream_hub_dropped_total",
        "counter",
        "Media messages the hub's readers lost because their queue was full (a slow reader).",
        |s| Some(s.hub_dropped),
    );
    f.per_stream(
        streams,
        "livepack_stream_parts_published_total",
        "counter",
        "LL-HLS parts (CMAF chunks) published for the top rendition.",
        |s| Some(Counters::get(&s.counters.parts_published)),
    );
    f.per_stream(
        streams,
        "livepack_stream_gops_skipped_total",
        "counter",
        "Source GOPs not transcoded so that a transcode behind real time catches up (the outputs repeat the last picture over them).",
        |s| Some(Counters::get(&s.counters.gops_skipped)),
    );
    f.per_stream(
        streams,
        "livepack_stream_output_delay_seconds",
        "gauge",
        "From the ingest of the newest part's last frame to the part's publication.",
        |s| {
            (Counters::get(&s.counters.parts_published) > 0)
                .then(|| Counters::get(&s.counters.output_delay_us) as f64 / 1e6)
        },
    );
}

/// The node's queues and budgets: webhook deliveries and uploads waiting or failed (from the
/// store, all nodes'; `None` when it could not be read), the recordings' disk (bytes used,
/// quota, free) and the restreams running here (sending, reconnecting).
pub fn operations(
    backlog: Option<crate::db::Backlog>,
    (used, max, free): (u64, Option<u64>, Option<u64>),
    (sending, reconnecting): (usize, usize),
) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    if let Some(b) = backlog {
        f.single(
            "livepack_webhook_deliveries_pending",
            "gauge",
            "Webhook deliveries waiting to be made or retried (all nodes').",
            Some(b.webhooks_pending),
        );
        f.single(
            "livepack_webhook_deliveries_failed",
            "gauge",
            "Webhook deliveries given up on (retried for their window), kept a day.",
            Some(b.webhooks_failed),
        );
        f.single(
            "livepack_uploads_pending",
            "gauge",
            "Recorded videos being uploaded to object storage (all nodes').",
            Some(b.uploads_pending),
        );
        f.single(
            "livepack_uploads_failed",
            "gauge",
            "Recorded videos whose upload failed (status upload_failed).",
            Some(b.uploads_failed),
        );
    }
    f.single(
        "livepack_recordings_bytes",
        "gauge",
        "Bytes the recorded videos hold on this node's disk.",
        Some(used),
    );
    f.single(
        "livepack_recordings_max_bytes",
        "gauge",
        "The recordings' quota (recordings_max_bytes); absent without one.",
        max,
    );
    f.single(
        "livepack_recordings_disk_free_bytes",
        "gauge",
        "Free bytes of the filesystem holding the recordings.",
        free,
    );
    let name = "livepack_restreams";
    f.header(name, "gauge", "Restreams running on this node, by state.");
    f.sample(name, "{state=\"sending\"}", sending);
    f.sample(name, "{state=\"reconnecting\"}", reconnecting);
    out
}

/// The cluster's nodes by state, as their heartbeats in the store tell (`None`: the store
/// could not be read), and the events feeds open on this node.
pub fn cluster(nodes: Option<[usize; 3]>, feeds: usize) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    if let Some(nodes) = nodes {
        let name = "livepack_cluster_nodes";
        f.header(
            name,
            "gauge",
            "Nodes sharing the store by state: alive, missing (silent past node_dead_secs, for under an hour), gone.",
        );
        for state in crate::cluster::NodeState::ALL {
            let labels = format!("{{state=\"{}\"}}", state.as_str());
            f.sample(name, &labels, nodes[state as usize]);
        }
    }
    f.single(
        "livepack_event_feeds",
        "gauge",
        "Events feeds (/streaming/events, the console's) open on this node.",
        Some(feeds),
    );
    out
}

/// The source as received and who watches, per stream.
fn source_and_viewer_families(f: &mut Family<'_>, streams: &[StreamMetrics]) {
    f.per_stream(
        streams,
        "livepack_stream_video_bits_per_second",
        "gauge",
        "The source's video bitrate as received, over the last 2 s.",
        |s| s.status.video_bitrate().map(|kbps| kbps * 1000),
    );
    f.per_stream(
        streams,
        "livepack_stream_keyframe_interval_seconds",
        "gauge",
        "The source's longest keyframe interval over the last 2 s.",
        |s| s.status.keyframe_interval(),
    );
    let name = "livepack_stream_viewers";
    f.header(
        name,
        "gauge",
        "Viewers by output: HLS/DASH players by their manifest requests (address and user agent, last 15 s), WHEP and SRT readers by session.",
    );
    for s in streams {
        let p = s.status.players();
        let (whep, srt) = s.status.realtime_readers();
        for (output, n) in [
            ("hls", p.hls),
            ("dash", p.dash),
            ("hls_mpegts", p.hls_mpegts),
            ("whep", whep),
            ("srt", srt),
        ] {
            f.sample(
                name,
                &format!("{{stream=\"{}\",output=\"{output}\"}}", s.id),
                n,
            );
        }
    }
}

/// The exposition of `registry` now.
pub fn scrape(registry: &Registry) -> String {
    let tasks = tokio::runtime::Handle::try_current()
        .ok()
        .map(|h| h.metrics().num_alive_tasks());
    let mut text = render(&registry.metrics(), ProcessStats::read(), tasks);
    text.push_str(&crate::cluster::lookup::metrics());
    text.push_str(&crate::http::stats::metrics());
    if let Some(capacity) = registry.capacity() {
        text.push_str(&capacity.metrics(&registry.transcodes()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::LiveStatus;
    use std::sync::Arc;

    #[test]
    fn families_are_typed_and_streams_labelled() {
        let counters = Arc::new(Counters::default());
        Counters::add(&counters.frames_received, 90);
        Counters::add(&counters.parts_published, 6);
        counters
            .output_delay_us
            .store(612_000, std::sync::atomic::Ordering::Relaxed);
        let streams = [StreamMetrics {
            id: 7,
            status: {
                let mut s = LiveStatus::default();
                s.set_receiving(true, false);
                s.set_transcoding_speed(1.002);
                s.set_input(Some((2999.6, 2.0)));
                s.with_counts(
                    0,
                    crate::package::audience::Counted {
                        hls: 4,
                        dash: 1,
                        hls_mpegts: 0,
                    },
                    (2, 2),
                )
            },
            counters,
            hub_readers: 3,
            hub_dropped: 5,
        }];
        let text = render(
            &streams,
            ProcessStats {
                resident_bytes: Some(4096),
                pull: Some(crate::ingest::pull::source::Counts {
                    alive: 1,
                    demuxers: 1,
                    started: 40,
                    crashed: 0,
                }),
                ..ProcessStats::default()
            },
            Some(12),
        );
        for line in [
            "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 4096\n",
            "livepack_tasks 12\n",
            "# TYPE livepack_pull_sources gauge\nlivepack_pull_sources 1\n",
            "# TYPE livepack_pull_demuxers gauge\nlivepack_pull_demuxers 1\n",
            "# TYPE livepack_pull_source_starts_total counter\nlivepack_pull_source_starts_total 40\n",
            "livepack_pull_source_crashes_total 0\n",
            "livepack_streams 1\n",
            "livepack_stream_live{stream=\"7\"} 1\n",
            "livepack_stream_backup_live{stream=\"7\"} 0\n",
            "livepack_stream_transcoding_speed{stream=\"7\"} 1.002\n",
            "# TYPE livepack_stream_frames_received_total counter\nlivepack_stream_frames_received_total{stream=\"7\"} 90\n",
            "livepack_stream_output_delay_seconds{stream=\"7\"} 0.612\n",
            "# TYPE livepack_stream_hub_readers gauge\nlivepack_stream_hub_readers{stream=\"7\"} 3\n",
            "# TYPE livepack_stream_hub_dropped_total counter\nlivepack_stream_hub_dropped_total{stream=\"7\"} 5\n",
            "# TYPE livepack_stream_whep_viewers gauge\nlivepack_stream_whep_viewers{stream=\"7\"} 2\n",
            "# TYPE livepack_stream_srt_readers gauge\nlivepack_stream_srt_readers{stream=\"7\"} 2\n",
            "livepack_stream_video_bits_per_second{stream=\"7\"} 3000000\n",
            "livepack_stream_keyframe_interval_seconds{stream=\"7\"} 2\n",
            "livepack_stream_viewers{stream=\"7\",output=\"hls\"} 4\n",
            "livepack_stream_viewers{stream=\"7\",output=\"dash\"} 1\n",
            "livepack_stream_viewers{stream=\"7\",output=\"hls_mpegts\"} 0\n",
            "livepack_stream_viewers{stream=\"7\",output=\"whep\"} 2\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        // Unknown values are left out rather than reported as zero.
        assert!(!text.contains("process_cpu_seconds_total"));
        assert!(!text.contains("livepack_stream_frame_rate{"));
    }

    #[test]
    fn the_node_s_queues_and_budgets_are_typed_and_unknowns_left_out() {
        let backlog = crate::db::Backlog {
            webhooks_pending: 4,
            webhooks_failed: 1,
            uploads_pending: 2,
            uploads_failed: 0,
        };
        let text = operations(Some(backlog), (1 << 20, None, Some(5 << 30)), (2, 1));
        for line in [
            "# TYPE livepack_webhook_deliveries_pending gauge\nlivepack_webhook_deliveries_pending 4\n",
            "livepack_webhook_deliveries_failed 1\n",
            "livepack_uploads_pending 2\n",
            "livepack_uploads_failed 0\n",
            "livepack_recordings_bytes 1048576\n",
            "livepack_recordings_disk_free_bytes 5368709120\n",
            "livepack_restreams{state=\"sending\"} 2\n",
            "livepack_restreams{state=\"reconnecting\"} 1\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("livepack_recordings_max_bytes"));
        // A store that could not be read: its families are absent, not zero.
        let text = operations(None, (0, Some(10), None), (0, 0));
        assert!(!text.contains("livepack_webhook") && !text.contains("livepack_uploads"));
        assert!(text.contains("livepack_recordings_max_bytes 10\n"));
    }

    #[test]
    fn this_process_is_readable() {
        let p = ProcessStats::read();
        assert!(p.resident_bytes.unwrap() > 0);
        assert!(p.open_fds.unwrap() >= 3);
        assert!(p.threads.unwrap() >= 1);
        assert!(p.cpu_seconds.unwrap() >= 0.0);
    }
}
