// Opens the console (/console) signed in with KEY on the streams table (or PAGE) in headless
// Chromium and keeps it open SECONDS, as an operator's tab would be; for scripts/bench-console.
// Prints one JSON line: {"rows": table rows seen, "feed": the feed state's text}.
// Usage: node scripts/console-open.mjs BASE KEY SECONDS [PAGE]
import { launch } from '../tests/browser/chromium.mjs';

const [base, key, seconds, hash = '#/streams'] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${base}/console`);
  await page.locator('#api-key').fill(key);
  await page.keyboard.press('Enter');
  await page.locator('#streams').waitFor();
  if (hash !== '#/streams') await page.goto(`${base}/console${hash}`);
  await new Promise((r) => setTimeout(r, Number(seconds) * 1000));
  const rows = await page.locator('tbody tr').count();
  const feed = await page.locator('#feed-state').textContent();
  console.log(JSON.stringify({ rows, feed }));
} finally {
  await browser.close();
}
