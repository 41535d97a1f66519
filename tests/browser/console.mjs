// Drives the console (/console) in headless Debian Chromium as an operator would, and prints
// one JSON line of what it saw:
//   refused      the sign-in error shown for a wrong key
//   pushUrl      the RTMP push URL as copied to the clipboard from the stream's page
//   onAirMs      from the first frame pushed to the page showing the stream on air with its
//                bitrate and frame rate (the health row filled)
//   health       the page's health texts then
//   previewT     the preview's video time, twice 3 s apart (it plays)
//   viewersBefore, viewersAfter   the page's viewer total before and after two hls.js players
//   eventsSeen   the events list's lines after the kick
//   offAirMs     from the kick to the page showing the stream off air
//   tableRow     the streams table's row texts for the stream while on air
//   shots        screenshots (1280 and 375 px wide) of the streams table and the stream page
//   origins      every origin the console's tab requested; errors: page errors, failed requests
// The pusher is ffmpeg (FIXTURE looped in real time); players are hls.js pages of this server.
// Usage: node tests/browser/console.mjs BASE KEY OUT_DIR FIXTURE
import { launch } from './chromium.mjs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import fs from 'node:fs';

const [base, key, outDir, fixture] = process.argv.slice(2);
fs.mkdirSync(outDir, { recursive: true });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, fn, ms = 30000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

const browser = await launch();
const errors = [];
const origins = new Set();
const shots = [];
let ffmpeg = null;
const players = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  const page = await context.newPage();
  page.on('pageerror', (e) => errors.push(`page error: ${e}`));
  page.on('request', (r) => origins.add(new URL(r.url()).origin));
  page.on('requestfailed', (r) => {
    // The feed and the preview's media are cut when the page moves on: not failures.
    const f = r.failure() ? r.failure().errorText : '';
    if (!/ERR_ABORTED/.test(f)) errors.push(`failed: ${r.url()} ${f}`);
  });
  // The console's own requests; the preview's (the player page, which shows a poster only once
  // the stream has a screenshot) are the player's business.
  page.on('response', (r) => {
    if (r.status() >= 400 && r.frame() === page.mainFrame()) errors.push(`${r.status()}: ${r.url()}`);
  });

  // A wrong key is refused; the right one signs in (keyboard only).
  await page.goto(`${base}/console`);
  await page.locator('#api-key').fill('not-the-key');
  await page.keyboard.press('Enter');
  const refused = await until('the refusal', async () => (await page.locator('#sign-in-error').textContent()) || null);
  errors.splice(0, errors.length, ...errors.filter((e) => !e.startsWith('401')));
  await page.locator('#api-key').fill(key);
  await page.keyboard.press('Enter');
  await page.locator('#streams').waitFor();
  await until('the feed', async () => /live/.test(await page.locator('#feed-state').textContent()));

  // Create a stream from the dialog; the console opens its page.
  await page.locator('#new-stream').click();
  await page.locator('#f-name').fill('console test');
  await page.getByRole('button', { name: 'Create' }).click();
  await page.locator('#push').waitFor();
  const id = Number(page.url().match(/#\/streams\/(\d+)/)[1]);
  await page.getByRole('button', { name: 'Copy RTMP', exact: true }).click();
  const pushUrl = await page.evaluate(() => navigator.clipboard.readText());

  // Push what was copied; the page shows it on air with its numbers.
  ffmpeg = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-re', '-stream_loop', '20', '-i',
    fixture, '-c', 'copy', '-f', 'flv', pushUrl], { stdio: 'ignore' });
  const pushed = Date.now();
  const health = () => page.evaluate(() => Object.fromEntries(
    [...document.querySelectorAll('#health dd')].map((d) => [d.dataset.field, d.textContent])));
  await until('on air with bitrate and fps', async () => {
    const h = await health();
    return (await page.locator('#on-air').textContent()).includes('main · rtmp')
      && /fps/.test(h.Input) && /bit\/s/.test(h.Input);
  });
  const onAirMs = Date.now() - pushed;
  const healthSeen = await health();

  // The preview (the player page in real-time mode) plays.
  const preview = page.frameLocator('.preview iframe');
  const previewTime = () => preview.locator('#video').evaluate((v) => v.currentTime);
  await until('the preview', async () => (await previewTime()) > 0.5, 60000);
  const t0 = await previewTime();
  await sleep(3000);
  const previewT = [t0, await previewTime()];

  // Two hls.js players of the player page: the viewer count rises.
  const viewers = async () => Number(((await health()).Viewers || '0').split(' ')[0]) || 0;
  const viewersBefore = await viewers();
  // Two viewers: players are told apart by address and user agent, and both are on 127.0.0.1.
  for (let i = 0; i < 2; i++) {
    const agent = `${await page.evaluate(() => navigator.userAgent)} viewer-${i}`;
    const p = await (await browser.newContext({ userAgent: agent })).newPage();
    await p.goto(`${base}/player/${id}`);
    players.push(p);
  }
  const viewersAfter = await until('the players counted', async () => {
    const n = await viewers();
    return n >= viewersBefore + 2 ? n : null;
  }, 45000);

  // The page at 1280 and 375 px, full length, each after `settle` ms (a health sample redraws).
  const screenshots = async (name, settle) => {
    for (const width of [1280, 375]) {
      await page.setViewportSize({ width, height: width > 600 ? 900 : 812 });
      await sleep(settle);
      const shot = path.join(outDir, `console-${name}-${width}.png`);
      await page.screenshot({ path: shot, fullPage: true });
      shots.push(shot);
    }
    await page.setViewportSize({ width: 1280, height: 900 });
  };
  // Screenshots of the stream page, then the streams table, at 1280 and 375 px.
  await screenshots('stream', 2200);
  await page.goto(`${base}/console#/streams`);
  const row = page.locator(`#streams tr[data-id="${id}"]`);
  await until('the live row', async () => /rtmp/.test(await row.textContent()) && /fps/.test(await row.textContent()));
  const tableRow = await row.locator('td').allTextContents();
  await screenshots('streams', 500);

  // Kick from the stream's page: it goes off air, and the events say so.
  await page.goto(`${base}/console#/streams/${id}`);
  await page.locator('#events li').first().waitFor();
  page.once('dialog', (d) => d.accept());
  const kicked = Date.now();
  await page.getByRole('button', { name: 'Kick' }).click();
  await until('off air', async () => (await page.locator('#on-air').textContent()).includes('main off'));
  const offAirMs = Date.now() - kicked;
  const eventsSeen = await until('the events', async () => {
    const lines = await page.locator('#events li').allTextContents();
    return lines.some((l) => /publish stopped/.test(l)) ? lines : null;
  });
  console.log(JSON.stringify({ id, refused, pushUrl, onAirMs, health: healthSeen, previewT, viewersBefore,
    viewersAfter, eventsSeen, offAirMs, tableRow, shots, origins: [...origins], errors }));
} finally {
  if (ffmpeg) ffmpeg.kill('SIGKILL');
  await browser.close();
}
