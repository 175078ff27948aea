// auditlens explorer: a small router over the History API, the theme
// toggle and the keyboard shortcuts. Each view renders into <main> and the
// body carries data-view and data-state (loading | ready | error), which the
// browser tests wait on; data-render-ms is the time from navigation to ready.

import { clear } from './dom.js';
import { initDetail } from './detail.js';
import * as timeline from './timeline.js';
import * as finding from './finding.js';
import * as object from './object.js';
import * as jq from './jq.js';
import * as reports from './reports.js';
import * as signin from './signin.js';
import { session, signOut } from './api.js';

const ROUTES = [
  { re: /^\/$/, view: 'timeline', mod: timeline, title: 'Timeline', nav: '/' },
  { re: /^\/findings\/.+$/, view: 'finding', mod: finding, title: 'Finding', nav: '/' },
  { re: /^\/objects\/?$/, view: 'object', mod: object, title: 'Object history', nav: '/' },
  { re: /^\/jq\/?$/, view: 'jq', mod: jq, title: 'jq console', nav: '/jq' },
  { re: /^\/reports\/?$/, view: 'reports', mod: reports, title: 'Reports', nav: '/reports' },
];

const body = document.body;
const main = document.getElementById('main');
const errorBox = document.getElementById('error');
let current = null;
let navStart = 0; // the first render counts from the navigation start (0)

function match(path) {
  return ROUTES.find((r) => r.re.test(path));
}

export function navigate(url, { replace = false } = {}) {
  const u = new URL(url, location.origin);
  const same = u.pathname + u.search === location.pathname + location.search;
  if (replace || same) history.replaceState(null, '', u.pathname + u.search);
  else history.pushState(null, '', u.pathname + u.search);
  navStart = performance.now();
  route();
}

function showError(err) {
  errorBox.textContent = err && err.message ? err.message : String(err);
  errorBox.hidden = false;
}

async function route() {
  if (current) current.abort();
  const ac = new AbortController();
  current = ac;
  const path = location.pathname;
  const r = match(path);
  const dlg = document.getElementById('detail');
  if (dlg && dlg.open) dlg.close();
  const tip = document.getElementById('tooltip');
  if (tip) tip.hidden = true;
  errorBox.hidden = true;
  errorBox.textContent = '';
  clear(main);
  body.dataset.view = r ? r.view : 'notfound';
  body.dataset.state = 'loading';
  delete body.dataset.renderMs;
  for (const a of document.querySelectorAll('nav a')) {
    if (r && a.getAttribute('href') === r.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = (r ? r.title : 'Not found') + ' · auditlens';
  try {
    if (!r) throw new Error(`No page at ${path}. Try the timeline, the jq console or the reports.`);
    await r.mod.render({
      main, path, params: new URLSearchParams(location.search), signal: ac.signal, navigate,
    });
    if (ac.signal.aborted) return;
    body.dataset.renderMs = String(Math.round(performance.now() - navStart));
    body.dataset.state = 'ready';
  } catch (err) {
    if (ac.signal.aborted || (err && err.name === 'AbortError')) return;
    if (err && err.status === 401) {
      showSignIn(ac);
      return;
    }
    if (err && err.status === 403) {
      showForbidden(ac, err);
      return;
    }
    showError(err);
    body.dataset.renderMs = String(Math.round(performance.now() - navStart));
    body.dataset.state = 'error';
  }
}

// ---- sign-in --------------------------------------------------------------

const signOutBtn = document.getElementById('signout');

const whoami = document.getElementById('whoami');

// showAccount shows who is signed in and the sign-out button, which only
// a session this browser signed in to has (a proxy's user cannot sign out
// here).
function showAccount(st) {
  const mine = Boolean(st && st.signed_in && st.via === 'cookie');
  signOutBtn.hidden = !mine;
  whoami.textContent = st && st.signed_in && st.user ? st.user : '';
  whoami.hidden = !whoami.textContent;
}

function refreshAccount() {
  return session().then((st) => { showAccount(st); return st; }).catch(() => null);
}

// showSignIn replaces the page with the sign-in form; once signed in, the
// page that asked is rendered again.
async function showSignIn(ac) {
  clear(main);
  errorBox.hidden = true;
  body.dataset.view = 'signin';
  body.dataset.state = 'loading';
  document.title = 'Sign in · auditlens';
  showAccount(null);
  const st = await session().catch(() => null);
  if (ac !== current) return;
  signin.render({ main }, {
    state: st,
    onSignedIn: () => {
      if (ac !== current) return;
      refreshAccount();
      navStart = performance.now();
      route();
    },
  });
  body.dataset.renderMs = String(Math.round(performance.now() - navStart));
  body.dataset.state = 'ready';
}

// showForbidden replaces the page with why this client may read nothing.
async function showForbidden(ac, err) {
  clear(main);
  errorBox.hidden = true;
  body.dataset.view = 'forbidden';
  body.dataset.state = 'loading';
  document.title = 'No access · auditlens';
  const st = await refreshAccount();
  if (ac !== current) return;
  signin.forbidden({ main }, { state: st, err, onSignOut: doSignOut });
  body.dataset.renderMs = String(Math.round(performance.now() - navStart));
  body.dataset.state = 'ready';
}

async function doSignOut() {
  try {
    await signOut();
  } catch (err) {
    showError(err);
    return;
  }
  // Every page asks again, even one that has shown no data yet (jq).
  if (current) current.abort();
  current = new AbortController();
  navStart = performance.now();
  showSignIn(current);
}

signOutBtn.addEventListener('click', doSignOut);

refreshAccount();

// ---- links within the app -------------------------------------------------

document.addEventListener('click', (ev) => {
  if (ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  const a = ev.target.closest('a[href]');
  if (!a || a.target || a.hasAttribute('download')) return;
  const u = new URL(a.href, location.href);
  if (u.origin !== location.origin || !match(u.pathname)) return;
  if (u.hash && u.pathname === location.pathname && u.search === location.search) return;
  ev.preventDefault();
  navigate(u.pathname + u.search);
});
window.addEventListener('popstate', () => {
  navStart = performance.now();
  route();
});

// ---- theme ----------------------------------------------------------------

const themeBtn = document.getElementById('theme');
function paintThemeButton() {
  const t = document.documentElement.dataset.theme === 'dark' ? 'dark' : 'light';
  themeBtn.textContent = t === 'dark' ? '☾ Dark' : '☀ Light';
  themeBtn.title = `Theme: ${t}. Switch to ${t === 'dark' ? 'light' : 'dark'}.`;
  themeBtn.setAttribute('aria-label', `Switch to ${t === 'dark' ? 'light' : 'dark'} theme`);
}
if (!document.documentElement.dataset.theme) {
  document.documentElement.dataset.theme = matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}
themeBtn.addEventListener('click', () => {
  const next = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
  document.documentElement.dataset.theme = next;
  try { localStorage.setItem('auditlens-theme', next); } catch (_) { /* storage off */ }
  paintThemeButton();
});
paintThemeButton();

// ---- keyboard -------------------------------------------------------------

function typing(el) {
  return el && (el.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName));
}
let gPending = 0;
document.addEventListener('keydown', (ev) => {
  if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const dlg = document.getElementById('detail');
  if (dlg && dlg.open) return; // the dialog handles Escape itself
  if (ev.key === 'Escape') {
    const tip = document.getElementById('tooltip');
    if (tip) tip.hidden = true;
    if (typing(document.activeElement)) document.activeElement.blur();
    return;
  }
  if (typing(ev.target)) return;
  if (ev.key === '/') {
    const first = document.querySelector('#filters input, #jq-program');
    if (first) {
      ev.preventDefault();
      first.focus();
      if (first.select) first.select();
    }
    return;
  }
  if (gPending && Date.now() - gPending < 1200) {
    gPending = 0;
    const to = { t: '/', j: '/jq', r: '/reports' }[ev.key];
    if (to) { ev.preventDefault(); navigate(to); }
    return;
  }
  if (ev.key === 'g') { gPending = Date.now(); return; }
  if (ev.key === 'j' || ev.key === 'k') {
    const table = document.querySelector('#events, main table.nav-rows');
    if (!table) return;
    const rows = table.tBodies[0] ? table.tBodies[0].rows : [];
    if (!rows.length) return;
    const cur = document.activeElement && document.activeElement.closest && document.activeElement.closest('tr');
    let i = cur && cur.parentElement === table.tBodies[0] ? cur.sectionRowIndex : -1;
    i = ev.key === 'j' ? Math.min(rows.length - 1, i + 1) : Math.max(0, i < 0 ? 0 : i - 1);
    ev.preventDefault();
    rows[i].focus({ preventScroll: true });
    rows[i].scrollIntoView({ block: 'nearest' });
  }
});

initDetail();
route();
