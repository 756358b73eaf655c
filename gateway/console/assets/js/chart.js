// lineChart draws series of [time ms, value] points as an inline SVG:
// enough for "the last minutes", no library. A series' kind is its CSS
// class (in, out): colours live in style.css, as the CSP wants.

const NS = 'http://www.w3.org/2000/svg';
const W = 600;
const H = 180;
const PAD = { l: 44, r: 8, t: 8, b: 20 };

function s(tag, attrs, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

// niceMax rounds up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

export function lineChart(series, { span = 300_000, now = Date.now(), label = '' } = {}) {
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': label });
  const t0 = now - span;
  let max = 0;
  for (const se of series) for (const [, v] of se.points) max = Math.max(max, v);
  max = niceMax(max);
  const x = (t) => PAD.l + ((t - t0) / span) * (W - PAD.l - PAD.r);
  const y = (v) => H - PAD.b - (v / max) * (H - PAD.t - PAD.b);
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    svg.append(s('line', { class: 'grid', x1: PAD.l, x2: W - PAD.r, y1: y(v), y2: y(v) }));
    svg.append(s('text', { x: PAD.l - 6, y: y(v) + 3, 'text-anchor': 'end' }, fmt(v)));
  }
  const step = span > 120_000 ? 60_000 : 30_000;
  for (let i = 0; i * step <= span; i++) {
    const ago = i * step;
    const name = ago === 0 ? 'now' : ago % 60_000 ? `-${ago / 1000} s` : `-${ago / 60_000} min`;
    svg.append(s('text', { x: x(now - ago), y: H - 5, 'text-anchor': ago === 0 ? 'end' : ago === span ? 'start' : 'middle' }, name));
  }
  for (const se of series) {
    const pts = se.points.filter(([t]) => t >= t0);
    if (!pts.length) continue;
    const d = pts.map(([t, v], i) => `${i ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join('');
    svg.append(s('path', { class: 'area ' + se.kind, d: `${d}L${x(pts[pts.length - 1][0]).toFixed(1)},${y(0)}L${x(pts[0][0]).toFixed(1)},${y(0)}Z` }));
    svg.append(s('path', { class: 'line ' + se.kind, d }));
  }
  return svg;
}

function fmt(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + 'M';
  if (v >= 1e3) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + 'k';
  return String(Math.round(v * 100) / 100);
}
