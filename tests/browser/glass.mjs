// The browser side of scripts/bench-glass: opens the measuring page (tests/browser/glass.html,
// served by the script at ORIGIN) in headless Debian Chromium, once per join, and prints one
// JSON line: each join's glass-to-glass samples (ms), the player's own latency figures, decode
// failures, the time to the first frame. With --self-test, it decodes the frames the script
// hands over (a JSON file) with the page's decoder instead and prints those results.
// Usage: node tests/browser/glass.mjs ORIGIN '{"mode":"hls|dash|whep","url":…,"joins":N,
//          "seconds":S,"warmup":W,"pause":P}'
//        node tests/browser/glass.mjs ORIGIN --self-test FRAMES.json
import { readFileSync } from 'node:fs';
import { launch } from './chromium.mjs';

const [origin, arg, file] = process.argv.slice(2);
// Without the first flag Chromium offers no loopback ICE candidates (the daemon is on
// 127.0.0.1); without the second a page without camera permission hides its host addresses
// behind mDNS names (a server may still reach it as a peer-reflexive candidate).
const browser = await launch(['--allow-loopback-in-peer-connection',
  '--disable-features=WebRtcHideLocalIpsWithMdns']);
try {
  if (arg === '--self-test') {
    const page = await browser.newPage();
    await page.goto(origin + '/');
    const frames = JSON.parse(readFileSync(file, 'utf8'));
    console.log(JSON.stringify(await page.evaluate((f) => window.glassSelfTest(f), frames)));
  } else {
    const cfg = JSON.parse(arg);
    const joins = [];
    for (let j = 0; j < cfg.joins; j++) {
      if (j > 0 && cfg.pause) await new Promise((r) => setTimeout(r, Math.random() * cfg.pause * 1000));
      const page = await browser.newPage({ viewport: { width: 960, height: 540 } });
      const pageErrors = [];
      page.on('pageerror', (e) => pageErrors.push(String(e)));
      await page.goto(origin + '/');
      const r = await page.evaluate((c) => window.glassRun(c), cfg);
      r.errors.push(...pageErrors);
      r.errors = r.errors.slice(0, 5);
      joins.push(r);
      await page.close();
      // No endpoint: no point in joining again.
      if (cfg.mode === 'whep' && r.status === 404) break;
    }
    console.log(JSON.stringify({ joins }));
  }
} finally {
  await browser.close();
}
