// Drives the daemon's player page (/player/{id}) in headless Debian Chromium and reports its
// states as JSON lines, with a PNG screenshot of each:
//   {"event":"offline", shot}            the page shows its offline state
//   {"event":"live", shot, t0, t1, …}    the video advanced by 2 s or more
// then waits for the next state change and reports it the same way, until `EVENTS` states were
// seen or 5 minutes passed (the test bounds each wait itself; on a loaded machine they add up).
// Usage: node tests/browser/player.mjs PAGE_URL OUT_DIR PREFIX EVENTS
import { launch } from './chromium.mjs';
import path from 'node:path';
import fs from 'node:fs';

const [url, outDir, prefix = 'player', events = '3'] = process.argv.slice(2);
fs.mkdirSync(outDir, { recursive: true });
const emit = (o) => console.log(JSON.stringify(o));
// SwiftShader gives headless Chromium WebGL without a GPU (for the 360° view).
const browser = await launch(['--enable-unsafe-swiftshader', '--use-gl=angle', '--use-angle=swiftshader']);
try {
  const page = await browser.newPage({ viewport: { width: 960, height: 540 } });
  page.on('pageerror', (e) => process.stderr.write(`page error: ${e}\n`));
  page.on('console', (m) => process.stderr.write(`page: ${m.text()}\n`));
  // A media request the daemon refused is what a stalled player's report needs first
  // (dash.js asking for one segment again and again): each one, with its status, on stderr.
  page.on('response', (r) => {
    if (r.status() >= 400 && /\.(m4s|mp4|mpd|m3u8)(\?|$)/.test(r.url())) {
      process.stderr.write(`media ${r.status()}: ${r.url()}\n`);
    }
  });
  await page.goto(url);
  let last = null;
  const deadline = Date.now() + 300000;
  let seen = 0;
  while (seen < Number(events) && Date.now() < deadline) {
    const s = await page.evaluate(() => ({
      state: document.getElementById('stage').dataset.state,
      text: document.getElementById('state').textContent,
      t: document.getElementById('video').currentTime,
      w: document.getElementById('video').videoWidth,
      sphere: getComputedStyle(document.getElementById('sphere')).display === 'block',
      webgl: window.webglProbe ??= !!document.createElement('canvas').getContext('webgl'),
      poster: document.getElementById('poster').style.backgroundImage,
    }));
    if (s.state === 'offline' && last !== 'offline') {
      // The poster loads asynchronously: give it a moment when the stream has screenshots.
      for (let i = 0; i < 12 && !s.poster; i++) {
        await new Promise((r) => setTimeout(r, 250));
        s.poster = await page.evaluate(() => document.getElementById('poster').style.backgroundImage);
      }
      const shot = path.join(outDir, `${prefix}-offline-${seen}.png`);
      await page.screenshot({ path: shot });
      emit({ event: 'offline', shot, ...s });
      last = 'offline';
      seen++;
    } else if (s.state === 'live' && last !== 'live') {
      const t0 = s.t;
      const until = Date.now() + 15000;
      let t1 = t0;
      while (t1 < t0 + 2 && Date.now() < until) {
        await new Promise((r) => setTimeout(r, 250));
        t1 = await page.evaluate(() => document.getElementById('video').currentTime);
      }
      const shot = path.join(outDir, `${prefix}-live-${seen}.png`);
      await page.screenshot({ path: shot });
      const w = await page.evaluate(() => document.getElementById('video').videoWidth);
      emit({ event: 'live', shot, t0, t1, ...s, w });
      last = 'live';
      seen++;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
} finally {
  await browser.close();
}
