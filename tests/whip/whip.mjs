// A browser WHIP publisher (RFC 9725) for the tests: headless Debian Chromium with its fake
// camera and microphone pushes to URL from a page of another origin (so CORS is exercised).
// Prints JSON lines: {"event":"created",…} after the POST, {"event":"connected",…} once ICE and
// DTLS are up, {"event":"stats",…} every second. Commands on stdin, one per line:
//   downscale   halve the sent resolution (RTCRtpSender.setParameters)
//   delete      DELETE the session resource, print {"event":"deleted",status}, exit
//   close       close the peer connection without DELETE (a vanished client), exit
// With `tcp`, UDP candidates are removed from the offer the daemon gets and from the answer the
// browser gets, so UDP is blocked as far as this session goes: only ICE-TCP can connect.
// {"event":"created"} carries the `Link` headers as the page could read them (CORS);
// {"event":"connected"} the selected candidate pair's remote end (address, port, protocol).
// Usage: node tests/whip/whip.mjs URL bearer|query [udp|tcp]
import readline from 'node:readline';
import { launch } from '../browser/chromium.mjs';
import { servePage, waitConnected } from './connected.mjs';

const [endpoint, auth = 'bearer', transport = 'udp'] = process.argv.slice(2);
const emit = (o) => console.log(JSON.stringify(o));
const browser = await launch(['--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream',
  '--allow-loopback-in-peer-connection']);
const { page, server } = await servePage(browser, '<!doctype html><title>WHIP publisher</title><p>WHIP publisher</p>');

const created = await page.evaluate(async ({ endpoint, auth, transport }) => {
  const url = new URL(endpoint);
  const token = url.searchParams.get('token');
  const headers = { 'Content-Type': 'application/sdp' };
  if (auth === 'bearer') {
    url.searchParams.delete('token');
    headers.Authorization = `Bearer ${token}`;
  }
  const media = await navigator.mediaDevices.getUserMedia({
    audio: true, video: { width: 1280, height: 720, frameRate: 30 } });
  const pc = new RTCPeerConnection();
  window.pc = pc;
  for (const track of media.getTracks()) pc.addTransceiver(track, { direction: 'sendonly' });
  await pc.setLocalDescription(await pc.createOffer());
  // Non-trickle: the offer goes out with every candidate gathered.
  await new Promise((resolve) => {
    if (pc.iceGatheringState === 'complete') return resolve();
    pc.addEventListener('icegatheringstatechange', () => {
      if (pc.iceGatheringState === 'complete') resolve();
    });
  });
  // UDP blocked both ways: the daemon must not learn our UDP candidates either, or its checks
  // would find us (a peer-reflexive pair) without a single UDP candidate in the answer.
  const noUdp = (sdp) => sdp.split('\r\n').filter((l) => !/^a=candidate:\S+ \d+ udp /i.test(l)).join('\r\n');
  const offer = transport === 'tcp' ? noUdp(pc.localDescription.sdp) : pc.localDescription.sdp;
  const r = await fetch(url, { method: 'POST', headers, body: offer });
  let answer = await r.text();
  const out = { event: 'created', status: r.status, location: r.headers.get('Location'),
    etag: r.headers.get('ETag'), contentType: r.headers.get('Content-Type'),
    link: r.headers.get('Link') };
  if (r.status !== 201) return { ...out, body: answer };
  window.location_ = new URL(out.location, url).href;
  window.headers_ = auth === 'bearer' ? { Authorization: headers.Authorization } : {};
  if (transport === 'tcp') {
    answer = noUdp(answer);
  }
  out.candidates = answer.split('\r\n').filter((l) => l.startsWith('a=candidate:'));
  window.iceConnected = null;
  pc.addEventListener('iceconnectionstatechange', () => {
    if (pc.iceConnectionState === 'connected' && window.iceConnected === null) {
      window.iceConnected = performance.now();
    }
  });
  window.answered = performance.now();
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  return out;
}, { endpoint, auth, transport });
emit(created);
if (created.status !== 201) {
  await browser.close();
  server.close();
  process.exit(0);
}

const connected = await waitConnected(page, 'answered');
if (connected.event === 'connected') {
  connected.iceMs = await page.evaluate(() => (window.iceConnected === null ? null
    : Math.round(window.iceConnected - window.answered)));
}
emit(connected);

const statsTimer = setInterval(async () => {
  try {
    const s = await page.evaluate(async () => {
      const out = {};
      (await window.pc.getStats()).forEach((r) => {
        if (r.type === 'outbound-rtp' && r.kind === 'video') {
          Object.assign(out, { width: r.frameWidth, height: r.frameHeight, frames: r.framesEncoded,
            codec: r.encoderImplementation, keyframes: r.keyFramesEncoded, pli: r.pliCount });
        }
      });
      return out;
    });
    emit({ event: 'stats', ...s });
  } catch { /* the page is closing */ }
}, 1000);

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const cmd = line.trim();
  if (cmd === 'downscale') {
    await page.evaluate(async () => {
      const sender = window.pc.getSenders().find((s) => s.track?.kind === 'video');
      const p = sender.getParameters();
      p.encodings[0].scaleResolutionDownBy = 2;
      await sender.setParameters(p);
    });
    emit({ event: 'downscaled' });
  } else if (cmd === 'delete') {
    const status = await page.evaluate(async () => {
      const r = await fetch(window.location_, { method: 'DELETE', headers: window.headers_ });
      window.pc.close();
      return r.status;
    });
    emit({ event: 'deleted', status });
    break;
  } else if (cmd === 'close') {
    await page.evaluate(() => window.pc.close());
    emit({ event: 'closed' });
    break;
  }
}
clearInterval(statsTimer);
await browser.close();
server.close();
