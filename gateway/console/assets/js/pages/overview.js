// Overview: connections by protocol, messages per second in and out over
// the last minutes, retained and queued totals, store, bridge and cluster
// health. Everything comes from the sampler's GET /api/v1/stats.

import { h, num, rate, bytes, duration, badge, table, errorBox } from '../ui.js';
import { lineChart } from '../chart.js';
import * as stats from '../stats.js';

const SPAN = 5 * 60_000;

function card(id, label, value, sub) {
  return h('div', { class: 'card', id }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value), sub ? h('div', { class: 'sub' }, sub) : null);
}

function legend(items) {
  return h('div', { class: 'legend' }, items.map(([name, kind]) => h('span', {}, h('i', { class: kind }), name)));
}

function view() {
  const l = stats.latest();
  if (!l) return stats.lastError ? errorBox(stats.lastError) : h('p', { class: 'muted' }, 'Loading…');
  const s = l.s;
  const conns = Object.values(s.connections).reduce((a, b) => a + b, 0);
  const now = l.t;
  // The charts span what the tab has seen, one minute to five.
  const span = Math.min(SPAN, Math.max(60_000, Math.ceil((now - stats.samples[0].t) / 60_000) * 60_000));
  const storeOK = s.store.ready;
  const downBridges = s.bridges.filter((b) => b.state !== 'connected');
  return h('div', {},
    stats.lastError ? errorBox(stats.lastError) : null,
    h('div', { class: 'cards' },
      card('card-connections', 'Connections', num(conns), `MQTT ${num(s.connections.mqtt || 0)} · AMQP ${num(s.connections.amqp || 0)}`),
      card('card-in', 'Messages in', rate(l.inRate) + '/s', num(s.messages.received) + ' since start'),
      card('card-out', 'Messages out', rate(l.outRate) + '/s', num(s.messages.delivered) + ' delivered · ' + num(s.messages.dropped) + ' dropped'),
      card('card-retained', 'Retained', num(s.retained.count), bytes(s.retained.bytes)),
      card('card-queues', 'Queues', num(s.queues.count), num(s.queues.messages) + ' messages queued'),
      card('card-store', 'Store', s.store.backend, storeOK ? badge('ready', 'ok') : badge(s.store.error || 'not ready', 'bad')),
      card('card-bridges', 'Bridges', num(s.bridges.length), s.bridges.length ? (downBridges.length ? badge(downBridges.length + ' not connected', 'bad') : badge('all connected', 'ok')) : 'none configured'),
      card('card-cluster', 'Cluster', s.cluster.enabled ? num(s.cluster.members) + ' members' : 'off', s.ready ? badge('ready', 'ok') : badge(s.notReady || 'not ready', 'bad')),
      card('card-uptime', 'Uptime', duration(s.uptimeSeconds), 'node ' + s.node),
    ),
    h('div', { class: 'charts' },
      h('div', { class: 'panel chart', id: 'chart-rates' },
        h('h2', {}, 'Messages per second'),
        legend([['in', 'in'], ['out', 'out']]),
        lineChart([
          { kind: 'in', points: stats.samples.slice(1).map((x) => [x.t, x.inRate]) },
          { kind: 'out', points: stats.samples.slice(1).map((x) => [x.t, x.outRate]) },
        ], { span, now, label: 'messages per second in and out' })),
      h('div', { class: 'panel chart', id: 'chart-connections' },
        h('h2', {}, 'Connections'),
        legend([['MQTT', 'in'], ['AMQP', 'out']]),
        lineChart([
          { kind: 'in', points: stats.samples.map((x) => [x.t, x.s.connections.mqtt || 0]) },
          { kind: 'out', points: stats.samples.map((x) => [x.t, x.s.connections.amqp || 0]) },
        ], { span, now, label: 'connections by protocol' })),
    ),
    s.bridges.length ? h('div', { class: 'panel' }, h('h2', {}, 'Bridges'), table([
      { title: 'Name', value: (b) => b.name },
      { title: 'State', value: (b) => badge(b.state, b.state === 'connected' ? 'ok' : 'bad') },
      { title: 'Buffered', value: (b) => num(b.buffered), num: true },
      { title: 'Last error', value: (b) => b.lastError || '—' },
    ], s.bridges)) : null,
  );
}

export default function overview(main) {
  main.append(h('h1', {}, 'Overview'));
  const body = h('div', { id: 'overview' });
  main.append(body);
  const draw = () => body.replaceChildren(view());
  draw();
  return stats.onSample(draw);
}
