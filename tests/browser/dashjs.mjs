// Plays an LL-DASH MPD with dash.js 4 (low-latency mode, live catch-up) in headless Debian
// Chromium and prints one JSON line: playback samples (currentTime, live latency), errors.
// Usage: node tests/browser/dashjs.mjs MPD_URL SECONDS
import { launch, videoPage } from './chromium.mjs';

const [url, seconds = '15'] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await videoPage(browser, 'dashjs/dist/dash.all.min.js');
  const result = await page.evaluate(async ({ url, seconds }) => {
    const v = document.getElementById('v');
    const errors = [];
    const player = dashjs.MediaPlayer().create();
    player.updateSettings({ streaming: { lowLatencyEnabled: true, delay: { liveDelay: 1.5 },
      liveCatchup: { enabled: true, maxDrift: 0, playbackRate: 0.3 } } });
    player.on(dashjs.MediaPlayer.events.ERROR, (e) => errors.push(JSON.stringify(e.error || e)));
    player.initialize(v, url, true);
    const samples = [];
    const start = performance.now();
    while (performance.now() - start < seconds * 1000) {
      await new Promise((r) => setTimeout(r, 500));
      samples.push({ wall: (performance.now() - start) / 1000, t: v.currentTime,
        latency: player.getCurrentLiveLatency(), lowLatency: player.getLowLatencyModeEnabled?.() });
    }
    return { samples, errors, width: v.videoWidth, height: v.videoHeight };
  }, { url, seconds: Number(seconds) });
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}
