// The player page's own controls, inlined into the page by the daemon: play/pause,
// mute, a quality menu, a timeline of the DVR window (or of a video), a LIVE control with the
// latency, full screen; keys (space, arrows, f, m) and touch. Hand-written, not a UI library:
// nothing more to serve or to trust, and what hls.js, dash.js and native HLS differ in fits in
// three small adapters. The page keeps the players; this only reads and steers them.
'use strict';

// `player()` is the page's current player (hls.js, dash.js, a native stub) or null. Returns
// `{held}`: whether the viewer paused the picture (the page's stall check leaves it be).
function playerControls({ cfg, stage, video, player }) {
  const $ = (id) => document.getElementById(id);
  const [bar, playBtn, muteBtn, timeline, spacer, clock, goLive, latencyEl, quality, fullBtn, toastEl] =
    ['bar', 'play', 'mute', 'timeline', 'spacer', 'clock', 'golive', 'latency', 'quality', 'fullscreen', 'toast'].map($);
  // Within this much of the player's own target latency the picture is "at the live edge".
  const EDGE_SLACK = 1.5;
  // Without a target from the player (native HLS): the edge is this close.
  const DEFAULT_TARGET = 3;
  const SKIP = 5; // seconds per arrow key
  const VOLUME_STEP = 0.1;
  const IDLE_MS = 3000;
  const ui = { held: false };
  let shown = null; // the player the menu was built for
  let chosen = -1; // the viewer's rung (-1: automatic)
  let scrubbing = false;
  let idleTimer = 0;
  let toastTimer = 0;

  // hls.js: its levels; the playlist's window; latency as hls.js counts it (to the newest
  // part, plus the playlist's age), here also while paused.
  function hlsAdapter(hls) {
    const live = () => { const d = hls.latestLevelDetails; return d && d.live ? d : null; };
    return {
      rungs: () => hls.levels.map((l, i) => ({ index: i, height: l.height, bitrate: l.bitrate })),
      // The next segment switches (no flush, no stall); back to automatic without a flush too.
      choose(i) { if (i < 0) hls.loadLevel = -1; else hls.nextLevel = i; },
      window() { const d = live(); return d && { start: d.fragmentStart, end: d.edge }; },
      latency() { const d = live(); return d ? d.edge + d.age - video.currentTime : NaN; },
      target: () => hls.targetLatency,
      seek(t) { video.currentTime = t; },
      // hls.js adds a second to its target latency for every stall, for the rest of the
      // session; a seek back into the window can stall it twice (3 s behind after LIVE). The
      // viewer asked for the edge: the target starts again from the playlist's hold-back.
      live() {
        const d = live();
        const hold = d && (d.partHoldBack || d.holdBack);
        if (hold) hls.targetLatency = hold;
        const p = hls.liveSyncPosition;
        if (p !== null) video.currentTime = p;
      },
    };
  }

  // dash.js: its video representations; its DVR window; its wall-clock latency.
  function dashAdapter(p) {
    const range = () => {
      const info = p.getDashMetrics().getCurrentDVRInfo('video');
      return info && info.range;
    };
    return {
      rungs: () => p.getBitrateInfoListFor('video')
        .map((b) => ({ index: b.qualityIndex, height: b.height, bitrate: b.bitrate })),
      choose(i) {
        p.updateSettings({ streaming: { abr: { autoSwitchBitrate: { video: i < 0 } } } });
        if (i >= 0) p.setQualityFor('video', i);
      },
      window() { const r = range(); return r && { start: r.start, end: r.end }; },
      latency: () => p.getCurrentLiveLatency(),
      target: () => p.getTargetLiveDelay(),
      // dash.js's own seek keeps the latency the viewer chose (its catch-up then aims there,
      // not back at the live edge); seekToOriginalLive restores its target.
      seek(t) { const r = range(); if (r) p.seek(t - r.start); },
      live() { p.seekToOriginalLive(); },
    };
  }

  // Native HLS (Safari on iOS): no rungs to choose; the element's seekable range.
  function nativeAdapter() {
    const range = () => {
      const s = video.seekable;
      return s.length ? { start: s.start(0), end: s.end(s.length - 1) } : null;
    };
    return {
      rungs: () => [],
      choose() {},
      window: range,
      latency() { const w = range(); return w ? Math.max(0, w.end - video.currentTime) : NaN; },
      target: () => DEFAULT_TARGET,
      seek(t) { video.currentTime = t; },
      live() { const w = range(); if (w) video.currentTime = Math.max(w.start, w.end - 1); },
    };
  }

  // WebRTC (WHEP): always at the live edge; the server sends one rung, no window.
  function realtimeAdapter() {
    return {
      rungs: () => [],
      choose() {},
      window: () => null,
      latency: () => NaN,
      target: () => DEFAULT_TARGET,
      seek() {},
      live() {},
    };
  }

  function adapter(p) {
    if (p.whep) return realtimeAdapter();
    if (window.Hls && p instanceof window.Hls) return hlsAdapter(p);
    if (typeof p.getBitrateInfoListFor === 'function') return dashAdapter(p);
    return nativeAdapter();
  }

  // The range the timeline covers: a video's whole length, a live stream's DVR window; none
  // for a live stream without DVR (its few seconds are the player's buffer, not a rewind).
  function seekWindow(a) {
    if (cfg.vod) {
      const d = video.duration;
      return Number.isFinite(d) && d > 0 ? { start: 0, end: d } : null;
    }
    const w = cfg.dvr ? a.window() : null;
    return w && w.end > w.start ? w : null;
  }

  function fmt(s) {
    s = Math.max(0, Math.floor(s));
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, sec = String(s % 60).padStart(2, '0');
    return h ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`;
  }

  function toast(text) {
    toastEl.textContent = text;
    toastEl.classList.add('shown');
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => toastEl.classList.remove('shown'), 1200);
  }

  // Both icons of a two-state button: the first shows while `first` holds.
  function icons(btn, first) {
    const [a, b] = btn.querySelectorAll('svg');
    a.toggleAttribute('hidden', !first);
    b.toggleAttribute('hidden', first);
  }

  function option(value, text) {
    const o = document.createElement('option');
    o.value = String(value);
    o.textContent = text;
    return o;
  }

  // Auto + each rung by its height (its bitrate too where two share one), highest first.
  function qualityMenu(a) {
    const rungs = a.rungs().filter((r) => r.height)
      .sort((x, y) => y.height - x.height || y.bitrate - x.bitrate);
    quality.hidden = rungs.length < 2;
    const key = rungs.map((r) => `${r.index}:${r.height}:${r.bitrate}`).join(',');
    if (quality.dataset.key !== key) {
      quality.dataset.key = key;
      const label = (r) => (rungs.filter((x) => x.height === r.height).length > 1
        ? `${r.height}p ${Math.round(r.bitrate / 1000)} kb/s` : `${r.height}p`);
      quality.replaceChildren(option(-1, 'Auto'), ...rungs.map((r) => option(r.index, label(r))));
      quality.value = String(chosen);
    }
    // Automatic says what it plays.
    const auto = video.videoHeight ? `Auto (${video.videoHeight}p)` : 'Auto';
    if (quality.options[0] && quality.options[0].textContent !== auto) quality.options[0].textContent = auto;
  }

  function liveReadout(a) {
    const latency = a.latency();
    const known = Number.isFinite(latency);
    const edge = known && !video.paused && latency <= (a.target() || DEFAULT_TARGET) + EDGE_SLACK;
    goLive.dataset.edge = String(edge);
    latencyEl.dataset.seconds = known ? latency.toFixed(2) : '';
    latencyEl.textContent = known ? `Latency ${latency.toFixed(1)} s` : '';
  }

  function refresh() {
    const p = player();
    bar.hidden = !p;
    if (!p) { shown = null; return; }
    if (p !== shown) { shown = p; chosen = -1; ui.held = false; quality.dataset.key = ''; }
    try {
      const a = adapter(p);
      const w = seekWindow(a);
      timeline.hidden = !w;
      spacer.hidden = !!w;
      if (w && !scrubbing) {
        timeline.min = String(w.start);
        timeline.max = String(w.end);
        timeline.value = String(video.currentTime);
      }
      if (cfg.vod) clock.textContent = w ? `${fmt(video.currentTime)} / ${fmt(w.end)}` : '';
      else clock.textContent = scrubbing && w ? `−${fmt(w.end - Number(timeline.value))}` : '';
      goLive.hidden = latencyEl.hidden = !!cfg.vod;
      if (!cfg.vod) liveReadout(a);
      qualityMenu(a);
    } catch (e) {
      // A player between sources answers nothing useful: the next refresh asks again.
    }
    icons(playBtn, video.paused);
    icons(muteBtn, !video.muted && video.volume > 0);
    icons(fullBtn, !fullscreenElement());
  }

  function play() { ui.held = false; video.play().catch(() => {}); }

  function togglePlay() {
    if (!player()) return;
    if (video.paused) play();
    else { ui.held = true; video.pause(); }
    refresh();
  }

  // False where there is nothing to seek in (a live stream without DVR).
  function seekTo(t) {
    const a = adapter(player());
    const w = seekWindow(a);
    if (!w) return false;
    // Past the target latency's reach is the live edge itself.
    if (!cfg.vod && t >= w.end - (a.target() || DEFAULT_TARGET)) { toLive(); return true; }
    t = Math.max(w.start, Math.min(t, w.end));
    if (cfg.vod) video.currentTime = t;
    else a.seek(t);
    refresh();
    return true;
  }

  function skip(d) {
    if (player() && seekTo(video.currentTime + d)) toast(d < 0 ? `−${-d} s` : `+${d} s`);
  }

  function toLive() {
    const p = player();
    if (!p || cfg.vod) return;
    adapter(p).live();
    play();
    toast('Live');
  }

  function toggleMute() {
    video.muted = !video.muted;
    if (!video.muted && video.volume === 0) video.volume = 0.5;
    toast(video.muted ? 'Muted' : `Volume ${Math.round(video.volume * 100)} %`);
    refresh();
  }

  function volume(d) {
    video.volume = Math.round(Math.max(0, Math.min(1, video.volume + d)) * 10) / 10;
    video.muted = video.volume === 0;
    toast(`Volume ${Math.round(video.volume * 100)} %`);
    refresh();
  }

  function fullscreenElement() {
    return document.fullscreenElement || document.webkitFullscreenElement || null;
  }

  // The whole stage (controls included); an iPhone only lets the video itself go full screen.
  // An embedding page must allow it (`<iframe allow="fullscreen">`), else the button hides.
  function toggleFullscreen() {
    if (fullscreenElement()) (document.exitFullscreen || document.webkitExitFullscreen).call(document);
    else if (document.fullscreenEnabled) stage.requestFullscreen().catch(() => {});
    else if (document.webkitFullscreenEnabled) stage.webkitRequestFullscreen();
    else if (video.webkitEnterFullscreen) video.webkitEnterFullscreen();
  }
  fullBtn.hidden = !(document.fullscreenEnabled || document.webkitFullscreenEnabled
    || (video.webkitEnterFullscreen && !stage.requestFullscreen));

  // Shown on any activity; hidden after a while without while the picture moves.
  function hide() { if (!video.paused && player()) stage.classList.add('idle'); }
  function wake() {
    stage.classList.remove('idle');
    clearTimeout(idleTimer);
    idleTimer = setTimeout(hide, IDLE_MS);
  }

  const keys = {
    ' ': togglePlay,
    ArrowLeft: () => skip(-SKIP),
    ArrowRight: () => skip(SKIP),
    ArrowUp: () => volume(VOLUME_STEP),
    ArrowDown: () => volume(-VOLUME_STEP),
    f: toggleFullscreen,
    m: toggleMute,
  };
  document.addEventListener('keydown', (e) => {
    // A menu keeps its own keys (arrows choose, letters jump).
    if (e.ctrlKey || e.metaKey || e.altKey || e.target instanceof HTMLSelectElement) return;
    const act = keys[e.key.length === 1 ? e.key.toLowerCase() : e.key];
    if (!act) return;
    // Also keeps space from pressing a focused button and arrows from stepping the timeline.
    e.preventDefault();
    wake();
    act();
  });

  // A tap (a press that hardly moved: not a 360° drag) on the picture: a mouse plays or
  // pauses; a finger shows the controls, or hides them when they are showing.
  let press = null;
  const onControls = (e) => bar.contains(e.target) || e.target.id === 'streams';
  stage.addEventListener('pointerdown', (e) => {
    press = onControls(e) ? null : { x: e.clientX, y: e.clientY, at: e.timeStamp, idle: stage.classList.contains('idle') };
    wake();
  });
  stage.addEventListener('pointermove', wake);
  // A finger "leaves" at every lift: only a mouse leaving means the viewer looks elsewhere.
  stage.addEventListener('pointerleave', (e) => { if (e.pointerType === 'mouse') hide(); });
  stage.addEventListener('pointerup', (e) => {
    const p = press;
    press = null;
    if (!p || !player() || Math.hypot(e.clientX - p.x, e.clientY - p.y) > 10 || e.timeStamp - p.at > 500) return;
    if (e.pointerType === 'mouse') togglePlay();
    else if (!p.idle) { clearTimeout(idleTimer); hide(); }
  });
  stage.addEventListener('dblclick', (e) => { if (!onControls(e)) toggleFullscreen(); });

  playBtn.addEventListener('click', togglePlay);
  muteBtn.addEventListener('click', toggleMute);
  fullBtn.addEventListener('click', toggleFullscreen);
  goLive.addEventListener('click', toLive);
  quality.addEventListener('change', () => {
    chosen = Number(quality.value);
    try { adapter(player()).choose(chosen); } catch (e) { /* no player any more */ }
  });
  // Dragging previews the position (the clock); letting go seeks, once.
  timeline.addEventListener('input', () => { scrubbing = true; refresh(); });
  timeline.addEventListener('change', () => { scrubbing = false; seekTo(Number(timeline.value)); });
  // `emptied`: the page stopped its player (offline, an error): the bar goes at once.
  for (const ev of ['play', 'pause', 'volumechange', 'loadedmetadata', 'resize', 'emptied']) video.addEventListener(ev, refresh);
  document.addEventListener('fullscreenchange', refresh);
  document.addEventListener('webkitfullscreenchange', refresh);
  setInterval(refresh, 250);
  wake();
  // A message that stays a while: what the page did by itself (a fallback).
  ui.notice = (text) => {
    toast(text);
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => toastEl.classList.remove('shown'), 6000);
  };
  return ui;
}
