// Plays an LL-HLS URL with hls.js (low-latency mode) in headless Debian Chromium and prints one
// JSON line: playback samples (currentTime, hls.latency), fatal errors, levels seen.
// Usage: node tests/browser/hlsjs.mjs URL SECONDS [SCREENSHOT.png|-] [ORIGIN]
// ORIGIN (e.g. the daemon's https://…): the page is served from there, its certificate taken as
// is, and the result lists the protocols its requests used (resource timing's nextHopProtocol).
import { launch, videoPage } from './chromium.mjs';

const [url, seconds = '15', shot, origin] = process.argv.slice(2);
const browser = await launch(origin ? ['--ignore-certificate-errors'] : []);
try {
  const page = await videoPage(browser, 'hls.js/dist/hls.min.js', origin);
  const result = await page.evaluate(async ({ url, seconds }) => {
    const v = document.getElementById('v');
    const errors = [];
    const hls = new Hls({ lowLatencyMode: true });
    hls.on(Hls.Events.ERROR, (_e, d) => { if (d.fatal) errors.push(`${d.type}:${d.details}`); });
    hls.loadSource(url);
    hls.attachMedia(v);
    v.play().catch(() => {});
    const samples = [];
    const start = performance.now();
    while (performance.now() - start < seconds * 1000) {
      await new Promise((r) => setTimeout(r, 500));
      samples.push({ wall: (performance.now() - start) / 1000, t: v.currentTime,
        latency: hls.latency, level: hls.currentLevel, partsLoaded: !!hls.latestLevelDetails?.partList });
    }
    return { samples, errors, levels: hls.levels.map((l) => l.height),
      lowLatency: hls.lowLatencyMode, targetLatency: hls.targetLatency,
      width: v.videoWidth, height: v.videoHeight, dropped: v.getVideoPlaybackQuality().droppedVideoFrames,
      protocols: [...new Set(performance.getEntriesByType('resource').map((e) => e.nextHopProtocol))] };
  }, { url, seconds: Number(seconds) });
  if (shot && shot !== '-') await page.screenshot({ path: shot });
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}
