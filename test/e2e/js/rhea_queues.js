#!/usr/bin/env node
// Reference-client checks of the gateway's queues (docs/queues.md, "AMQP")
// with rhea. Run by test/e2e/amqp_clients.sh against a running gateway, next
// to rhea_checks.js, whose helpers and runner it uses. Each check declares
// its own queue through the admin API (PUT /api/v1/queues/{name}), so
// --admin is required, and deletes it at the end. Prints one PASS/FAIL line
// per check; exits 1 if any check failed.
//
//   node rhea_queues.js --amqp 127.0.0.1:5672 --admin 127.0.0.1:8088
'use strict';

const { args, RUN, T, TOPIC, CheckFailed, expect, describe, bodyBytes, attach, sender, next, nothing, send, run } = require('./rhea_checks.js');

const checks = [];
function check(name, fn) {
  checks.push({ name, fn, gatewayOnly: true, mqtt: false });
}

// --- admin API ----------------------------------------------------------------

// One admin API request on queue name; resolves with the decoded answer
// (null when empty).
async function admin(method, name, body) {
  if (!args.admin) throw new CheckFailed('no --admin HOST:PORT given: the queue checks declare their queues through the admin API');
  const url = `http://${args.admin}/api/v1/queues/${encodeURIComponent(name)}`;
  let res;
  try {
    res = await fetch(url, {
      method,
      headers: { 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(T),
    });
  } catch (e) {
    throw new CheckFailed(`${method} ${url}: ${e.message}`);
  }
  const text = await res.text();
  if (!res.ok) throw new CheckFailed(`${method} ${url}: HTTP ${res.status}: ${text.trim()}`);
  return text.trim() ? JSON.parse(text) : null;
}

// A queue declared for one check (PUT) and deleted after it (DELETE).
async function declare(cs, tag, config) {
  const name = `js-${RUN}-${tag}`;
  await admin('PUT', name, config);
  cs.cleanups.push(() =>
    admin('DELETE', name).catch((e) => console.log('warning: ' + e.message))
  );
  return {
    name,
    addr: 'queue://' + name,
    view: () => admin('GET', name),
    // Polls the admin API until the queue holds nothing (stored or in flight).
    async waitEmpty(what) {
      const deadline = Date.now() + T;
      for (;;) {
        const v = await admin('GET', name);
        if (v.messages === 0 && v.inFlight === 0) return;
        if (Date.now() > deadline) {
          throw new CheckFailed(`${what}: queue ${name} not empty after ${T} ms: messages=${v.messages} inFlight=${v.inFlight} counters=${JSON.stringify(v.counters)}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

// A receiver that leaves each delivery unsettled for the check to settle
// (settle below).
const consumer = (conn, address, extra = {}) => attach(conn, 'receiver', { source: { address, ...extra }, credit_window: 20, autoaccept: false });

// The header's defaults (AMQP 1.0 3.2.1): an absent delivery-count is 0, an
// absent first-acquirer false; rhea leaves absent fields undefined.
const count = (m) => m.delivery_count ?? 0;
const first = (m) => m.first_acquirer ?? false;
// Settles m's delivery with outcome ('accept', 'release', 'modified', with
// args) and lets rhea write the disposition before the next one: rhea 3.0.5
// (lib/session.js, write_dispositions) joins consecutive deliveries settled
// in one tick into a single disposition range with the first one's state
// (it compares states only once the range holds two), so accept(m0) then
// release(m1) in the same tick would accept both.
async function settle(m, outcome, ...a) {
  m.delivery[outcome](...a);
  await new Promise((r) => setImmediate(r));
}

const header = (m) => `delivery_count=${count(m)} first_acquirer=${first(m)}`;
const text = (m) => bodyBytes(m).toString();

// --- checks -------------------------------------------------------------------

check('queue: 3 sends accepted, received in order; released comes back (first-acquirer false, delivery-count unchanged), modified{delivery-failed} counts; the queue ends empty', async (cs) => {
  const q = await declare(cs, 'order', {});
  const c = await cs.connect();
  const s = await sender(c, q.addr);
  for (let i = 0; i < 3; i++) await send(s, { body: 'm' + i, durable: true }); // unsettled: accepted once stored
  const r = await consumer(c, q.addr);
  for (const [i, outcome] of [[0, 'accept'], [1, 'release']]) {
    const m = await next(r, `message ${i} of 3 from ${q.addr}`);
    expect(text(m) === 'm' + i, `message ${i} out of order: ${describe(m)}`);
    expect(first(m) === true && count(m) === 0, `first delivery of m${i}: ${header(m)}, want delivery_count=0 first_acquirer=true`);
    expect(!m.delivery.remote_settled, `m${i} sent settled: a queue consumer's deliveries wait for its outcome`);
    await settle(m, outcome);
  }
  // m2 was in flight already when m1 was released, so the two may come
  // either way round; m2 is accepted, the released m1's return is
  // modified{delivery-failed}
  const got = [];
  while (got.length < 2) {
    const m = await next(r, `m2 and the released m1 (got ${got})`);
    got.push(text(m));
    if (text(m) === 'm2') {
      expect(first(m) === true && count(m) === 0, 'm2: ' + header(m));
      await settle(m, 'accept');
    } else if (text(m) === 'm1') {
      expect(first(m) === false && count(m) === 0, `m1 after released: ${header(m)}, want delivery_count=0 first_acquirer=false`);
      await settle(m, 'modified', { delivery_failed: true });
    } else {
      throw new CheckFailed('unexpected message after the release: ' + describe(m));
    }
  }
  expect(JSON.stringify([...got].sort()) === '["m1","m2"]', `after releasing m1 got ${got}, want m1 and m2`);
  const m = await next(r, 'm1 after modified{delivery-failed}');
  expect(text(m) === 'm1', 'want m1 again after modified: ' + describe(m));
  expect(first(m) === false && count(m) === 1, `m1 after modified{delivery-failed=true}: ${header(m)}, want delivery_count=1 first_acquirer=false`);
  await settle(m, 'accept');
  await nothing(r, `every message of ${q.addr} was accepted`);
  await q.waitEmpty('after accepting all three');
});

check('queue: a topic publish a queue subscribes to (clients/node/<run>/#) lands in the queue', async (cs) => {
  const prefix = 'clients/node/' + RUN;
  const q = await declare(cs, 'subs', { subscriptions: [prefix + '/#'] });
  const c = await cs.connect();
  await send(await sender(c, prefix + '/x', TOPIC), { body: 'via-topic', durable: true });
  await send(await sender(c, 'clients/node/other-' + RUN, TOPIC), { body: 'not-for-the-queue', durable: true });
  const r = await consumer(c, q.addr);
  const m = await next(r, `topic publish on ${prefix}/x from ${q.addr}`);
  expect(text(m) === 'via-topic', 'body differs: ' + describe(m));
  expect([prefix + '/x', 'topic://' + prefix + '/x'].includes(m.to), 'a message stored through a subscription keeps its topic: ' + describe(m));
  await settle(m, 'accept');
  await nothing(r, `only ${prefix}/# is subscribed`);
  await q.waitEmpty('after accepting the topic publish');
});

check('queue: a full queue (maxMessages 1) rejects the second send with amqp:resource-limit-exceeded', async (cs) => {
  const q = await declare(cs, 'full', { maxMessages: 1 });
  const c = await cs.connect();
  const s = await sender(c, q.addr);
  await send(s, { body: 'fits', durable: true });
  const res = await send(s, { body: 'too-many', durable: true }, 'rejected');
  const err = res.delivery.remote_state && res.delivery.remote_state.error;
  expect(err && err.condition === 'amqp:resource-limit-exceeded', `rejected with ${JSON.stringify(err)}, want condition amqp:resource-limit-exceeded`);
  expect((err.description || '').includes(q.name), `the description ${JSON.stringify(err.description)} does not name the queue ${q.name}`);
  const v = await q.view();
  expect(v.messages === 1, `full queue holds ${v.messages} messages, want 1`);
  const r = await consumer(c, q.addr);
  const m = await next(r, 'the one message of the full queue');
  expect(text(m) === 'fits', 'want the message that fitted: ' + describe(m));
  await settle(m, 'accept');
  await nothing(r, 'the refused message must not be stored');
  await q.waitEmpty('after taking the one message');
  await send(s, { body: 'room-again', durable: true }); // room again once consumed
});

check('queue: a browser (distribution-mode copy) sees the messages; a consumer afterwards gets them all', async (cs) => {
  const q = await declare(cs, 'browse', {});
  const c = await cs.connect();
  const s = await sender(c, q.addr);
  const bodies = ['b0', 'b1', 'b2'];
  for (const b of bodies) await send(s, { body: b, durable: true });
  const br = await consumer(c, q.addr, { distribution_mode: 'copy' });
  const mode = br.remote.attach.source.distribution_mode;
  expect(mode === 'copy', `the attach answer says distribution-mode ${JSON.stringify(mode)}, want copy`);
  const seen = [];
  for (let i = 0; i < bodies.length; i++) {
    const m = await next(br, `browsing ${q.addr} (seen ${seen})`);
    seen.push(text(m));
    expect(m.delivery.remote_settled, 'browsed message sent unsettled: ' + describe(m));
  }
  expect(JSON.stringify(seen) === JSON.stringify(bodies), `browser saw ${seen}, want ${bodies}`);
  await nothing(br, 'the browser sees each message once');
  const v = await q.view();
  expect(v.messages === 3, `after browsing the queue holds ${v.messages} messages, want 3`);
  br.close();
  const r = await consumer(c, q.addr);
  const got = [];
  for (let i = 0; i < bodies.length; i++) {
    const m = await next(r, `consuming ${q.addr} after the browser (got ${got})`);
    got.push(text(m));
    await settle(m, 'accept');
  }
  expect(JSON.stringify(got) === JSON.stringify(bodies), `consumer after the browser got ${got}, want ${bodies}`);
  await nothing(r, 'three messages only');
  await q.waitEmpty('after consuming what was browsed');
});

check('queue: exclusive: the first receiver gets everything, the second stands by and takes over (with the unsettled message) when the first leaves', async (cs) => {
  const q = await declare(cs, 'excl', { access: 'exclusive' });
  const c = await cs.connect();
  const s = await sender(c, q.addr);
  const active = await consumer(await cs.connect(), q.addr);
  const standby = await consumer(await cs.connect(), q.addr);
  for (const b of ['x0', 'x1']) await send(s, { body: b, durable: true });
  let m = await next(active, 'x0 on the active consumer of ' + q.addr);
  expect(text(m) === 'x0', 'active consumer: want x0, got ' + describe(m));
  await settle(m, 'accept');
  m = await next(active, 'x1 on the active consumer');
  expect(text(m) === 'x1', 'active consumer: want x1, got ' + describe(m));
  await nothing(standby, 'the standby of an exclusive queue gets nothing while the first is attached');
  active.close(); // x1 unsettled: given back, to the standby
  m = await next(standby, 'x1 on the standby after the active consumer left');
  expect(text(m) === 'x1', `standby took over with ${describe(m)}, want x1`);
  expect(first(m) === false, 'x1 was delivered before: ' + header(m));
  await settle(m, 'accept');
  await send(s, { body: 'x2', durable: true });
  m = await next(standby, 'x2 on the consumer that took over');
  expect(text(m) === 'x2', 'want x2, got ' + describe(m));
  await settle(m, 'accept');
  await nothing(standby, 'three messages only');
  await q.waitEmpty('after the standby took everything');
});

check('queue: rejected and modified{delivery-failed} past maxDeliveries go to the dead-letter queue', async (cs) => {
  const dlq = await declare(cs, 'dlq', {});
  const q = await declare(cs, 'dl', { maxDeliveries: 2, deadLetter: dlq.name });
  const c = await cs.connect();
  const s = await sender(c, q.addr);
  await send(s, { body: 'rejected', durable: true });
  await send(s, { body: 'poison', durable: true });
  const r = await consumer(c, q.addr);
  let m = await next(r, 'the message to reject');
  expect(text(m) === 'rejected', "want 'rejected' first, got " + describe(m));
  await settle(m, 'reject');
  for (let i = 0; i < 2; i++) {
    m = await next(r, `poison, delivery ${i + 1} of 2`);
    expect(text(m) === 'poison', 'want poison, got ' + describe(m));
    expect(count(m) === i, `poison delivery ${i + 1}: ${header(m)}`);
    await settle(m, 'modified', { delivery_failed: true });
  }
  await nothing(r, 'poison failed maxDeliveries (2) times: it must not come again');
  await q.waitEmpty('after the rejection and the failed deliveries');
  const counters = (await q.view()).counters;
  expect(counters.deadLettered === 2, `queue counters ${JSON.stringify(counters)}, want deadLettered 2`);
  const d = await consumer(c, dlq.addr);
  const got = [];
  for (let i = 0; i < 2; i++) {
    const dm = await next(d, `dead letter ${i + 1} of 2`);
    got.push(text(dm));
    await settle(dm, 'accept');
  }
  got.sort();
  expect(JSON.stringify(got) === JSON.stringify(['poison', 'rejected']), `the dead-letter queue holds ${got}, want poison and rejected`);
});

run(checks);
