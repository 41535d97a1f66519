import http from 'node:http';

// Shared by the WebRTC browser drivers (whip.mjs, whep.mjs): waits, 15 s at most, for the
// page's `window.pc` to connect, and reports the selected candidate pair's remote end and the
// milliseconds since the page's `window[since]` mark.
export async function waitConnected(page, since) {
  return page.evaluate(async (since) => {
    const t0 = performance.now();
    while (window.pc.connectionState !== 'connected') {
      if (['failed', 'closed'].includes(window.pc.connectionState) || performance.now() - t0 > 15000) {
        return { event: 'failed', state: window.pc.connectionState };
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    let remote = null;
    (await window.pc.getStats()).forEach((r, _k, all) => {
      if (r.type === 'transport' && r.selectedCandidatePairId) {
        const pair = all.get(r.selectedCandidatePairId);
        const c = pair && all.get(pair.remoteCandidateId);
        if (c) remote = { address: c.address, port: c.port, protocol: c.protocol };
      }
    });
    return { event: 'connected', ms: Math.round(performance.now() - window[since]), remote };
  }, since);
}

// A page for the driver on its own loopback origin (another port than the daemon's: CORS is
// exercised; and 127.0.0.1 is a secure context, which getUserMedia needs), its console on
// stderr. Returns the page and the server to close at the end.
export async function servePage(browser, html) {
  const page = await browser.newPage();
  page.on('console', (m) => process.stderr.write(`page: ${m.text()}\n`));
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end(html);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  await page.goto(`http://127.0.0.1:${server.address().port}/`);
  return { page, server };
}
