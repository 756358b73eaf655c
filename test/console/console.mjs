// The console's browser test: Debian's chromium, driven by playwright-core,
// opens each page of the web console against the gateway that
// console_test.go started (with real clients) and checks what it shows.
// Every step waits for what it expects, with a deadline; none sleeps to
// pass. Screenshots go to $CONSOLE_SHOTS; with $CONSOLE_README_SHOT, the
// overview under traffic is written there too (docs/console.png).

import { chromium } from 'playwright-core';
import path from 'node:path';

const url = process.env.CONSOLE_URL;
const token = process.env.CONSOLE_TOKEN;
const shots = process.env.CONSOLE_SHOTS;
const readme = process.env.CONSOLE_README_SHOT;
const TIMEOUT = 20_000;

function step(name) {
  console.log(`- ${name}`);
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
const problems = [];
try {
  const page = await browser.newPage({ viewport: { width: 1360, height: 860 } });
  page.setDefaultTimeout(TIMEOUT);
  page.on('pageerror', (e) => problems.push('uncaught: ' + e.message));
  page.on('console', (m) => {
    // A refused or missing API call is logged by the browser itself; the
    // page shows those. Anything else logged as an error is a fault (a CSP
    // violation, a module that failed to load).
    if (m.type() === 'error' && !/status of (401|404)/.test(m.text())) problems.push('console: ' + m.text());
  });
  const shot = (name) => page.screenshot({ path: path.join(shots, name + '.png'), fullPage: true });
  const text = (sel) => page.locator(sel).innerText();
  // waitText waits until the element's text matches re.
  const waitText = (sel, re) => page.waitForFunction(([s, src, flags]) => {
    const el = document.querySelector(s);
    return el && new RegExp(src, flags).test(el.textContent);
  }, [sel, re.source, re.flags]);
  const confirmDialog = async (re) => {
    await page.locator('#confirm-dialog[open]').waitFor();
    const t = await text('#confirm-text');
    if (!re.test(t)) throw new Error(`the confirmation says "${t}", want ${re}`);
    await page.click('#confirm-ok');
    await page.locator('#confirm-dialog[open]').waitFor({ state: 'detached' }).catch(() => {});
  };

  step('the assets load without a token; the API asks for one: a wrong token is refused, the right one accepted');
  await page.goto(url + '?interval=1000#/overview');
  await page.locator('#token-dialog[open]').waitFor();
  await page.fill('#token-input', 'not-the-token');
  await page.click('#token-ok');
  await waitText('#token-error', /refused/);
  await page.fill('#token-input', token);
  await page.click('#token-ok');

  step('overview: connections by protocol, retained, queues, store; message rates non-zero');
  await waitText('#card-connections .sub', /MQTT [1-9].*AMQP [1-9]/);
  await waitText('#card-retained .value', /^[1-9]/);
  await waitText('#card-queues .sub', /^[1-9]/);
  await waitText('#card-store', /embedded\s*ready/);
  await waitText('#card-in .value', /^(?!0\/s)[0-9.,]+\/s/);
  await waitText('#card-out .value', /^(?!0\/s)[0-9.,]+\/s/);
  await page.locator('#chart-rates svg path.line').first().waitFor();
  console.log('  ' + (await text('#overview .cards')).replace(/\s+/g, ' '));
  await shot('overview');

  if (readme) {
    step('README screenshot: the overview after a minute of traffic, before the steps below change it');
    await page.setViewportSize({ width: 1280, height: 720 });
    await page.waitForTimeout(60_000); // history for the charts, not a wait for a condition
    await page.screenshot({ path: readme });
    await page.setViewportSize({ width: 1360, height: 860 });
  }

  step('topics and subscriptions: the feed\'s topics, console-dev\'s subscription');
  await page.goto(url + '#/topics');
  await page.locator('#topic-table tr[data-id="sensors/room1/temp"]').waitFor();
  await page.fill('#sub-client', 'console-dev');
  await page.waitForFunction(() => document.querySelectorAll('#sub-table tbody tr').length === 1); // the search narrowed it
  await page.locator('#sub-table td', { hasText: 'devices/console-dev/cmd/#' }).waitFor();
  await shot('topics');

  step('a slow answer to an older search does not replace the newer one\'s');
  // The unfiltered listing (every subscription) is held back 2 s; the
  // search typed after it is answered at once, then the old answer comes.
  const slow = (u) => /\/api\/v1\/subscriptions\?/.test(u.href) && !u.searchParams.get('clientId');
  await page.route(slow, async (r) => { await new Promise((res) => setTimeout(res, 2000)); await r.continue().catch(() => {}); });
  const older = page.waitForResponse((r) => slow(new URL(r.url())));
  await page.fill('#sub-client', '');
  await page.waitForRequest((r) => slow(new URL(r.url())));
  await page.fill('#sub-client', 'console-dev');
  await older; // the old answer has arrived
  await page.evaluate(() => new Promise((res) => requestAnimationFrame(() => setTimeout(res, 50)))); // and been handled
  const shown = await page.evaluate(() => document.querySelectorAll('#sub-table tbody tr').length);
  if (shown !== 1) throw new Error(`the subscriptions table shows ${shown} rows after a stale answer, want the newer search's 1`);
  await page.unroute(slow);

  step('connections: search finds the paho client, its detail shows its filter, Disconnect ends it; an AMQP connection\'s detail shows its link');
  await page.goto(url + '#/connections');
  await page.fill('#conn-search', 'console-d');
  const row = page.locator('#conn-table tr[data-id="mqtt:console-dev"]');
  await row.waitFor();
  await page.waitForFunction(() => document.querySelectorAll('#conn-table tbody tr').length === 1); // the search narrowed it
  await row.click();
  await page.locator('#conn-panel', { hasText: 'devices/console-dev/cmd/#' }).waitFor();
  await shot('connection');
  await page.click('#conn-disconnect');
  await confirmDialog(/Disconnect mqtt:console-dev/);
  await row.waitFor({ state: 'detached' });
  await page.fill('#conn-search', 'console-amqp');
  await page.waitForFunction(() => document.querySelectorAll('#conn-table tbody tr').length === 1);
  await page.click('#conn-table tbody tr');
  await page.locator('#conn-panel', { hasText: 'console/amqp/#' }).waitFor(); // its link

  step('sessions: the session kept for console-sleeper, its subscription and held message; Delete ends it');
  await page.goto(url + '#/sessions');
  await page.fill('#sess-search', 'console-sleeper');
  const sess = page.locator('#sess-table tr[data-id="console-sleeper"]');
  await sess.waitFor();
  await page.waitForFunction(() => document.querySelectorAll('#sess-table tbody tr').length === 1);
  const st = (await sess.innerText()).replace(/\s+/g, ' ');
  if (!/disconnected yes alerts\/# 1 /.test(st)) throw new Error(`the session's row says "${st}"`);
  await shot('sessions');
  await sess.locator('.sess-delete').click();
  await confirmDialog(/Delete the session of console-sleeper\? The session ends: its 1 subscriptions and 1 held messages/);
  await sess.waitFor({ state: 'detached' });

  step('retained: find by filter, view as JSON and hex, page by topic, delete by filter after a confirmation with the count');
  await page.goto(url + '#/retained');
  await page.fill('#ret-filter', 'sensors/#');
  await page.click('#ret-search');
  await waitText('#ret-count', /^2 retained messages/);
  await page.click('#ret-table tr[data-id="sensors/room1/temp"]');
  await waitText('#ret-payload', /"celsius": 21\.5/); // application/json opens as JSON, indented
  await page.click('#ret-as-hex');
  await waitText('#ret-payload', /^00000000  7b 22 63 65/);
  await page.click('#ret-table tr[data-id="sensors/room1/raw"]');
  await waitText('#ret-payload', /^00000000  00 01 02 fe ff/); // not UTF-8: hex
  await shot('retained');
  // Paged in topic order (GET /api/v1/retained?after=): a page of one.
  await page.goto(url + '#/retained?filter=sensors%2F%23&limit=1');
  await waitText('#ret-count', /^1 retained message, more may follow/);
  await page.waitForSelector('#ret-table tr[data-id="sensors/room1/raw"]');
  await page.click('#ret-next');
  await waitText('#ret-count', /^After sensors\/room1\/raw: 1 retained message/);
  await page.waitForSelector('#ret-table tr[data-id="sensors/room1/temp"]');
  await page.click('#ret-next');
  await waitText('#ret-count', /^After sensors\/room1\/temp: 0 retained messages/);
  await page.click('#ret-first');
  await waitText('#ret-count', /^1 retained message, more may follow/);
  await page.click('#ret-delete-filter');
  await confirmDialog(/Delete 2 retained messages matching “sensors\/#”/);
  await waitText('#flash', /Deleted 2 retained messages/);
  await waitText('#ret-list', /No retained message matches/);

  step('queues: depth 3, browse, a publish from the form makes it 4, purge makes it 0; create and delete a queue');
  await page.goto(url + '#/queues');
  const orders = '#queue-table tr[data-id="orders"]';
  await waitText(orders + ' .depth', /^3$/);
  await page.click(orders + ' .q-browse');
  await waitText('#queue-browse h2', /orders: 3 messages/);
  await page.goto(url + '#/publish');
  await page.fill('#pub-topic', 'orders/new');
  await page.fill('#pub-payload', '{"order":"from the browser"}');
  await page.selectOption('#pub-qos', '1');
  await page.click('#pub-send');
  await waitText('#pub-result', /Published to orders\/new/);
  await page.goto(url + '#/queues');
  await waitText(orders + ' .depth', /^4$/);
  await shot('queues');
  await page.click(orders + ' .q-purge');
  await confirmDialog(/Purge queue orders\? Its 4 stored messages/);
  await waitText(orders + ' .depth', /^0$/);
  await page.fill('#queue-name', 'browser-q');
  await page.fill('#queue-subs', 'browser/#');
  await page.click('#queue-create button[type=submit]');
  await page.locator('#queue-table tr[data-id="browser-q"]').waitFor();
  await page.click('#queue-table tr[data-id="browser-q"] .q-delete');
  await confirmDialog(/Delete queue browser-q/);
  await page.locator('#queue-table tr[data-id="browser-q"]').waitFor({ state: 'detached' });

  step('publish: a message the console-listener subscriber gets (checked by console_test.go)');
  await page.goto(url + '#/publish');
  await page.fill('#pub-topic', 'console/greeting');
  await page.fill('#pub-payload', 'hello from the browser');
  await page.click('#pub-send');
  await waitText('#pub-result', /Published to console\/greeting: [1-9][0-9]* subscribers? matched/);
  await shot('publish');

  step('bridges and cluster: the NATS bridge connected, its rule carrying the sensors out (counted); no cluster, said so');
  await page.goto(url + '#/bridges');
  await waitText('#bridge-list', /connected/);
  await waitText('#bridge-list', /sensors\/#/);
  await waitText('#bridge-list', /iot\.sensors\.>/);
  await waitText('#bridge-list', /nats:\/\/127\.0\.0\.1:\d+/);
  // The rule's Out column, the fifth: the steady traffic goes through it.
  await page.waitForFunction(() => {
    const row = [...document.querySelectorAll('#bridge-list tr')].find((r) => r.textContent.includes('sensors/#'));
    return row && Number((row.cells[4]?.textContent || '0').replace(/[^0-9]/g, '')) > 0;
  });
  await waitText('#cluster', /Node edge-1: not in a cluster/);
  await shot('bridges');

} catch (e) {
  problems.push(String(e && e.stack ? e.stack : e));
  await browser.contexts()[0]?.pages()[0]?.screenshot({ path: path.join(shots, 'failure.png'), fullPage: true }).catch(() => {});
} finally {
  await browser.close();
}
if (problems.length) {
  console.log('the page reported:\n' + problems.join('\n'));
  process.exit(1);
}
console.log('ok');
