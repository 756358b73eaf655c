#!/usr/bin/env node
// Reference-client checks of the gateway's AMQP 1.0 port with rhea (and
// mqtt.js for the cross-protocol checks). Run by test/e2e/amqp_clients.sh
// against a running gateway (README, "Test it").
// Prints one PASS/FAIL/SKIP line per check; exits 1 if any check failed.
//
//   node rhea_checks.js --amqp 127.0.0.1:5672 --mqtt 127.0.0.1:1883 --user alice --password secret
//
// --target=broker runs only the pure-AMQP checks Qpid Proton's example broker
// (broker.py: queues only, no SASL PLAIN, no MQTT) can pass.
'use strict';

const crypto = require('crypto');
const rhea = require('rhea');

const CLIENT = 'node';
const T = 5000; // ms per operation
const QUIET = 1000; // ms to wait for a message that must not come
const CHECK_TIMEOUT = 20000; // ms per check
const RUN = crypto.randomBytes(4).toString('hex');
const BASE = 'e2e/js/' + RUN;

function parseArgs(argv) {
  const a = { user: 'alice', password: 'secret', target: 'gateway' };
  for (let i = 2; i < argv.length; i++) {
    let k = argv[i];
    let v;
    if (k.includes('=')) [k, v] = [k.slice(0, k.indexOf('=')), k.slice(k.indexOf('=') + 1)];
    else v = argv[++i];
    a[k.replace(/^--/, '')] = v;
  }
  if (!a.amqp) {
    console.error('usage: rhea_checks.js --amqp HOST:PORT [--mqtt HOST:PORT] [--mqtt-ws HOST:PORT] [--admin HOST:PORT] [--user U --password P] [--target gateway|broker] [--only TEXT]');
    process.exit(2);
  }
  return a;
}
const args = parseArgs(process.argv);

class CheckFailed extends Error {}
function expect(cond, what) {
  if (!cond) throw new CheckFailed(what);
}
function hostPort(s) {
  const i = s.lastIndexOf(':');
  return { host: s.slice(0, i), port: Number(s.slice(i + 1)) };
}
function withTimeout(p, ms, what) {
  let timer;
  return Promise.race([
    p,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new CheckFailed(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const binary = (buf) => rhea.types.wrap_binary(buf); // a Buffer alone would be sent as a uuid

function bodyBytes(m) {
  // docs/mapping.md: the payload is one data section; a text payload may
  // arrive as an amqp-value string (Qpid JMS TextMessage)
  const b = m.body;
  if (Buffer.isBuffer(b)) return b;
  if (typeof b === 'string') return Buffer.from(b, 'utf8');
  if (b && b.typecode === 0x75) return b.multiple ? Buffer.concat(b.content) : b.content;
  throw new CheckFailed('unexpected body ' + describe(m));
}
function isDataSection(m) {
  return m.body && m.body.typecode === 0x75;
}
function retainFlag(m) {
  return m.message_annotations ? m.message_annotations['x-opt-retain'] : undefined;
}
function describe(m) {
  const o = {};
  for (const k of ['to', 'reply_to', 'content_type', 'correlation_id', 'durable', 'ttl', 'application_properties', 'message_annotations']) {
    if (m[k] !== undefined) o[k] = Buffer.isBuffer(m[k]) ? 'binary:' + m[k].toString('hex') : m[k];
  }
  let b = m.body;
  if (b && b.typecode === 0x75) b = 'data:' + (b.multiple ? '<multiple>' : b.content.length > 64 ? `<${b.content.length} bytes>` : b.content.toString('hex'));
  else if (Buffer.isBuffer(b)) b = 'binary:' + b.toString('hex');
  o.body = b;
  return JSON.stringify(o);
}

// --- AMQP helpers -----------------------------------------------------------

class Conns {
  constructor() {
    this.list = [];
    this.mqtt = [];
    this.cleanups = []; // async functions run after the connections are closed
  }

  // Opens a connection; resolves with it once the server's open arrived,
  // rejects with the error condition when the server refuses.
  connect(opts = {}) {
    const { host, port } = hostPort(args.amqp);
    const container = rhea.create_container({ id: 'e2e-js-' + crypto.randomBytes(3).toString('hex') });
    container.on('error', () => {}); // errors are reported through the promises below
    const conn = container.connect({ host, port, reconnect: false, idle_time_out: 30000, ...opts });
    this.list.push(conn);
    return withTimeout(
      new Promise((resolve, reject) => {
        conn.on('connection_open', () => resolve(conn));
        conn.on('connection_error', (ctx) => {
          const e = ctx.connection.get_error();
          reject(Object.assign(new Error(`connection error ${e && e.condition}: ${e && e.description}`), { condition: e && e.condition }));
        });
        conn.on('disconnected', (ctx) => {
          reject(Object.assign(new Error('disconnected before open' + (ctx.error ? ': ' + ctx.error : '')), { condition: 'disconnected' }));
        });
      }),
      T,
      'connection open'
    );
  }

  async close() {
    for (const c of this.list) {
      try {
        c.close();
        if (c.socket) c.socket.destroy();
      } catch (e) {
        /* ignore */
      }
    }
    for (const m of this.mqtt) m.end(true);
    for (const fn of this.cleanups) await fn();
    this.cleanups = [];
  }
}

// rhea hands a null terminus over as a Typed null, not as null.
function isNullTerminus(t) {
  return t == null || (t.constructor && t.constructor.name === 'Typed' && t.value == null);
}

// Attaches a link and resolves once the server attached back with a
// terminus; rejects with the detach error if the server refuses it.
function attach(conn, kind, opts) {
  const link = kind === 'receiver' ? conn.open_receiver(opts) : conn.open_sender(opts);
  link.messages = [];
  link.waiters = [];
  link.outcomes = new Map();
  if (kind === 'receiver') {
    link.on('message', (ctx) => {
      // the delivery rides along for the checks that settle it themselves (autoaccept: false)
      Object.defineProperty(ctx.message, 'delivery', { value: ctx.delivery });
      const w = link.waiters.shift();
      if (w) w(ctx.message);
      else link.messages.push(ctx.message);
    });
  } else {
    for (const o of ['accepted', 'rejected', 'released', 'modified']) {
      link.on(o, (ctx) => {
        const r = link.outcomes.get(ctx.delivery.id);
        if (r) r({ outcome: o, delivery: ctx.delivery });
      });
    }
  }
  return withTimeout(
    new Promise((resolve, reject) => {
      const fail = (ctx) => {
        const e = link.remote.detach && link.remote.detach.error;
        reject(Object.assign(new Error(`${kind} detached: ${e ? e.condition + ': ' + e.description : 'no error'}`), { condition: e ? e.condition : null, refused: true }));
      };
      link.on(kind + '_error', fail);
      link.on(kind + '_close', fail);
      link.on(kind + '_open', () => {
        const term = kind === 'receiver' ? link.remote.attach.source : link.remote.attach.target;
        if (!isNullTerminus(term)) resolve(link); // a null terminus announces a refusal: wait for the detach
      });
    }),
    T,
    `${kind} attach ${JSON.stringify(opts)}`
  );
}
const receiver = (conn, address, extra = {}) => attach(conn, 'receiver', { source: { address, ...extra }, credit_window: 20, autoaccept: true });
const sender = (conn, address, extra = {}) => attach(conn, 'sender', { target: { address, ...extra } });
const TOPIC = { capabilities: ['topic'] };

function next(rcv, what, ms = T) {
  if (rcv.messages.length) return Promise.resolve(rcv.messages.shift());
  let w;
  const p = new Promise((resolve) => {
    w = resolve;
    rcv.waiters.push(resolve);
  });
  return withTimeout(p, ms, 'no message: ' + what).catch((e) => {
    rcv.waiters = rcv.waiters.filter((x) => x !== w);
    throw e;
  });
}
async function nothing(rcv, what) {
  try {
    const m = await next(rcv, what, QUIET);
    throw new CheckFailed(`unexpected message (${what}): ${describe(m)}`);
  } catch (e) {
    if (e instanceof CheckFailed && e.message.startsWith('unexpected')) throw e;
  }
}

// Sends unsettled once the link has credit; resolves with the outcome.
async function sendRaw(snd, msg) {
  const deadline = Date.now() + T;
  while (!snd.sendable()) {
    if (Date.now() > deadline) throw new CheckFailed(`no credit within ${T} ms on sender to ${snd.target && snd.target.address}`);
    await sleep(5);
  }
  const p = new Promise((resolve) => {
    const d = snd.send(msg);
    snd.outcomes.set(d.id, resolve);
  });
  return withTimeout(p, T, 'outcome of a send to ' + ((snd.target && snd.target.address) || msg.to));
}
async function send(snd, msg, want = 'accepted') {
  const r = await sendRaw(snd, msg);
  if (r.outcome !== want) {
    const e = r.delivery.remote_state && r.delivery.remote_state.error;
    throw new CheckFailed(`send to ${(snd.target && snd.target.address) || msg.to}: outcome ${r.outcome}${e ? ` (${e.condition}: ${e.description})` : ''}, want ${want}`);
  }
  return r;
}

async function expectRefused(p, what, condition = 'amqp:not-found') {
  let link;
  try {
    link = await p;
  } catch (e) {
    if (e.refused) {
      expect(e.condition === condition, `${what}: refused with ${e.condition}, want ${condition} (${e.message})`);
      return;
    }
    throw new CheckFailed(`${what}: want refusal with ${condition}, got ${e.message}`);
  }
  const term = link.is_receiver() ? link.remote.attach.source : link.remote.attach.target;
  throw new CheckFailed(`${what}: attach succeeded (remote terminus ${JSON.stringify(term)}), want refusal with ${condition}`);
}

// --- MQTT helpers -------------------------------------------------------------

async function mqttClient(cs, name, { ws = false } = {}) {
  const mqtt = require('mqtt');
  const opts = { protocolVersion: 5, clientId: `e2e-js-${name}-${RUN}`, reconnectPeriod: 0, connectTimeout: T };
  let c;
  if (ws) {
    if (!args['mqtt-ws']) throw new CheckFailed('no --mqtt-ws HOST:PORT given');
    c = mqtt.connect(`ws://${args['mqtt-ws']}/mqtt`, opts); // mqtt.js over the ws library
  } else {
    const { host, port } = hostPort(args.mqtt);
    c = mqtt.connect({ host, port, ...opts });
  }
  cs.mqtt.push(c);
  c.msgs = [];
  c.waiters = [];
  c.on('message', (topic, payload, packet) => {
    const m = { topic, payload, packet };
    const w = c.waiters.shift();
    if (w) w(m);
    else c.msgs.push(m);
  });
  c.next = (what, ms = T) => {
    if (c.msgs.length) return Promise.resolve(c.msgs.shift());
    return withTimeout(new Promise((r) => c.waiters.push(r)), ms, 'MQTT subscriber got nothing: ' + what);
  };
  await withTimeout(
    new Promise((resolve, reject) => {
      c.once('connect', resolve);
      c.once('error', reject);
    }),
    T,
    'MQTT connect to ' + (ws ? 'ws://' + args['mqtt-ws'] : args.mqtt)
  );
  return c;
}

// --- checks -----------------------------------------------------------------

const checks = [];
function check(name, fn, { gatewayOnly = false, mqtt = false } = {}) {
  checks.push({ name, fn, gatewayOnly, mqtt });
}

check('no SASL layer (bare AMQP header) and SASL ANONYMOUS connect and send', async (cs) => {
  const c = await cs.connect(); // rhea skips SASL when no username is set
  await send(await sender(c, BASE + '/anon', TOPIC), { body: 'hello' });
  const c2 = await cs.connect({ username: 'anonymous' }); // username without password: SASL ANONYMOUS
  await send(await sender(c2, BASE + '/anon', TOPIC), { body: 'hello' });
});

check('SASL PLAIN with good credentials connects and sends', async (cs) => {
  const c = await cs.connect({ username: args.user, password: args.password });
  await send(await sender(c, BASE + '/plain', TOPIC), { body: 'hello' });
}, { gatewayOnly: true });

check('SASL PLAIN with bad credentials is refused', async (cs) => {
  for (const [u, p] of [[args.user, args.password + '-wrong'], ['nobody-' + RUN, args.password]]) {
    let c;
    try {
      c = await cs.connect({ username: u, password: p });
    } catch (e) {
      expect(e.condition === 'amqp:unauthorized-access', `${u}/<bad>: connection failed, but not as an authentication failure: ${e.message}`);
      continue;
    }
    throw new CheckFailed(`${u} with a bad password: connection opened (remote container ${c.remote.open.container_id})`);
  }
}, { gatewayOnly: true });

check("send/receive on a topic with terminus capability 'topic'; properties survive AMQP->AMQP", async (cs) => {
  const t = BASE + '/caps/room1/temp';
  const c = await cs.connect();
  const r = await receiver(c, t, TOPIC);
  const s = await sender(c, t, TOPIC);
  const payload = Buffer.concat([crypto.randomBytes(32), Buffer.from([0, 255])]);
  const corr = Buffer.from('\x01corr-' + RUN);
  const props = { unit: 'C', run: RUN };
  await send(s, { body: rhea.message.data_section(payload), content_type: 'application/octet-stream', correlation_id: binary(corr), application_properties: props, reply_to: BASE + '/caps/reply' });
  let m = await next(r, 'message sent on ' + t);
  let d = describe(m);
  expect(isDataSection(m) && bodyBytes(m).equals(payload), 'body differs (want one data section): ' + d);
  expect(m.content_type === 'application/octet-stream', 'content_type lost: ' + d);
  expect(Buffer.isBuffer(m.correlation_id) && m.correlation_id.equals(corr), 'binary correlation_id lost: ' + d);
  expect(JSON.stringify(m.application_properties) === JSON.stringify(props), 'application-properties differ: ' + d);
  expect([BASE + '/caps/reply', 'topic://' + BASE + '/caps/reply'].includes(m.reply_to), 'reply_to lost: ' + d);
  expect(retainFlag(m) !== true, 'live message carries x-opt-retain: ' + d);
  await send(s, { body: '21.5 °C', content_type: 'text/plain; charset=utf-8', application_properties: { unit: 'C' } });
  m = await next(r, 'text message on ' + t);
  d = describe(m);
  expect(bodyBytes(m).equals(Buffer.from('21.5 °C')), 'text body differs: ' + d);
  expect(m.content_type === 'text/plain; charset=utf-8', 'content_type lost: ' + d);
});

check('string correlation-id survives AMQP->AMQP', async (cs) => {
  const t = BASE + '/corr';
  const c = await cs.connect();
  const r = await receiver(c, t, TOPIC);
  await send(await sender(c, t, TOPIC), { body: 'x', correlation_id: 'req-42' });
  const m = await next(r, 'message on ' + t);
  expect(m.correlation_id === 'req-42', `sent correlation_id 'req-42' (string), received ${describe(m)}`);
}, { gatewayOnly: true });

check("send/receive with the topic:// prefix; same topic as capability 'topic'", async (cs) => {
  const t = BASE + '/prefix/a';
  const c = await cs.connect();
  const rp = await receiver(c, 'topic://' + t);
  const sp = await sender(c, 'topic://' + t);
  await send(sp, { body: 'via-prefix' });
  let m = await next(rp, `topic://${t} receiver, sent to topic://${t}`);
  expect(bodyBytes(m).toString() === 'via-prefix', 'body differs: ' + describe(m));
  if (args.target === 'broker') return;
  const rc = await receiver(c, t, TOPIC);
  const sc = await sender(c, t, TOPIC);
  await send(sc, { body: 'via-capability' });
  for (const [r, what] of [[rp, 'topic:// receiver'], [rc, 'capability receiver']]) {
    m = await next(r, what + ', sent with capability topic');
    expect(bodyBytes(m).toString() === 'via-capability', 'body differs: ' + describe(m));
  }
});

check('receiver on wildcard sensors/+/temp', async (cs) => {
  const c = await cs.connect();
  const r = await receiver(c, 'sensors/+/temp', TOPIC);
  const sent = [];
  for (const [topic, match] of [
    [`sensors/js-${RUN}-a/temp`, true],
    [`sensors/js-${RUN}-a/humidity`, false],
    [`sensors/js-${RUN}/x/temp`, false],
    [`other/js-${RUN}/temp`, false],
    [`sensors/js-${RUN}-b/temp`, true],
  ]) {
    const s = await sender(c, topic, TOPIC);
    await send(s, { body: topic });
    s.close();
    if (match) sent.push(topic);
  }
  const got = [];
  for (let i = 0; i < sent.length; i++) got.push(bodyBytes(await next(r, 'wildcard receiver, sent ' + sent)).toString());
  expect(JSON.stringify(got) === JSON.stringify(sent), `wildcard receiver got ${got}, want ${sent}`);
  await nothing(r, 'non-matching topics must not reach sensors/+/temp');
}, { gatewayOnly: true });

check('send to a topic with no subscriber is accepted (not released)', async (cs) => {
  const c = await cs.connect();
  await send(await sender(c, BASE + '/nobody/listens', TOPIC), { body: 'into the void' });
  await send(await sender(c, 'topic://' + BASE + '/nobody/either'), { body: 'into the void', durable: true });
});

check('sender and receiver attach on an unknown queue are refused with amqp:not-found', async (cs) => {
  const c = await cs.connect();
  await expectRefused(sender(c, 'queue://nope-' + RUN), 'sender to queue://nope-' + RUN);
  await expectRefused(sender(c, 'nope-' + RUN, { capabilities: ['queue'] }), `sender to nope-${RUN} with capability queue`);
  await expectRefused(receiver(c, 'nope-' + RUN, { capabilities: ['queue'] }), `receiver on nope-${RUN} with capability queue`);
  await expectRefused(receiver(c, 'queue://nope-' + RUN), 'receiver on queue://nope-' + RUN);
}, { gatewayOnly: true });

check('1 MiB message (split over many transfer frames) arrives intact', async (cs) => {
  const t = BASE + '/large';
  const c = await cs.connect({ max_frame_size: 16384 }); // the server must split what it sends us
  if (args.target === 'gateway') {
    const remote = c.remote.open.max_frame_size;
    expect(remote > 0 && remote < 1 << 20, `gateway max-frame-size ${remote} does not force the 1 MiB message to be split`);
  }
  const r = await receiver(c, t, TOPIC);
  const s = await sender(c, t, TOPIC);
  const payload = crypto.randomBytes(1 << 20);
  await send(s, { body: rhea.message.data_section(payload) });
  const m = await next(r, '1 MiB message on ' + t, 15000);
  expect(isDataSection(m), 'want one data section: ' + describe(m));
  const got = bodyBytes(m);
  const h = (b) => crypto.createHash('sha256').update(b).digest('hex').slice(0, 16);
  expect(got.equals(payload), `1 MiB body differs: got ${got.length} bytes sha256 ${h(got)}, want ${payload.length} sha256 ${h(payload)}`);
});

async function dynamicReceiver(c) {
  const r = await attach(c, 'receiver', { source: { dynamic: true }, credit_window: 20 });
  const addr = r.remote.attach.source && r.remote.attach.source.address;
  expect(addr, 'dynamic receiver: the server returned no address: ' + JSON.stringify(r.remote.attach.source));
  return [r, addr];
}

check('request/reply: dynamic reply-to, AMQP responder', async (cs) => {
  const svc = BASE + '/svc/amqp';
  const reqC = await cs.connect();
  const rspC = await cs.connect();
  const [replyRcv, replyAddr] = await dynamicReceiver(reqC);
  const svcRcv = await receiver(rspC, svc, TOPIC);
  const corr = Buffer.from('rpc-' + RUN);
  await send(await sender(reqC, svc, TOPIC), { body: 'ping', reply_to: replyAddr, correlation_id: binary(corr) });
  const req = await next(svcRcv, 'request on ' + svc);
  expect(req.reply_to === replyAddr, `request reply_to ${req.reply_to}, want the dynamic address ${replyAddr}`);
  const rs = await sender(rspC, req.reply_to);
  await send(rs, { body: 'pong:' + bodyBytes(req).toString(), correlation_id: Buffer.isBuffer(req.correlation_id) ? binary(req.correlation_id) : req.correlation_id });
  const rsp = await next(replyRcv, 'reply on dynamic address ' + replyAddr);
  expect(bodyBytes(rsp).toString() === 'pong:ping', 'reply body differs: ' + describe(rsp));
  expect(Buffer.isBuffer(rsp.correlation_id) && rsp.correlation_id.equals(corr), 'reply correlation_id differs: ' + describe(rsp));
});

check('request/reply: dynamic reply-to, MQTT responder', async (cs) => {
  const svc = BASE + '/svc/mqtt';
  const mq = await mqttClient(cs, 'responder');
  await new Promise((res, rej) => mq.subscribe(svc, { qos: 1 }, (err) => (err ? rej(err) : res())));
  const c = await cs.connect();
  const [replyRcv, replyAddr] = await dynamicReceiver(c);
  const corr = Buffer.from('rpc-mqtt-' + RUN);
  await send(await sender(c, svc, TOPIC), { body: 'ping', reply_to: replyAddr, correlation_id: binary(corr), content_type: 'text/plain' });
  const req = await mq.next('request published by AMQP on ' + svc);
  const p = req.packet.properties || {};
  expect(p.responseTopic === replyAddr, `MQTT responder saw responseTopic ${p.responseTopic}, want the dynamic address ${replyAddr}`);
  expect(Buffer.isBuffer(p.correlationData) && p.correlationData.equals(corr), `MQTT responder saw correlationData ${p.correlationData && p.correlationData.toString('hex')}, want ${corr.toString('hex')}`);
  await new Promise((res, rej) =>
    mq.publish(p.responseTopic, Buffer.concat([Buffer.from('pong:'), req.payload]), { qos: 1, properties: { correlationData: p.correlationData } }, (err) => (err ? rej(err) : res()))
  );
  const rsp = await next(replyRcv, 'MQTT reply on dynamic address ' + replyAddr);
  expect(bodyBytes(rsp).toString() === 'pong:ping', 'reply body differs: ' + describe(rsp));
  expect(Buffer.isBuffer(rsp.correlation_id) && rsp.correlation_id.equals(corr), 'reply correlation_id differs: ' + describe(rsp));
}, { gatewayOnly: true, mqtt: true });

check('MQTT 5 publish -> AMQP receiver and AMQP send -> MQTT 5 subscriber (payload and properties)', async (cs) => {
  const c = await cs.connect();
  const mq = await mqttClient(cs, 'x');
  // MQTT -> AMQP
  const t1 = BASE + '/x/m2a';
  const r = await receiver(c, t1, TOPIC);
  const payload = Buffer.from([0, 1, 0x62, 0xff]);
  await new Promise((res, rej) =>
    mq.publish(t1, payload, { qos: 1, properties: { contentType: 'application/octet-stream', correlationData: Buffer.from('c-' + RUN), userProperties: { unit: 'C', run: RUN }, responseTopic: BASE + '/x/reply', messageExpiryInterval: 60 } }, (err) => (err ? rej(err) : res()))
  );
  let m = await next(r, 'MQTT publish on ' + t1);
  let d = describe(m);
  expect(isDataSection(m) && bodyBytes(m).equals(payload), 'payload differs: ' + d);
  expect(m.content_type === 'application/octet-stream', 'content-type not mapped: ' + d);
  expect(Buffer.isBuffer(m.correlation_id) && m.correlation_id.equals(Buffer.from('c-' + RUN)), 'correlation data not mapped to binary correlation-id: ' + d);
  expect(m.application_properties && m.application_properties.unit === 'C' && m.application_properties.run === RUN && Object.keys(m.application_properties).length === 2, 'user properties not mapped: ' + d);
  expect(m.reply_to === BASE + '/x/reply', 'response topic not mapped to reply-to: ' + d);
  expect(m.durable === true, 'QoS 1 not mapped to header.durable=true: ' + d);
  expect(m.ttl >= 50000 && m.ttl <= 60000, 'message expiry 60 s not mapped to header.ttl: ' + d);
  expect(retainFlag(m) !== true, 'live message carries x-opt-retain: ' + d);
  // AMQP -> MQTT
  const t2 = BASE + '/x/a2m';
  await new Promise((res, rej) => mq.subscribe(t2, { qos: 1 }, (err) => (err ? rej(err) : res())));
  const s = await sender(c, t2, TOPIC);
  const corr = Buffer.from('c2-' + RUN);
  await send(s, { body: rhea.message.data_section(payload), durable: true, ttl: 60000, content_type: 'application/x-test', correlation_id: binary(corr), application_properties: { unit: 'C', run: RUN }, reply_to: BASE + '/x/back' });
  const mm = await mq.next('AMQP send on ' + t2);
  const p = mm.packet.properties || {};
  d = JSON.stringify({ payload: mm.payload.toString('hex'), qos: mm.packet.qos, retain: mm.packet.retain, props: p });
  expect(mm.payload.equals(payload), 'payload differs: ' + d);
  expect(mm.packet.qos === 1, 'durable=true not delivered at QoS 1: ' + d);
  expect(!mm.packet.retain, 'live message has RETAIN=1: ' + d);
  expect(p.contentType === 'application/x-test', 'content-type not mapped: ' + d);
  expect(Buffer.isBuffer(p.correlationData) && p.correlationData.equals(corr), 'correlation-id not mapped: ' + d);
  expect(p.userProperties && p.userProperties.unit === 'C' && p.userProperties.run === RUN, 'application-properties not mapped: ' + d);
  expect(p.responseTopic === BASE + '/x/back', 'reply-to not mapped: ' + d);
  expect(p.messageExpiryInterval >= 50 && p.messageExpiryInterval <= 60, 'ttl not mapped to message expiry: ' + d);
}, { gatewayOnly: true, mqtt: true });

check('retained (AMQP x-opt-retain=true): live receiver unflagged, late receiver gets x-opt-retain=true', async (cs) => {
  const t = BASE + '/ret/amqp';
  const c = await cs.connect();
  const live = await receiver(c, t, TOPIC);
  const s = await sender(c, t, TOPIC);
  await send(s, { body: 'kept', message_annotations: { 'x-opt-retain': true } });
  let m = await next(live, 'live receiver on ' + t);
  expect(bodyBytes(m).toString() === 'kept', 'live body differs: ' + describe(m));
  expect(retainFlag(m) !== true, "live receiver's copy carries x-opt-retain (docs/architecture.md, decision 1): " + describe(m));
  const late = await receiver(c, t, TOPIC);
  m = await next(late, 'late receiver on ' + t);
  expect(bodyBytes(m).toString() === 'kept', 'late body differs: ' + describe(m));
  expect(retainFlag(m) === true, "late receiver's copy lacks x-opt-retain=true: " + describe(m));
  await send(s, { body: 'live-now' });
  m = await next(late, 'live message after the retained one on ' + t);
  expect(bodyBytes(m).toString() === 'live-now' && retainFlag(m) !== true, 'live message: ' + describe(m));
  await send(s, { body: rhea.message.data_section(Buffer.alloc(0)), message_annotations: { 'x-opt-retain': true } }); // clear
}, { gatewayOnly: true });

check('retained (MQTT retain=true): late AMQP receiver gets x-opt-retain=true', async (cs) => {
  const t = BASE + '/ret/mqtt';
  const mq = await mqttClient(cs, 'retainer');
  await new Promise((res, rej) => mq.publish(t, 'stored-state', { qos: 1, retain: true }, (err) => (err ? rej(err) : res())));
  const c = await cs.connect();
  const r = await receiver(c, t, TOPIC);
  const m = await next(r, 'retained message for late receiver on ' + t);
  expect(bodyBytes(m).toString() === 'stored-state', 'retained body differs: ' + describe(m));
  expect(retainFlag(m) === true, 'retained copy lacks x-opt-retain=true: ' + describe(m));
  await new Promise((res, rej) => mq.publish(t, '', { qos: 1, retain: true }, (err) => (err ? rej(err) : res()))); // clear
}, { gatewayOnly: true, mqtt: true });

check('MQTT 5 over WebSocket (mqtt.js): a 200 KB publish reaches a TCP subscriber; an AMQP send reaches the WebSocket subscriber', async (cs) => {
  const ws = await mqttClient(cs, 'ws', { ws: true });
  const tcp = await mqttClient(cs, 'ws-tcp');
  const t = BASE + '/ws/big';
  await new Promise((res, rej) => tcp.subscribe(t, { qos: 1 }, (err) => (err ? rej(err) : res())));
  const big = crypto.randomBytes(200 * 1024);
  await new Promise((res, rej) => ws.publish(t, big, { qos: 1 }, (err) => (err ? rej(err) : res())));
  const m = await tcp.next('200 KB publish over WebSocket on ' + t);
  expect(m.payload.equals(big), `payload differs: got ${m.payload.length} bytes`);
  const t2 = BASE + '/ws/a2m';
  await new Promise((res, rej) => ws.subscribe(t2, { qos: 1 }, (err) => (err ? rej(err) : res())));
  const c = await cs.connect();
  await send(await sender(c, t2, TOPIC), { body: 'to-ws' });
  const mm = await ws.next('AMQP send on ' + t2 + ' to the WebSocket subscriber');
  expect(mm.payload.toString() === 'to-ws', 'payload differs: ' + mm.payload.toString('hex'));
}, { gatewayOnly: true, mqtt: true });

// --- runner -----------------------------------------------------------------

// Runs selected (a list like checks; default: this file's checks).
async function main(selected = checks) {
  const results = [];
  for (const { name, fn, gatewayOnly, mqtt } of selected) {
    if (args.only && !name.includes(args.only)) continue;
    if (gatewayOnly && args.target !== 'gateway') {
      console.log(`SKIP ${CLIENT}: ${name} -- needs the gateway`);
      continue;
    }
    if (mqtt && !args.mqtt) {
      console.log(`SKIP ${CLIENT}: ${name} -- no --mqtt given`);
      continue;
    }
    const cs = new Conns();
    const t0 = Date.now();
    let status = 'PASS';
    let detail = '';
    try {
      await withTimeout(fn(cs), CHECK_TIMEOUT, 'check did not finish');
    } catch (e) {
      status = 'FAIL';
      detail = e instanceof CheckFailed ? e.message : `${e.name}: ${e.message}`;
      if (args.verbose && !(e instanceof CheckFailed)) console.error(e.stack);
    } finally {
      await cs.close();
    }
    results.push(status);
    console.log(`${status} ${CLIENT}: ${name}${detail ? ' -- ' + detail : ''} (${((Date.now() - t0) / 1000).toFixed(1)}s)`);
  }
  const failed = results.filter((s) => s === 'FAIL').length;
  console.log(`${CLIENT}: ${results.length - failed} passed, ${failed} failed`);
  return failed ? 1 : 0;
}

function run(selected) {
  main(selected).then(
    (code) => process.exit(code),
    (e) => {
      console.error(e);
      process.exit(1);
    }
  );
}

module.exports = { args, RUN, T, TOPIC, CheckFailed, expect, describe, bodyBytes, attach, sender, next, nothing, send, run };

if (require.main === module) run();
