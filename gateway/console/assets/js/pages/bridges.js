// Bridges and cluster: GET /api/v1/bridges (state, rules, buffered
// messages, last error) and GET /api/v1/cluster (members).

import { get, latest } from '../api.js';
import { h, num, when, badge, table, kv, replace, errorBox, duration } from '../ui.js';

export default function bridges(main) {
  const blist = h('div', { id: 'bridge-list' });
  const clist = h('div', { id: 'cluster' });

  const loadTicket = latest();
  async function load() {
    const current = loadTicket();
    try {
      const bs = await get('/api/v1/bridges');
      if (!current()) return;
      replace(blist, bs.length ? h('div', {}, bs.map((b) => h('div', { class: 'panel bridge' },
        h('h2', {}, b.name, ' ', badge(b.state, b.state === 'connected' ? 'ok' : 'bad')),
        kv([['URLs', (b.urls || []).join(', ')], ['Last error', b.lastError],
          ['Last error at', b.lastErrorAt ? new Date(b.lastErrorAt).toISOString() : undefined]]),
        table([
          { title: 'Rule', value: (r) => r.name },
          { title: 'Direction', value: (r) => r.direction },
          { title: 'Local', value: (r) => h('span', { class: 'mono' }, r.local) },
          { title: 'Remote', value: (r) => h('span', { class: 'mono' }, r.remote) },
          { title: 'Out', value: (r) => num(r.out), num: true },
          { title: 'In', value: (r) => num(r.in), num: true },
          { title: 'Dropped', value: (r) => num(r.dropped), num: true },
          { title: 'Buffered', value: (r) => (r.buffer ? `${num(r.buffer.messages)} (${num(r.buffer.bytes)} B)` : '—'), num: true },
        ], b.rules || [], { empty: 'No rules.' }))))
        : h('p', { class: 'muted' }, 'No bridge configured (bridge.nats.*, bridge.amqp in docs/bridge.md).'));
    } catch (e) {
      if (!current()) return;
      replace(blist, errorBox(e));
    }
    try {
      const c = await get('/api/v1/cluster');
      replace(clist, c.enabled ? h('div', {},
        kv([['Node', c.node], ['Instance', c.instance], ['Prefix', c.prefix],
          ['Sent / received', c.stats ? `${num(c.stats.out)} / ${num(c.stats.in)}` : undefined],
          ['Dropped / refused', c.stats ? `${num(c.stats.dropped)} / ${num(c.stats.refused)}` : undefined],
          ['NATS reconnections', c.reconnects ? num(c.reconnects) : undefined],
          ['Duplicate node ids', c.duplicates && c.duplicates.length ? badge(c.duplicates.map((d) => d.instance).join(', '), 'bad') : undefined]]),
        h('h2', {}, 'Members'),
        table([
          { title: 'Node', value: (m) => [m.node, m.self ? ' (this one)' : ''] },
          { title: 'MQTT', value: (m) => m.mqtt || '—' },
          { title: 'AMQP', value: (m) => m.amqp || '—' },
          { title: 'Admin', value: (m) => m.admin || '—' },
          { title: 'Connections', value: (m) => num(m.connections), num: true },
          { title: 'Uptime', value: (m) => duration(m.uptimeSeconds || 0) },
          { title: 'Last heard', value: (m) => when(m.lastHeard) },
        ], c.members || [], { empty: 'No member heard yet.' }))
        : h('p', { class: 'muted' }, `Node ${c.node}: not in a cluster (cluster.* in docs/cluster.md).`));
    } catch (e) {
      replace(clist, errorBox(e));
    }
  }

  main.append(h('h1', {}, 'Bridges'), blist, h('h1', { class: 'spaced' }, 'Cluster'), clist);
  load();
  const timer = setInterval(load, 5000);
  return () => clearInterval(timer);
}
