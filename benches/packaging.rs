//! The pure packaging parts under load: LL-HLS/LL-DASH rendering, the blocking-reload wake-up of
//! many held requests when a part lands, and the segment store's put/get. `cargo bench --bench
//! packaging`; the last figures are in benches/README.md.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use time::OffsetDateTime;

use livepack::http::delivery::media_playlist_now;
use livepack::package::hls::{self, MediaQuery};
use livepack::package::{
    dash, Package, PackageState, PackagingConfig, PartIn, Rendition, RenditionKind, Retention,
};

const PART: Duration = Duration::from_millis(500);
const PARTS_PER_SEGMENT: u64 = 4;
/// A CMAF chunk of the 720p rung at 3 Mbit/s: 0.5 s ≈ 190 KB.
const PART_BYTES: usize = 190_000;

fn ladder() -> Vec<Rendition> {
    let video = |name: &str, width, height, kbps: u64| {
        let kind = RenditionKind::Video {
            width,
            height,
            frame_rate: 30.0,
        };
        let mut r = Rendition::new(name, kind, "avc1.64001f", kbps * 1000);
        r.set_init(Bytes::from_static(b"init"));
        r
    };
    let mut audio = Rendition::new(
        "audio",
        RenditionKind::Audio {
            channels: 2,
            sample_rate: 48_000,
        },
        "mp4a.40.2",
        128_000,
    );
    audio.set_init(Bytes::from_static(b"init"));
    vec![
        video("720p", 1280, 720, 3000),
        video("480p", 854, 480, 1500),
        video("360p", 640, 360, 800),
        audio,
    ]
}

fn part(index: u64, t0: OffsetDateTime, data: &Bytes) -> PartIn {
    PartIn {
        starts_segment: index.is_multiple_of(PARTS_PER_SEGMENT),
        independent: index.is_multiple_of(PARTS_PER_SEGMENT),
        duration: PART,
        pdt: t0 + PART * index as u32,
        data: data.clone(),
    }
}

/// A stream that has published `parts` parts on every rendition (plus one open part), with
/// the live window or a DVR window.
fn stream(parts: u64, dvr: Option<Duration>) -> PackageState {
    let mut p = PackageState::new(PackagingConfig::default(), ladder());
    p.set_dvr_window(dvr);
    let t0 = OffsetDateTime::now_utc() - PART * parts as u32;
    let data = Bytes::from(vec![0u8; PART_BYTES]);
    for i in 0..=parts {
        for r in 0..p.renditions().len() {
            p.push_part(r, part(i, t0, &data));
        }
    }
    p
}

fn rendering(c: &mut Criterion) {
    let live = stream(120, None);
    let dvr = stream(2 * 3600 * 2, Some(Duration::from_secs(3600)));
    let top = &live.renditions()[0];
    c.bench_function("hls/render_master", |b| {
        b.iter(|| hls::render_master(black_box(&live)))
    });
    c.bench_function("hls/render_media live window (6 segments)", |b| {
        b.iter(|| hls::render_media(black_box(&live), top, false, false))
    });
    let dvr_top = &dvr.renditions()[0];
    c.bench_function("hls/render_media DVR 1 h (1800 segments)", |b| {
        b.iter(|| hls::render_media(black_box(&dvr), dvr_top, false, false))
    });
    c.bench_function("hls/render_media DVR 1 h, delta update (_HLS_skip)", |b| {
        b.iter(|| hls::render_media(black_box(&dvr), dvr_top, true, false))
    });
    let now = OffsetDateTime::now_utc();
    c.bench_function("dash/render_mpd live", |b| {
        b.iter(|| dash::render_mpd(black_box(&live), now, "/time", dash::DashClient::LowLatency))
    });
    c.bench_function("dash/render_mpd DVR 1 h", |b| {
        b.iter(|| dash::render_mpd(black_box(&dvr), now, "/time", dash::DashClient::LowLatency))
    });
}

fn store(c: &mut Criterion) {
    let data = Bytes::from(vec![0u8; PART_BYTES]);
    let t0 = OffsetDateTime::now_utc();
    c.bench_function("store/put part (window full, evicting)", |b| {
        b.iter_batched_ref(
            || {
                let mut r = ladder().swap_remove(0);
                for i in 0..44 {
                    r.push_part(part(i, t0, &data), Retention::Segments(11));
                }
                (r, 44u64)
            },
            |(r, i)| {
                for _ in 0..PARTS_PER_SEGMENT {
                    r.push_part(part(*i, t0, &data), Retention::Segments(11));
                    *i += 1;
                }
            },
            BatchSize::SmallInput,
        )
    });
    let live = stream(120, None);
    let top = &live.renditions()[0];
    let (last_msn, _) = top.last_part().expect("parts");
    c.bench_function("store/get part", |b| {
        b.iter(|| {
            let s = top.segment(black_box(last_msn - 1)).expect("held");
            s.parts[black_box(2)].data.clone()
        })
    });
    c.bench_function("store/get whole segment (4 chunks)", |b| {
        b.iter(|| top.segment(black_box(last_msn - 1)).expect("held").data())
    });
}

/// 1000 blocking playlist requests held for the next part; one part lands; time until every
/// request has its rendered playlist (what the HTTP handlers then write out).
fn blocking_reload(c: &mut Criterion) {
    const WAITERS: usize = 1000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let data = Bytes::from(vec![0u8; PART_BYTES]);
    let mut group = c.benchmark_group("blocking_reload");
    group.sample_size(20);
    let cases = [
        ("live window", 40, None),
        ("DVR 1 h", 2 * 3600 * 2, Some(Duration::from_secs(3600))),
    ];
    for (label, parts, dvr) in cases {
        group.bench_function(
            format!("1000 waiters, {label}: part lands → all answered"),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let package = Arc::new(Package::new(stream(parts, dvr)));
                        let (msn, idx) =
                            package.read(|p| p.renditions()[0].last_part().expect("parts"));
                        let (next_msn, next_part) = if idx + 1 < PARTS_PER_SEGMENT as usize {
                            (msn, idx + 1)
                        } else {
                            (msn + 1, 0)
                        };
                        let q = MediaQuery {
                            msn: Some(next_msn),
                            part: Some(next_part as u64),
                            skip: false,
                        };
                        let ready = Arc::new(tokio::sync::Barrier::new(WAITERS + 1));
                        let handles: Vec<_> = (0..WAITERS)
                            .map(|_| {
                                let package = package.clone();
                                let ready = ready.clone();
                                runtime.spawn(async move {
                                    ready.wait().await;
                                    package
                                        .wait_for(Duration::from_secs(6), |p| {
                                            media_playlist_now(p, "720p", &q, false)
                                        })
                                        .await
                                        .expect("answered")
                                        .expect("a playlist")
                                        .len()
                                })
                            })
                            .collect();
                        runtime.block_on(async {
                            ready.wait().await;
                            // Every waiter has evaluated once and parked on the change signal.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        });
                        let name = package.read(|p| p.renditions()[0].name.clone());
                        let sink = package
                            .sink(livepack::package::Output::Cmaf, &name)
                            .expect("installed");
                        let t0 = OffsetDateTime::now_utc();
                        let start = Instant::now();
                        sink.part(part(parts + 1, t0, &data));
                        let bytes: usize = runtime.block_on(async {
                            let mut sum = 0;
                            for h in handles {
                                sum += h.await.expect("task");
                            }
                            sum
                        });
                        total += start.elapsed();
                        black_box(bytes);
                    }
                    total
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, rendering, store, blocking_reload);
criterion_main!(benches);
