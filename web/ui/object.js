// Object history (/objects?cluster&resource&namespace&name): every request
// naming the object, the watches of its resource open at the time (one
// lane per watcher, a mark at each restart with the resourceVersion it
// asked for), and the watch-loop finding that explains the object's churn,
// with the watches of the resource that finding's client re-watched.

import { h, link, fmtUTC, fmtDuration, timeTitle, parseTime, codeClass, clear, severityBadge } from './dom.js';
import { api, getJSON, getNDJSON, ApiError } from './api.js';
import { drawWatcherStrip, watcherName, staticRV } from './chart.js';

const KEYS = ['cluster', 'resource', 'namespace', 'name', 'since', 'until', 'limit'];

// fromEvents derives the history from /api/v1/events when the server has no
// /api/v1/objects/history: one row per audit ID (its last stage), no watches.
async function fromEvents(q, signal) {
  const eq = new URLSearchParams();
  for (const k of ['cluster', 'resource', 'namespace', 'name', 'since', 'until']) if (q.get(k)) eq.set(k, q.get(k));
  eq.set('order', 'asc');
  eq.set('limit', '5000');
  const { lines } = await getNDJSON(api('/events', eq), signal);
  const byID = new Map();
  for (const line of lines) {
    let e;
    try { e = JSON.parse(line); } catch (_) { continue; }
    const rv = e.objectRef && e.objectRef.resourceVersion;
    byID.set(e.auditID, {
      time: e.requestReceivedTimestamp || e.stageTimestamp, audit_id: e.auditID, stage: e.stage, verb: e.verb,
      user: e.user && e.user.username, user_agent: e.userAgent, source_ip: (e.sourceIPs || [])[0] || '',
      code: e.responseStatus ? e.responseStatus.code : 0, resource_version: rv || '', request_uri: e.requestURI,
    });
  }
  return { events: [...byID.values()], watches: null, truncated: lines.length >= 5000 };
}

// loopFindings returns the watch-loop findings that name obj, seen in the
// page's since/until when it has them; [] when the server has no findings.
async function loopFindings(obj, p, signal) {
  if (!obj.name) return [];
  const q = new URLSearchParams({ detector: 'watch-loop', object: `${obj.resource}/${obj.namespace}/${obj.name}`, limit: '20' });
  if (obj.cluster) q.set('cluster', obj.cluster);
  for (const k of ['since', 'until']) if (p.get(k)) q.set(k, p.get(k));
  try {
    const fs = await getJSON(api('/findings', q), signal);
    return Array.isArray(fs) ? fs : [];
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    return []; // no findings API here, or none readable: the history still shows
  }
}

// explains says whether watcher w is the client finding f names: same
// cluster, user and resource, and a restart from the static resourceVersion.
function explains(f, w) {
  const sj = f.subjects || {};
  return (!f.cluster || f.cluster === w.cluster) && sj.user === w.user && sj.resource === w.resource &&
    (w.restarts || []).some((r) => r.resource_version === sj.resource_version);
}

function findingCard(findings) {
  const items = findings.map((f) => {
    const sj = f.subjects || {};
    const a = parseTime(f.first_seen), b = parseTime(f.last_seen);
    return h('li', { class: 'finding-callout-item' },
      severityBadge(f.severity), ' ',
      h('a', { class: 'finding-link', href: link('/findings/' + encodeURIComponent(f.id)), dataset: { id: f.id } }, f.title || f.id),
      h('p', { class: 'small finding-callout-why' },
        h('span', { class: 'mono' }, sj.user || '?'), ` re-watched ${sj.resource || '?'} from resourceVersion `,
        h('strong', { class: 'mono static-rv' }, sj.resource_version || '?'),
        sj.watch_restarts ? ` at ${sj.watch_restarts} restarts` : ' at every restart',
        `; this object was deleted and re-created after them. Seen ${Number.isFinite(a) ? fmtUTC(a, { ms: false }) : '?'} – ${Number.isFinite(b) ? fmtUTC(b, { ms: false }) : '?'} UTC (${f.cluster || 'cluster ?'}).`));
  });
  return h('section', { id: 'object-findings', class: 'card finding-callout', 'aria-label': 'Finding that explains this object’s churn' },
    h('h2', {}, findings.length > 1 ? 'Findings that explain this object’s churn' : 'A finding explains this object’s churn'),
    h('ul', { class: 'finding-callout-list' }, ...items));
}

// watcherSummary is the text alternative of the watcher lanes.
function watcherSummary(watchers, isCulprit) {
  return h('ul', { id: 'watcher-summary', class: 'watcher-summary small', 'aria-label': 'Watchers and their restarts' },
    ...watchers.map((w) => {
      const rs = w.restarts || [];
      const rvs = [...new Set(rs.map((r) => r.resource_version || '∅'))];
      const rv = staticRV(w);
      const n = w.watches || rs.length;
      const shown = w.restarts_truncated ? ` (latest ${rs.length} of ${n} shown)` : '';
      let text;
      if (rvs.length === 1) text = `${n} watch${n === 1 ? '' : 'es'}, ${n > 1 ? 'every one from' : 'from'} resourceVersion `;
      else text = `${n} watches from resourceVersions `;
      const rvList = rvs.length > 8 ? rvs.slice(-8) : rvs;
      return h('li', { class: ['watcher-line', isCulprit(w) ? 'culprit' : '', rv ? 'same-rv' : ''], dataset: { resource: w.resource || '' } },
        h('strong', {}, watcherName(w)), ' ', h('span', { class: 'muted' }, `(${w.user || '?'})`), ': ', text,
        h('span', { class: 'mono' }, (rvs.length > 8 ? '… ' : '') + rvList.join(', ')), shown,
        rv && rvs.length > 1 ? [', restarting from ', h('strong', { class: 'mono' }, rv), ' again and again'] : null,
        isCulprit(w) ? h('span', { class: 'culprit-note' }, ' — the client the finding names') : null);
    }));
}

export async function render(ctx) {
  const p = ctx.params;
  const q = new URLSearchParams();
  for (const k of KEYS) for (const v of p.getAll(k)) if (v) q.append(k, v);
  const obj = { cluster: p.get('cluster') || '', resource: p.get('resource') || '', namespace: p.get('namespace') || '', name: p.get('name') || '' };
  if (!obj.resource) throw new ApiError(400, 'Object history needs at least resource (and usually cluster, namespace and name) in the URL query.');
  const label = [obj.namespace, obj.name].filter(Boolean).join('/') || '(all)';
  document.title = `${obj.resource} ${label} · auditlens`;

  const stripBox = h('div', { id: 'strip', class: 'strip-box' });
  const head = h('section', { class: 'card' },
    h('p', { class: 'crumbs' }, h('a', { href: link('/') }, 'Timeline'), ' / object history'),
    h('h1', { class: 'object-title' }, h('span', { class: 'muted' }, obj.resource + ' '), h('span', { class: 'mono' }, label)),
    h('p', { class: 'meta-line' },
      obj.cluster ? h('span', { class: 'pill' }, 'cluster ', h('strong', {}, obj.cluster)) : h('span', { class: 'pill' }, 'all clusters'),
      p.get('since') ? h('span', { class: 'muted small' }, ` ${fmtUTC(p.get('since'), { ms: false })} – ${p.get('until') ? fmtUTC(p.get('until'), { ms: false }) : 'now'} UTC`) : null,
      ' ',
      h('a', { class: 'button ghost', href: link('/', { cluster: obj.cluster, resource: obj.resource, namespace: obj.namespace, name: obj.name, since: p.get('since') || '', until: p.get('until') || '' }) }, 'Events in the timeline')));
  ctx.main.append(head);
  const width = head.clientWidth - 32;

  // The findings first: a watch-loop finding names the resource its client
  // re-watched (services for endpoints), whose watches the history adds.
  let findings = await loopFindings(obj, p, ctx.signal);
  if (ctx.signal.aborted) return;
  for (const r of new Set(findings.map((f) => (f.subjects || {}).resource).filter(Boolean))) {
    if (r !== obj.resource) q.append('watch_resource', r);
  }

  let data, fallback = false;
  try {
    data = await getJSON(api('/objects/history', q), ctx.signal);
  } catch (e) {
    if (!(e instanceof ApiError) || !e.missing) throw e;
    fallback = true;
    data = await fromEvents(q, ctx.signal);
  }
  if (ctx.signal.aborted) return;
  const events = Array.isArray(data.events) ? data.events : [];
  const watches = Array.isArray(data.watches) ? data.watches : [];
  const watchers = Array.isArray(data.watchers) ? data.watchers : [];

  // The page's range: since/until, else the object's first and last request.
  const evTimes = events.map((e) => parseTime(e.time)).filter(Number.isFinite);
  const lo = Number.isFinite(parseTime(p.get('since'))) ? parseTime(p.get('since')) : (evTimes.length ? Math.min(...evTimes) : -Infinity);
  const hi = Number.isFinite(parseTime(p.get('until'))) ? parseTime(p.get('until')) : (evTimes.length ? Math.max(...evTimes) : Infinity);
  const evClusters = new Set(events.map((e) => e.cluster));
  findings = findings.filter((f) => parseTime(f.first_seen) <= hi && parseTime(f.last_seen) >= lo && (obj.cluster || !events.length || evClusters.has(f.cluster)));
  const isCulprit = (w) => findings.some((f) => explains(f, w));
  if (watchers) watchers.sort((a, b) => Number(isCulprit(b)) - Number(isCulprit(a)));
  if (findings.length) ctx.main.insertBefore(findingCard(findings), head.nextSibling);

  // Repeated watches from the same RV by the same client: the loop's mark.
  const repeats = new Map();
  for (const w of watches) {
    const k = `${w.user}\u0000${w.user_agent}\u0000${w.resource_version}`;
    repeats.set(k, (repeats.get(k) || 0) + 1);
  }

  const days = new Set(events.map((e) => fmtUTC(e.time).slice(0, 10)));
  const withDate = days.size > 1;
  const clusters = new Set(events.map((e) => e.cluster).filter(Boolean));
  const showCluster = !obj.cluster && clusters.size > 1;
  const histRows = document.createDocumentFragment();
  for (const e of events) {
    histRows.appendChild(h('tr', { tabindex: 0, dataset: { auditId: e.audit_id || '' }, class: 'verb-row-' + (['delete', 'create', 'update', 'patch'].includes(e.verb) ? e.verb : 'read') },
      h('td', { class: 'mono nowrap', title: timeTitle(e.time) }, fmtUTC(e.time, { date: withDate }), showCluster ? h('div', { class: 'muted small' }, e.cluster || '') : null),
      h('td', { class: 'verb' }, e.verb || '', e.subresource ? h('span', { class: 'muted' }, ' /' + e.subresource) : null),
      h('td', { class: 'actor' }, h('div', { class: 'ellipsis', title: e.user || '' }, e.user || ''), h('div', { class: 'muted small ellipsis', title: e.user_agent || '' }, e.user_agent || '')),
      h('td', { class: 'mono ' + codeClass(e.code) }, e.code === undefined || e.code === null ? '' : String(e.code)),
      h('td', { class: 'mono num' }, e.resource_version || ''),
      h('td', { class: 'small' }, e.stage || ''),
      h('td', { class: 'mono small ellipsis uri', title: e.request_uri || '' }, e.request_uri || '')));
  }
  const history = h('section', { class: 'card' },
    h('div', { class: 'card-head' }, h('h2', {}, 'Requests naming the object'),
      !withDate && days.size ? h('span', { class: 'muted small' }, [...days][0] + ' UTC') : null, h('span', { class: 'muted small' }, `${events.length}${data.truncated ? '+ (truncated: narrow since/until)' : ''}`)),
    h('div', { class: 'table-scroll' }, h('table', { id: 'history', class: 'data nav-rows' },
      h('thead', {}, h('tr', {}, ...['Time (UTC)', 'Verb', 'Actor (user, user agent)', 'Code', 'resourceVersion', 'Stage', 'Request URI'].map((l) => h('th', { scope: 'col' }, l)))),
      h('tbody', {}, histRows))),
    events.length ? null : h('p', { class: 'muted empty' }, 'No requests name this object in this window.'));

  const wRows = document.createDocumentFragment();
  for (const w of watches) {
    const rep = repeats.get(`${w.user}\u0000${w.user_agent}\u0000${w.resource_version}`) || 0;
    const a = parseTime(w.start), b = parseTime(w.end);
    wRows.appendChild(h('tr', { tabindex: 0, dataset: { auditId: w.audit_id || '' } },
      h('td', { class: 'ellipsis', title: w.user || '' }, w.user || ''),
      h('td', { class: 'ellipsis small', title: w.user_agent || '' }, w.user_agent || ''),
      h('td', { class: 'mono small' }, w.source_ip || ''),
      h('td', { class: 'mono num' }, w.resource_version || '∅', rep > 1 ? h('span', { class: 'repeat', title: `this client watched from this resourceVersion ${rep} times` }, ` ×${rep}`) : null),
      h('td', { class: 'mono small', title: timeTitle(w.start) }, fmtUTC(w.start)),
      h('td', { class: 'mono small', title: w.end ? timeTitle(w.end) : 'still open' }, w.end ? fmtUTC(w.end, { date: false }) : 'open'),
      h('td', { class: 'small' }, w.end && Number.isFinite(a) && Number.isFinite(b) ? fmtDuration(b - a) : ''),
      h('td', { class: 'small mono' }, [w.resource && w.resource !== obj.resource ? w.resource : '', w.namespace ? 'ns=' + w.namespace : '', w.label_selector ? 'l=' + w.label_selector : '', w.field_selector ? 'f=' + w.field_selector : ''].filter(Boolean).join(' '))));
  }
  const wCard = h('section', { class: 'card' },
    h('div', { class: 'card-head' }, h('h2', {}, `Watches of ${[...new Set([obj.resource, ...q.getAll('watch_resource')])].join(' and ')} open at the time`), h('span', { class: 'muted small' }, fallback ? '' : String(watches.length))),
    fallback
      ? h('p', { class: 'muted notice' }, 'Watches need /api/v1/objects/history, which this server does not provide yet; the requests above come from /api/v1/events.')
      : h('div', { class: 'table-scroll' }, h('table', { id: 'watches', class: 'data' },
        h('thead', {}, h('tr', {}, ...['User', 'User agent', 'Source IP', 'RV asked', 'Start (UTC)', 'End', 'Lasted', 'Scope'].map((l) => h('th', { scope: 'col' }, l)))),
        h('tbody', {}, wRows))),
    !fallback && !watches.length ? h('p', { class: 'muted empty' }, 'No watches of this resource were open.') : null);

  const stripCard = h('section', { class: 'card' },
    h('div', { class: 'card-head' }, h('h2', {}, 'Requests and watches over time'),
      h('span', { class: 'legend-inline small' },
        h('span', { class: 'lg-tick verb-delete' }), 'delete ', h('span', { class: 'lg-tick verb-create' }), 'create ',
        h('span', { class: 'lg-tick verb-update' }), 'update/patch ', h('span', { class: 'lg-tick verb-get' }), 'read ',
        h('span', { class: 'lg-bar' }), 'watch',
        watchers.length ? [h('span', { class: 'lg-restart' }), 'restart, labelled with the resourceVersion it asked for ',
          h('span', { class: 'lg-restart same-rv' }), 'same resourceVersion as the restart before',
          findings.length ? [h('span', { class: 'lg-restart culprit' }), 'the client the finding names'] : null] : null)),
    stripBox);
  ctx.main.append(stripCard, h('div', { class: 'grid-history' }, history, wCard));
  drawWatcherStrip(stripBox, events, watchers, width, { culprit: isCulprit });
  if (watchers.length) stripBox.appendChild(watcherSummary(watchers, isCulprit));
  if (data.watchers_truncated) stripBox.appendChild(h('p', { class: 'muted small' }, 'Only the most active watchers are shown: narrow since/until for the others.'));
  if (!events.length && !watches.length && !watchers.length) clear(stripBox).appendChild(h('p', { class: 'muted' }, 'Nothing to draw.'));
}
