// Small DOM helpers. Text always goes in through textContent, never
// innerHTML: topics, client ids and payloads are the clients' to choose.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function num(n) {
  if (n === undefined || n === null) return '—';
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: 1 });
}

export function rate(n) {
  if (n === undefined || n === null) return '—';
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: n < 10 ? 2 : 1 });
}

export function bytes(n) {
  if (n === undefined || n === null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i ? v.toFixed(1) : String(v)) + ' ' + units[i];
}

export function when(s) {
  if (!s) return '—';
  const d = new Date(s);
  const secs = Math.round((Date.now() - d.getTime()) / 1000);
  const ago = secs < 60 ? secs + ' s' : secs < 3600 ? Math.round(secs / 60) + ' min' : secs < 86400 ? Math.round(secs / 3600) + ' h' : Math.round(secs / 86400) + ' d';
  return h('span', { title: d.toISOString() }, secs >= 0 ? ago + ' ago' : d.toISOString());
}

export function duration(secs) {
  const s = Math.floor(secs);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
  if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
}

export function badge(text, kind) {
  return h('span', { class: 'badge ' + (kind || '') }, text);
}

// table: columns are {title, value: row => node|string, num: bool}; with
// onRow, rows are clickable and keyboard-reachable.
export function table(columns, rows, { onRow, empty = 'Nothing here.', id, rowId } = {}) {
  if (!rows.length) return h('p', { class: 'muted', id }, empty);
  return h('table', { id },
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.num ? 'num' : '' }, c.title)))),
    h('tbody', {}, rows.map((r) => h('tr', {
      class: onRow ? 'clickable' : '',
      tabindex: onRow ? 0 : undefined,
      dataset: rowId ? { id: rowId(r) } : undefined,
      onclick: onRow ? (ev) => { if (!ev.target.closest('button')) onRow(r, ev.currentTarget); } : undefined,
      onkeydown: onRow ? (ev) => { if (ev.key === 'Enter') onRow(r, ev.currentTarget); } : undefined,
    }, columns.map((c) => h('td', { class: c.num ? 'num' : '' }, c.value(r)))))));
}

export function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs.filter(([, v]) => v !== undefined && v !== null && v !== '')
    .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

let flashTimer;
export function flash(msg, isError) {
  const el = document.getElementById('flash');
  el.textContent = msg;
  el.className = isError ? 'error' : '';
  el.hidden = false;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => { el.hidden = true; }, isError ? 8000 : 4000);
}

// confirm asks in the page's own dialog (testable, and it can say how many
// things an action touches); resolves true on Confirm.
export function confirm(text, okLabel = 'Confirm') {
  const dlg = document.getElementById('confirm-dialog');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = okLabel;
  dlg.returnValue = '';
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
    dlg.showModal();
  });
}

// replace puts node in place of container's children, unless it renders
// to the same markup (an auto-refresh leaves a steady table alone, so a
// click on it is not lost to a rebuild).
export function replace(container, node) {
  const html = node instanceof Element ? node.outerHTML : String(node.textContent);
  if (container.dataset.rendered === html) return;
  container.dataset.rendered = html;
  container.replaceChildren(node);
}

// errorBox renders an API error where the data would be.
export function errorBox(e, what) {
  const missing = e && e.status === 404;
  return h('p', { class: 'error' }, missing && what
    ? what + ' is not served by this gateway (' + e.message + ').'
    : String(e && e.message ? e.message : e));
}
