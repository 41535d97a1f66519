//! HTML overlays burned into the transcoded picture. Each overlay page renders in a pipeline of
//! its own (`wpevideosrc` → BGRA at the box's size, a few frames a second → appsink keeping
//! the newest frame); the live pipeline holds one `overlaycomposition` element that, for every
//! video frame, blends the newest frame of each overlay into its box (scaled from the
//! 1920×1080 overlay space to the picture). So the live pipeline never waits for a page: a page
//! that is slow, hangs or fails only leaves its box empty, and adding, moving or removing an
//! overlay changes a list, not the pipeline.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app::AppSink;
use gstreamer_video as gst_video;

use super::wpe;
use crate::events::{Event, Events, Next};
use crate::overlay::{OverlaySpec, SPACE_HEIGHT, SPACE_WIDTH};
use crate::url_policy;
use crate::url_policy::client::{self, OutboundClient};

/// How long a page may take to answer the pre-check before it is skipped.
const PAGE_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Frames a second each page is rendered at (the cloud API promises 1).
pub const RENDER_FPS: i32 = 2;

/// The newest frame of one page.
type Latest = Arc<Mutex<Option<gst::Buffer>>>;

/// One overlay page rendering in its own pipeline.
pub struct PageRenderer {
    pipeline: gst::Pipeline,
    latest: Latest,
    /// The page failed after it started (WebKit then draws its error text: not shown).
    failed: Arc<std::sync::atomic::AtomicBool>,
    /// Counts this renderer among its hub's running ones until its pipeline has stopped
    /// (a field: dropped after `Drop::drop` returns).
    _running: Option<Running>,
}

/// One running renderer in a hub's count ([`OverlayHub::renderers_running`]).
struct Running(Arc<AtomicUsize>);

impl Running {
    fn new(count: &Arc<AtomicUsize>) -> Running {
        count.fetch_add(1, Ordering::Relaxed);
        Running(count.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PageRenderer {
    /// Starts rendering `spec.url` at the box's size (the full space for `stretch`).
    pub fn start(spec: &OverlaySpec) -> Result<PageRenderer, String> {
        super::init().map_err(|e| e.to_string())?;
        static PRIMED: std::sync::Once = std::sync::Once::new();
        PRIMED.call_once(wpe::prime);
        let (w, h) = render_size(spec);
        let make = |name: &str| {
            gst::ElementFactory::make(name)
                .build()
                .map_err(|e| format!("{name}: {e} (is gstreamer1.0-wpe installed?)"))
        };
        let src = make("wpevideosrc")?;
        src.set_property("location", &spec.url);
        src.set_property("draw-background", false);
        let caps = gst::Caps::builder("video/x-raw")
            .field("format", "BGRA")
            .field("width", w as i32)
            .field("height", h as i32)
            .field("framerate", gst::Fraction::new(RENDER_FPS, 1))
            .build();
        let sink = AppSink::builder()
            .caps(&caps)
            .sync(false)
            .max_buffers(1)
            .drop(true)
            .build();
        let latest: Latest = Arc::default();
        let keep = latest.clone();
        sink.set_callbacks(
            gstreamer_app::AppSinkCallbacks::builder()
                .new_sample(move |sink| {
                    let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                    if let Some(mut buffer) = sample.buffer_owned() {
                        // Overlay rectangles need the frame's layout as a meta.
                        if buffer.meta::<gst_video::VideoMeta>().is_none() {
                            let _ = gst_video::VideoMeta::add(
                                buffer.make_mut(),
                                gst_video::VideoFrameFlags::empty(),
                                gst_video::VideoFormat::Bgra,
                                w,
                                h,
                            );
                        }
                        *keep.lock().unwrap_or_else(|p| p.into_inner()) = Some(buffer);
                    }
                    Ok(gst::FlowSuccess::Ok)
                })
                .build(),
        );
        let pipeline = gst::Pipeline::new();
        pipeline
            .add_many([&src, sink.upcast_ref()])
            .map_err(|e| e.to_string())?;
        src.link(&sink).map_err(|e| e.to_string())?;
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(bus) = pipeline.bus() {
            let (failed, url) = (failed.clone(), crate::url_policy::redact(&spec.url));
            bus.set_sync_handler(move |_, msg| {
                if let gst::MessageView::Error(e) = msg.view() {
                    if !failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        tracing::warn!(url = %url, error = %e.error(), "overlay page failed; not shown");
                    }
                }
                gst::BusSyncReply::Drop
            });
        }
        pipeline
            .set_state(gst::State::Playing)
            .map_err(|e| format!("overlay page: {e}"))?;
        Ok(PageRenderer {
            pipeline,
            latest,
            failed,
            _running: None,
        })
    }

    /// Counts this renderer in `count` until its pipeline has stopped.
    fn counted_in(mut self, count: &Arc<AtomicUsize>) -> PageRenderer {
        self._running = Some(Running::new(count));
        self
    }

    /// The newest rendered frame, if the page rendered one yet and has not failed.
    pub fn latest(&self) -> Option<gst::Buffer> {
        if self.failed.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        self.latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for PageRenderer {
    /// Stops the page's pipeline, waiting at most [`wpe::STOP_TIMEOUT`]: wpevideosrc (1.22) waits for
    /// WebKit's next frame without a way to be woken, so when the page's web process is gone the
    /// stop never returns (seen once in the unit test: the drop hung in `gst_pad_stop_task`).
    /// Its thread is then left behind with a warning rather than taking its caller with it.
    fn drop(&mut self) {
        wpe::stop(&self.pipeline);
    }
}

/// The size a page renders at: its box in the overlay space.
fn render_size(spec: &OverlaySpec) -> (u32, u32) {
    if spec.stretch {
        (SPACE_WIDTH, SPACE_HEIGHT)
    } else {
        (spec.width, spec.height)
    }
}

/// Where a box lands on a `width`×`height` picture: (x, y, w, h), scaled from the overlay
/// space and never empty.
pub fn placement(spec: &OverlaySpec, width: u32, height: u32) -> (i32, i32, u32, u32) {
    if spec.stretch {
        return (0, 0, width, height);
    }
    let sx = |v: u32| (u64::from(v) * u64::from(width) / u64::from(SPACE_WIDTH)) as u32;
    let sy = |v: u32| (u64::from(v) * u64::from(height) / u64::from(SPACE_HEIGHT)) as u32;
    (
        sx(spec.x) as i32,
        sy(spec.y) as i32,
        sx(spec.width).max(1),
        sy(spec.height).max(1),
    )
}

/// What the live pipeline's `overlaycomposition` draws: the current overlays, each with its
/// renderer. Shared with whoever applies overlay changes.
#[derive(Default)]
pub struct OverlaySet {
    items: Mutex<Vec<Rendering>>,
}

impl std::fmt::Debug for OverlaySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.items.lock().map(|i| i.len()).unwrap_or(0);
        write!(f, "OverlaySet({n} overlays)")
    }
}

impl OverlaySet {
    /// Replaces the set (renderers of unchanged overlays are kept by the caller) and hands
    /// back the previous one, so that a renderer's last reference is not dropped (its stop can
    /// take seconds) under the lock `draw` takes for every frame.
    #[must_use = "the previous overlays may hold the last reference to a renderer: drop them off the async workers"]
    pub fn set(&self, items: Vec<Rendering>) -> Vec<Rendering> {
        std::mem::replace(&mut *lock(&self.items), items)
    }

    /// The composition for a `width`×`height` frame; `None` when nothing has rendered.
    pub fn composition(
        &self,
        width: u32,
        height: u32,
    ) -> Option<gst_video::VideoOverlayComposition> {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        let rects: Vec<gst_video::VideoOverlayRectangle> = items
            .iter()
            .filter_map(|(spec, renderer)| {
                let buffer = renderer.latest()?;
                buffer.meta::<gst_video::VideoMeta>()?;
                let (x, y, w, h) = placement(spec, width, height);
                Some(gst_video::VideoOverlayRectangle::new_raw(
                    &buffer,
                    x,
                    y,
                    w,
                    h,
                    gst_video::VideoOverlayFormatFlags::empty(),
                ))
            })
            .collect();
        if rects.is_empty() {
            return None;
        }
        gst_video::VideoOverlayComposition::new(rects.iter()).ok()
    }
}

/// The live pipeline's element: blends `set` into every frame passing through.
pub fn element(set: Arc<OverlaySet>) -> Result<gst::Element, String> {
    let overlay = gst::ElementFactory::make("overlaycomposition")
        .build()
        .map_err(|e| format!("overlaycomposition: {e}"))?;
    let size = Arc::new(Mutex::new((0u32, 0u32)));
    let on_caps = size.clone();
    overlay.connect("caps-changed", false, move |args| {
        let w = args.get(2).and_then(|v| v.get::<u32>().ok()).unwrap_or(0);
        let h = args.get(3).and_then(|v| v.get::<u32>().ok()).unwrap_or(0);
        *on_caps.lock().unwrap_or_else(|p| p.into_inner()) = (w, h);
        None
    });
    overlay.connect("draw", false, move |_args| {
        let (w, h) = *size.lock().unwrap_or_else(|p| p.into_inner());
        let composition = (w > 0 && h > 0).then(|| set.composition(w, h)).flatten();
        Some(composition.to_value())
    });
    Ok(overlay)
}

/// An overlay's spec and the renderer rendering it.
type Rendering = (OverlaySpec, Arc<PageRenderer>);

/// Every stream's overlay set, and the renderers behind them: rendering runs while a stream is
/// live with `html_overlay: true`; changes through the API apply at once (`changed`).
pub struct OverlayHub {
    store: Arc<dyn crate::db::Store>,
    /// Fetches each page once before rendering it (WebKit would render a 404's body, and
    /// waits without a bound for a server that never answers); every redirect hop checked.
    client: Option<OutboundClient>,
    /// Sets by stream id: the pipeline built for a stream draws its set.
    sets: Mutex<HashMap<i64, Arc<OverlaySet>>>,
    /// Running renderers by (stream, overlay id), with the spec they render.
    renderers: Mutex<HashMap<(i64, i64), Rendering>>,
    /// Streams live now.
    live: Mutex<HashSet<i64>>,
    /// Where a page that cannot be shown is told (set by [`OverlayHub::spawn`]).
    events: std::sync::OnceLock<Events>,
    /// One turn per stream with a change being applied: the API and the live-event follower
    /// both call `changed`, and two applications at once would each start the page and one
    /// renderer would be lost still running. Entries go when no one holds or waits for them.
    turns: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>,
    /// The page proxy's task, when the daemon runs one: aborted at the end of the stop.
    page_proxy: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Renderers whose pipeline has not stopped yet, this hub's (logged with each change).
    running: Arc<AtomicUsize>,
    /// Pages this hub started rendering, ever (logged with each change).
    started: AtomicUsize,
    /// The events follower, and the changes being applied, until [`OverlayHub::shutdown`].
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
    tasks: crate::tasks::Owned,
    /// Set by [`OverlayHub::shutdown`]: no change starts a page any more.
    closed: AtomicBool,
}

impl OverlayHub {
    pub fn new(store: Arc<dyn crate::db::Store>) -> Arc<OverlayHub> {
        let client = client::build(client::Outbound::web_page(), |b| {
            b.timeout(PAGE_CHECK_TIMEOUT).user_agent("livepack-overlay")
        })
        .map_err(
            |e| tracing::error!(error = %e, "overlay page client unavailable; pages are skipped"),
        )
        .ok();
        Arc::new(OverlayHub {
            store,
            client,
            sets: Mutex::default(),
            renderers: Mutex::default(),
            live: Mutex::default(),
            events: std::sync::OnceLock::new(),
            turns: Mutex::default(),
            page_proxy: Mutex::default(),
            running: Arc::default(),
            started: AtomicUsize::new(0),
            follower: Mutex::default(),
            tasks: Default::default(),
            closed: AtomicBool::new(false),
        })
    }

    /// Whether this GStreamer has the WPE WebKit source.
    pub fn available() -> bool {
        super::init().is_ok() && gst::ElementFactory::find("wpevideosrc").is_some()
    }

    fn failed(&self, stream_id: i64, overlay: i64, error: String) {
        if let Some(events) = self.events.get() {
            events.emit(Event::OverlayFailed {
                stream_id,
                overlay_id: Some(overlay),
                error,
            });
        }
    }

    /// The set a stream's pipeline draws (created empty on first use).
    pub fn set_for(&self, stream: i64) -> Arc<OverlaySet> {
        lock(&self.sets).entry(stream).or_default().clone()
    }

    /// Page renderers started and not yet stopped, over all streams.
    pub fn renderers_running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Page renderers started since the hub was made, over all streams.
    pub fn renderers_started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }

    /// Follows streams going live and ending on `events`, and reports pages that fail there.
    pub fn spawn(self: &Arc<Self>, events: &Events) {
        let this = self.clone();
        let _ = self.events.set(events.clone());
        let mut events = events.subscribe();
        let follower = tokio::spawn(async move {
            loop {
                let id = match events.next().await {
                    Some(Next::Event(e)) => match e.event {
                        Event::LiveStarted { stream_id, .. } => {
                            lock(&this.live).insert(stream_id);
                            stream_id
                        }
                        Event::LiveEnded { stream_id } => {
                            lock(&this.live).remove(&stream_id);
                            stream_id
                        }
                        _ => continue,
                    },
                    Some(Next::Lost(_)) => continue,
                    None => break,
                };
                // Applied in the stream's turn, not here: a page that is slow to answer must
                // not hold up the events of every stream (a lagging receiver loses some).
                this.change(id);
            }
        });
        *lock(&self.follower) = Some(follower);
    }

    /// Applies a change in the background (starting a page takes a moment), owned by the hub.
    pub fn change(self: &Arc<Self>, stream: i64) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let hub = self.clone();
        self.tasks.spawn(async move { hub.changed(stream).await });
    }

    /// The daemon is stopping, its pipelines done: no change starts a page any more, those
    /// under way finish (or are cut at `within`), and every page renderer stops before this
    /// returns, so no page reports a failure once the webhooks are flushed.
    pub async fn shutdown(&self, within: std::time::Duration) {
        self.closed.store(true, Ordering::Release);
        if let Some(follower) = lock(&self.follower).take() {
            follower.abort();
        }
        crate::tasks::drain(self.tasks.take(), within).await;
        let retired: Vec<Rendering> = lock(&self.renderers).drain().map(|(_, r)| r).collect();
        lock(&self.sets).clear();
        let _ = tokio::task::spawn_blocking(move || drop(retired)).await;
        // Last: the pages fetched through it until their renderers were gone.
        if let Some(proxy) = lock(&self.page_proxy).take() {
            proxy.abort();
        }
    }

    /// The page proxy's task ([`crate::page_proxy::serve`]): the hub's pages fetch through it,
    /// and it ends with the hub's stop.
    pub fn serve_pages_with(&self, proxy: tokio::task::JoinHandle<()>) {
        *lock(&self.page_proxy) = Some(proxy);
    }

    /// A stream's overlays or its `html_overlay` changed (or it went live or ended): renders
    /// what it should now show. Changes of one stream apply one at a time, in call order;
    /// each reads the state current when its turn comes.
    pub async fn changed(&self, stream: i64) {
        let turn = lock(&self.turns).entry(stream).or_default().clone();
        {
            let _turn = turn.lock().await;
            self.apply(stream).await;
        }
        let mut turns = lock(&self.turns);
        // Two references: the map's and ours. A waiter would hold a third, taken under this lock.
        if Arc::strong_count(&turn) == 2 {
            turns.remove(&stream);
        }
    }

    /// One change, applied while holding the stream's turn.
    async fn apply(&self, stream: i64) {
        let Some(overlays) = self.wanted(stream).await else {
            return;
        };
        // Renderers replaced or stopped here: dropped together at the end, off the workers.
        let mut retired: Vec<Rendering> = Vec::new();
        let mut items = Vec::with_capacity(overlays.len());
        for o in overlays {
            // A move keeps the page; a new URL or box size renders it anew.
            let running = lock(&self.renderers)
                .get(&(stream, o.id))
                .filter(|(spec, _)| {
                    spec.url == o.spec.url && render_size(spec) == render_size(&o.spec)
                })
                .map(|(_, r)| r.clone());
            let renderer = match running {
                Some(r) => r,
                None => match self.start_page(stream, o.id, &o.spec).await {
                    Some(r) => r,
                    None => continue,
                },
            };
            let previous =
                lock(&self.renderers).insert((stream, o.id), (o.spec.clone(), renderer.clone()));
            retired.extend(previous);
            items.push((o.id, o.spec, renderer));
        }
        let keep: HashSet<i64> = items.iter().map(|(id, _, _)| *id).collect();
        retired.extend(
            self.set_for(stream)
                .set(items.into_iter().map(|(_, spec, r)| (spec, r)).collect()),
        );
        // This stream's renderers whose overlay is gone (or not shown now) stop.
        {
            let mut renderers = lock(&self.renderers);
            let gone: Vec<(i64, i64)> = renderers
                .keys()
                .filter(|(s, id)| *s == stream && !keep.contains(id))
                .copied()
                .collect();
            retired.extend(gone.iter().filter_map(|k| renderers.remove(k)));
        }
        if !retired.is_empty() {
            // Stopping a WebKit pipeline waits for its threads (up to `STOP_TIMEOUT`).
            tokio::task::spawn_blocking(move || drop(retired));
        }
        tracing::debug!(
            stream,
            running = self.renderers_running(),
            started = self.renderers_started(),
            "overlay renderers after a change"
        );
    }

    /// The overlays `stream` should show now: none unless it is live with `html_overlay`;
    /// `None` (logged) when the store cannot say.
    async fn wanted(&self, stream: i64) -> Option<Vec<crate::db::OverlayRow>> {
        let store = self.store.clone();
        let wanted = tokio::task::spawn_blocking(move || {
            let on = store
                .get_stream(stream)?
                .is_some_and(|r| r.settings.html_overlay);
            let overlays = if on {
                store.list_overlays(stream)?
            } else {
                Vec::new()
            };
            Ok::<_, crate::db::StoreError>(overlays)
        })
        .await;
        match wanted {
            Ok(Ok(o)) if lock(&self.live).contains(&stream) => Some(o),
            Ok(Ok(_)) => Some(Vec::new()),
            Ok(Err(e)) => {
                tracing::warn!(stream, error = %e, "cannot read the stream's overlays");
                None
            }
            Err(_) => None,
        }
    }
}

impl OverlayHub {
    /// Checks that the page answers 2xx in time, then starts rendering it; `None` (logged)
    /// when it does not.
    async fn start_page(
        &self,
        stream: i64,
        overlay: i64,
        spec: &OverlaySpec,
    ) -> Option<Arc<PageRenderer>> {
        let checked = match &self.client {
            Some(client) => client.pre_check(&spec.url).await,
            None => Err("no HTTP client".to_owned()),
        };
        if let Err(why) = checked {
            tracing::warn!(stream, overlay, url = %url_policy::redact(&spec.url), reason = %why, "overlay page skipped");
            self.failed(stream, overlay, why);
            return None;
        }
        let spec = spec.clone();
        let running = self.running.clone();
        let started = tokio::task::spawn_blocking(move || {
            PageRenderer::start(&spec).map(|r| r.counted_in(&running))
        });
        match started.await {
            Ok(Ok(r)) => {
                self.started.fetch_add(1, Ordering::Relaxed);
                Some(Arc::new(r))
            }
            Ok(Err(e)) => {
                tracing::warn!(stream, overlay, error = %e, "overlay page skipped");
                self.failed(stream, overlay, e.to_string());
                None
            }
            Err(_) => None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gstreamer_video::prelude::*;

    /// Serves one HTML page on 127.0.0.1 (every request gets it); returns its URL.
    fn serve(html: &'static str) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/page.html", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten().take(50) {
                let mut conn = conn;
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
                    html.len()
                );
            }
        });
        url
    }

    /// The Y, U and V of one pixel of an I420 frame.
    fn yuv_at(
        frame: &gst_video::VideoFrameRef<&gst::BufferRef>,
        x: usize,
        y: usize,
    ) -> (u8, u8, u8) {
        let plane = |i: u32, x: usize, y: usize| {
            let stride = frame.plane_stride()[i as usize] as usize;
            frame.plane_data(i).unwrap()[y * stride + x]
        };
        (
            plane(0, x, y),
            plane(1, x / 2, y / 2),
            plane(2, x / 2, y / 2),
        )
    }

    /// A real page (a solid red body) rendered by WPE into the bottom-right quarter of the
    /// 1920×1080 space lands in the bottom-right quarter of a 640×360 picture, and nowhere else.
    #[test]
    fn a_page_is_blended_into_its_box_and_only_there() {
        super::super::init().unwrap();
        std::env::set_var("LIBGL_ALWAYS_SOFTWARE", "1");
        let url = serve(
            "<!doctype html><html><body style=\"margin:0;background:#ff0000\"></body></html>",
        );
        let spec = OverlaySpec {
            url,
            width: 960,
            height: 540,
            x: 960,
            y: 540,
            stretch: false,
        };
        let renderer = Arc::new(PageRenderer::start(&spec).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        // The first frames are blank (the page is still loading): wait for the painted one.
        let painted = |b: &gst::Buffer| {
            let map = b.map_readable().unwrap();
            let center = (270 * 960 + 480) * 4;
            map.get(center + 3).is_some_and(|a| *a > 0)
        };
        while !renderer.latest().is_some_and(|b| painted(&b)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the page never painted"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let set = Arc::new(OverlaySet::default());
        let _ = set.set(vec![(spec, renderer)]);
        let pipeline = gst::Pipeline::new();
        let src = gst::ElementFactory::make("videotestsrc")
            .property_from_str("pattern", "black")
            .property("num-buffers", 5)
            .build()
            .unwrap();
        let caps = gst::ElementFactory::make("capsfilter")
            .property(
                "caps",
                gst::Caps::builder("video/x-raw")
                    .field("format", "I420")
                    .field("width", 640)
                    .field("height", 360)
                    .build(),
            )
            .build()
            .unwrap();
        let overlay = element(set).unwrap();
        let sink = AppSink::builder().sync(false).build();
        pipeline
            .add_many([&src, &caps, &overlay, sink.upcast_ref()])
            .unwrap();
        gst::Element::link_many([&src, &caps, &overlay, sink.upcast_ref()]).unwrap();
        pipeline.set_state(gst::State::Playing).unwrap();
        let sample = sink.pull_sample().unwrap();
        let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
        let frame =
            gst_video::VideoFrameRef::from_buffer_ref_readable(sample.buffer().unwrap(), &info)
                .unwrap();
        let (y, _, v) = yuv_at(&frame, 480, 270);
        // Red: Y 63 in BT.709, 82 in BT.601; V near 240.
        assert!(
            (55..=90).contains(&y) && v > 200,
            "red in the box: Y {y} V {v}"
        );
        for (x, yy) in [(160, 90), (480, 90), (160, 270), (310, 170)] {
            let (y, u, v) = yuv_at(&frame, x, yy);
            assert!(
                y < 30 && (118..=138).contains(&u) && (118..=138).contains(&v),
                "black at ({x},{yy}): {y} {u} {v}"
            );
        }
        drop(frame);
        pipeline.set_state(gst::State::Null).unwrap();
    }

    /// The API and the live-event follower change one stream's overlays at the same moment:
    /// the changes apply one after the other, so the second finds the first's renderer and
    /// keeps it — one page starts, one runs — and the stream's end stops it (off the workers).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_changes_of_one_stream_start_one_renderer() {
        super::super::init().unwrap();
        std::env::set_var("LIBGL_ALWAYS_SOFTWARE", "1");
        let url = serve("<!doctype html><html><body style=\"background:#00ff00\"></body></html>");
        let dir = tempfile::tempdir().unwrap();
        use crate::db::{OverlayStore as _, StreamStore as _};
        let store = Arc::new(crate::db::SqliteStore::open_in(dir.path()).unwrap());
        let now = time::OffsetDateTime::now_utc();
        let settings = crate::db::StreamSettings {
            html_overlay: true,
            ..crate::db::StreamSettings::default()
        };
        let stream = store.create_stream(&settings, "tok", now).unwrap().id;
        let spec = OverlaySpec {
            url,
            width: 320,
            height: 180,
            x: 0,
            y: 0,
            stretch: false,
        };
        store
            .create_overlays(stream, &[spec], 10, now)
            .unwrap()
            .unwrap();
        let hub = OverlayHub::new(store);
        lock(&hub.live).insert(stream);

        tokio::join!(hub.changed(stream), hub.changed(stream));
        assert_eq!(hub.renderers_started(), 1, "each change started a page");
        assert_eq!(hub.renderers_running(), 1);
        assert_eq!(lock(&hub.set_for(stream).items).len(), 1);

        lock(&hub.live).remove(&stream);
        hub.changed(stream).await;
        assert!(lock(&hub.set_for(stream).items).is_empty());
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
        while hub.renderers_running() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the renderer never stopped"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(lock(&hub.turns).is_empty(), "turns are let go");
    }

    #[test]
    fn boxes_scale_from_the_overlay_space_to_the_picture() {
        let spec = OverlaySpec {
            url: String::new(),
            width: 960,
            height: 540,
            x: 960,
            y: 540,
            stretch: false,
        };
        assert_eq!(placement(&spec, 640, 360), (320, 180, 320, 180));
        assert_eq!(placement(&spec, 1920, 1080), (960, 540, 960, 540));
        let full = OverlaySpec {
            stretch: true,
            ..spec
        };
        assert_eq!(placement(&full, 1280, 720), (0, 0, 1280, 720));
    }
}
