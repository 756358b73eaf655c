#!/usr/bin/env node
// Security checks with rhea (docs/security.md): SASL PLAIN over TLS against
// the gateway's amqps port. Run by test/e2e/security.sh, which starts the
// gateway with a users file and amqp.tls; uses rhea_checks.js's helpers and
// runner. Prints one PASS/FAIL line per check; exits 1 if any failed.
//
//   node rhea_security.js --amqp 127.0.0.1:5671 --ca ca.pem --user alice --password PW
'use strict';

const fs = require('fs');
const { args, RUN, CheckFailed, expect, bodyBytes, attach, sender, next, send, run } = require('./rhea_checks.js');

if (!args.ca) {
  console.error('rhea_security.js: --ca FILE (the CA of the gateway certificate) is required');
  process.exit(2);
}
const tls = () => ({ transport: 'tls', ca: [fs.readFileSync(args.ca)], servername: 'localhost' });

const checks = [];
function check(name, fn) {
  checks.push({ name, fn, gatewayOnly: true, mqtt: false });
}

check('SASL PLAIN over TLS: connects, round trip on devices/alice/...', async (cs) => {
  const c = await cs.connect({ ...tls(), username: args.user, password: args.password });
  expect(c.socket && c.socket.encrypted && c.socket.authorized, `not a verified TLS connection (authorizationError ${c.socket && c.socket.authorizationError})`);
  const address = `devices/${args.user}/${RUN}/rhea`;
  const r = await attach(c, 'receiver', { source: { address }, credit_window: 10, autoaccept: true });
  const body = 'rhea-tls-' + RUN;
  await send(await sender(c, address), { body });
  const m = await next(r, 'the round trip on ' + address);
  expect(bodyBytes(m).toString() === body, `got ${bodyBytes(m).toString()}`);
});

check('SASL PLAIN over TLS, wrong password and unknown user: amqp:unauthorized-access', async (cs) => {
  for (const [u, p] of [[args.user, args.password + '-wrong'], ['nobody-' + RUN, args.password]]) {
    let c;
    try {
      c = await cs.connect({ ...tls(), username: u, password: p });
    } catch (e) {
      expect(e.condition === 'amqp:unauthorized-access', `${u}: refused, but not as an authentication failure: ${e.message}`);
      continue;
    }
    throw new CheckFailed(`${u} with a bad password: connection opened (remote container ${c.remote.open.container_id})`);
  }
});

check('ACL over TLS: a sender to devices/bob/... is refused with amqp:unauthorized-access', async (cs) => {
  const c = await cs.connect({ ...tls(), username: args.user, password: args.password });
  try {
    await sender(c, `devices/bob/${RUN}`);
  } catch (e) {
    expect(e.condition === 'amqp:unauthorized-access', `refused with ${e.condition}: ${e.message}`);
    return;
  }
  throw new CheckFailed('the attach to devices/bob/... succeeded');
});

run(checks);
