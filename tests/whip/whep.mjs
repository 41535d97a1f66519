// A browser WHEP viewer (draft-ietf-wish-whep) for the tests: headless Debian Chromium receives
// a stream from URL on a page of another origin (so CORS is exercised) and plays it in a
// <video>. Prints JSON lines: {"event":"created",…} after the POST, {"event":"connected",…}
// once ICE and DTLS are up, {"event":"playing",…} at the first picture shown (ms since the
// POST), {"event":"stats",…} every second (picture size and position, frames decoded, packets
// lost, NACKs and PLIs sent, audio received). Commands on stdin, one per line:
//   delete      DELETE the session resource, print {"event":"deleted",status}, exit
//   close       close the peer connection without DELETE (a vanished viewer), exit
// With `tcp`, UDP candidates are removed from the offer and the answer: only ICE-TCP connects.
// Usage: node tests/whip/whep.mjs URL [udp|tcp] [video|av]
import readline from 'node:readline';
import { launch } from '../browser/chromium.mjs';
import { servePage, waitConnected } from './connected.mjs';

const [endpoint, transport = 'udp', kinds = 'av'] = process.argv.slice(2);
const emit = (o) => console.log(JSON.stringify(o));
const browser = await launch(['--allow-loopback-in-peer-connection', '--autoplay-policy=no-user-gesture-required']);
const { page, server } = await servePage(browser, '<!doctype html><title>WHEP viewer</title><video id="v" muted autoplay playsinline></video>');

const created = await page.evaluate(async ({ endpoint, transport, kinds }) => {
  const pc = new RTCPeerConnection();
  window.pc = pc;
  pc.addTransceiver('video', { direction: 'recvonly' });
  if (kinds === 'av') pc.addTransceiver('audio', { direction: 'recvonly' });
  const stream = new MediaStream();
  const video = document.getElementById('v');
  pc.addEventListener('track', (e) => {
    stream.addTrack(e.track);
    video.srcObject = stream;
  });
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((resolve) => {
    if (pc.iceGatheringState === 'complete') return resolve();
    pc.addEventListener('icegatheringstatechange', () => {
      if (pc.iceGatheringState === 'complete') resolve();
    });
  });
  const noUdp = (sdp) => sdp.split('\r\n').filter((l) => !/^a=candidate:\S+ \d+ udp /i.test(l)).join('\r\n');
  const offer = transport === 'tcp' ? noUdp(pc.localDescription.sdp) : pc.localDescription.sdp;
  window.posted = performance.now();
  const r = await fetch(endpoint, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: offer });
  let answer = await r.text();
  const out = { event: 'created', status: r.status, location: r.headers.get('Location'),
    etag: r.headers.get('ETag'), contentType: r.headers.get('Content-Type') };
  if (r.status !== 201) return { ...out, body: answer };
  window.location_ = new URL(out.location, endpoint).href;
  if (transport === 'tcp') answer = noUdp(answer);
  out.candidates = answer.split('\r\n').filter((l) => l.startsWith('a=candidate:'));
  out.h264 = answer.split('\r\n').filter((l) => /^a=fmtp:\d+ .*profile-level-id/.test(l));
  out.offered = offer.split('\r\n').filter((l) => /^a=fmtp:\d+ .*profile-level-id/.test(l));
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  window.firstFrame = null;
  video.requestVideoFrameCallback(() => { window.firstFrame = performance.now(); });
  return out;
}, { endpoint, transport, kinds });
emit(created);
if (created.status !== 201) {
  await browser.close();
  server.close();
  process.exit(0);
}

const connected = await waitConnected(page, 'posted');
emit(connected);

const playing = await page.evaluate(async () => {
  const t0 = performance.now();
  while (window.firstFrame === null) {
    if (performance.now() - t0 > 15000) return { event: 'failed', state: 'no picture' };
    await new Promise((r) => setTimeout(r, 10));
  }
  const v = document.getElementById('v');
  return { event: 'playing', ms: Math.round(window.firstFrame - window.posted), width: v.videoWidth, height: v.videoHeight };
});
emit(playing);

const stats = async () => page.evaluate(async () => {
  const v = document.getElementById('v');
  const out = { width: v.videoWidth, height: v.videoHeight, time: v.currentTime,
    state: window.pc.connectionState, audioTracks: v.srcObject ? v.srcObject.getAudioTracks().length : 0 };
  (await window.pc.getStats()).forEach((r, _k, all) => {
    if (r.type === 'inbound-rtp' && r.kind === 'video') {
      const codec = all.get(r.codecId);
      Object.assign(out, { codec: codec && codec.sdpFmtpLine, payloadType: codec && codec.payloadType, framesDecoded: r.framesDecoded, keyFramesDecoded: r.keyFramesDecoded,
        packetsLost: r.packetsLost, nackCount: r.nackCount, pliCount: r.pliCount,
        decoder: r.decoderImplementation, jitterBufferDelay: r.jitterBufferDelay,
        jitterBufferEmitted: r.jitterBufferEmittedCount });
    }
    if (r.type === 'inbound-rtp' && r.kind === 'audio') {
      Object.assign(out, { audioPackets: r.packetsReceived, audioSamples: r.totalSamplesReceived });
    }
  });
  return out;
});
let closing = false;
const statsTimer = setInterval(async () => {
  if (closing) return;
  try {
    emit({ event: 'stats', ...(await stats()) });
  } catch { /* the page is closing */ }
}, 1000);

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const cmd = line.trim();
  if (cmd === 'delete') {
    closing = true;
    const status = await page.evaluate(async () => {
      const r = await fetch(window.location_, { method: 'DELETE' });
      window.pc.close();
      return r.status;
    });
    emit({ event: 'deleted', status });
    break;
  } else if (cmd === 'close') {
    closing = true;
    await page.evaluate(() => window.pc.close());
    emit({ event: 'closed' });
    break;
  }
}
clearInterval(statsTimer);
await browser.close();
server.close();
