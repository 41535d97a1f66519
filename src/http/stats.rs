//! What the HTTP listener answers, for `/metrics`: requests by route class and status class,
//! response bytes by route class, and how long playlists and parts take to be answered (a
//! blocking playlist reload's hold included: that is the wait players see). Lock-free counters
//! bumped once per request.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::body::Body as _;

use crate::http::listener::Body;

/// Route classes, by path alone (a signed path's grant does not change its class).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Api,
    Playlist,
    Mpd,
    Part,
    Segment,
    Init,
    Mpegts,
    Screenshot,
    Video,
    Player,
    Webrtc,
    Ops,
    Other,
}

const ROUTES: [Route; 13] = [
    Route::Api,
    Route::Playlist,
    Route::Mpd,
    Route::Part,
    Route::Segment,
    Route::Init,
    Route::Mpegts,
    Route::Screenshot,
    Route::Video,
    Route::Player,
    Route::Webrtc,
    Route::Ops,
    Route::Other,
];

impl Route {
    pub fn of(path: &str) -> Route {
        let file = path.rsplit('/').next().unwrap_or("");
        let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
        match first {
            "cmaf" if file.ends_with(".m3u8") => Route::Playlist,
            "cmaf" if file.ends_with(".mpd") => Route::Mpd,
            "cmaf" if file.starts_with("part_") => Route::Part,
            "cmaf" if file.starts_with("seg_") => Route::Segment,
            "cmaf" if file.starts_with("init_") => Route::Init,
            "mpegts" => Route::Mpegts,
            "screenshots" => Route::Screenshot,
            "videos" => Route::Video,
            "player" | "docs" | "console" => Route::Player,
            "whip" | "whep" => Route::Webrtc,
            "metrics" | "healthz" | "readyz" => Route::Ops,
            "streaming" | "fastedge" | "security" | "openapi.json" => Route::Api,
            _ => Route::Other,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Route::Api => "api",
            Route::Playlist => "playlist",
            Route::Mpd => "mpd",
            Route::Part => "part",
            Route::Segment => "segment",
            Route::Init => "init",
            Route::Mpegts => "mpegts",
            Route::Screenshot => "screenshot",
            Route::Video => "video",
            Route::Player => "player",
            Route::Webrtc => "webrtc",
            Route::Ops => "ops",
            Route::Other => "other",
        }
    }

    /// Its place in [`ROUTES`] (declared in the same order).
    fn index(self) -> usize {
        self as usize
    }

    /// The classes whose answer time is a histogram: what a low-latency player waits on.
    fn timed(self) -> Option<usize> {
        match self {
            Route::Playlist => Some(0),
            Route::Part => Some(1),
            _ => None,
        }
    }
}

/// Upper bounds of the duration buckets, seconds: from a part served from memory to a blocking
/// reload held for its part (up to three target durations).
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const CODES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NO_CODES: [AtomicU64; 5] = [ZERO; 5];
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Histogram = Histogram {
    buckets: [ZERO; BUCKETS.len()],
    count: ZERO,
    sum_us: ZERO,
};

static REQUESTS: [[AtomicU64; 5]; ROUTES.len()] = [NO_CODES; ROUTES.len()];
static BYTES: [AtomicU64; ROUTES.len()] = [ZERO; ROUTES.len()];
static DURATIONS: [Histogram; 2] = [EMPTY; 2];

/// One request of `route` answered with `resp` after `took` (until its head was ready).
pub fn record(route: Route, resp: &hyper::Response<Body>, took: Duration) {
    let r = route.index();
    let code = (resp.status().as_u16() / 100).clamp(1, 5) as usize - 1;
    REQUESTS[r][code].fetch_add(1, Ordering::Relaxed);
    // A body of known length (media from memory, JSON): a streamed one is not counted.
    if let Some(n) = resp.body().size_hint().exact() {
        BYTES[r].fetch_add(n, Ordering::Relaxed);
    }
    if let Some(h) = route.timed() {
        let h = &DURATIONS[h];
        let secs = took.as_secs_f64();
        // The count first, the buckets after, and the scrape reads them the other way round:
        // a scrape never sees a bucket above `+Inf` (the count).
        h.count.fetch_add(1, Ordering::SeqCst);
        h.sum_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.buckets[i].fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// The families in the text exposition format.
pub fn metrics() -> String {
    let mut out = String::new();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let name = "livepack_http_requests_total";
    let _ = writeln!(out, "# HELP {name} HTTP requests answered, by route class and status class.\n# TYPE {name} counter");
    for route in ROUTES {
        for (c, code) in CODES.iter().enumerate() {
            let n = get(&REQUESTS[route.index()][c]);
            if n > 0 {
                let _ = writeln!(
                    out,
                    "{name}{{route=\"{}\",code=\"{code}\"}} {n}",
                    route.name()
                );
            }
        }
    }
    let name = "livepack_http_response_bytes_total";
    let _ = writeln!(out, "# HELP {name} Bytes of HTTP response bodies of known length (media and documents from memory), by route class.\n# TYPE {name} counter");
    for route in ROUTES {
        let _ = writeln!(
            out,
            "{name}{{route=\"{}\"}} {}",
            route.name(),
            get(&BYTES[route.index()])
        );
    }
    let name = "livepack_http_request_duration_seconds";
    let _ = writeln!(out, "# HELP {name} Time to answer LL-HLS playlists (a blocking reload's hold included) and parts, until the response head.\n# TYPE {name} histogram");
    for (route, h) in [
        (Route::Playlist, &DURATIONS[0]),
        (Route::Part, &DURATIONS[1]),
    ] {
        let route = route.name();
        let buckets: Vec<u64> = h.buckets.iter().map(|b| b.load(Ordering::SeqCst)).collect();
        let count = h.count.load(Ordering::SeqCst);
        for (n, le) in buckets.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{route=\"{route}\",le=\"{le}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{route=\"{route}\",le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "{name}_sum{{route=\"{route}\"}} {}",
            get(&h.sum_us) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count{{route=\"{route}\"}} {count}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_fall_into_their_route_class() {
        for (path, route) in [
            ("/cmaf/7/master.m3u8", Route::Playlist),
            ("/cmaf/7/t/1700000000/abc/720p/index.m3u8", Route::Playlist),
            ("/cmaf/7/720p/part_12_3.m4s", Route::Part),
            ("/cmaf/7/720p/seg_12.m4s", Route::Segment),
            ("/cmaf/7/720p/init_1.mp4", Route::Init),
            ("/cmaf/7/index.mpd", Route::Mpd),
            ("/mpegts/7/720p/seg_3.ts", Route::Mpegts),
            ("/streaming/streams/7", Route::Api),
            ("/whep/7", Route::Webrtc),
            ("/readyz", Route::Ops),
            ("/nothing", Route::Other),
        ] {
            assert_eq!(Route::of(path), route, "{path}");
        }
        for (i, route) in ROUTES.into_iter().enumerate() {
            assert_eq!(route.index(), i, "{route:?}");
        }
    }
}
