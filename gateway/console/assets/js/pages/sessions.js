// MQTT sessions: GET /api/v1/sessions (connected or kept for a client
// that will come back: subscriptions, messages held, expiry) and
// DELETE /api/v1/sessions/{clientId} to end one.

import { api, get, q, latest } from '../api.js';
import { h, num, duration, badge, table, flash, confirm, replace, errorBox } from '../ui.js';

const SHOWN = 1000;

export default function sessions(main) {
  const search = h('input', { type: 'search', id: 'sess-search', placeholder: 'client id prefix' });
  const list = h('div', { id: 'sess-list' });

  const loadTicket = latest();
  async function load() {
    const current = loadTicket();
    try {
      // The prefix is applied by the API, so every session can be found.
      const rows = await get('/api/v1/sessions' + q({ clientId: search.value.trim(), limit: SHOWN }));
      if (!current()) return;
      replace(list, h('div', {}, h('p', { class: 'muted' }, rows.length === SHOWN
        ? `The first ${SHOWN} sessions; narrow the search.` : `${rows.length} session${rows.length === 1 ? '' : 's'}`), table([
        { title: 'Client id', value: (s) => h('span', { class: 'mono' }, s.clientId) },
        { title: 'State', value: (s) => (s.connected ? badge('connected', 'ok') : badge('disconnected', 'warn')) },
        { title: 'Persistent', value: (s) => (s.persistent ? 'yes' : 'no') },
        { title: 'Subscriptions', value: (s) => (s.subscriptions || []).join(', ') || '—' },
        { title: 'Held', value: (s) => num(s.queued), num: true },
        { title: 'Expiry', value: (s) => (s.expirySeconds ? duration(s.expirySeconds) : '—'), num: true },
        { title: '', value: (s) => h('button', { class: 'danger sess-delete', onclick: () => remove(s) }, 'Delete') },
      ], rows, { id: 'sess-table', rowId: (s) => s.clientId, empty: 'No MQTT session matches.' })));
    } catch (e) {
      if (!current()) return;
      replace(list, errorBox(e));
    }
  }

  async function remove(s) {
    const what = s.connected ? 'The client is disconnected and its session ends' : 'The session ends';
    if (!(await confirm(`Delete the session of ${s.clientId}? ${what}: its ${(s.subscriptions || []).length} subscriptions and ${num(s.queued)} held messages are dropped.`, 'Delete'))) return;
    try {
      await api('DELETE', '/api/v1/sessions/' + encodeURIComponent(s.clientId));
      flash(`Deleted the session of ${s.clientId}.`);
    } catch (e) {
      flash(e.message, true);
    }
    load();
  }

  let debounce;
  search.addEventListener('input', () => { clearTimeout(debounce); debounce = setTimeout(load, 250); });
  main.append(h('h1', {}, 'MQTT sessions'),
    h('div', { class: 'toolbar' }, search, h('button', { onclick: load }, 'Refresh')), list);
  load();
  const timer = setInterval(load, 5000);
  return () => { clearInterval(timer); clearTimeout(debounce); };
}
