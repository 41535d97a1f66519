//! WPE page pipelines' start and stop, around two faults of GStreamer 1.22's wpevideosrc: a
//! stop that can hang forever, and a WebKit thread that can come up without its main context
//! (so the first page never renders) — see [`stop`] and [`prime`].

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;

/// How long a page renderer gets to stop.
pub(super) const STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Stops a page pipeline within [`STOP_TIMEOUT`], or leaves it behind with a warning.
pub(super) fn stop(pipeline: &gst::Pipeline) {
    let stopping = pipeline.clone();
    let (done, stopped) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("overlay-stop".into())
        .spawn(move || {
            let _ = stopping.set_state(gst::State::Null);
            let _ = done.send(());
        });
    match spawned {
        Ok(_) => {
            if stopped.recv_timeout(STOP_TIMEOUT).is_err() {
                tracing::warn!(
                    timeout = ?STOP_TIMEOUT,
                    "an overlay page renderer did not stop (its WebKit process is gone?); left behind"
                );
            }
        }
        Err(_) => {
            let _ = pipeline.set_state(gst::State::Null);
        }
    }
}

/// How long the first page waits for WPE's WebKit thread ([`prime`]).
const PRIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
/// How long a primer may take before another is started to rescue it ([`prime`]).
const PRIME_STEP: std::time::Duration = std::time::Duration::from_secs(1);
/// Primers started at most ([`prime`]).
const PRIMERS: usize = 4;

/// Brings up WPE's WebKit thread before the first page. GStreamer 1.22's wpevideosrc (Debian 12;
/// fixed upstream in 1.24.10, "wpe: initialize threading.ready before reading it") starts that
/// thread, one per process, and waits for it on a flag it never initialised: when the flag
/// happens to be set, it does not wait, and a view created before the thread has made its main
/// context is queued on GLib's global default context instead, which nothing runs. That page
/// never renders and its streaming thread waits forever (seen as the unit test's page that
/// never painted, in about half the full test runs under load). So throwaway sources on a blank
/// page are started, one more every [`PRIME_STEP`], until each one's view exists: the first view
/// created proves the thread runs (every later view lands on it), and from that thread its
/// primer runs what is stranded on the default context, so an earlier primer lost that way is
/// created too, on the thread it belongs to, and stops like any other.
pub(super) fn prime() {
    let (created, came) = std::sync::mpsc::channel::<()>();
    let mut primers: Vec<gst::Pipeline> = Vec::new();
    let mut views = 0;
    let deadline = std::time::Instant::now() + PRIME_LIMIT;
    let mut last = std::time::Instant::now();
    loop {
        if primers.is_empty() || (primers.len() < PRIMERS && last.elapsed() >= PRIME_STEP) {
            match primer(created.clone()) {
                Ok(p) => primers.push(p),
                Err(e) => {
                    tracing::debug!(error = %e, "no WPE primer");
                    break;
                }
            }
            last = std::time::Instant::now();
        }
        if came
            .recv_timeout(std::time::Duration::from_millis(50))
            .is_ok()
        {
            views += 1;
        }
        if views == primers.len() {
            break;
        }
        if std::time::Instant::now() >= deadline {
            tracing::warn!(
                primers = primers.len(),
                views,
                "WPE's WebKit thread did not come up in time; the first overlay page may stay empty"
            );
            break;
        }
    }
    // Each waits for its blank page's first frame before it can stop: not the first page's wait.
    let _ = std::thread::Builder::new()
        .name("overlay-primers".into())
        .spawn(move || primers.iter().for_each(stop));
}

/// A wpevideosrc on its default blank page whose view, once created, says so on `created`.
fn primer(created: std::sync::mpsc::Sender<()>) -> Result<gst::Pipeline, String> {
    let src = gst::ElementFactory::make("wpevideosrc")
        .build()
        .map_err(|e| e.to_string())?;
    // Emitted on WebKit's thread while the view is created.
    src.connect("configure-web-view", false, move |_| {
        let default = glib::MainContext::default();
        let stranded = (0..PRIMERS)
            .take_while(|_| default.iteration(false))
            .count();
        if stranded > 0 {
            tracing::debug!(
                stranded,
                "WPE views stranded on GLib's default context created"
            );
        }
        let _ = created.send(());
        None
    });
    let sink = gst::ElementFactory::make("fakesink")
        .property("sync", false)
        .build()
        .map_err(|e| e.to_string())?;
    let pipeline = gst::Pipeline::new();
    pipeline
        .add_many([&src, &sink])
        .map_err(|e| e.to_string())?;
    let caps = gst::Caps::builder("video/x-raw")
        .field("format", "BGRA")
        .field("width", 16)
        .field("height", 16)
        .build();
    src.link_filtered(&sink, &caps).map_err(|e| e.to_string())?;
    pipeline
        .set_state(gst::State::Playing)
        .map_err(|e| e.to_string())?;
    Ok(pipeline)
}
