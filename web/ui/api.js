// API client: JSON and NDJSON reads with the API's {"error": "…"} shape.

export class ApiError extends Error {
  constructor(status, message, { missing = false, detail = '' } = {}) {
    super(message);
    this.status = status;
    // detail: the server's own words, without the path and status.
    this.detail = detail || message;
    // missing: the endpoint does not exist on this server (a 404 that is
    // not one of the API's JSON errors), e.g. an older auditlens.
    this.missing = missing;
  }
}

async function failure(res, url) {
  const text = await res.text().catch(() => '');
  let msg = '';
  let isJSON = false;
  try {
    const j = JSON.parse(text);
    if (j && typeof j.error === 'string') {
      msg = j.error;
      isJSON = true;
    }
  } catch (_) { /* not JSON */ }
  if (!msg) msg = (text.trim().slice(0, 300) || res.statusText || 'request failed');
  const path = url.split('?')[0];
  return new ApiError(res.status, `${path}: ${res.status} ${msg}`.trim(), {
    missing: res.status === 404 && !isJSON, detail: msg,
  });
}

async function request(url, signal) {
  let res;
  try {
    res = await fetch(url, { signal, headers: { Accept: 'application/json, application/x-ndjson' } });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, `${url.split('?')[0]}: network error: ${e.message}`);
  }
  if (!res.ok) throw await failure(res, url);
  return res;
}

export async function getJSON(url, signal) {
  const res = await request(url, signal);
  return res.json();
}

// getNDJSON returns {lines, error}: the non-empty lines of the body, and
// the message of a trailing {"error": …} line (the stream broke midway).
export async function getNDJSON(url, signal) {
  const res = await request(url, signal);
  const text = await res.text();
  const lines = text.split('\n');
  while (lines.length && lines[lines.length - 1] === '') lines.pop();
  let error = '';
  if (lines.length) {
    const last = lines[lines.length - 1];
    if (last.startsWith('{"error"')) {
      try {
        const j = JSON.parse(last);
        if (j && Object.keys(j).length === 1 && typeof j.error === 'string') {
          error = j.error;
          lines.pop();
        }
      } catch (_) { /* a real output */ }
    }
  }
  return { lines, error };
}

export function api(path, params) {
  const q = params ? params.toString() : '';
  return '/api/v1' + path + (q ? '?' + q : '');
}

// send makes a JSON request that changes something (sign in, sign out).
// The session cookie is HttpOnly: scripts never see it, the browser sends
// it with every request to this server, links opened in new tabs included.
async function send(method, url, body) {
  let res;
  try {
    res = await fetch(url, {
      method,
      headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, `${url}: network error: ${e.message}`);
  }
  if (!res.ok) throw await failure(res, url);
  return res.json();
}

// session tells whether the read API wants credentials, how a browser may
// sign in and whether this one has: {auth: "none"|"token", signed_in, via,
// user, methods: ["token", "oidc"], provider}.
export const session = () => getJSON('/api/v1/session');
export const signIn = (token) => send('POST', '/api/v1/session', { token });
export const signOut = () => send('DELETE', '/api/v1/session');
