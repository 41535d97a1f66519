// Opens the API reference page (/docs/api) in headless Debian Chromium and waits until Swagger UI
// has rendered the operations of /openapi.json. Prints one JSON line:
//   {"operations": rendered operation blocks, "summaries": their summary texts,
//    "origins": every origin the page requested, "errors": page errors and failed requests}
// Usage: node tests/browser/apidocs.mjs PAGE_URL EXPECTED_OPERATIONS
import { launch } from './chromium.mjs';

const [url, expected] = process.argv.slice(2);
const browser = await launch();
const errors = [];
const origins = new Set();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('request', (r) => origins.add(new URL(r.url()).origin));
  page.on('requestfailed', (r) => errors.push(`failed: ${r.url()}`));
  page.on('response', (r) => { if (r.status() >= 400) errors.push(`${r.status()}: ${r.url()}`); });
  await page.goto(url);
  const deadline = Date.now() + 30000;
  let operations = 0;
  while (Date.now() < deadline) {
    operations = await page.locator('.opblock').count();
    if (operations >= Number(expected)) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  const summaries = await page.locator('.opblock-summary-description').allTextContents();
  console.log(JSON.stringify({ operations, summaries, origins: [...origins], errors }));
} finally {
  await browser.close();
}
