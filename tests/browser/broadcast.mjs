// Drives a broadcast's player page (/player/broadcasts/{id}) in headless Debian Chromium and
// reports each state the page shows as a JSON line, with a PNG screenshot:
//   {"event": STATE, shot, text, broadcast, replay, poster, t0, t1, w}
// STATE is the page's `data-state` (pending, waiting, connecting, live, paused, finished,
// replay, playing, …). For `live` and `playing` the line waits until the picture advanced by
// 2 s (or 15 s passed): t0 → t1 is that progress. Runs until killed or 150 s passed.
// Usage: node tests/browser/broadcast.mjs PAGE_URL OUT_DIR
import { launch } from './chromium.mjs';
import path from 'node:path';
import fs from 'node:fs';

const [url, outDir] = process.argv.slice(2);
fs.mkdirSync(outDir, { recursive: true });
const emit = (o) => console.log(JSON.stringify(o));
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 960, height: 540 } });
  page.on('pageerror', (e) => process.stderr.write(`page error: ${e}\n`));
  page.on('console', (m) => process.stderr.write(`page: ${m.text()}\n`));
  await page.goto(url);
  const read = () => page.evaluate(() => {
    const stage = document.getElementById('stage');
    const video = document.getElementById('video');
    return {
      state: stage.dataset.state,
      broadcast: stage.dataset.broadcast || null,
      replay: stage.dataset.replay || null,
      text: document.getElementById('state').textContent,
      poster: document.getElementById('poster').style.backgroundImage,
      t: video.currentTime,
      w: video.videoWidth,
    };
  });
  let last = null;
  let n = 0;
  const deadline = Date.now() + 150000;
  while (Date.now() < deadline) {
    const s = await read();
    if (s.state !== last) {
      last = s.state;
      let { t: t0, t: t1 } = s;
      // The poster loads asynchronously: give it a moment.
      for (let i = 0; s.state === 'pending' && !s.poster && i < 12; i++) {
        await new Promise((r) => setTimeout(r, 250));
        s.poster = (await read()).poster;
      }
      if (s.state === 'live' || s.state === 'playing') {
        const until = Date.now() + 15000;
        while (t1 < t0 + 2 && Date.now() < until) {
          await new Promise((r) => setTimeout(r, 250));
          t1 = (await read()).t;
        }
      }
      const shot = path.join(outDir, `broadcast-${n++}-${s.state}.png`);
      await page.screenshot({ path: shot });
      const w = (await read()).w;
      emit({ event: s.state, shot, ...s, t0, t1, w });
    }
    await new Promise((r) => setTimeout(r, 250));
  }
} finally {
  await browser.close();
}
