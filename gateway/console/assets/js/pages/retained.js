// Retained browser: GET /api/v1/retained?filter=, a message's payload as
// text, JSON or hex, and DELETE /api/v1/retained?filter= after a
// confirmation that says how many messages the filter matches.

import { api, get, q, latest } from '../api.js';
import { h, num, bytes, when, table, kv, flash, confirm, replace, errorBox } from '../ui.js';

const PAGE = 1000;
const COUNT_LIMIT = 10000;

// payloadBytes: the API gives UTF-8 payloads as text, others in base64.
export function payloadBytes(m) {
  if (m.payload !== undefined && m.payload !== null) return new TextEncoder().encode(m.payload);
  const bin = atob(m.payloadBase64 || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function hexdump(b) {
  const lines = [];
  for (let off = 0; off < b.length; off += 16) {
    const row = b.subarray(off, off + 16);
    const hex = Array.from(row, (x) => x.toString(16).padStart(2, '0')).join(' ');
    const ascii = Array.from(row, (x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '.')).join('');
    lines.push(off.toString(16).padStart(8, '0') + '  ' + hex.padEnd(47) + '  ' + ascii);
  }
  return lines.join('\n') || '(empty)';
}

export function payloadView(m, idPrefix) {
  const b = payloadBytes(m);
  const out = h('pre', { id: idPrefix + '-payload' });
  const modes = {
    text: () => (m.payload !== undefined && m.payload !== null ? m.payload : new TextDecoder().decode(b)),
    json: () => {
      try {
        return JSON.stringify(JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(b)), null, 2);
      } catch (e) {
        return 'Not JSON: ' + e.message;
      }
    },
    hex: () => hexdump(b),
  };
  const buttons = Object.keys(modes).map((k) => h('button', { type: 'button', id: `${idPrefix}-as-${k}`, 'aria-pressed': 'false', onclick: () => pick(k) }, k === 'json' ? 'JSON' : k));
  function pick(k) {
    for (const bt of buttons) bt.setAttribute('aria-pressed', String(bt.id.endsWith('-' + k)));
    out.textContent = modes[k]();
  }
  pick(m.contentType && m.contentType.includes('json') ? 'json' : m.payload !== undefined && m.payload !== null ? 'text' : 'hex');
  return h('div', {}, h('div', { class: 'tabs' }, buttons), out);
}

export default function retained(main, params) {
  const filter = h('input', { type: 'search', id: 'ret-filter', placeholder: 'topic or filter, e.g. sensors/#', value: params.get('filter') || '#' });
  const list = h('div', { id: 'ret-list' });
  const detail = h('div', { id: 'ret-detail' });
  // A page is the messages in topic order after the last topic of the one
  // before (GET /api/v1/retained?after=); #/retained?limit=N sets its size.
  const limit = Math.min(Math.max(parseInt(params.get('limit'), 10) || PAGE, 1), COUNT_LIMIT);
  let after = '';
  let debounce;

  const loadTicket = latest();
  async function load() {
    const current = loadTicket();
    clearTimeout(debounce);
    try {
      const rows = await get('/api/v1/retained' + q({ filter: filter.value.trim() || '#', after, limit, payload: 'false' }));
      if (!current()) return;
      const more = rows.length === limit;
      const n = `${rows.length} retained message${rows.length === 1 ? '' : 's'}`;
      replace(list, h('div', {},
        h('p', { class: 'muted', id: 'ret-count' }, (after ? `After ${after}: ` : '') + n + (more ? ', more may follow.' : '')),
        h('p', { class: 'toolbar' },
          after ? h('button', { id: 'ret-first', onclick: () => { after = ''; load(); } }, 'First page') : null,
          more ? h('button', { id: 'ret-next', onclick: () => { after = rows[rows.length - 1].topic; load(); } }, 'Next page') : null),
        table([
          { title: 'Topic', value: (m) => h('span', { class: 'mono' }, m.topic) },
          { title: 'Size', value: (m) => bytes(m.size), num: true },
          { title: 'QoS', value: (m) => String(m.qos), num: true },
          { title: 'Content type', value: (m) => m.contentType || '—' },
          { title: 'Stored', value: (m) => when(m.created) },
          { title: 'Origin', value: (m) => m.origin || '—' },
        ], rows, { id: 'ret-table', rowId: (m) => m.topic, onRow: show, empty: 'No retained message matches.' })));
    } catch (e) {
      if (!current()) return;
      replace(list, errorBox(e));
    }
  }
  function search() {
    after = '';
    load();
  }

  // show fetches the one message with its payload: the list carries none.
  async function show(row) {
    let m;
    try {
      [m] = await get('/api/v1/retained' + q({ filter: row.topic, limit: 1 }));
    } catch (e) {
      flash(e.message, true);
      return;
    }
    if (!m) {
      flash(`${row.topic} has no retained message any more.`);
      return;
    }
    detail.replaceChildren(h('div', { class: 'panel', id: 'ret-panel' },
      h('h2', { class: 'mono' }, m.topic),
      kv([['Size', bytes(m.size)], ['QoS', String(m.qos)], ['Content type', m.contentType], ['Origin', m.origin],
        ['Stored', new Date(m.created).toISOString()], ['Expires', m.expiry ? new Date(m.expiry).toISOString() : undefined],
        ['User properties', m.userProperties ? Object.entries(m.userProperties).map(([k, v]) => `${k}=${v}`).join(', ') : undefined]]),
      payloadView(m, 'ret'),
      h('p', {}, h('button', { class: 'danger', id: 'ret-delete-one', onclick: () => remove(m.topic) }, 'Delete this message'))));
  }

  async function remove(f) {
    let n;
    try {
      n = (await get('/api/v1/retained' + q({ filter: f, limit: COUNT_LIMIT, payload: 'false' }))).length;
    } catch (e) {
      flash(e.message, true);
      return;
    }
    if (n === 0) {
      flash(`No retained message matches ${f}.`);
      return;
    }
    const count = n === COUNT_LIMIT ? `at least ${num(n)}` : num(n);
    if (!(await confirm(`Delete ${count} retained message${n === 1 ? '' : 's'} matching “${f}”? This cannot be undone.`, 'Delete'))) return;
    try {
      const r = await api('DELETE', '/api/v1/retained' + q({ filter: f }));
      flash(`Deleted ${num(r.deleted)} retained message${r.deleted === 1 ? '' : 's'}.`);
    } catch (e) {
      flash(e.message, true);
    }
    detail.replaceChildren();
    load();
  }

  filter.addEventListener('input', () => { clearTimeout(debounce); debounce = setTimeout(search, 300); });
  main.append(h('h1', {}, 'Retained messages'),
    h('div', { class: 'toolbar' }, filter, h('button', { onclick: search, id: 'ret-search' }, 'Search'),
      h('button', { class: 'danger', id: 'ret-delete-filter', onclick: () => remove(filter.value.trim() || '#') }, 'Delete matching…')),
    list, detail);
  load();
  return () => clearTimeout(debounce);
}
