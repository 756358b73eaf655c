// The console's entry: a hash router over the pages, the token, the
// stats sampler. Each page's render(main, params) may return a function
// that stops what it started (timers) when another page opens.

import { forgetToken, hasToken } from './api.js';
import * as stats from './stats.js';
import overview from './pages/overview.js';
import connections from './pages/connections.js';
import sessions from './pages/sessions.js';
import topics from './pages/topics.js';
import retained from './pages/retained.js';
import queues from './pages/queues.js';
import bridges from './pages/bridges.js';
import publish from './pages/publish.js';

const pages = { overview, connections, sessions, topics, retained, queues, bridges, publish };
let stop = null;

function route() {
  const [name, query] = location.hash.replace(/^#\/?/, '').split('?');
  const page = pages[name] ? name : 'overview';
  const params = new URLSearchParams(query || '');
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.getAttribute('href') === '#/' + page);
  }
  if (stop) stop();
  stop = null;
  const main = document.getElementById('page');
  main.replaceChildren();
  main.dataset.page = page;
  document.title = `${page[0].toUpperCase()}${page.slice(1)} · Tolsey console`;
  const r = pages[page](main, params);
  if (typeof r === 'function') stop = r;
}

window.addEventListener('hashchange', route);
document.getElementById('logout').addEventListener('click', () => {
  forgetToken();
  location.reload();
});
stats.onSample(() => {
  const l = stats.latest();
  document.getElementById('logout').hidden = !hasToken();
  if (l) document.getElementById('node').textContent = `node ${l.s.node} · ${l.s.version}`;
});
stats.start();
route();
