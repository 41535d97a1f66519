// Shared by the browser drivers: Debian's headless Chromium with the flags the project agreed
// on, and a blank page holding one muted autoplay <video id="v"> plus a player script from
// node_modules (installed by the set-up scripts; no CDN).
import { chromium } from 'playwright-core';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export async function launch(extraArgs = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--autoplay-policy=no-user-gesture-required', ...extraArgs],
  });
}

// `origin`: the page is first opened there, so its requests to that origin are same-origin
// (their resource timing shows the protocol each used).
export async function videoPage(browser, script, origin) {
  const page = await browser.newPage();
  if (origin) await page.goto(`${origin}/time`);
  await page.setContent('<video id="v" muted autoplay playsinline width="640" height="360"></video>');
  await page.addScriptTag({ path: path.join(root, 'node_modules', script) });
  return page;
}
