// Drives the player page's controls (/player/{id} of a live stream with DVR and ABR rungs) in
// headless Debian Chromium, as a viewer would (menu, mouse, keys), and prints one JSON line of
// what it saw; a PNG screenshot of each state goes to OUT_DIR:
//   hls, dash  (hls.js, then dash.js with `?format=dash`), each with
//     rungs    the quality menu's labels, and for 360p then 720p the video height before and
//              after
//     edge     at the live edge: latency readout, LIVE control, the DVR window
//     scrubbed the first look after a click on the timeline 20 s back
//     dvr      then: latency, LIVE control, picture advancing
//     back     after pressing LIVE: latency, LIVE control, how long it took; `after`, the same
//              once the picture advanced 1 s more
//   keys       (hls.js) m (mute), space (pause, play), arrow left (5 s back), f (full screen)
//   touch      (dash.js, a touch screen) the bar hidden after 3 s idle, shown by a tap on the
//              picture, hidden by the next
//   error      the page when its player library cannot load (words on screen)
// Usage: node tests/browser/controls.mjs PAGE_URL OUT_DIR
import { launch } from './chromium.mjs';
import path from 'node:path';
import fs from 'node:fs';

const [url, outDir] = process.argv.slice(2);
fs.mkdirSync(outDir, { recursive: true });
const report = { errors: [], shots: [], phases: {} };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (m) => process.stderr.write(`controls: ${m}\n`);
// Seconds since the driver started, at the end of each phase (where the time goes).
const begun = Date.now();
const phase = (name) => { report.phases[name] = (Date.now() - begun) / 1000; };

// What the page shows, read from its elements only (as a viewer sees it).
const look = (page) => page.evaluate(() => {
  const $ = (id) => document.getElementById(id);
  const v = $('video'), q = $('quality'), tl = $('timeline');
  return {
    state: $('stage').dataset.state, text: $('state').textContent, hint: $('hint').textContent,
    t: v.currentTime, h: v.videoHeight, paused: v.paused, muted: v.muted,
    latency: parseFloat($('latency').dataset.seconds), latencyText: $('latency').textContent,
    edge: $('golive').dataset.edge === 'true', liveShown: !$('golive').hidden,
    options: q.hidden ? [] : [...q.options].map((o) => o.textContent),
    timeline: tl.hidden ? null : { min: Number(tl.min), max: Number(tl.max), value: Number(tl.value) },
    full: !!document.fullscreenElement, bar: !$('bar').hidden, idle: $('stage').classList.contains('idle'),
    wall: Date.now() / 1000,
  };
});

async function until(page, ok, ms, what) {
  const deadline = Date.now() + ms;
  let s = await look(page);
  while (!ok(s) && Date.now() < deadline) {
    await sleep(200);
    s = await look(page);
  }
  if (!ok(s)) log(`gave up waiting for ${what}: ${JSON.stringify(s)}`);
  return s;
}

// A screenshot with the bar showing (a mouse moved over the picture wakes it), unless `wake`
// is false.
let jiggle = 0;
async function shot(page, name, wake = true) {
  if (wake) {
    await page.mouse.move(480 + (jiggle++ % 2), 300);
    await sleep(100);
  }
  const file = path.join(outDir, `controls-${name}.png`);
  await page.screenshot({ path: file });
  report.shots.push(file);
}

// Chooses `label` in the quality menu; the height before and the one the video reaches within
// 20 s (and still shows once what was buffered before the choice has played).
async function chooseRung(page, label, height) {
  const from = (await look(page)).h;
  const value = await page.$eval('#quality', (q, l) => [...q.options].find((o) => o.textContent === l)?.value, label);
  await page.selectOption('#quality', value);
  const started = Date.now();
  const s = await until(page, (x) => x.h === height, 20000, `${label}`);
  const ms = Date.now() - started;
  // A switch up that automatic fetched just before the choice may still play out of dash.js's
  // buffer (a choice does not flush it): past the buffer, the chosen height must hold.
  await page.waitForTimeout(3000);
  await until(page, (x) => x.h === height, 20000, `${label} held`);
  return { label, from, height: s.h, ms };
}

async function newPage(browser, options = {}) {
  const page = await browser.newPage({ viewport: { width: 960, height: 540 }, ...options });
  page.on('pageerror', (e) => report.errors.push(String(e)));
  page.on('console', (m) => { if (m.type() !== 'debug') log(`page: ${m.text()}`); });
  return page;
}

// Clicks the timeline where `time` is (a range input: its thumb's centre spans the width
// less one thumb).
async function clickTimeline(page, time) {
  const box = await page.locator('#timeline').boundingBox();
  const s = await look(page);
  const frac = (time - s.timeline.min) / (s.timeline.max - s.timeline.min);
  const thumb = 16;
  await page.mouse.click(box.x + thumb / 2 + frac * (box.width - thumb), box.y + box.height / 2);
}

// Plays the page in `format`: rungs, the live edge, 20 s back on the timeline, LIVE again;
// `between` runs while the picture is behind live.
async function controls(browser, format, between, after) {
  const page = await newPage(browser, { hasTouch: format === 'dash' });
  await page.goto(format === 'dash' ? `${url}?format=dash` : url);
  let s = await until(page, (x) => x.state === 'live' && x.options.length > 1, 60000, 'live with rungs');
  const r = { rungs: { options: s.options, chosen: [] } };
  report[format] = r;
  // Automatic may play 360p already; from a chosen 360p (automatic off), 720p is a change.
  for (const h of [360, 720]) {
    r.rungs.chosen.push(await chooseRung(page, `${h}p`, h));
    await shot(page, `${format}-${h}p`);
  }
  await page.selectOption('#quality', '-1');

  phase(`${format} rungs`);
  // A window 20 s deep (and a little) to scrub in; from the live edge (a starved player falls
  // behind by itself: LIVE first).
  await until(page, (x) => x.timeline && x.timeline.max - x.timeline.min >= 24, 60000, 'a 24 s window');
  await page.click('#golive');
  s = await until(page, (x) => x.edge, 10000, 'the live edge');
  r.edge = s;
  await shot(page, `${format}-live-edge`);
  phase(`${format} window`);

  await clickTimeline(page, s.t - 20);
  r.scrubbed = await until(page, (x) => x.latency >= s.latency + 10, 15000, 'latency growing');
  const t0 = r.scrubbed.t;
  // Played on from there for a moment: the picture advances, still that far behind.
  r.dvr = await until(page, (x) => x.t >= t0 + 1.5 && !x.paused, 15000, 'the picture advancing');
  await shot(page, `${format}-dvr`);
  phase(`${format} scrubbed`);
  if (between) await between(page);

  await page.click('#golive');
  const pressed = Date.now();
  const back = await until(page, (x) => x.edge && x.latency < 3, 15000, 'back at the live edge');
  r.back = { ...back, ms: Date.now() - pressed };
  r.back.after = await until(page, (x) => x.t >= back.t + 1, 5000, 'advancing at the edge');
  await shot(page, `${format}-back-live`);
  phase(`${format} back`);
  if (after) await after(page);
  await page.close();
}

// The keys, as a viewer behind live presses them.
async function keys(page) {
  const key = async (k, ok, what) => { await page.keyboard.press(k); return until(page, ok, 5000, what); };
  const k = {};
  report.keys = k;
  k.unmuted = (await key('m', (x) => !x.muted, 'unmuted')).muted === false;
  k.muted = (await key('m', (x) => x.muted, 'muted')).muted === true;
  // The page's state follows within its 2 s tick.
  k.paused = await key('Space', (x) => x.paused && x.state === 'paused', 'paused');
  await shot(page, 'hls-paused');
  k.playing = (await key('Space', (x) => !x.paused, 'playing')).paused === false;
  const from = (await look(page)).t;
  k.left = { from, to: (await key('ArrowLeft', (x) => x.t < from - 3, '5 s back')).t };
  k.fullscreen = (await key('f', (x) => x.full, 'full screen')).full;
  k.window = !(await key('f', (x) => !x.full, 'window')).full;
  phase('keys');
}

// A finger on a touch screen: taps on the picture show and hide the bar.
async function touch(page) {
  const idle = await until(page, (x) => x.idle, 8000, 'the bar hidden');
  await page.touchscreen.tap(480, 200);
  const shown = await until(page, (x) => !x.idle, 3000, 'the bar shown');
  await shot(page, 'dash-tapped', false);
  await page.touchscreen.tap(480, 200);
  const hidden = await until(page, (x) => x.idle, 3000, 'the bar hidden again');
  report.touch = { idle: idle.idle, shown: !shown.idle, hidden: hidden.idle };
  phase('touch');
}

// The player library cannot load: the page says so in words (and retries).
async function error(browser) {
  const page = await newPage(browser);
  await page.route('**/player/assets/hls.min.js', (r) => r.abort());
  await page.goto(url);
  report.error = await until(page, (x) => x.state === 'error', 20000, 'the error state');
  await shot(page, 'error');
  phase('error');
  await page.close();
}

const browser = await launch();
try {
  await controls(browser, 'hls', keys);
  await error(browser);
  await controls(browser, 'dash', null, touch);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
