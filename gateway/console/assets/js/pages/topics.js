// Topics and subscriptions: GET /api/v1/topics?filter= (topics seen
// lately with their rates) and GET /api/v1/subscriptions (by filter or
// client id prefix).

import { get, q, latest } from '../api.js';
import { h, num, rate, when, table, replace, errorBox } from '../ui.js';

export default function topics(main, params) {
  const tfilter = h('input', { type: 'search', id: 'topic-filter', placeholder: 'MQTT filter, e.g. sensors/#', value: params.get('filter') || '#' });
  const sclient = h('input', { type: 'search', id: 'sub-client', placeholder: 'client id prefix' });
  const sfilter = h('input', { type: 'search', id: 'sub-filter', placeholder: 'exact filter' });
  const tlist = h('div', { id: 'topic-list' });
  const slist = h('div', { id: 'sub-list' });

  const loadTopicsTicket = latest();
  async function loadTopics() {
    const current = loadTopicsTicket();
    try {
      const rows = await get('/api/v1/topics' + q({ filter: tfilter.value.trim() || '#', limit: 1000 }));
      if (!current()) return;
      replace(tlist, table([
        { title: 'Topic', value: (t) => h('span', { class: 'mono' }, t.topic) },
        { title: 'Messages', value: (t) => num(t.messages), num: true },
        { title: 'Rate', value: (t) => rate(t.ratePerSecond) + '/s', num: true },
        { title: 'Last seen', value: (t) => when(t.lastSeen) },
        { title: 'Retained', value: (t) => (t.retained ? h('a', { href: '#/retained?filter=' + encodeURIComponent(t.topic) }, 'yes') : 'no') },
        { title: '', value: (t) => h('a', { href: '#/publish?topic=' + encodeURIComponent(t.topic) }, 'publish…') },
      ], rows, { id: 'topic-table', rowId: (t) => t.topic, empty: 'No topic seen lately matches.' }));
    } catch (e) {
      if (!current()) return;
      replace(tlist, errorBox(e, 'GET /api/v1/topics'));
    }
  }

  const loadSubsTicket = latest();
  async function loadSubs() {
    const current = loadSubsTicket();
    try {
      const rows = await get('/api/v1/subscriptions' + q({ clientId: sclient.value.trim(), filter: sfilter.value.trim(), limit: 1000 }));
      if (!current()) return;
      replace(slist, table([
        { title: 'Connection', value: (s) => h('a', { href: '#/connections?id=' + encodeURIComponent(s.connection) }, s.connection) },
        { title: 'Protocol', value: (s) => s.protocol.toUpperCase() },
        { title: 'Client id', value: (s) => s.clientId || '—' },
        { title: 'Filter', value: (s) => h('span', { class: 'mono' }, s.filter) },
        { title: 'QoS', value: (s) => String(s.qos), num: true },
        { title: 'Share group', value: (s) => s.shareGroup || '—' },
        { title: 'Durable', value: (s) => (s.durable ? 'yes' : 'no') },
      ], rows, { id: 'sub-table', rowId: (s) => s.id, empty: 'No subscription matches.' }));
    } catch (e) {
      if (!current()) return;
      replace(slist, errorBox(e, 'GET /api/v1/subscriptions'));
    }
  }

  let d1;
  let d2;
  tfilter.addEventListener('input', () => { clearTimeout(d1); d1 = setTimeout(loadTopics, 300); });
  for (const el of [sclient, sfilter]) el.addEventListener('input', () => { clearTimeout(d2); d2 = setTimeout(loadSubs, 300); });
  main.append(h('h1', {}, 'Topics'),
    h('div', { class: 'toolbar' }, tfilter, h('button', { onclick: loadTopics }, 'Refresh')), tlist,
    h('h1', { class: 'spaced' }, 'Subscriptions'),
    h('div', { class: 'toolbar' }, sclient, sfilter, h('button', { onclick: loadSubs }, 'Refresh')), slist);
  loadTopics();
  loadSubs();
  const timer = setInterval(() => { loadTopics(); loadSubs(); }, 5000);
  return () => { clearInterval(timer); clearTimeout(d1); clearTimeout(d2); };
}
