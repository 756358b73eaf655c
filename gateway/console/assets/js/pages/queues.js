// Queues: GET /api/v1/queues (depth, rates, consumers), browse
// (GET /queues/{name}/messages), purge (POST /queues/{name}/purge), create
// (PUT /queues/{name}) and delete (DELETE /queues/{name}).

import { api, get, q, latest } from '../api.js';
import { h, num, rate, bytes, when, table, flash, confirm, replace, errorBox } from '../ui.js';
import { payloadView } from './retained.js';

const path = (name) => '/api/v1/queues/' + encodeURIComponent(name);

export default function queues(main) {
  const list = h('div', { id: 'queue-list' });
  const detail = h('div', { id: 'queue-detail' });
  const name = h('input', { type: 'text', id: 'queue-name', placeholder: 'name', required: true });
  const subs = h('input', { type: 'text', id: 'queue-subs', placeholder: 'subscriptions: a/#, !a/b (comma-separated)' });
  const maxMessages = h('input', { type: 'number', id: 'queue-max', placeholder: 'max messages', min: 0 });

  const loadTicket = latest();
  async function load() {
    const current = loadTicket();
    try {
      const rows = await get('/api/v1/queues' + q({ limit: 10000 }));
      if (!current()) return;
      replace(list, table([
        { title: 'Name', value: (x) => h('span', { class: 'mono' }, x.name) },
        { title: 'Subscriptions', value: (x) => ((x.config && x.config.subscriptions) || []).join(', ') || '—' },
        { title: 'Depth', value: (x) => h('span', { class: 'depth' }, num(x.messages)), num: true },
        { title: 'Bytes', value: (x) => bytes(x.bytes), num: true },
        { title: 'In flight', value: (x) => num(x.inFlight), num: true },
        { title: 'Consumers', value: (x) => num(x.consumers), num: true },
        { title: 'In/s', value: (x) => rate(x.rates.in), num: true },
        { title: 'Out/s', value: (x) => rate(x.rates.out), num: true },
        { title: 'Dead-lettered', value: (x) => num(x.counters.deadLettered), num: true },
        { title: '', value: (x) => h('span', { class: 'actions' },
          h('button', { class: 'q-browse', onclick: () => browse(x.name) }, 'Browse'),
          h('button', { class: 'q-purge', onclick: () => purge(x) }, 'Purge'),
          h('button', { class: 'q-delete danger', onclick: () => remove(x) }, 'Delete')) },
      ], rows, { id: 'queue-table', rowId: (x) => x.name, empty: 'No queue. Create one above, or declare them in queues.declare.' }));
    } catch (e) {
      if (!current()) return;
      replace(list, errorBox(e));
    }
  }

  async function browse(n) {
    try {
      const msgs = await get(path(n) + '/messages' + q({ limit: 100 }));
      detail.replaceChildren(h('div', { class: 'panel', id: 'queue-browse' },
        h('h2', {}, `${n}: ${msgs.length === 100 ? 'the first 100' : msgs.length} message${msgs.length === 1 ? '' : 's'}`),
        table([
          { title: 'ID', value: (m) => String(m.id), num: true },
          { title: 'Topic', value: (m) => h('span', { class: 'mono' }, m.topic) },
          { title: 'Size', value: (m) => bytes(m.size), num: true },
          { title: 'QoS', value: (m) => String(m.qos), num: true },
          { title: 'Deliveries', value: (m) => num(m.deliveryCount || 0), num: true },
          { title: 'Stored', value: (m) => when(m.created) },
        ], msgs, {
          empty: 'Empty.',
          onRow: (m, tr) => {
            const view = payloadView(m.encoding === 'base64' ? { payloadBase64: m.payload, contentType: m.contentType } : m, 'qmsg');
            tr.parentElement.querySelector('tr.payload')?.remove();
            tr.after(h('tr', { class: 'payload' }, h('td', { colspan: 6 }, view)));
          },
        })));
    } catch (e) {
      flash(e.message, true);
    }
  }

  async function purge(x) {
    if (!(await confirm(`Purge queue ${x.name}? Its ${num(x.messages)} stored message${x.messages === 1 ? '' : 's'} are removed; the queue and its subscriptions stay.`, 'Purge'))) return;
    try {
      const r = await api('POST', path(x.name) + '/purge');
      flash(`Purged ${num(r && r.purged)} message${r && r.purged === 1 ? '' : 's'} from ${x.name}.`);
    } catch (e) {
      flash(e.status === 404 || e.status === 405 ? 'This gateway has no purge (POST /api/v1/queues/{name}/purge).' : e.message, true);
    }
    detail.replaceChildren();
    load();
  }

  async function remove(x) {
    if (!(await confirm(`Delete queue ${x.name} with its ${num(x.messages)} message${x.messages === 1 ? '' : 's'}? Its consumers are detached.`, 'Delete'))) return;
    try {
      await api('DELETE', path(x.name));
      flash(`Deleted queue ${x.name}.`);
    } catch (e) {
      flash(e.message, true);
    }
    detail.replaceChildren();
    load();
  }

  async function create(ev) {
    ev.preventDefault();
    const cfg = {};
    const s = subs.value.split(',').map((x) => x.trim()).filter(Boolean);
    if (s.length) cfg.subscriptions = s;
    if (maxMessages.value) cfg.maxMessages = Number(maxMessages.value);
    try {
      await api('PUT', path(name.value.trim()), cfg);
      flash(`Queue ${name.value.trim()} saved.`);
      name.value = '';
      subs.value = '';
      maxMessages.value = '';
    } catch (e) {
      flash(e.message, true);
    }
    load();
  }

  main.append(h('h1', {}, 'Queues'),
    h('form', { class: 'toolbar', id: 'queue-create', onsubmit: create }, name, subs, maxMessages,
      h('button', { class: 'primary', type: 'submit' }, 'Create or update'),
      h('button', { type: 'button', onclick: load, id: 'queue-refresh' }, 'Refresh')),
    list, detail);
  load();
  const timer = setInterval(load, 3000);
  return () => clearInterval(timer);
}
