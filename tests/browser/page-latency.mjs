// Opens the daemon's player page (/player/{id}, e.g. with ?format=dash) in headless Debian
// Chromium, as a viewer would, and prints one JSON line of half-second samples: the picture's
// position and the live latency the page's player reports (dash.js getCurrentLiveLatency, hls.js
// latency). The benches use it to measure the page's own settings, not a copy of them.
// Usage: node tests/browser/page-latency.mjs PAGE_URL SECONDS
import { launch } from './chromium.mjs';

const [url, seconds = '15'] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 960, height: 540 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  const samples = [];
  const start = Date.now();
  while (Date.now() - start < Number(seconds) * 1000) {
    await new Promise((r) => setTimeout(r, 500));
    // `player` is the page's top-level binding: whichever library it chose.
    samples.push(await page.evaluate((wall) => {
      const v = document.getElementById('video');
      let latency = null;
      try {
        latency = typeof player?.getCurrentLiveLatency === 'function'
          ? player.getCurrentLiveLatency() : player?.latency ?? null;
      } catch (e) { /* not ready */ }
      return { wall, t: v.currentTime, latency, rate: v.playbackRate, height: v.videoHeight };
    }, (Date.now() - start) / 1000));
  }
  console.log(JSON.stringify({ samples, errors }));
} finally {
  await browser.close();
}
