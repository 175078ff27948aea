// DOM helpers. Everything that comes from the API is attacker-controlled
// (a user agent can be "<img src=x onerror=…>"), so the UI never parses
// data as HTML: h() and s() create elements, and strings become text nodes.

const SVG_NS = 'http://www.w3.org/2000/svg';

// safeHref accepts only links to our own paths ("/…", not "//host"), so no
// data can ever become a javascript: or off-site URL.
function safeHref(v) {
  const s = String(v);
  if (!s.startsWith('/') || s.startsWith('//') || s.startsWith('/\\')) {
    throw new Error('refusing href not on this site: ' + s.slice(0, 40));
  }
  return s;
}

function setAttrs(el, attrs) {
  if (!attrs) return;
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) {
      // Event handlers are functions only: never strings (attributes).
      if (typeof v !== 'function') throw new Error('handler ' + k + ' must be a function');
      el.addEventListener(k.slice(2).toLowerCase(), v);
    } else if (k === 'class') {
      el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    } else if (k === 'href' || k === 'src' || k === 'action' || k === 'formaction') {
      el.setAttribute(k, safeHref(v));
    } else if (k === 'style') {
      throw new Error('use classes or el.style (CSP forbids style attributes)');
    } else if (k === 'dataset') {
      for (const [dk, dv] of Object.entries(v)) if (dv !== undefined && dv !== null) el.dataset[dk] = String(dv);
    } else if (k === 'value' && 'value' in el) {
      el.value = String(v);
    } else if (k === 'checked' || k === 'selected' || k === 'disabled' || k === 'hidden' || k === 'open') {
      el[k] = Boolean(v);
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false || c === true) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// h builds an HTML element: h('a', {href: link('/x', {a: 1})}, 'text').
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

// s builds an SVG element.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// link builds a URL on our own site from a path and query parameters
// (an object of strings or arrays, or URLSearchParams); empty values are
// dropped.
export function link(path, params) {
  let qs;
  if (params instanceof URLSearchParams) qs = params;
  else {
    qs = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (Array.isArray(v)) v.forEach((x) => x !== '' && x != null && qs.append(k, x));
      else if (v !== '' && v !== null && v !== undefined) qs.append(k, v);
    }
  }
  const q = qs.toString();
  return safeHref(path) + (q ? '?' + q : '');
}

// ---- time formatting: the UI shows UTC and says so ------------------------

const pad = (n, w = 2) => String(n).padStart(w, '0');

export function parseTime(v) {
  if (v === null || v === undefined || v === '') return NaN;
  if (typeof v === 'number') return v;
  return Date.parse(v);
}

// fmtUTC formats a time as "2026-11-29 14:19:26.241" (UTC).
export function fmtUTC(v, { ms = true, date = true } = {}) {
  const t = parseTime(v);
  if (!Number.isFinite(t)) return '—';
  const d = new Date(t);
  let out = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
  if (ms) out += '.' + pad(d.getUTCMilliseconds(), 3);
  if (date) out = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` + out;
  return out;
}

export function fmtLocal(v) {
  const t = parseTime(v);
  if (!Number.isFinite(t)) return '';
  return new Date(t).toLocaleString(undefined, { hour12: false, timeZoneName: 'short' });
}

// timeTitle is the tooltip for a time cell: exact UTC, and local time.
export function timeTitle(v) {
  return (typeof v === 'string' ? v : new Date(parseTime(v)).toISOString()) + '  (local: ' + fmtLocal(v) + ')';
}

export function fmtDuration(ms) {
  if (!Number.isFinite(ms)) return '—';
  const a = Math.abs(ms);
  if (a < 1000) return Math.round(ms) + ' ms';
  if (a < 60e3) return (ms / 1000).toFixed(a < 10e3 ? 2 : 1).replace(/\.?0+$/, '') + ' s';
  if (a < 3600e3) return Math.floor(a / 60e3) + ' min ' + Math.round((a % 60e3) / 1000) + ' s';
  if (a < 86400e3) return Math.floor(a / 3600e3) + ' h ' + Math.round((a % 3600e3) / 60e3) + ' min';
  return Math.floor(a / 86400e3) + ' d ' + Math.round((a % 86400e3) / 3600e3) + ' h';
}

// isoParam formats a time for since/until: RFC 3339, no needless ".000".
export function isoParam(t) {
  return new Date(t).toISOString().replace('.000Z', 'Z');
}

export function fmtNum(n) {
  return Number(n || 0).toLocaleString('en-US');
}

// shortUA trims a user agent to its product/version for compact labels.
export function shortUA(ua) {
  if (!ua) return '';
  const m = /^([^\s(]+)/.exec(ua);
  return m ? m[1] : ua;
}

export function severityBadge(sev) {
  const v = ['critical', 'warning', 'info'].includes(sev) ? sev : 'info';
  return h('span', { class: ['sev', 'sev-' + v] }, String(sev || 'info'));
}

export function codeClass(code) {
  const c = Number(code);
  if (!c) return 'code-none';
  if (c >= 500) return 'code-5xx';
  if (c >= 400) return 'code-4xx';
  if (c >= 300) return 'code-3xx';
  return 'code-2xx';
}
