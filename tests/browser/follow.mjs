// Follows a live LL-HLS stream with hls.js (low-latency mode) in headless Debian Chromium for
// SECONDS, as a viewer whose page recovers the way livepack's player page does (after a fatal
// error, or a picture stalled for 10 s, a new player a second later), and prints one JSON line: the stalls (wall time with the
// picture not advancing, once it first played), the longest, fatal errors, recoveries and one
// sample a second; for explaining a stall, the buffered ranges in each sample and the
// fragments buffered (type, sequence number, discontinuity counter, start, end).
// Usage: node tests/browser/follow.mjs URL SECONDS
// FOLLOW_DEBUG=1: hls.js's own log on stderr, each line with the page's time (explaining a stall).
import { launch, videoPage } from './chromium.mjs';

const [url, seconds = '40'] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await videoPage(browser, 'hls.js/dist/hls.min.js');
  const debug = process.env.FOLLOW_DEBUG === '1';
  if (debug) page.on('console', (m) => process.stderr.write(`${m.text()}\n`));
  const result = await page.evaluate(async ({ url, seconds, debug }) => {
    const v = document.getElementById('v');
    const t0 = performance.now();
    const now = () => (performance.now() - t0) / 1000;
    const errors = [];
    const buffered = [];
    let recoveries = 0;
    let hls;
    const start = () => {
      const log = (...a) => console.log(`[${now().toFixed(2)}] ${a.join(' ')}`);
      const logger = { trace: log, debug: log, log, info: log, warn: log, error: log };
      hls = new Hls({ lowLatencyMode: true, debug: debug ? logger : false });
      hls.on(Hls.Events.ERROR, (_e, d) => {
        const status = d.response && d.response.code;
        const url = d.context && d.context.url;
        if (errors.length < 40) errors.push({ at: now(), fatal: d.fatal, what: `${d.type}:${d.details}`, status, url });
        if (d.fatal) restart();
      });
      hls.on(Hls.Events.FRAG_BUFFERED, (_e, d) => {
        const f = d.frag;
        if (buffered.length < 80) buffered.push({ at: now(), type: f.type, sn: f.sn, cc: f.cc,
          part: d.part ? d.part.index : null, start: f.start, end: f.end });
      });
      hls.loadSource(url);
      hls.attachMedia(v);
      v.play().catch(() => {});
    };
    let restarting = false;
    const restart = () => {
      if (restarting) return;
      restarting = true;
      hls.destroy();
      setTimeout(() => { restarting = false; recoveries += 1; start(); }, 1000);
    };
    start();
    const stalls = [];
    let watchdogs = 0;
    let lastWatchdog = 0;
    const samples = [];
    let prev = null;
    let moved = null; // wall time the picture last advanced
    while (now() < seconds) {
      await new Promise((r) => setTimeout(r, 100));
      const wall = now();
      const t = v.currentTime;
      if (prev !== null && t > prev + 0.01) {
        if (moved !== null && wall - moved > 0.5) stalls.push({ from: moved, to: wall, secs: wall - moved });
        moved = wall;
      }
      prev = t;
      // The player page's stall check: a picture stopped for 10 s gets a new player.
      if (moved !== null && wall - Math.max(moved, lastWatchdog) > 10 && !restarting) {
        watchdogs += 1;
        lastWatchdog = wall;
        restart();
      }
      if (samples.length === 0 || wall - samples[samples.length - 1].wall >= 1) {
        const ranges = [];
        for (let i = 0; i < v.buffered.length; i++) ranges.push([v.buffered.start(i), v.buffered.end(i)]);
        samples.push({ wall, t, latency: hls.latency, level: hls.currentLevel, ranges });
      }
    }
    // A stall still going on at the end counts too.
    if (moved !== null && now() - moved > 0.5) stalls.push({ from: moved, to: now(), secs: now() - moved, open: true });
    const longest = stalls.reduce((m, s) => Math.max(m, s.secs), 0);
    return { longestStall: longest, stalls, firstPlayed: samples.find((s) => s.t > 0)?.wall ?? null,
      playedUntil: moved, errors, recoveries, watchdogs, samples, buffered: buffered.slice(-40),
      width: v.videoWidth, height: v.videoHeight };
  }, { url, seconds: Number(seconds), debug });
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}
