//! Transcoding capacity: whether this node takes one more transcode. A count (`max_transcodes`)
//! and a measured check — the node's CPU over the last seconds with one more transcode (and
//! those admitted too recently to show) at the running ones' average cost, and the real-time
//! factor of every running transcode — decide whether the node is full; the overload policy says what
//! a publish that finds it full gets. Inputs: the running transcodes' speeds (from the live
//! registry) and `/proc/stat`; outputs: a [`Verdict`], `/readyz`'s answer and the counters
//! behind `/metrics`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// The CPU share is measured over this window, sampled every second.
pub const CPU_WINDOW: Duration = Duration::from_secs(5);
const CPU_SAMPLE: Duration = Duration::from_secs(1);
/// The node is full when its CPU with one more transcode would reach this: the rest leaves
/// room for the viewers' requests and the measure's noise (benches/README "Capacity").
pub const DEFAULT_CPU_PERCENT: u64 = 90;
/// What a transcode is assumed to cost until the node has measured one: three quarters of a
/// core (a 720p ladder of real content takes 0.7–0.9 of one here, benches/README).
pub const ASSUMED_CORES_PER_TRANSCODE: f64 = 0.75;
/// A running transcode slower than this (media time over wall time, over its last 10 s) means
/// the node already carries more than it can.
pub const MIN_SPEED: f64 = 0.97;

/// What a refused WHIP publish and an at-capacity `/readyz` tell the client to wait: about
/// the time the CPU measure needs to see a change.
pub const RETRY_AFTER_SECS: &str = "5";

/// What a publish that finds the node full gets (`overload_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverloadPolicy {
    /// Refused, as each protocol refuses, before anything is allocated.
    Refuse,
    /// Accepted with only the quality set's lowest rung (the others are "shed").
    Shed,
    /// Accepted with no video transcode: the source's video is packaged as it came, the only
    /// video rendition (its audio is still made AAC, which costs little).
    Passthrough,
}

impl OverloadPolicy {
    pub fn parse(v: &str) -> Option<OverloadPolicy> {
        match v {
            "refuse" => Some(OverloadPolicy::Refuse),
            "shed" => Some(OverloadPolicy::Shed),
            "passthrough" => Some(OverloadPolicy::Passthrough),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OverloadPolicy::Refuse => "refuse",
            OverloadPolicy::Shed => "shed",
            OverloadPolicy::Passthrough => "passthrough",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityConfig {
    /// The most transcodes at once; `None`: the measured check alone.
    pub max_transcodes: Option<usize>,
    /// The CPU share (of all cores) at which the node is full; 100: the measured check is off.
    pub cpu_percent: u32,
    pub policy: OverloadPolicy,
}

impl Default for CapacityConfig {
    fn default() -> CapacityConfig {
        CapacityConfig {
            max_transcodes: None,
            cpu_percent: DEFAULT_CPU_PERCENT as u32,
            policy: OverloadPolicy::Refuse,
        }
    }
}

/// Why the node is full, as the refusal and the log say it.
#[derive(Debug, Clone, PartialEq)]
pub enum Full {
    Count { running: usize, max: usize },
    Cpu { percent: u32, max: u32 },
    Behind { stream: i64, speed: f64 },
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Full::Count { running, max } => {
                write!(f, "{running} transcodes running, max_transcodes is {max}")
            }
            Full::Cpu { percent, max } => write!(f, "CPU at {percent}% (full at {max}%)"),
            Full::Behind { stream, speed } => {
                write!(f, "stream {stream} transcodes at {speed:.2}x real time")
            }
        }
    }
}

impl Full {
    /// A short label for the metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Full::Count { .. } => "count",
            Full::Cpu { .. } => "cpu",
            Full::Behind { .. } => "behind",
        }
    }
}

/// What the record says of a passed-through stream's encoder (`transcoding_preset`), and how
/// the capacity check tells such a stream from a transcode.
pub const PASSTHROUGH_PRESET: &str = "passthrough";

/// What a publish taken on a full node is transcoded to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reduction {
    /// The whole ladder (the node had room).
    #[default]
    None,
    /// The lowest rung the source allows ([`OverloadPolicy::Shed`]).
    LowestRung,
    /// No video transcode ([`OverloadPolicy::Passthrough`]).
    Passthrough,
}

/// What a publish that would start a transcode gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Admit,
    /// Full; the policy sheds: accepted with the lowest rung.
    Shed(Full),
    /// Full; the policy passes the source through: accepted with no video transcode, so it
    /// takes no transcode's place.
    Passthrough(Full),
    /// Full; the policy refuses.
    Refuse(Full),
}

/// One running transcode as the check sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transcode {
    pub stream: i64,
    /// Its real-time factor; `None` before its first part.
    pub speed: Option<f64>,
}

/// The node's capacity: its settings, its CPU meter and what it refused.
pub struct Capacity {
    config: CapacityConfig,
    /// The busy share of all cores over [`CPU_WINDOW`], in tenths of a percent; `u32::MAX`:
    /// not measured yet.
    cpu_permille: Arc<AtomicU32>,
    /// When the transcodes of the last [`CPU_WINDOW`] were admitted: the CPU does not show them
    /// yet.
    admitted: Mutex<VecDeque<Instant>>,
    /// Publishes admitted whose session has not opened yet: counted beside the running ones,
    /// so two publishes judged at once cannot both take the last place.
    pending: Mutex<usize>,
    /// [`ASSUMED_CORES_PER_TRANSCODE`] as a share of the node's CPU, in percent.
    assumed_cost: f64,
    refused: AtomicU64,
    shed: AtomicU64,
    passed_through: AtomicU64,
    sampler: Option<tokio::task::JoinHandle<()>>,
}

/// An admitted publish's place, held until its session has opened (it then counts among the
/// running transcodes) or it gave up.
#[derive(Debug)]
pub struct Reservation(Arc<Capacity>);

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut pending = self.0.pending.lock().unwrap_or_else(|p| p.into_inner());
        *pending = pending.saturating_sub(1);
    }
}

impl std::fmt::Debug for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capacity")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Drop for Capacity {
    fn drop(&mut self) {
        if let Some(sampler) = &self.sampler {
            sampler.abort();
        }
    }
}

impl Capacity {
    /// With the CPU sampled from `/proc/stat` every second (shown in `/metrics` even when the
    /// measured check is off).
    pub fn start(config: CapacityConfig) -> Capacity {
        let mut capacity = Capacity::fixed(config);
        let meter = capacity.cpu_permille.clone();
        capacity.sampler = Some(tokio::spawn(sample_cpu(meter)));
        capacity
    }

    /// With no CPU sampler: the share is set by hand ([`Capacity::set_cpu_percent`]), for tests.
    pub fn fixed(config: CapacityConfig) -> Capacity {
        Capacity {
            config,
            cpu_permille: Arc::new(AtomicU32::new(u32::MAX)),
            admitted: Mutex::new(VecDeque::new()),
            pending: Mutex::new(0),
            assumed_cost: 100.0 * ASSUMED_CORES_PER_TRANSCODE
                / std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
            refused: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            passed_through: AtomicU64::new(0),
            sampler: None,
        }
    }

    pub fn set_cpu_percent(&self, percent: f64) {
        self.cpu_permille
            .store((percent * 10.0).round() as u32, Ordering::Relaxed);
    }

    pub fn config(&self) -> CapacityConfig {
        self.config
    }

    /// The node's CPU share over the last seconds (of all cores), once measured.
    pub fn cpu_percent(&self) -> Option<f64> {
        match self.cpu_permille.load(Ordering::Relaxed) {
            u32::MAX => None,
            p => Some(f64::from(p) / 10.0),
        }
    }

    /// Whether one more transcode fits beside `running` and `pending` admitted ones not running
    /// yet; `None` when it does.
    fn full(&self, running: &[Transcode], pending: usize, measured: bool) -> Option<Full> {
        let now = Instant::now();
        let count = running.len() + pending;
        let young = {
            let mut admitted = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
            while admitted
                .front()
                .is_some_and(|t| now.duration_since(*t) > CPU_WINDOW)
            {
                admitted.pop_front();
            }
            admitted.len().min(count)
        };
        if let Some(max) = self.config.max_transcodes {
            if count >= max {
                return Some(Full::Count {
                    running: count,
                    max,
                });
            }
        }
        if self.config.cpu_percent >= 100 || !measured {
            return None;
        }
        if let Some(slow) = running
            .iter()
            .filter_map(|t| Some((t.stream, t.speed?)))
            .find(|(_, speed)| *speed < MIN_SPEED)
        {
            return Some(Full::Behind {
                stream: slow.0,
                speed: slow.1,
            });
        }
        let cpu = self.cpu_percent()?;
        // What one transcode costs: the running ones' average (the whole node's load counted
        // as theirs, which errs on the safe side), or, before any has settled, an assumption.
        let settled = count - young;
        let each = if settled > 0 {
            cpu / settled as f64
        } else {
            self.assumed_cost
        };
        // The young ones and this one, at that cost, on top of what the CPU shows.
        let projected = cpu + each * (young + 1) as f64;
        (projected >= f64::from(self.config.cpu_percent)).then(|| Full::Cpu {
            percent: projected.round() as u32,
            max: self.config.cpu_percent,
        })
    }

    /// The verdict on a publish that would start a transcode beside the ones `running` lists
    /// (read under the judge's lock, so a session opening meanwhile is counted once: running or
    /// pending). An admitted one (shed or not) holds its place until the reservation drops and
    /// counts as young until the CPU shows it.
    pub fn judge(
        self: &Arc<Self>,
        running: impl FnOnce() -> Vec<Transcode>,
    ) -> (Verdict, Option<Reservation>) {
        self.judge_with(running, true)
    }

    /// As [`Capacity::judge`], for a stream back within its grace period (its publisher
    /// reconnected after a blip): its own load is still in the CPU window the measured check
    /// reads, which would count it twice and refuse it, so only the count applies.
    pub fn judge_returning(
        self: &Arc<Self>,
        running: impl FnOnce() -> Vec<Transcode>,
    ) -> (Verdict, Option<Reservation>) {
        self.judge_with(running, false)
    }

    fn judge_with(
        self: &Arc<Self>,
        running: impl FnOnce() -> Vec<Transcode>,
        measured: bool,
    ) -> (Verdict, Option<Reservation>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let verdict = match self.full(&running(), *pending, measured) {
            None => Verdict::Admit,
            Some(full) => match self.config.policy {
                OverloadPolicy::Refuse => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return (Verdict::Refuse(full), None);
                }
                OverloadPolicy::Shed => {
                    self.shed.fetch_add(1, Ordering::Relaxed);
                    Verdict::Shed(full)
                }
                OverloadPolicy::Passthrough => {
                    self.passed_through.fetch_add(1, Ordering::Relaxed);
                    return (Verdict::Passthrough(full), None);
                }
            },
        };
        *pending += 1;
        drop(pending);
        self.admitted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(Instant::now());
        (verdict, Some(Reservation(self.clone())))
    }

    /// Whether the node is full now (for `/readyz`), beside `running`.
    pub fn full_now(&self, running: &[Transcode]) -> Option<Full> {
        let pending = *self.pending.lock().unwrap_or_else(|p| p.into_inner());
        self.full(running, pending, true)
    }

    /// The spare capacity beside `running`, ‰ of the node's: the smaller of what the count and
    /// the CPU leave (each when it applies); 0 when full; `None` when neither applies.
    pub fn headroom(&self, running: &[Transcode]) -> Option<u32> {
        if self.full_now(running).is_some() {
            return Some(0);
        }
        let count = self
            .config
            .max_transcodes
            .map(|max| (max.saturating_sub(running.len()) * 1000 / max.max(1)) as u32);
        let cpu = (self.config.cpu_percent < 100)
            .then(|| self.cpu_percent())
            .flatten()
            .map(|cpu| {
                let max = f64::from(self.config.cpu_percent);
                ((max - cpu).max(0.0) / max * 1000.0) as u32
            });
        match (count, cpu) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The node's capacity in the Prometheus text format, beside `running`.
    pub fn metrics(&self, running: &[Transcode]) -> String {
        let full = self.full_now(running);
        let mut out = format!(
            "# HELP livepack_transcodes Streams transcoding on this node now.\n\
             # TYPE livepack_transcodes gauge\nlivepack_transcodes {}\n\
             # HELP livepack_at_capacity 1 while the node takes no more transcodes (/readyz 503).\n\
             # TYPE livepack_at_capacity gauge\nlivepack_at_capacity {}\n\
             # HELP livepack_publishes_over_capacity_total Publishes that found the node full, by what they got (overload_policy).\n\
             # TYPE livepack_publishes_over_capacity_total counter\n\
             livepack_publishes_over_capacity_total{{outcome=\"refused\"}} {}\n\
             livepack_publishes_over_capacity_total{{outcome=\"shed\"}} {}\n\
             livepack_publishes_over_capacity_total{{outcome=\"passthrough\"}} {}\n",
            running.len(),
            u8::from(full.is_some()),
            self.refused(),
            self.shed(),
            self.passed_through.load(Ordering::Relaxed),
        );
        if let Some(cpu) = self.cpu_percent() {
            out.push_str(&format!(
                "# HELP livepack_node_cpu_percent The node's busy CPU share of all cores over the last 5 s.\n\
                 # TYPE livepack_node_cpu_percent gauge\nlivepack_node_cpu_percent {cpu}\n"
            ));
        }
        out
    }

    /// Publishes refused for capacity since the start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Publishes accepted with rungs shed since the start.
    pub fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }
}

/// Busy and total jiffies of all cores, from `/proc/stat`'s first line.
fn read_cpu() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(stat.lines().next()?)
}

/// `cpu  user nice system idle iowait irq softirq steal …` → (busy, total); guest time is
/// already inside user time.
fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 8 {
        return None;
    }
    let idle = v[3] + v[4];
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    Some((busy, busy + idle))
}

/// Samples the CPU every second and stores the busy share over the last [`CPU_WINDOW`].
async fn sample_cpu(meter: Arc<AtomicU32>) {
    let mut samples: VecDeque<(u64, u64)> = VecDeque::new();
    let mut every = tokio::time::interval(CPU_SAMPLE);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let kept = (CPU_WINDOW.as_secs() + 1) as usize;
    loop {
        every.tick().await;
        let Some(now) = read_cpu() else {
            return;
        };
        samples.push_back(now);
        while samples.len() > kept {
            samples.pop_front();
        }
        let (first, last) = (samples[0], now);
        let total = last.1.saturating_sub(first.1);
        let busy = last.0.saturating_sub(first.0);
        if let Some(permille) = (busy * 1000).checked_div(total) {
            meter.store(permille as u32, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(speeds: &[Option<f64>]) -> Vec<Transcode> {
        speeds
            .iter()
            .enumerate()
            .map(|(i, &speed)| Transcode {
                stream: i as i64 + 1,
                speed,
            })
            .collect()
    }

    #[test]
    fn the_cpu_line_gives_busy_and_total() {
        let line = "cpu  100 5 50 800 20 3 2 10 7 0";
        assert_eq!(parse_cpu_line(line), Some((170, 990)));
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(parse_cpu_line("cpu 1 2"), None);
        let (busy, total) = read_cpu().expect("/proc/stat on Linux");
        assert!(busy <= total && total > 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_count_caps_and_policy_picks_refuse_shed_or_passthrough() {
        let capacity = Arc::new(Capacity::fixed(CapacityConfig {
            max_transcodes: Some(2),
            cpu_percent: 100,
            policy: OverloadPolicy::Refuse,
        }));
        let (verdict, place) = capacity.judge(|| running(&[Some(1.0)]));
        assert_eq!(verdict, Verdict::Admit);
        let full = Full::Count { running: 2, max: 2 };
        // The admitted one's place is held until it runs: one running + one pending is full.
        assert_eq!(
            capacity.judge(|| running(&[Some(1.0)])).0,
            Verdict::Refuse(full.clone())
        );
        drop(place);
        assert_eq!(capacity.judge(|| running(&[Some(1.0)])).0, Verdict::Admit);
        assert_eq!(
            capacity.judge(|| running(&[Some(1.0), Some(1.0)])).0,
            Verdict::Refuse(full.clone())
        );
        assert_eq!(capacity.refused(), 2);
        let shedding = Arc::new(Capacity::fixed(CapacityConfig {
            policy: OverloadPolicy::Shed,
            ..capacity.config()
        }));
        let (verdict, place) = shedding.judge(|| running(&[None, None]));
        assert_eq!(verdict, Verdict::Shed(full.clone()));
        assert!(place.is_some(), "a shed publish is admitted");
        assert_eq!(shedding.shed(), 1);
        let passing = Arc::new(Capacity::fixed(CapacityConfig {
            policy: OverloadPolicy::Passthrough,
            ..capacity.config()
        }));
        let (verdict, place) = passing.judge(|| running(&[None, None]));
        assert_eq!(verdict, Verdict::Passthrough(full));
        assert!(
            place.is_none(),
            "a passed-through stream takes no transcode's place"
        );
        assert!(passing
            .metrics(&running(&[None, None]))
            .contains("livepack_publishes_over_capacity_total{outcome=\"passthrough\"} 1\n"));
        // Headroom: what the count leaves (the CPU is not checked here), 0 when full.
        assert_eq!(capacity.headroom(&running(&[None])), Some(500));
        assert_eq!(capacity.headroom(&running(&[None, None])), Some(0));
        let unbounded = Capacity::fixed(CapacityConfig {
            cpu_percent: 100,
            ..CapacityConfig::default()
        });
        assert_eq!(unbounded.headroom(&running(&[None])), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_cpu_projects_one_more_and_a_slow_one_means_full() {
        let mut capacity = Capacity::fixed(CapacityConfig::default());
        // As on two cores.
        capacity.assumed_cost = 37.5;
        let capacity = Arc::new(capacity);
        // Not measured yet: no CPU verdict.
        assert_eq!(capacity.full_now(&[]), None);
        capacity.set_cpu_percent(5.0);
        // Nothing settled: each new one at the assumed cost. 5 + 37.5, then 5 + 2 × 37.5.
        assert_eq!(capacity.judge(Vec::new).0, Verdict::Admit);
        assert_eq!(capacity.judge(|| running(&[None])).0, Verdict::Admit);
        assert_eq!(
            capacity.full_now(&running(&[None, None])),
            Some(Full::Cpu {
                percent: 118,
                max: 90
            }),
            "two young and one more at 37.5 % each"
        );
        tokio::time::sleep(CPU_WINDOW * 2).await;
        // Settled, the running ones' average is the cost: one at 40 % leaves room for another.
        capacity.set_cpu_percent(40.0);
        assert_eq!(capacity.full_now(&running(&[Some(1.0)])), None);
        // Two at 80 %: a third would bring 120 %.
        capacity.set_cpu_percent(80.0);
        assert_eq!(
            capacity.full_now(&running(&[Some(1.0), Some(1.0)])),
            Some(Full::Cpu {
                percent: 120,
                max: 90
            })
        );
        capacity.set_cpu_percent(45.0);
        assert_eq!(
            capacity.headroom(&running(&[Some(1.0)])),
            Some(0),
            "45 + 45 ≥ 90"
        );
        capacity.set_cpu_percent(30.0);
        assert_eq!(capacity.headroom(&running(&[Some(1.0)])), Some(666));
        assert_eq!(
            capacity.full_now(&running(&[Some(1.0), Some(0.9)])),
            Some(Full::Behind {
                stream: 2,
                speed: 0.9
            })
        );
        // A stream back from a blip at 80 %: its own load is in it; only the count applies.
        capacity.set_cpu_percent(80.0);
        assert!(capacity.full_now(&running(&[Some(1.0)])).is_some());
        let (verdict, _back) = capacity.judge_returning(|| running(&[Some(1.0)]));
        assert_eq!(verdict, Verdict::Admit);
    }

    #[tokio::test(start_paused = true)]
    async fn at_100_percent_the_measured_check_is_off() {
        let capacity = Capacity::fixed(CapacityConfig {
            cpu_percent: 100,
            ..CapacityConfig::default()
        });
        capacity.set_cpu_percent(100.0);
        assert_eq!(capacity.full_now(&running(&[Some(0.5); 8])), None);
    }
}
