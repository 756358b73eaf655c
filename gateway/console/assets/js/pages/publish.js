// Publish: POST /api/v1/publish, one message into the topic space with
// the admin API as its origin.

import { api } from '../api.js';
import { h, num, flash } from '../ui.js';

export default function publish(main, params) {
  const topic = h('input', { type: 'text', id: 'pub-topic', required: true, placeholder: 'sensors/room1/temp', value: params.get('topic') || '' });
  const payload = h('textarea', { id: 'pub-payload', placeholder: 'payload (UTF-8 text)' });
  const qos = h('select', { id: 'pub-qos' }, h('option', { value: '0' }, '0'), h('option', { value: '1' }, '1'));
  const retain = h('input', { type: 'checkbox', id: 'pub-retain' });
  const ctype = h('input', { type: 'text', id: 'pub-ctype', placeholder: 'e.g. application/json' });
  const rtopic = h('input', { type: 'text', id: 'pub-rtopic', placeholder: 'optional' });
  const expiry = h('input', { type: 'number', id: 'pub-expiry', min: 0, placeholder: 'seconds, 0: never' });
  const props = h('textarea', { id: 'pub-props', placeholder: 'key=value, one a line', class: 'short' });
  const result = h('div', { id: 'pub-result' });

  async function send(ev) {
    ev.preventDefault();
    const body = { topic: topic.value, payload: payload.value, qos: Number(qos.value), retain: retain.checked };
    if (ctype.value) body.contentType = ctype.value;
    if (rtopic.value) body.responseTopic = rtopic.value;
    if (expiry.value) body.expirySeconds = Number(expiry.value);
    const up = {};
    for (const line of props.value.split('\n')) {
      const i = line.indexOf('=');
      if (i > 0) up[line.slice(0, i).trim()] = line.slice(i + 1);
    }
    if (Object.keys(up).length) body.userProperties = up;
    try {
      const r = await api('POST', '/api/v1/publish', body);
      const text = `Published to ${body.topic}: ${num(r.matched)} subscriber${r.matched === 1 ? '' : 's'} matched` +
        (r.failed ? `, ${num(r.failed)} failed` : '') + (r.retained ? ', retained' : '') + (r.error ? ` (${r.error})` : '') + '.';
      result.replaceChildren(h('p', { class: r.error ? 'error' : 'ok' }, text));
      flash(text, Boolean(r.error));
    } catch (e) {
      result.replaceChildren(h('p', { class: 'error' }, e.message));
    }
  }

  main.append(h('h1', {}, 'Publish a message'),
    h('form', { class: 'panel form', id: 'pub-form', onsubmit: send },
      h('label', { for: 'pub-topic' }, 'Topic'), topic,
      h('label', { for: 'pub-payload' }, 'Payload'), payload,
      h('label', { for: 'pub-qos' }, 'QoS'), h('div', {}, qos),
      h('label', { for: 'pub-retain' }, 'Retain'), h('div', {}, retain),
      h('label', { for: 'pub-ctype' }, 'Content type'), ctype,
      h('label', { for: 'pub-rtopic' }, 'Response topic'), rtopic,
      h('label', { for: 'pub-expiry' }, 'Expiry'), expiry,
      h('label', { for: 'pub-props' }, 'User properties'), props,
      h('span', {}), h('div', {}, h('button', { class: 'primary', type: 'submit', id: 'pub-send' }, 'Publish'))),
    result);
}
