// The sampler: GET /api/v1/stats every few seconds while the tab is open,
// keeping the last ten minutes so the overview's charts have a history
// whichever page was open meanwhile. Rates are derived here from the
// cumulative counters (docs/console.md, "Overview").

import { get } from './api.js';

export const INTERVAL = Number(new URLSearchParams(location.search).get('interval')) || 2000;
const KEEP = 10 * 60_000;

export const samples = []; // {t, s: stats, inRate, outRate}
const listeners = new Set();
let timer = null;
export let lastError = null;

export function onSample(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

let busy = false; // one call at a time: a tab left at the token prompt piles up nothing

async function tick() {
  if (busy) return;
  busy = true;
  try {
    const s = await get('/api/v1/stats');
    const t = Date.parse(s.time) || Date.now();
    const prev = samples[samples.length - 1];
    let inRate = 0;
    let outRate = 0;
    if (prev && t > prev.t && s.uptimeSeconds >= prev.s.uptimeSeconds) {
      const dt = (t - prev.t) / 1000;
      inRate = Math.max(0, (s.messages.received - prev.s.messages.received) / dt);
      outRate = Math.max(0, (s.messages.delivered - prev.s.messages.delivered) / dt);
    }
    samples.push({ t, s, inRate, outRate });
    while (samples.length && samples[0].t < t - KEEP) samples.shift();
    lastError = null;
  } catch (e) {
    lastError = e;
  } finally {
    busy = false;
  }
  for (const fn of listeners) fn();
}

export function start() {
  if (timer) return;
  tick();
  timer = setInterval(tick, INTERVAL);
}

export function latest() {
  return samples[samples.length - 1];
}
