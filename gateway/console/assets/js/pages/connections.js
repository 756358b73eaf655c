// Connections: GET /api/v1/connections with the client id prefix and
// protocol filters, one connection's detail (GET /connections/{id}, its
// subscriptions from GET /subscriptions) and DELETE to disconnect it.

import { get, api, q, latest } from '../api.js';
import { h, num, bytes, when, table, kv, flash, confirm, replace, errorBox } from '../ui.js';

export default function connections(main, params) {
  const search = h('input', { type: 'search', id: 'conn-search', placeholder: 'client id prefix', value: params.get('clientId') || '' });
  const proto = h('select', { id: 'conn-protocol' }, h('option', { value: '' }, 'all protocols'), h('option', { value: 'mqtt' }, 'MQTT'), h('option', { value: 'amqp' }, 'AMQP'));
  const list = h('div', { id: 'conn-list' });
  const detail = h('div', { id: 'conn-detail' });
  let selected = params.get('id') || '';

  const loadTicket = latest();
  async function load() {
    const current = loadTicket();
    try {
      const rows = await get('/api/v1/connections' + q({ clientId: search.value.trim(), protocol: proto.value, limit: 1000 }));
      if (!current()) return;
      replace(list, h('div', {},
        h('p', { class: 'muted' }, rows.length === 1000 ? 'The first 1,000 connections; narrow the search.' : `${rows.length} connection${rows.length === 1 ? '' : 's'}`),
        table([
          { title: 'ID', value: (c) => h('span', { class: 'mono' }, c.id) },
          { title: 'Protocol', value: (c) => `${c.protocol.toUpperCase()} ${c.version || ''}` },
          { title: 'Client id', value: (c) => c.clientId || '—' },
          { title: 'User', value: (c) => c.user || '—' },
          { title: 'Remote', value: (c) => c.remote },
          { title: 'Connected', value: (c) => when(c.connectedSince) },
          { title: 'Subs / links', value: (c) => num(c.subscriptions !== undefined ? c.subscriptions : c.links), num: true },
          { title: 'In', value: (c) => num(c.messagesIn), num: true },
          { title: 'Out', value: (c) => num(c.messagesOut), num: true },
          { title: 'Queued', value: (c) => num(c.queued), num: true },
        ], rows, { id: 'conn-table', rowId: (c) => c.id, onRow: (c) => show(c.id), empty: 'No open connection matches.' })));
    } catch (e) {
      if (!current()) return;
      replace(list, errorBox(e));
    }
  }

  async function show(id) {
    selected = id;
    let c;
    try {
      c = await get('/api/v1/connections/' + encodeURIComponent(id));
    } catch (e) {
      detail.replaceChildren(h('div', { class: 'panel' }, errorBox(e)));
      return;
    }
    let subs = c.subscriptionList || null;
    if (!subs && c.protocol === 'mqtt') {
      try {
        subs = (await get('/api/v1/subscriptions' + q({ clientId: c.clientId, protocol: c.protocol, limit: 1000 })))
          .filter((s) => s.connection === c.id);
      } catch {
        subs = null; // a gateway without GET /subscriptions: its filters below still say
      }
    }
    const disconnect = h('button', { class: 'danger', id: 'conn-disconnect', onclick: async () => {
      if (!(await confirm(`Disconnect ${c.id}? ${c.protocol === 'mqtt' ? 'An MQTT 5 client is told 0x98 (administrative action); its session stays.' : 'The AMQP connection is closed with amqp:connection:forced.'}`, 'Disconnect'))) return;
      try {
        await api('DELETE', '/api/v1/connections/' + encodeURIComponent(c.id));
        flash(`Disconnected ${c.id}`);
        detail.replaceChildren();
        selected = '';
        load();
      } catch (e) {
        flash(e.message, true);
      }
    } }, 'Disconnect');
    detail.replaceChildren(h('div', { class: 'panel', id: 'conn-panel' },
      h('h2', {}, c.id),
      kv([
        ['Protocol', `${c.protocol.toUpperCase()} ${c.version || ''}`],
        ['Client id', c.clientId], ['User', c.user], ['Remote', c.remote], ['Listener', c.listener],
        ['Connected since', c.connectedSince ? new Date(c.connectedSince).toISOString() : undefined],
        ['Keep alive', c.keepAlive !== undefined ? c.keepAlive + ' s' : undefined],
        ['Messages in / out', c.messagesIn !== undefined ? `${num(c.messagesIn)} / ${num(c.messagesOut)}` : undefined],
        ['Bytes in / out', c.bytesIn !== undefined ? `${bytes(c.bytesIn)} / ${bytes(c.bytesOut)}` : undefined],
        ['Queued', c.queued !== undefined ? num(c.queued) : undefined],
      ]),
      c.protocol === 'amqp' ? [h('h2', {}, 'Links'), table([
        { title: 'Name', value: (l) => l.name },
        { title: 'Role', value: (l) => l.role },
        { title: 'Address', value: (l) => h('span', { class: 'mono' }, l.address) },
        { title: 'Credit', value: (l) => num(l.credit), num: true },
        { title: 'QoS', value: (l) => String(l.qos), num: true },
        { title: 'Subscription', value: (l) => [l.subscription || '—', l.durable ? ' (durable)' : '', l.shared ? ' (shared)' : ''] },
      ], c.linkList || [], { empty: 'None.' })] : null,
      c.protocol === 'amqp' ? null : h('h2', {}, 'Subscriptions'),
      c.protocol === 'amqp' ? null : subs ? table([
        { title: 'Filter', value: (s) => h('span', { class: 'mono' }, s.filter) },
        { title: 'QoS', value: (s) => String(s.qos), num: true },
        { title: 'Share group', value: (s) => s.shareGroup || '—' },
        { title: 'Durable', value: (s) => (s.durable ? 'yes' : 'no') },
      ], subs, { empty: 'None.' })
        : (c.filters && c.filters.length ? h('ul', {}, c.filters.map((f) => h('li', { class: 'mono' }, f))) : h('p', { class: 'muted' }, 'None.')),
      h('p', {}, disconnect)));
  }

  let debounce;
  search.addEventListener('input', () => { clearTimeout(debounce); debounce = setTimeout(load, 250); });
  proto.addEventListener('change', load);
  main.append(h('h1', {}, 'Connections'),
    h('div', { class: 'toolbar' }, search, proto, h('button', { onclick: load, id: 'conn-refresh' }, 'Refresh')),
    list, detail);
  load();
  if (selected) show(selected);
  const timer = setInterval(load, 5000);
  return () => { clearInterval(timer); clearTimeout(debounce); };
}
