//! Admission of peer connections: the process's file-descriptor budget, each listener's cap and
//! its per-address cap, the trusted proxies exempt from it, and refusal logs that a flood cannot
//! turn into a log flood. Inputs: a peer address at accept; outputs: a [`Ticket`] held for the
//! connection's life, or a refusal the listener answers cheaply (503, close, SRT `Overload`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors kept out of every listener's reach: segment files, recordings, the database, the
/// pipelines' sockets and PULL's connections must open even while every listener is full. A
/// quarter of the limit, and never less than this.
pub const MIN_FILE_RESERVE: u64 = 256;
/// One refusal line per listener per this period, with the count of the ones it stands for.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Raises the soft `RLIMIT_NOFILE` to the hard one, as Go's runtime does for MediaMTX: service
/// managers start daemons at a soft 1024 that a few hundred idle clients exhaust. Returns the
/// limit in force afterwards (the soft one if it could not be raised, with a warning).
pub fn raise_file_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let before = getrlimit(Resource::Nofile);
    let soft = before.current.unwrap_or(u64::MAX);
    let Some(hard) = before.maximum.filter(|&h| h > soft) else {
        tracing::info!(limit = soft, "open file limit");
        return soft;
    };
    let raised = Rlimit {
        current: Some(hard),
        maximum: Some(hard),
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::info!(
                from = soft,
                limit = hard,
                "open file limit raised to the hard limit"
            );
            hard
        }
        Err(e) => {
            tracing::warn!(limit = soft, hard, error = %e, "cannot raise the open file limit");
            soft
        }
    }
}

/// The descriptors every TCP listener together may hold: the limit less its reserve.
pub fn file_budget(limit: u64) -> Arc<Semaphore> {
    let reserve = (limit / 4).max(MIN_FILE_RESERVE);
    let budget = limit.saturating_sub(reserve).max(1);
    let permits = usize::try_from(budget)
        .unwrap_or(usize::MAX)
        .min(Semaphore::MAX_PERMITS);
    tracing::info!(
        connections = permits,
        reserve,
        "file descriptors for peer connections"
    );
    Arc::new(Semaphore::new(permits))
}

/// Addresses of proxies and CDN edges in front of the daemon: many viewers arrive from each, so
/// the per-address caps do not apply to them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies(nets)
    }

    /// `10.0.0.0/8`, `2001:db8::/32` or a bare address (a single host).
    pub fn parse(item: &str) -> Result<IpNet, String> {
        let item = item.trim();
        item.parse::<IpNet>()
            .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
            .map_err(|_| format!("`{item}` is neither an IP address nor a CIDR network"))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The listener holds its maximum.
    Listener,
    /// This address holds its maximum on this listener.
    Address,
    /// Every listener together holds the descriptors kept for peers.
    Files,
}

impl Refused {
    fn as_str(self) -> &'static str {
        match self {
            Refused::Listener => "listener connection limit reached",
            Refused::Address => "per-address connection limit reached",
            Refused::Files => "file descriptors for peer connections exhausted",
        }
    }
}

/// One listener's gate. Cheap to clone; every clone shares the counts.
#[derive(Clone)]
pub struct Admission(Arc<Inner>);

struct Inner {
    listener: &'static str,
    max: usize,
    max_per_address: usize,
    total: Arc<Semaphore>,
    files: Option<Arc<Semaphore>>,
    trusted: Arc<TrustedProxies>,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    log: RefusalLog,
}

/// Held for a connection's life; dropping it gives its places back.
pub struct Ticket {
    gate: Arc<Inner>,
    /// `None` for a trusted proxy, which is not counted per address.
    address: Option<IpAddr>,
    _total: OwnedSemaphorePermit,
    _file: Option<OwnedSemaphorePermit>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("listener", &self.gate.listener)
            .field("address", &self.address)
            .finish()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let Some(ip) = self.address else { return };
        let mut counts = self.gate.per_address();
        if let Some(n) = counts.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&ip);
            }
        }
    }
}

impl Admission {
    /// `files`: the process-wide budget for listeners whose connections are descriptors (TCP);
    /// `None` for SRT, whose callers share one UDP socket.
    pub fn new(
        listener: &'static str,
        max: usize,
        max_per_address: usize,
        files: Option<Arc<Semaphore>>,
        trusted: Arc<TrustedProxies>,
    ) -> Admission {
        Admission(Arc::new(Inner {
            listener,
            max,
            max_per_address,
            total: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            files,
            trusted,
            per_address: Mutex::new(HashMap::new()),
            log: RefusalLog::default(),
        }))
    }

    /// A ticket for a connection from `peer`, or why not. The refusal is logged here, at most
    /// once per [`REFUSAL_LOG_PERIOD`] per listener.
    pub fn admit(&self, peer: IpAddr) -> Result<Ticket, Refused> {
        let result = self.try_admit(peer.to_canonical());
        if let Err(why) = result {
            self.0
                .log
                .refused(self.0.listener, peer, why, self.limit(why));
        }
        result
    }

    fn limit(&self, why: Refused) -> usize {
        match why {
            Refused::Address => self.0.max_per_address,
            Refused::Listener => self.0.max,
            Refused::Files => self.0.files.as_ref().map_or(0, |f| f.available_permits()),
        }
    }

    fn try_admit(&self, ip: IpAddr) -> Result<Ticket, Refused> {
        let trusted = self.0.trusted.contains(ip);
        let total = self
            .0
            .total
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refused::Listener)?;
        let file = match &self.0.files {
            Some(files) => Some(
                files
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| Refused::Files)?,
            ),
            None => None,
        };
        if !trusted {
            let mut counts = self.0.per_address();
            let n = counts.entry(ip).or_insert(0);
            if *n >= self.0.max_per_address {
                if *n == 0 {
                    counts.remove(&ip);
                }
                return Err(Refused::Address);
            }
            *n += 1;
        }
        Ok(Ticket {
            gate: self.0.clone(),
            address: (!trusted).then_some(ip),
            _total: total,
            _file: file,
        })
    }

    /// Connections held now (for tests and metrics).
    pub fn held(&self) -> usize {
        self.0.max.min(Semaphore::MAX_PERMITS) - self.0.total.available_permits()
    }
}

impl Inner {
    fn per_address(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        // The map stays consistent under a panic elsewhere: every update is one statement.
        self.per_address
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A refusal line at most once per period, counting the ones it stands for.
#[derive(Default)]
struct RefusalLog {
    /// Milliseconds since `epoch` of the last line; 0 before the first.
    last_ms: AtomicU64,
    suppressed: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
}

impl RefusalLog {
    fn refused(&self, listener: &'static str, peer: IpAddr, why: Refused, limit: usize) {
        let epoch = *self.epoch.get_or_init(Instant::now);
        let now = epoch.elapsed().as_millis() as u64 + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        let period = REFUSAL_LOG_PERIOD.as_millis() as u64;
        let due = last == 0 || now.saturating_sub(last) >= period;
        if !due
            || self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let also = self.suppressed.swap(0, Ordering::Relaxed);
        tracing::warn!(
            listener,
            %peer,
            limit,
            refused_since_last_line = also,
            "connection refused: {}",
            why.as_str()
        );
    }
}

/// One listener's connection caps: in all, and per address.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub max: usize,
    pub per_address: usize,
}

/// Every listener's caps and the proxies trusted to name the client, as the configuration
/// states them ([`crate::config::Config::admission`]).
#[derive(Debug, Clone)]
pub struct Limits {
    pub http: Caps,
    /// RTMP and RTMPS, each.
    pub rtmp: Caps,
    pub srt: Caps,
    pub ice_tcp: Caps,
    pub trusted: TrustedProxies,
}

/// Each listener's admission gate; the TCP ones share the process's file budget.
pub struct Gates {
    pub http: Admission,
    pub rtmp: Admission,
    pub rtmps: Admission,
    pub srt: Admission,
    pub ice_tcp: Admission,
}

impl Gates {
    /// Raises the file limit (once per process is enough; again is harmless) and builds the
    /// gates from `limits`.
    pub fn new(limits: Limits) -> Gates {
        let files = file_budget(raise_file_limit());
        let trusted = Arc::new(limits.trusted);
        let tcp = |name, caps: Caps| {
            Admission::new(
                name,
                caps.max,
                caps.per_address,
                Some(files.clone()),
                trusted.clone(),
            )
        };
        Gates {
            http: tcp("http", limits.http),
            rtmp: tcp("rtmp", limits.rtmp),
            rtmps: tcp("rtmps", limits.rtmp),
            // Callers share one UDP socket: no descriptor each.
            srt: Admission::new(
                "srt",
                limits.srt.max,
                limits.srt.per_address,
                None,
                trusted.clone(),
            ),
            ice_tcp: tcp("ice-tcp", limits.ice_tcp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_address_cannot_take_another_ones_places() {
        let gate = Admission::new("test", 10, 3, None, Arc::default());
        let held: Vec<Ticket> = (0..3)
            .map(|_| gate.admit(ip("127.0.0.2")).unwrap())
            .collect();
        assert_eq!(
            gate.admit(ip("127.0.0.2")).err(),
            Some(Refused::Address),
            "the fourth from one address"
        );
        let other = gate
            .admit(ip("127.0.0.1"))
            .expect("another address still gets in");
        drop(held);
        drop(other);
        assert_eq!(gate.held(), 0, "every place is given back");
        assert!(gate.0.per_address().is_empty(), "no count is left behind");
        gate.admit(ip("127.0.0.2"))
            .expect("places come back when connections end");
    }

    #[test]
    fn the_listener_cap_and_the_file_budget_bind_everyone() {
        let files = Arc::new(Semaphore::new(2));
        let a = Admission::new("a", 10, 10, Some(files.clone()), Arc::default());
        let b = Admission::new("b", 1, 10, Some(files), Arc::default());
        let _b1 = b.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(b.admit(ip("10.0.0.2")).err(), Some(Refused::Listener));
        let _a1 = a.admit(ip("10.0.0.3")).unwrap();
        assert_eq!(
            a.admit(ip("10.0.0.4")).err(),
            Some(Refused::Files),
            "listeners share the descriptor budget"
        );
    }

    #[test]
    fn trusted_proxies_are_not_capped_per_address() {
        let trusted = Arc::new(TrustedProxies::new(vec![
            TrustedProxies::parse("10.1.0.0/16").unwrap(),
            TrustedProxies::parse("::1").unwrap(),
        ]));
        let gate = Admission::new("test", 100, 1, None, trusted);
        let held: Vec<Ticket> = (0..5)
            .map(|_| gate.admit(ip("10.1.2.3")).unwrap())
            .collect();
        assert_eq!(held.len(), 5);
        let _one = gate.admit(ip("10.2.0.1")).unwrap();
        assert_eq!(gate.admit(ip("10.2.0.1")).err(), Some(Refused::Address));
        // An IPv4-mapped IPv6 peer is the IPv4 address it maps.
        assert!(gate.0.trusted.contains(ip("::ffff:10.1.9.9")));
        assert!(TrustedProxies::parse("not-an-ip").is_err());
        assert!(TrustedProxies::parse("10.0.0.0/33").is_err());
    }

    #[test]
    fn the_limit_is_raised_to_the_hard_one() {
        let limit = raise_file_limit();
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(now.current, Some(limit));
        assert_eq!(now.current, now.maximum);
    }
}
