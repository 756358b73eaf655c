// The admin API from the browser: every call carries the bearer token kept
// in this tab's sessionStorage; a 401 asks for one and tries again.

const KEY = 'tolsey.adminToken';

export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let asking = null; // one token dialog for every call that met a 401

function askToken(reason) {
  if (asking) return asking;
  const dlg = document.getElementById('token-dialog');
  const err = document.getElementById('token-error');
  const input = document.getElementById('token-input');
  err.hidden = !reason;
  err.textContent = reason || '';
  input.value = '';
  asking = new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      const t = input.value.trim();
      if (t) sessionStorage.setItem(KEY, t);
      asking = null;
      resolve();
    }, { once: true });
  });
  dlg.showModal();
  return asking;
}

export function hasToken() {
  return sessionStorage.getItem(KEY) !== null;
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
}

// api calls method path (with body as JSON), returning the parsed answer
// (null for 204); APIError carries the API's {"error": ...}.
export async function api(method, path, body) {
  for (;;) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    if (r.status === 401) {
      // Only the token this request carried: a newer one entered while
      // it was on its way is not dropped for its answer.
      if (token && sessionStorage.getItem(KEY) === token) forgetToken();
      await askToken(token ? 'That token was refused.' : '');
      continue;
    }
    const text = await r.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!r.ok) {
      throw new APIError(r.status, (data && data.error) || text.trim() || r.statusText);
    }
    return data;
  }
}

export const get = (path) => api('GET', path);

// q builds a query string from the non-empty values of params.
export function q(params) {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') s.set(k, String(v));
  }
  const out = s.toString();
  return out ? '?' + out : '';
}

// latest returns a ticket machine for one repeated call (a list's load):
// calling it before the call gives a function that says, once the answer
// has come, whether no later call was started meanwhile. A slow answer to an
// older query (the previous search text, an earlier poll) is then dropped
// instead of replacing a newer one.
export function latest() {
  let n = 0;
  return () => {
    const mine = ++n;
    return () => mine === n;
  };
}
