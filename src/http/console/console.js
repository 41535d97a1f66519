// The operator's console (/console): streams on air and their health, a stream's page with a
// preview, graphs and events, videos, webhooks and nodes. Plain browser JavaScript against the
// control API with the API key kept in this tab's session storage (never in a URL); live
// numbers come from the events feed (/streaming/events), read with fetch so the key travels in
// the Authorization header as for every API call.
'use strict';

const KEY = 'livepack.apiKey';
const HOUR_MS = 3600e3;
const main = document.getElementById('main');
const state = { health: new Map(), listeners: new Set(), feed: null, feedNode: '', view: 0 };
// A view still waiting on a request when the operator moved on draws nothing: each view takes
// a number at its start and checks it after every wait.
const current = (view) => view === state.view;
// What a stream off air shows in place of the numbers it had.
const OFF_AIR = { live: false, backup_live: false, input_protocol: null, backup_input_protocol: null,
  transcoding_speed: null, transcoding_preset: null, transcoded_qualities: [], frame_rate: null,
  video_width: null, video_height: null, video_codec: null, audio_codec: null, video_bitrate: null,
  keyframe_interval: null, frames_dropped: 0, viewers: null, recording: false, restreams: {} };

// ---------- helpers ----------
function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    // Through the CSSOM: the page's policy refuses style attributes.
    else if (k === 'style') el.style.cssText = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) if (kid != null) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}
const fmt = {
  num: (v, d = 0) => (v == null ? '–' : Number(v).toFixed(d)),
  kbps: (v) => (v == null ? '–' : v >= 1000 ? `${(v / 1000).toFixed(2)} Mbit/s` : `${v} kbit/s`),
  time: (s) => (s ? new Date(s).toLocaleString() : '–'),
  secs: (v) => (v == null ? '–' : `${Number(v).toFixed(1)} s`),
  bytes: (n) => (n == null ? '–' : n > 1e9 ? `${(n / 1e9).toFixed(2)} GB` : `${(n / 1e6).toFixed(1)} MB`),
};
function toast(message, bad = false) {
  const t = document.getElementById('toast');
  t.textContent = message;
  t.className = bad ? 'bad' : '';
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, bad ? 6000 : 2500);
}
// A media URL of this server as a path of this page's origin: the console never loads another
// origin (a CDN host in the record serves the same paths).
function local(url) {
  try { const u = new URL(url, location.href); return u.pathname + u.search; } catch { return url; }
}
async function copy(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // Plain http from another host is not a secure context: no clipboard API there.
    const area = h('textarea', { 'aria-hidden': 'true', style: 'position:fixed;left:-999px' });
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand('copy');
    area.remove();
  }
  toast('Copied');
}
function urlRow(label, value) {
  if (!value) return null;
  return h('div', { class: 'url' },
    h('span', { class: 'muted', style: 'min-width:8em' }, label),
    h('code', {}, value),
    h('button', { type: 'button', 'aria-label': `Copy ${label}`, onclick: () => copy(value) }, 'Copy'));
}

// Newer / page n of m / older, for a table of `pages` pages; `go(p)` is page p's address.
function pagerLinks(page, pages, go, what) {
  return [
    page > 1 ? h('a', { class: 'button', href: go(page - 1) }, '← Newer') : null,
    h('span', { class: 'muted' }, `Page ${page} of ${pages} · ${what}`),
    page < pages ? h('a', { class: 'button', href: go(page + 1) }, 'Older →') : null,
  ].filter(Boolean);
}

// ---------- the API ----------
class ApiError extends Error {}
async function call(method, path, body) {
  const key = sessionStorage.getItem(KEY);
  const init = { method, headers: { Authorization: `apikey ${key}` } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (r.status === 401) {
    signOut('The API key was refused: sign in again.');
    throw new ApiError('unauthorized');
  }
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; } // a proxy's page
  if (!r.ok) {
    const e = json && json.error;
    throw new ApiError(e ? `${e.message}${e.field ? ` (${e.field})` : ''}` : `HTTP ${r.status}`);
  }
  return { json, total: Number(r.headers.get('x-total-count') || 0) };
}
async function act(what, fn) {
  try {
    const out = await fn();
    if (what) toast(what);
    return out;
  } catch (e) {
    if (!(e instanceof ApiError && e.message === 'unauthorized')) toast(e.message, true);
    return null;
  }
}

// ---------- the events feed ----------
function setFeed(text, on) {
  const el = document.getElementById('feed-state');
  el.hidden = false;
  el.textContent = text;
  el.className = `feed ${on ? 'on' : 'off'}`;
}
async function follow() {
  const controller = new AbortController();
  state.feed = controller;
  while (state.feed === controller) {
    try {
      const r = await fetch('/streaming/events', {
        headers: { Authorization: `apikey ${sessionStorage.getItem(KEY)}` },
        signal: controller.signal,
      });
      if (r.status === 401) { signOut('The API key was refused: sign in again.'); return; }
      if (!r.ok) throw new Error(`feed: HTTP ${r.status}`);
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          dispatch(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (e) {
      if (controller.signal.aborted) return;
    }
    setFeed('reconnecting…', false);
    await new Promise((r) => setTimeout(r, 2000));
  }
}
function dispatch(block) {
  let type = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('event: ')) type = line.slice(7);
    else if (line.startsWith('data: ')) data.push(line.slice(6));
  }
  if (!data.length) return;
  const payload = JSON.parse(data.join('\n'));
  if (type === 'hello') { state.feedNode = payload.node; setFeed(`live · ${payload.node}`, true); }
  if (type === 'bye') setFeed('node stopping…', false);
  if (type === 'health') {
    const seen = new Set();
    for (const s of payload.streams) { state.health.set(s.id, s); seen.add(s.id); }
    for (const id of [...state.health.keys()]) if (!seen.has(id)) state.health.delete(id);
  }
  for (const fn of state.listeners) fn(type, payload);
}
function listen(fn) { state.listeners.add(fn); }

// ---------- sign in and out ----------
function signOut(message) {
  sessionStorage.removeItem(KEY);
  if (state.feed) { state.feed.abort(); state.feed = null; }
  location.hash = '#/';
  signIn(message);
}
function signIn(message) {
  document.getElementById('nav').hidden = true;
  document.getElementById('sign-out').hidden = true;
  document.getElementById('feed-state').hidden = true;
  const input = h('input', { id: 'api-key', type: 'password', autocomplete: 'current-password', required: true });
  const error = h('p', { class: 'error', role: 'alert', id: 'sign-in-error' }, message || '');
  const form = h('form', { class: 'card signin', onsubmit: async (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, input.value.trim());
    const r = await fetch('/streaming/streams', { headers: { Authorization: `apikey ${input.value.trim()}` } });
    if (r.status === 401) {
      sessionStorage.removeItem(KEY);
      error.textContent = 'That API key was refused.';
      input.focus();
      return;
    }
    start();
  } },
  h('h1', {}, 'Sign in'),
  h('p', { class: 'muted' }, 'The API key of this server (api_keys in its settings). It stays in this tab only.'),
  h('label', { for: 'api-key' }, 'API key'), input, error,
  h('button', { class: 'primary', type: 'submit' }, 'Sign in'));
  main.replaceChildren(form);
  input.focus();
}
function start() {
  document.getElementById('nav').hidden = false;
  const out = document.getElementById('sign-out');
  out.hidden = false;
  out.onclick = () => signOut('Signed out.');
  if (!state.feed) follow();
  if (!location.hash || location.hash === '#/') location.hash = '#/streams';
  else route();
}

// ---------- routing ----------
const views = [
  [/^#\/streams\/(\d+)$/, (m) => streamPage(Number(m[1]))],
  [/^#\/streams(?:\?(.*))?$/, (m) => streamsPage(new URLSearchParams(m[1] || ''))],
  [/^#\/videos(?:\?(.*))?$/, (m) => videosPage(new URLSearchParams(m[1] || ''))],
  [/^#\/webhooks$/, () => webhooksPage()],
  [/^#\/nodes$/, () => nodesPage()],
];
function route() {
  if (!sessionStorage.getItem(KEY)) { signIn(); return; }
  state.listeners.clear();
  clearInterval(state.poll);
  state.view += 1;
  const hash = location.hash || '#/streams';
  for (const a of document.querySelectorAll('#nav a')) {
    if (hash.startsWith(a.getAttribute('href'))) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  for (const [re, view] of views) {
    const m = hash.match(re);
    if (m) { view(m); main.focus(); return; }
  }
  main.replaceChildren(h('p', {}, 'No such page. ', h('a', { href: '#/streams' }, 'Streams')));
}
window.addEventListener('hashchange', route);

// ---------- streams ----------
function onAir(s) {
  const badge = (on, label, protocol) => h('span', { class: `badge${on ? ' on' : ''}` },
    on ? `${label} · ${protocol || '?'}` : `${label} off`);
  return [badge(s.live, 'main', s.input_protocol), badge(s.backup_live, 'backup', s.backup_input_protocol)];
}
function inputText(s) {
  if (!s.live && !s.backup_live) return '–';
  const size = s.video_width ? `${s.video_width}×${s.video_height}` : '';
  return [s.video_codec, size, s.frame_rate != null ? `${fmt.num(s.frame_rate, 1)} fps` : '',
    fmt.kbps(s.video_bitrate), s.audio_codec].filter(Boolean).join(' · ');
}
function viewersText(v) {
  if (!v) return '–';
  return `${v.total} (HLS ${v.hls} · DASH ${v.dash} · TS ${v.hls_mpegts} · WHEP ${v.whep} · SRT ${v.srt})`;
}
// The total and the outputs that have viewers: `3 · HLS 2 · WHEP 1`.
function viewersShort(v) {
  if (!v) return '–';
  const names = { hls: 'HLS', dash: 'DASH', hls_mpegts: 'TS', whep: 'WHEP', srt: 'SRT' };
  return [String(v.total), ...Object.entries(names).filter(([k]) => v[k]).map(([k, n]) => `${n} ${v[k]}`)].join(' · ');
}
function restreamsText(s) {
  const all = Object.entries(s.restreams || {});
  if (!all.length) return '–';
  return all.map(([id, r]) => `#${id} ${r.live ? 'sending' : r.last_error ? 'failing' : 'waiting'}`).join(', ');
}
// Columns a phone's screen leaves out (the stream's page shows them).
const NARROW_HIDDEN = ['Keyframes', 'Recording', 'Restreams'];
// The live cells of a streams-table row, from a record or a health sample.
function fillRow(tr, s) {
  const cell = (name) => tr.querySelector(`[data-cell="${name}"]`);
  cell('onair').replaceChildren(...onAir(s));
  cell('input').textContent = inputText(s);
  cell('keyframe').textContent = s.live || s.backup_live ? fmt.secs(s.keyframe_interval) : '–';
  cell('viewers').textContent = viewersShort(s.viewers);
  cell('recording').replaceChildren(s.recording ? h('span', { class: 'badge bad' }, 'REC') : '–');
  cell('restreams').textContent = restreamsText(s);
}
async function streamsPage(params) {
  const page = Math.max(1, Number(params.get('page')) || 1);
  const search = params.get('search') || '';
  const query = new URLSearchParams({ page });
  if (search) query.set('search', search);
  const box = h('input', { id: 'stream-search', type: 'search', value: search, placeholder: 'Name contains…', class: 'grow', 'aria-label': 'Search streams by name' });
  const bar = h('form', { class: 'bar', role: 'search', onsubmit: (e) => {
    e.preventDefault();
    location.hash = `#/streams?${new URLSearchParams({ search: box.value.trim() })}`;
  } }, box, h('button', { type: 'submit' }, 'Search'),
  h('button', { type: 'button', class: 'primary', id: 'new-stream', onclick: () => editStream(null) }, 'New stream'));
  const tbody = h('tbody');
  const pager = h('div', { class: 'bar' });
  main.replaceChildren(h('h1', {}, 'Streams'), bar,
    h('div', { class: 'scroll' }, h('table', { id: 'streams' },
      h('thead', {}, h('tr', {}, ['Stream', 'On air', 'Input', 'Keyframes', 'Viewers', 'Recording', 'Restreams', ''].map((t) => h('th', { scope: 'col', class: NARROW_HIDDEN.includes(t) ? 'hide-narrow' : null }, t)))),
      tbody)), pager);
  const view = state.view;
  const got = await act(null, () => call('GET', `/streaming/streams?${query}`));
  if (!got || !current(view)) return;
  const { json: streams, total } = got;
  if (!streams.length) tbody.append(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, search ? 'No stream has that in its name.' : 'No streams yet: make one with “New stream”.')));
  for (const s of streams) {
    const tr = h('tr', { 'data-id': s.id },
      h('td', {}, h('a', { href: `#/streams/${s.id}` }, s.name || '(no name)'), h('div', { class: 'muted' }, `#${s.id}${s.active ? '' : ' · inactive'}${s.pull ? ' · pull' : ''}`)),
      h('td', { 'data-cell': 'onair' }), h('td', { 'data-cell': 'input' }), h('td', { 'data-cell': 'keyframe', class: 'hide-narrow' }),
      h('td', { 'data-cell': 'viewers' }), h('td', { 'data-cell': 'recording', class: 'hide-narrow' }), h('td', { 'data-cell': 'restreams', class: 'hide-narrow' }),
      h('td', {}, streamActions(s, () => route())));
    fillRow(tr, { ...s, ...(state.health.get(s.id) || {}) });
    tbody.append(tr);
  }
  const pages = Math.max(1, Math.ceil(total / 25));
  const go = (p) => `#/streams?${new URLSearchParams(search ? { page: p, search } : { page: p })}`;
  pager.replaceChildren(...pagerLinks(page, pages, go, `${total} streams`));
  let reload = null;
  listen((type, data) => {
    if (type === 'health') {
      for (const tr of tbody.querySelectorAll('tr[data-id]')) {
        const id = Number(tr.dataset.id);
        const live = data.streams.find((s) => s.id === id);
        fillRow(tr, live || OFF_AIR);
      }
    } else if (['stream_created', 'stream_deleted', 'stream_updated'].includes(type)) {
      clearTimeout(reload);
      reload = setTimeout(() => route(), 500);
    }
  });
}
function streamActions(s, after) {
  const recording = (state.health.get(s.id) || s).recording;
  return h('span', { class: 'actions' },
    h('button', { type: 'button', onclick: () => {
      if (!confirm(`Cut the publishers of stream #${s.id}? An encoder that reconnects is let in again.`)) return;
      act('Publishers kicked', () => call('PUT', `/streaming/streams/${s.id}/kick`));
    } }, 'Kick'),
    recording
      ? h('button', { type: 'button', onclick: async () => { await act('Recording stopped', () => call('PUT', `/streaming/streams/${s.id}/stop_recording`)); after(); } }, 'Stop rec')
      : h('button', { type: 'button', onclick: async () => { await act('Recording started', () => call('PUT', `/streaming/streams/${s.id}/start_recording`)); after(); } }, 'Record'),
    h('button', { type: 'button', class: 'danger', onclick: async () => {
      if (!confirm(`Delete stream #${s.id} “${s.name}”? Its push URLs stop working.`)) return;
      if (await act('Stream deleted', () => call('DELETE', `/streaming/streams/${s.id}`))) {
        if (location.hash.startsWith(`#/streams/${s.id}`)) location.hash = '#/streams'; else after();
      }
    } }, 'Delete'));
}
// The create / edit dialog: the fields an operator changes by hand.
function editStream(s) {
  const field = (name, label, input) => [h('label', { for: `f-${name}` }, label), input];
  const name = h('input', { id: 'f-name', value: s ? s.name : '', required: true, maxlength: 255 });
  const pull = h('input', { id: 'f-pull', type: 'checkbox', checked: s ? s.pull : false });
  const uri = h('input', { id: 'f-uri', value: s && s.uri ? s.uri : '', placeholder: 'srt://, rtmp://, https://… (for pull)' });
  const dvr = h('input', { id: 'f-dvr', type: 'checkbox', checked: s ? s.dvr_enabled : false });
  const dvrDuration = h('input', { id: 'f-dvr-duration', type: 'number', min: 60, max: 14400, value: s ? s.dvr_duration : 14400 });
  const rec = h('input', { id: 'f-record', type: 'checkbox', checked: s ? s.auto_record : false });
  const active = h('input', { id: 'f-active', type: 'checkbox', checked: s ? s.active : true });
  const error = h('p', { class: 'error', role: 'alert' });
  const dialog = h('dialog', { 'aria-labelledby': 'edit-title' });
  const form = h('form', { method: 'dialog', onsubmit: async (e) => {
    e.preventDefault();
    const body = { name: name.value.trim(), active: active.checked, pull: pull.checked,
      dvr_enabled: dvr.checked, dvr_duration: Number(dvrDuration.value), auto_record: rec.checked };
    if (pull.checked) body.uri = uri.value.trim();
    try {
      const { json } = s ? await call('PATCH', `/streaming/streams/${s.id}`, { stream: body })
        : await call('POST', '/streaming/streams', body);
      dialog.close();
      dialog.remove();
      toast(s ? 'Saved' : 'Stream created');
      if (s) route(); else location.hash = `#/streams/${json.id}`;
    } catch (err) { error.textContent = err.message; }
  } },
  h('h2', { id: 'edit-title' }, s ? `Edit stream #${s.id}` : 'New stream'),
  field('name', 'Name', name),
  h('label', { class: 'inline' }, active, 'Active (accepts publishers)'),
  h('label', { class: 'inline' }, pull, 'Pull: the server fetches the source'),
  field('uri', 'Source URI (pull)', uri),
  h('label', { class: 'inline' }, dvr, 'DVR (viewers can rewind)'),
  field('dvr-duration', 'DVR window, seconds', dvrDuration),
  h('label', { class: 'inline' }, rec, 'Record every broadcast'),
  error,
  h('div', { class: 'bar', style: 'margin-top:12px' },
    h('button', { type: 'submit', class: 'primary' }, s ? 'Save' : 'Create'),
    h('button', { type: 'button', onclick: () => { dialog.close(); dialog.remove(); } }, 'Cancel')));
  dialog.append(form);
  document.body.append(dialog);
  dialog.showModal();
  name.focus();
}

// ---------- one stream ----------
// A small line chart: the last hour of one measure, drawn on a canvas.
class Chart {
  constructor(label, unit, digits = 0) {
    this.points = [];
    this.unit = unit;
    this.digits = digits;
    this.canvas = h('canvas', { role: 'img', 'aria-label': `${label}, last hour` });
    this.value = h('span');
    this.el = h('figure', { class: 'chart', style: 'margin:0' }, h('figcaption', {}, h('span', {}, label), this.value), this.canvas);
  }
  add(t, v) {
    if (v == null || Number.isNaN(v)) return;
    this.points.push([t, v]);
    const since = Date.now() - HOUR_MS;
    while (this.points.length && this.points[0][0] < since) this.points.shift();
    this.value.textContent = `${Number(v).toFixed(this.digits)} ${this.unit}`;
  }
  draw() {
    const c = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const w = c.clientWidth || 260;
    const hgt = c.clientHeight || 90;
    c.width = w * ratio;
    c.height = hgt * ratio;
    const g = c.getContext('2d');
    g.scale(ratio, ratio);
    g.clearRect(0, 0, w, hgt);
    if (!this.points.length) return;
    const now = Date.now();
    const max = Math.max(...this.points.map((p) => p[1])) * 1.15 || 1;
    g.strokeStyle = '#0b62d6';
    g.lineWidth = 1.5;
    g.beginPath();
    this.points.forEach(([t, v], i) => {
      const x = ((t - (now - HOUR_MS)) / HOUR_MS) * w;
      const y = hgt - 4 - (v / max) * (hgt - 8);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
    g.fillStyle = '#5b6570';
    g.font = '10px system-ui';
    g.fillText(`${max.toFixed(this.digits)}`, 4, 11);
  }
}
function describe(type, e) {
  const slot = e.slot ? ` (${e.slot}${e.protocol ? `, ${e.protocol}` : ''})` : '';
  return `${type.replaceAll('_', ' ')}${slot}`;
}
async function streamPage(id) {
  const view = state.view;
  const got = await act(null, () => call('GET', `/streaming/streams/${id}`));
  if (!current(view)) return;
  if (!got) { main.replaceChildren(h('p', {}, 'No such stream. ', h('a', { href: '#/streams' }, 'Streams'))); return; }
  const s = got.json;
  const reload = () => route();
  const status = h('span', { id: 'on-air' });
  const numbers = h('dl', { class: 'kv', id: 'health' });
  const fill = (live) => {
    const v = { ...s, ...live };
    status.replaceChildren(...onAir(v));
    const rows = [
      ['Input', inputText(v)], ['Keyframe interval', fmt.secs(v.keyframe_interval)],
      ['Transcoding', v.transcoding_speed != null ? `${fmt.num(v.transcoding_speed, 2)}× real time · ${v.transcoding_preset || ''}` : '–'],
      ['Renditions', (v.transcoded_qualities || []).join(', ') || '–'],
      ['Frames dropped', v.frames_dropped ?? 0], ['Viewers', viewersText(v.viewers)],
      ['Recording', v.recording ? `yes · ${fmt.secs(v.recording_duration)}` : 'no'],
      ['Storage', v.storage_error || 'ok'],
    ];
    numbers.replaceChildren(...rows.flatMap(([k, val]) => [h('dt', {}, k), h('dd', { 'data-field': k }, val)]));
  };
  fill(state.health.get(id) || OFF_AIR);
  const charts = {
    bitrate: new Chart('Input bitrate', 'kbit/s'), fps: new Chart('Frame rate', 'fps', 1),
    dropped: new Chart('Frames dropped', '', 0), speed: new Chart('Transcoding speed', '×', 2),
    viewers: new Chart('Viewers', '', 0),
  };
  const events = h('ol', { class: 'events', id: 'events', 'aria-live': 'polite' });
  const obs = s.push_url ? s.push_url.match(/^(rtmp:\/\/[^/]+\/in)\/(.+)$/) : null;
  const play = local(s.iframe_url);
  const preview = h('div', { class: 'preview' }, h('iframe', { title: `Preview of stream ${id}`, src: `${play}${play.includes('?') ? '&' : '?'}format=webrtc`, allow: 'autoplay; fullscreen' }));
  const lists = h('div', { class: 'grid' });
  main.replaceChildren(
    h('div', { class: 'bar' }, h('a', { href: '#/streams' }, '← Streams')),
    h('h1', {}, `${s.name || '(no name)'} `, h('span', { class: 'muted' }, `#${id}`), ' ', status),
    h('div', { class: 'bar' },
      h('button', { type: 'button', id: 'edit-stream', onclick: () => editStream(s) }, 'Edit'),
      h('button', { type: 'button', onclick: () => act('DVR window cleared', () => call('PUT', `/streaming/streams/${id}/dvr_cleanup`)) }, 'Clear DVR'),
      streamActions(s, reload)),
    h('div', { class: 'grid' },
      h('section', { class: 'card', 'aria-label': 'Preview' }, h('h2', { style: 'margin-top:0' }, 'Preview'), preview),
      h('section', { class: 'card', 'aria-label': 'Health' }, h('h2', { style: 'margin-top:0' }, 'Health'), numbers)),
    h('section', { class: 'card' }, h('h2', { style: 'margin-top:0' }, 'Last hour'),
      h('div', { class: 'charts' }, Object.values(charts).map((c) => c.el))),
    h('div', { class: 'grid' },
      h('section', { class: 'card', id: 'push' }, h('h2', { style: 'margin-top:0' }, 'Push'),
        s.pull ? h('p', {}, `Pulled from ${s.uri || '(no uri)'}`) : null,
        urlRow('RTMP', s.push_url), urlRow('RTMP backup', s.backup_push_url), urlRow('SRT', s.push_url_srt),
        urlRow('SRT backup', s.backup_push_url_srt), urlRow('WHIP', s.push_url_whip),
        obs ? h('div', {}, h('h2', {}, 'OBS settings'), h('p', { class: 'muted' }, 'Settings → Stream → Service: Custom…'),
          urlRow('Server', obs[1]), urlRow('Stream key', obs[2])) : null),
      h('section', { class: 'card' }, h('h2', { style: 'margin-top:0' }, 'Play'),
        urlRow('Player', s.iframe_url), urlRow('LL-HLS', s.hls_cmaf_url), urlRow('LL-DASH', s.dash_url),
        urlRow('HLS (TS)', s.hls_mpegts_url), urlRow('WHEP', s.whep_url), urlRow('SRT read', s.srt_play_url))),
    h('section', { class: 'card' }, h('h2', { style: 'margin-top:0' }, 'Events'), events),
    lists);
  const event = (text, at) => {
    events.prepend(h('li', {}, h('span', { class: 'muted' }, new Date(at || Date.now()).toLocaleTimeString()), ' ', text));
    while (events.children.length > 200) events.lastChild.remove();
  };
  // The stored samples of the last hour, then the feed's.
  const now = Date.now();
  const q = new URLSearchParams({ stream_id: id, date_from: new Date(now - HOUR_MS).toISOString(), date_to: new Date(now).toISOString(), interval: 30, units: 'second' });
  const stats = await act(null, () => call('GET', `/streaming/statistics/ffprobe?${q}`));
  if (!current(view)) return;
  for (const b of (stats && stats.json.data) || []) {
    const t = Date.parse(b.time);
    charts.bitrate.add(t, b.avg_bitrate);
    charts.fps.add(t, b.max_fps);
    charts.dropped.add(t, b.max_frames_dropped);
    charts.speed.add(t, b.avg_transcoding_speed);
    charts.viewers.add(t, b.max_viewers);
  }
  Object.values(charts).forEach((c) => c.draw());
  listen((type, data) => {
    if (type === 'health') {
      const live = data.streams.find((x) => x.id === id);
      fill(live || OFF_AIR);
      const t = Date.parse(data.time);
      if (live) {
        charts.bitrate.add(t, live.video_bitrate);
        charts.fps.add(t, live.frame_rate);
        charts.dropped.add(t, live.frames_dropped);
        charts.speed.add(t, live.transcoding_speed);
        charts.viewers.add(t, live.viewers && live.viewers.total);
      }
      Object.values(charts).forEach((c) => c.draw());
    } else if (data.stream_id === id) {
      event(describe(type, data), data.at);
    }
  });
  event('watching events from here on');
  // The stream's restreams, overlays and recordings.
  const [restreams, overlays, videos] = await Promise.all([
    act(null, () => call('GET', '/streaming/restreams')),
    act(null, () => call('GET', `/streaming/streams/${id}/overlays`)),
    act(null, () => call('GET', `/streaming/videos?${new URLSearchParams({ stream_id: id, per_page: 10 })}`)),
  ]);
  if (!current(view)) return;
  const table = (title, cols, rows) => h('section', { class: 'card' }, h('h2', { style: 'margin-top:0' }, title),
    rows.length ? h('div', { class: 'scroll' }, h('table', {}, h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', { class: 'wrap' }, c))))))) : h('p', { class: 'muted' }, 'None.'));
  const mine = ((restreams && restreams.json) || []).filter((r) => r.stream_id === id);
  lists.append(
    table('Restreams', ['Name', 'Destination', 'State', 'Sent'], mine.map((r) => [r.name, r.uri,
      h('span', { class: `badge${r.live ? ' on' : r.last_error ? ' bad' : ''}` }, r.live ? 'sending' : r.last_error ? `failing: ${r.last_error}` : r.active ? 'waiting' : 'inactive'),
      fmt.bytes(r.bytes_sent)])),
    table('Overlays', ['URL', 'Size', 'Position'], ((overlays && overlays.json) || []).map((o) => [o.url, `${o.width}×${o.height}`, `${o.x}, ${o.y}`])),
    table('Recordings', ['Video', 'Status', 'Duration', ''], ((videos && videos.json) || []).map((v) => [
      `#${v.id} ${v.name || ''}`, videoStatus(v), fmt.secs(v.duration / 1000), h('a', { href: local(v.iframe_url), target: '_blank', rel: 'noopener' }, 'Play')])));
}

// ---------- videos ----------
function videoStatus(v) {
  const cls = { ready: ' on', upload_failed: ' bad', error: ' bad', pending: ' warn', uploading: ' warn' }[v.status] || '';
  return h('span', { class: `badge${cls}`, title: v.error || '' }, v.status.replaceAll('_', ' '));
}
async function videosPage(params) {
  const page = Math.max(1, Number(params.get('page')) || 1);
  const search = params.get('search') || '';
  const q = new URLSearchParams({ page, per_page: 25 });
  if (search) q.set('search', search);
  const box = h('input', { type: 'search', value: search, class: 'grow', 'aria-label': 'Search videos by name' });
  const tbody = h('tbody');
  const pager = h('div', { class: 'bar' });
  main.replaceChildren(h('h1', {}, 'Videos'),
    h('form', { class: 'bar', role: 'search', onsubmit: (e) => { e.preventDefault(); location.hash = `#/videos?${new URLSearchParams({ search: box.value.trim() })}`; } },
      box, h('button', { type: 'submit' }, 'Search')),
    h('div', { class: 'scroll' }, h('table', { id: 'videos' }, h('thead', {}, h('tr', {}, ['Video', 'Stream', 'Status', 'Duration', 'Size', 'Recorded', ''].map((t) => h('th', { scope: 'col' }, t)))), tbody)),
    pager);
  const view = state.view;
  const got = await act(null, () => call('GET', `/streaming/videos?${q}`));
  if (!got || !current(view)) return;
  if (!got.json.length) tbody.append(h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No videos.')));
  for (const v of got.json) {
    tbody.append(h('tr', {},
      h('td', { class: 'wrap' }, `#${v.id} ${v.name || ''}`), h('td', {}, h('a', { href: `#/streams/${v.stream_id}` }, `#${v.stream_id}`)),
      h('td', {}, videoStatus(v)), h('td', {}, fmt.secs(v.duration / 1000)), h('td', {}, fmt.bytes(v.origin_size)),
      h('td', {}, fmt.time(v.recording_started_at)),
      h('td', {}, h('span', { class: 'actions' },
        v.status === 'ready' || v.status === 'uploading' ? h('a', { class: 'button', href: local(v.iframe_url), target: '_blank', rel: 'noopener' }, 'Play') : null,
        v.origin_url ? h('a', { class: 'button', href: local(v.origin_url), download: '' }, 'Download') : null,
        h('button', { type: 'button', class: 'danger', onclick: async () => {
          if (!confirm(`Delete video #${v.id}? Its files go too.`)) return;
          if (await act('Video deleted', () => call('DELETE', `/streaming/videos/${v.id}`))) route();
        } }, 'Delete')))));
  }
  const pages = Math.max(1, Math.ceil(got.total / 25));
  const go = (p) => `#/videos?${new URLSearchParams(search ? { page: p, search } : { page: p })}`;
  pager.replaceChildren(...pagerLinks(page, pages, go, `${got.total} videos`));
  listen((type) => { if (type.startsWith('video_') || type.startsWith('recording_')) { clearTimeout(state.reload); state.reload = setTimeout(route, 1000); } });
}

// ---------- webhooks ----------
async function webhooksPage() {
  const list = h('div');
  main.replaceChildren(h('h1', {}, 'Webhooks'), list);
  const view = state.view;
  const got = await act(null, () => call('GET', '/streaming/webhooks?per_page=100'));
  if (!got || !current(view)) return;
  if (!got.json.length) list.append(h('p', { class: 'muted' }, 'No webhooks. Create them with POST /streaming/webhooks (see /docs/api).'));
  for (const w of got.json) {
    const deliveries = h('div');
    const show = async () => {
      const d = await act(null, () => call('GET', `/streaming/webhooks/${w.id}/deliveries?per_page=50`));
      if (!d || !current(view)) return;
      deliveries.replaceChildren(d.json.length ? h('div', { class: 'scroll' }, h('table', {},
        h('thead', {}, h('tr', {}, ['Event', 'Stream', 'Status', 'Attempts', 'Last answer', 'Next try', 'Created'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, d.json.map((x) => h('tr', {}, h('td', {}, x.event_type), h('td', {}, `#${x.stream_id}`),
          h('td', {}, h('span', { class: `badge${x.status === 'delivered' ? ' on' : x.status === 'failed' ? ' bad' : ' warn'}` }, x.status)),
          h('td', {}, x.attempts), h('td', { class: 'wrap' }, x.last_error || (x.last_status ? `HTTP ${x.last_status}` : '–')),
          h('td', {}, fmt.time(x.next_attempt_at)), h('td', {}, fmt.time(x.created_at)))))))
        : h('p', { class: 'muted' }, 'No deliveries yet.'));
    };
    // The secret is shown once, when made: here only after a rotation.
    const secret = h('span', { class: 'muted' }, 'shown once, when rotated');
    list.append(h('section', { class: 'card' },
      h('h2', { style: 'margin-top:0' }, `#${w.id} ${w.url} `, h('span', { class: `badge${w.active ? ' on' : ''}` }, w.active ? 'active' : 'inactive')),
      h('p', { class: 'muted' }, `Events: ${(w.events || ['all']).join(', ')}`),
      h('div', { class: 'bar' }, 'Secret: ', secret,
        h('button', { type: 'button', onclick: async () => {
          if (!confirm('Rotate the secret? Deliveries are signed with the new one from now on.')) return;
          const r = await act('Secret rotated', () => call('PUT', `/streaming/webhooks/${w.id}/rotate_secret`));
          if (r) { secret.replaceChildren(h('code', {}, r.json.secret)); copy(r.json.secret); }
        } }, 'Rotate secret'),
        h('button', { type: 'button', onclick: show }, 'Refresh deliveries')),
      deliveries));
    show();
  }
}

// ---------- nodes ----------
async function nodesPage() {
  const tbody = h('tbody');
  main.replaceChildren(h('h1', {}, 'Nodes'),
    h('p', { class: 'muted' }, 'The daemons sharing this store, by their heartbeats.'),
    h('div', { class: 'scroll' }, h('table', { id: 'nodes' }, h('thead', {}, h('tr', {}, ['Node', 'State', 'Last heartbeat', 'Streams', 'Headroom', 'Started', 'URL'].map((t) => h('th', { scope: 'col' }, t)))), tbody)));
  const view = state.view;
  const load = async () => {
    const got = await act(null, () => call('GET', '/streaming/nodes'));
    if (!got || !current(view)) return;
    tbody.replaceChildren(...got.json.map((n) => h('tr', {},
      h('td', {}, n.id, n.this_node ? h('span', { class: 'muted' }, ' (this one)') : null),
      h('td', {}, h('span', { class: `badge${n.state === 'alive' ? ' on' : n.state === 'missing' ? ' bad' : ''}` }, n.state)),
      h('td', {}, n.state === 'gone' ? '–' : `${fmt.num(n.heartbeat_age, 1)} s ago`), h('td', {}, n.streams),
      h('td', {}, n.headroom == null ? '–' : `${Math.round(n.headroom * 100)} %`), h('td', {}, fmt.time(n.started_at)),
      h('td', { class: 'wrap' }, n.url))));
  };
  // Heartbeats are not in the events feed: this small table asks again every 5 s (the timer
  // is set before the first answer, so leaving the page meanwhile stops it too).
  state.poll = setInterval(load, 5000);
  await load();
}

// ---------- start ----------
if (sessionStorage.getItem(KEY)) start(); else signIn();
