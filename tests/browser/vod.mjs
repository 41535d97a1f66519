// Drives the player page of a recorded video (/player/videos/{id}_{slug}) in headless Debian
// Chromium: waits until it plays, checks the picture advances, seeks near the end and waits
// for the end, having seeked to the middle first. Prints one JSON line:
//   {"duration", "t0", "t1", "middle", "tMiddle", "seekTo", "ended", "state", "w", "errors",
//    "detail": the element at the end (time, duration, paused, buffered) and its last events}
// Usage: node tests/browser/vod.mjs PAGE_URL
import { launch } from './chromium.mjs';

const [url] = process.argv.slice(2);
const browser = await launch();
const errors = [];
try {
  const page = await browser.newPage({ viewport: { width: 960, height: 540 } });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => process.stderr.write(`page: ${m.text()}\n`));
  await page.goto(url);
  // What the element did, for a failure's message: its events with their times.
  await page.evaluate(() => {
    const v = document.getElementById('video');
    window.__events = [];
    for (const e of ['seeking', 'seeked', 'waiting', 'pause', 'play', 'ended', 'durationchange', 'stalled']) {
      v.addEventListener(e, () => window.__events.push(`${e}@${v.currentTime.toFixed(3)}/${v.duration.toFixed(3)}`));
    }
  });
  const state = () => page.evaluate(() => ({
    state: document.getElementById('stage').dataset.state,
    t: document.getElementById('video').currentTime,
    duration: document.getElementById('video').duration,
    ended: document.getElementById('video').ended,
    w: document.getElementById('video').videoWidth,
  }));
  const until = async (ok, ms) => {
    const deadline = Date.now() + ms;
    let s = await state();
    while (!ok(s) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      s = await state();
    }
    return s;
  };
  const first = await until((s) => s.state === 'playing', 30000);
  const t0 = first.t;
  const later = await until((s) => s.t >= t0 + 2, 10000);
  // The middle: the picture goes on from there.
  const middle = later.duration / 2;
  await page.evaluate((t) => { document.getElementById('video').currentTime = t; }, middle);
  const mid = await until((s) => s.t >= middle + 1, 10000);
  const seekTo = Math.max(0, later.duration - 1.5);
  await page.evaluate((t) => { document.getElementById('video').currentTime = t; }, seekTo);
  const end = await until((s) => s.ended && s.state === 'ended', 15000);
  const detail = await page.evaluate(() => {
    const v = document.getElementById('video');
    const b = [];
    for (let i = 0; i < v.buffered.length; i++) b.push([v.buffered.start(i), v.buffered.end(i)]);
    return { t: v.currentTime, duration: v.duration, paused: v.paused, readyState: v.readyState, buffered: b,
      events: window.__events.slice(-30) };
  });
  console.log(JSON.stringify({ duration: later.duration, t0, t1: later.t, middle, tMiddle: mid.t, seekTo,
    ended: end.ended, state: end.state, w: later.w, errors, detail }));
} finally {
  await browser.close();
}
