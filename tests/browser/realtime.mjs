// Opens the daemon's player page (e.g. /player/{id}?format=webrtc) in headless Chromium (with
// loopback WebRTC candidates allowed) and prints one JSON line of half-second samples: which
// player the page runs (`webrtc`, `hls.js`, `dash.js`), the picture's position and height, the
// page's state and its notice (a fallback says why), and the mode menu's value.
// With a third argument `switch`, the mode menu is set to real time after SECONDS / 2.
// Usage: node tests/browser/realtime.mjs PAGE_URL SECONDS [switch]
import { launch } from './chromium.mjs';

const [url, seconds = '12', action = ''] = process.argv.slice(2);
const browser = await launch(['--allow-loopback-in-peer-connection']);
try {
  const page = await browser.newPage({ viewport: { width: 960, height: 540 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => process.stderr.write(`page: ${m.text()}\n`));
  await page.goto(url);
  const samples = [];
  const start = Date.now();
  let switched = false;
  while (Date.now() - start < Number(seconds) * 1000) {
    await new Promise((r) => setTimeout(r, 500));
    if (action === 'switch' && !switched && Date.now() - start > Number(seconds) * 500) {
      switched = true;
      await page.selectOption('#mode', 'webrtc');
    }
    samples.push(await page.evaluate((wall) => {
      const v = document.getElementById('video');
      const kind = !player ? null : player.whep ? 'webrtc'
        : (window.Hls && player instanceof window.Hls) ? 'hls.js'
          : typeof player.getBitrateInfoListFor === 'function' ? 'dash.js' : 'other';
      return { wall, kind, t: v.currentTime, height: v.videoHeight,
        state: document.getElementById('stage').dataset.state,
        notice: document.getElementById('toast').textContent,
        mode: document.getElementById('mode').value,
        modeShown: !document.getElementById('mode').hidden,
        pc: player && player.whep ? player.pc.connectionState : null };
    }, (Date.now() - start) / 1000));
  }
  console.log(JSON.stringify({ samples, errors }));
} finally {
  await browser.close();
}
