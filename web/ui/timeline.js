// Timeline (/): recent findings, filters, the stacked request histogram and
// the newest events.

import { h, link, fmtUTC, fmtNum, timeTitle, isoParam, parseTime, severityBadge, codeClass, clear } from './dom.js';
import { api, getJSON, getNDJSON } from './api.js';
import { drawHistogram } from './chart.js';
import { filtersForm, filterParams, withDefaults } from './filters.js';
import { openDetail } from './detail.js';

export const BY = ['verb', 'user', 'resource', 'code', 'user_agent', 'namespace', 'cluster', 'apiserver', 'stage'];
const BY_LABEL = { user_agent: 'user agent', apiserver: 'API server' };
const EVENT_LIMIT = 200;
const STAGE_SHORT = { RequestReceived: 'received', ResponseStarted: 'started', ResponseComplete: 'complete', Panic: 'panic' };

// Column → filter parameter, for "filter on this value".
const CELL_FILTER = { 'c-verb': 'verb', 'c-user': 'user', 'c-ua': 'user_agent', 'c-resource': 'resource', 'c-ns': 'namespace', 'c-name': 'name', 'c-code': 'code' };

export function findingsList(list) {
  const ul = h('ul', { class: 'finding-list' });
  for (const f of list) {
    ul.appendChild(h('li', {},
      h('a', { class: ['finding', 'sev-border-' + (f.severity || 'info')], href: link('/findings/' + encodeURIComponent(f.id)), dataset: { id: f.id } },
        severityBadge(f.severity),
        h('span', { class: 'f-detector mono' }, f.detector || ''),
        h('span', { class: 'f-cluster' }, f.cluster || ''),
        h('time', { class: 'f-time mono', datetime: f.last_seen || '', title: timeTitle(f.last_seen) }, fmtUTC(f.last_seen, { ms: false })),
        h('span', { class: 'f-title' }, f.title || ''))));
  }
  return ul;
}

function findingsWindow(fq) {
  // Findings near the window being looked at; "recent" for relative windows.
  const q = new URLSearchParams();
  const since = parseTime(fq.get('since'));
  const until = parseTime(fq.get('until'));
  if (Number.isFinite(since)) q.set('since', isoParam(since - 24 * 3600e3));
  else q.set('since', '30d');
  if (Number.isFinite(until)) q.set('until', isoParam(until + 24 * 3600e3));
  for (const c of fq.getAll('cluster')) q.append('cluster', c);
  q.set('limit', '12');
  return q;
}

function eventTime(e) {
  return e.stageTimestamp || e.requestReceivedTimestamp || e.timestamp || '';
}

function td(cls, text, title) {
  const el = document.createElement('td');
  el.className = cls;
  if (text !== '' && text !== undefined && text !== null) el.textContent = String(text);
  if (title) el.title = title;
  return el;
}

export function eventRows(events, withDate) {
  const frag = document.createDocumentFragment();
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (!e || typeof e !== 'object') continue;
    const o = e.objectRef || {};
    const u = e.user || {};
    const code = e.responseStatus && e.responseStatus.code !== undefined ? e.responseStatus.code : '';
    const t = eventTime(e);
    const tr = document.createElement('tr');
    tr.tabIndex = 0;
    tr.dataset.auditId = String(e.auditID || '');
    tr.dataset.i = String(i);
    const res = o.resource ? o.resource + (o.subresource ? '/' + o.subresource : '') : '';
    tr.append(
      td('c-time mono', fmtUTC(t, { date: withDate }), timeTitle(t)),
      td('c-stage', STAGE_SHORT[e.stage] || e.stage || '', e.stage || ''),
      td('c-verb', e.verb || ''),
      td('c-user', u.username || '', u.username || ''),
      td('c-ua', e.userAgent || '', e.userAgent || ''),
      td('c-resource', res, res),
      td('c-ns', o.namespace || ''),
      td('c-name', o.name || '', o.name || ''),
      td('c-code mono ' + codeClass(code), code === '' ? '' : String(code)));
    frag.appendChild(tr);
  }
  return frag;
}

export function eventsTable(id, caption) {
  const cols = [['c-time', 'Time (UTC)'], ['c-stage', 'Stage'], ['c-verb', 'Verb'], ['c-user', 'User'], ['c-ua', 'User agent'],
    ['c-resource', 'Resource'], ['c-ns', 'Namespace'], ['c-name', 'Name'], ['c-code', 'Code']];
  return h('table', { id, class: 'data events nav-rows' },
    h('caption', { class: 'sr-only' }, caption),
    h('colgroup', {}, ...cols.map(([c]) => h('col', { class: c }))),
    h('thead', {}, h('tr', {}, ...cols.map(([c, l]) => h('th', { class: c, scope: 'col' }, l)))),
    h('tbody', {}));
}

export async function render(ctx) {
  const p = ctx.params;
  // A native form submission leaves empty fields (cluster=&…): drop them.
  if ([...p.values()].some((v) => v === '')) {
    for (const k of [...new Set(p.keys())]) {
      const vals = p.getAll(k).filter((v) => v !== '');
      p.delete(k);
      vals.forEach((v) => p.append(k, v));
    }
    if (p.get('by') === 'verb') p.delete('by');
    history.replaceState(null, '', link('/', p));
  }
  const by = BY.includes(p.get('by')) ? p.get('by') : 'verb';
  const fq = filterParams(p);
  const aq = withDefaults(fq);
  const nav = (params) => ctx.navigate(link('/', params));

  const bySelect = h('select', { id: 'by', name: 'by', onchange: () => form.requestSubmit() },
    ...BY.map((b) => h('option', { value: b, selected: b === by }, BY_LABEL[b] || b)));
  const form = filtersForm(p, {
    extra: [h('label', { class: 'field', for: 'by' }, h('span', { class: 'field-label' }, 'Stack by'), bySelect)],
    onSubmit: (q) => nav(q),
  });

  const findingsBox = h('div', { id: 'findings', class: 'findings', 'aria-live': 'polite' }, h('p', { class: 'muted' }, 'Loading findings…'));
  const histBox = h('div', { id: 'histogram', class: 'histogram-box' });
  const rangeText = h('span', { class: 'range mono' });
  const totalText = h('span', { class: 'muted' });
  const zoomOut = h('button', { type: 'button', id: 'zoom-out', class: 'ghost', disabled: true, title: 'Double the time window (key: - on the chart)' }, '− Zoom out');
  const table = eventsTable('events', 'Newest events');
  const eventsNote = h('span', { class: 'muted' });

  ctx.main.append(
    h('section', { class: 'card findings-card', 'aria-labelledby': 'h-findings' },
      h('div', { class: 'card-head' }, h('h2', { id: 'h-findings' }, 'Recent findings'), h('a', { class: 'small', href: link('/reports') }, 'Reports →')),
      findingsBox),
    h('section', { class: 'card', 'aria-label': 'Filters' }, form),
    h('section', { class: 'card', 'aria-labelledby': 'h-hist' },
      h('div', { class: 'card-head' },
        h('h2', { id: 'h-hist' }, 'Events ', h('span', { class: 'muted small' }, 'stacked by ' + (BY_LABEL[by] || by))),
        totalText, rangeText,
        h('span', { class: 'spacer' }),
        h('span', { class: 'muted small hint' }, 'Drag across the chart to zoom'),
        zoomOut),
      histBox),
    h('section', { class: 'card', 'aria-labelledby': 'h-events' },
      h('div', { class: 'card-head' }, h('h2', { id: 'h-events' }, 'Events'), eventsNote,
        h('span', { class: 'spacer' }),
        h('span', { class: 'muted small hint' }, 'j/k move · Enter opens · click a value’s ⊕ to filter')),
      h('div', { class: 'table-scroll events-scroll' }, table)));

  // One layout read, before the fetches.
  const width = histBox.clientWidth || 1000;
  const buckets = Math.max(20, Math.min(240, Math.round((width - 66) / 8)));
  const hq = new URLSearchParams(aq);
  hq.set('by', by);
  hq.set('buckets', String(buckets));
  hq.set('top', '8');
  const eq = new URLSearchParams(aq);
  eq.set('order', 'desc');
  eq.set('limit', String(EVENT_LIMIT));

  const [hist, evs, fnd] = await Promise.allSettled([
    getJSON(api('/histogram', hq), ctx.signal),
    getNDJSON(api('/events', eq), ctx.signal),
    getJSON(api('/findings', findingsWindow(fq)), ctx.signal),
  ]);
  if (ctx.signal.aborted) return;

  // Findings.
  clear(findingsBox);
  if (fnd.status === 'fulfilled' && Array.isArray(fnd.value) && fnd.value.length) findingsBox.appendChild(findingsList(fnd.value));
  else if (fnd.status === 'fulfilled') findingsBox.appendChild(h('p', { class: 'muted' }, 'No findings near this window.'));
  else findingsBox.appendChild(h('p', { class: 'muted' }, fnd.reason.missing ? 'Findings are not available on this server.' : 'Could not load findings: ' + fnd.reason.message));

  // Histogram.
  let window0 = null;
  if (hist.status === 'fulfilled') {
    const d = hist.value;
    window0 = [parseTime(d.since), parseTime(d.until)];
    rangeText.textContent = `${fmtUTC(d.since, { ms: false })} – ${fmtUTC(d.until, { ms: false })} UTC`;
    totalText.textContent = `${fmtNum(d.total)} events`;
    const zoomTo = (a, b) => {
      const q = new URLSearchParams(p);
      const span = b - a;
      const round = span > 120e3 ? 1000 : 1;
      q.set('since', isoParam(Math.floor(a / round) * round));
      q.set('until', isoParam(Math.ceil(b / round) * round));
      nav(q);
    };
    const out = () => {
      const [a, b] = window0;
      const span = b - a;
      zoomTo(a - span / 2, b + span / 2);
    };
    zoomOut.disabled = false;
    zoomOut.addEventListener('click', out);
    drawHistogram(histBox, d, {
      width, onZoom: zoomTo, onZoomOut: out,
      onSeries: (key) => {
        const q = new URLSearchParams(p);
        q.delete(by);
        q.append(by, key);
        nav(q);
      },
    });
  } else if (hist.reason.missing) {
    histBox.appendChild(h('p', { class: 'muted notice' }, 'The histogram needs /api/v1/histogram, which this server does not provide yet.'));
  } else if (hist.reason.name !== 'AbortError') {
    histBox.appendChild(h('p', { class: 'notice error-text' }, 'Could not load the histogram: ' + hist.reason.message));
  }

  // Events.
  if (evs.status === 'rejected') throw evs.reason;
  const events = [];
  for (const line of evs.value.lines) {
    try { events.push(JSON.parse(line)); } catch (_) { /* skip a torn line */ }
  }
  let withDate = false;
  if (events.length) {
    const a = fmtUTC(eventTime(events[0])).slice(0, 10), b = fmtUTC(eventTime(events[events.length - 1])).slice(0, 10);
    withDate = a !== b;
  }
  const tbody = table.tBodies[0];
  tbody.appendChild(eventRows(events, withDate));
  eventsNote.textContent = events.length >= EVENT_LIMIT
    ? `newest ${EVENT_LIMIT} events (narrow the filters or zoom to see older ones)`
    : `${events.length} event${events.length === 1 ? '' : 's'}, newest first`;
  if (evs.value.error) table.parentElement.after(h('p', { class: 'notice error-text' }, 'The event stream broke: ' + evs.value.error));
  if (!events.length) {
    const empty = h('div', { class: 'empty' }, h('p', { class: 'muted' }, 'No events match these filters in this window.'));
    table.parentElement.after(empty);
    if (![...fq.keys()].some((k) => k !== 'since' && k !== 'until')) {
      // Maybe nothing was ever sent: say how to point an apiserver here.
      try {
        const info = await getJSON(api('/info'), ctx.signal);
        if (info && info.webhook_kubeconfig) {
          empty.append(h('p', {}, 'To send audit events here, give kube-apiserver ', h('code', {}, '--audit-webhook-config-file'), ' a kubeconfig like this one (see ', h('code', {}, 'auditlens webhook-config'), '):'),
            h('pre', { class: 'json' }, info.webhook_kubeconfig));
        }
      } catch (_) { /* optional */ }
    }
  }

  const singleCluster = fq.getAll('cluster').join(',').split(',').filter(Boolean);
  const openRow = (tr) => {
    const e = events[Number(tr.dataset.i)];
    if (e) openDetail(e, { cluster: singleCluster.length === 1 ? singleCluster[0] : '', onFilter: (k, v) => { const q = new URLSearchParams(p); q.delete(k); q.append(k, v); nav(q); } });
  };
  tbody.addEventListener('click', (ev) => {
    if (ev.target.closest('.cell-filter')) return;
    const tr = ev.target.closest('tr');
    if (tr) openRow(tr);
  });
  tbody.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && ev.target.matches('tr')) { ev.preventDefault(); openRow(ev.target); }
  });

  // One shared "filter on this value" button follows the pointer.
  const fbtn = h('button', { type: 'button', class: 'cell-filter', tabindex: -1, 'aria-hidden': 'true' }, '⊕');
  fbtn.addEventListener('click', (ev) => {
    ev.stopPropagation();
    const cell = fbtn.parentElement;
    const field = cell && CELL_FILTER[[...cell.classList].find((c) => CELL_FILTER[c])];
    const tr = cell && cell.parentElement;
    const e = tr && events[Number(tr.dataset.i)];
    if (!field || !e) return;
    const o = e.objectRef || {};
    const val = { verb: e.verb, user: e.user && e.user.username, user_agent: e.userAgent, resource: o.resource, namespace: o.namespace, name: o.name,
      code: e.responseStatus ? String(e.responseStatus.code) : '0' }[field];
    if (val === undefined || val === '') return;
    const q = new URLSearchParams(p);
    q.delete(field);
    q.append(field, val);
    nav(q);
  });
  tbody.addEventListener('mouseover', (ev) => {
    const cell = ev.target.closest('td');
    if (!cell || cell === fbtn.parentElement || !cell.textContent) return;
    const field = CELL_FILTER[[...cell.classList].find((c) => CELL_FILTER[c])];
    if (!field) { fbtn.remove(); return; }
    fbtn.title = `Filter on ${field} = ${cell.textContent}`;
    cell.appendChild(fbtn);
  });
  tbody.addEventListener('mouseleave', () => fbtn.remove());
}
