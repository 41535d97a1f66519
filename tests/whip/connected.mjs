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
