// Finding (/findings/ID): what was found, the evidence drawn on a time
// line, what to do, and the objects involved.

import { h, link, fmtUTC, fmtDuration, timeTitle, parseTime, severityBadge, codeClass, isoParam } from './dom.js';
import { api, getJSON, ApiError } from './api.js';
import { drawEvidence } from './chart.js';
import { drawHeartbeatLanes, drawRVRollback } from './incident.js';

const SUBJECT_LABEL = {
  user: 'User', user_agent: 'User agent', resource: 'Resource', api_group: 'API group', resource_version: 'Static resourceVersion',
  previous_resource_version: 'Previous resourceVersion', source_ip: 'Source IP', namespace: 'Namespace',
  watch_restarts: 'Watch restarts', iterations: 'Loop iterations',
};
// Detectors whose subjects mean something more specific.
const DETECTOR_LABEL = {
  'rv-rollback': { previous_resource_version: 'Head before the drop', resource_version: 'Head after the drop', conflicts: 'Conflicts (409)',
    stuck: 'Clients stuck above the new head' },
  'watch-loop': { resource_version: 'First stale resourceVersion', stale_rvs: 'Stale resourceVersions it resumed from' },
  'heartbeat-loss': { nodes_lost: 'Nodes that stopped heartbeating', nodes_seen: 'Nodes seen heartbeating before', pods_evicted: 'Pods evicted' },
};
const MONO = ['resource_version', 'previous_resource_version', 'source_ip', 'user_agent', 'api_group'];

// Findings whose evidence is drawn by their own chart: the detector's
// name → draw(container, finding, width, signal).
const DRAWERS = {
  'heartbeat-loss': { draw: drawHeartbeatLanes, hint: 'one lane per node · hover a mark or a gap for details' },
  'rv-rollback': { draw: drawRVRollback, hint: 'the cluster’s resourceVersion and the clients above it · hover a point for details' },
};

// subjectValue shows a subject whatever its shape: text, a list, or a
// list of records (rv-rollback's stuck clients) as a small table.
function subjectValue(v) {
  const text = (x) => (x === null || x === undefined ? '' : Array.isArray(x) ? x.map(text).join(', ') : typeof x === 'object' ? JSON.stringify(x) : String(x));
  if (Array.isArray(v) && v.length && v.every((x) => x && typeof x === 'object' && !Array.isArray(x))) {
    const keys = [...new Set(v.flatMap((x) => Object.keys(x)))];
    return h('table', { class: 'data subject-table' },
      h('thead', {}, h('tr', {}, ...keys.map((k) => h('th', { scope: 'col' }, k.replace(/_/g, ' '))))),
      h('tbody', {}, ...v.map((x) => h('tr', {}, ...keys.map((k) => h('td', { class: /rv$|^from$|^until$|^first$|^last$/.test(k) ? 'mono' : null },
        /^(from|until|first|last)$/.test(k) && Number.isFinite(parseTime(x[k])) ? fmtUTC(x[k], { ms: false }) : text(x[k])))))));
  }
  return text(v);
}

function objectHref(f, o) {
  const a = parseTime(f.first_seen), b = parseTime(f.last_seen);
  return link('/objects', {
    cluster: f.cluster || '', resource: o.resource || '', namespace: o.namespace || '', name: o.name || '',
    since: Number.isFinite(a) ? isoParam(a - 15 * 60e3) : '',
    until: Number.isFinite(b) ? isoParam(b + 15 * 60e3) : '',
  });
}

function timelineHref(f, extra) {
  const a = parseTime(f.first_seen), b = parseTime(f.last_seen);
  const span = Math.max((b - a) || 0, 60e3);
  return link('/', {
    since: Number.isFinite(a) ? isoParam(Math.floor((a - span * 0.25) / 1000) * 1000) : '',
    until: Number.isFinite(b) ? isoParam(Math.ceil((b + span * 0.25) / 1000) * 1000) : '',
    cluster: f.cluster || '', ...extra,
  });
}

export async function render(ctx) {
  const id = decodeURIComponent(ctx.path.slice('/findings/'.length));
  if (!id) throw new ApiError(400, 'no finding ID in the path');
  const f = await getJSON(api('/findings/' + encodeURIComponent(id)), ctx.signal);
  if (ctx.signal.aborted) return;
  document.title = `${f.title || f.id} · auditlens`;
  const subj = f.subjects || {};
  const evidence = Array.isArray(f.evidence) ? f.evidence.slice().sort((a, b) => parseTime(a.time) - parseTime(b.time)) : [];
  const objects = Array.isArray(f.objects) ? f.objects : [];
  const dur = parseTime(f.last_seen) - parseTime(f.first_seen);

  const head = h('section', { class: 'card finding-head' },
    h('div', { class: 'finding-badges' }, severityBadge(f.severity),
      h('span', { class: 'mono detector' }, f.detector || ''),
      f.cluster ? h('span', { class: 'pill' }, 'cluster ', h('strong', {}, f.cluster)) : null,
      f.confidence !== undefined ? h('span', { class: 'pill', title: 'How sure the detector is' }, 'confidence ', h('strong', {}, Math.round(Number(f.confidence) * 100) + '%')) : null),
    h('h1', { id: 'finding-title' }, f.title || f.id),
    h('dl', { class: 'meta' },
      h('div', {}, h('dt', {}, 'First seen'), h('dd', { class: 'mono', title: timeTitle(f.first_seen) }, fmtUTC(f.first_seen) + ' UTC')),
      h('div', {}, h('dt', {}, 'Last seen'), h('dd', { class: 'mono', title: timeTitle(f.last_seen) }, fmtUTC(f.last_seen) + ' UTC')),
      h('div', {}, h('dt', {}, 'Span'), h('dd', {}, fmtDuration(dur))),
      h('div', {}, h('dt', {}, 'ID'), h('dd', { class: 'mono small' }, f.id || ''))),
    h('p', { id: 'finding-summary', class: 'summary' }, f.summary || ''),
    h('p', { class: 'actions' },
      h('a', { class: 'button ghost', href: timelineHref(f, {}) }, 'Open this window in the timeline'),
      subj.user ? h('a', { class: 'button ghost', href: timelineHref(f, { user: subj.user, resource: subj.resource || '' }) }, 'Requests of ' + subj.user) : null));

  // Empty subjects (the fixed ones a detector does not use) are left out.
  // A list of records (rv-rollback's stuck clients) gets a card of its own.
  const isRecords = (v) => Array.isArray(v) && v.length > 0 && v.every((x) => x && typeof x === 'object' && !Array.isArray(x));
  const recordCards = Object.keys(subj).filter((k) => isRecords(subj[k])).map((k) => h('section', { class: 'card', dataset: { subject: k } },
    h('div', { class: 'card-head' }, h('h2', {}, (DETECTOR_LABEL[f.detector] || {})[k] || SUBJECT_LABEL[k] || k)),
    h('div', { class: 'table-scroll' }, subjectValue(subj[k]))));
  const subjRows = Object.keys(subj).filter((k) => subj[k] !== '' && subj[k] !== null && subj[k] !== undefined && !isRecords(subj[k])).map((k) => h('tr', {},
    h('th', { scope: 'row' }, (DETECTOR_LABEL[f.detector] || {})[k] || SUBJECT_LABEL[k] || k),
    h('td', { class: MONO.includes(k) ? 'mono' : null }, subjectValue(subj[k]))));
  const subjects = h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', {}, 'Subjects')),
    subjRows.length ? h('table', { class: 'data kv', id: 'subjects' }, h('tbody', {}, ...subjRows)) : h('p', { class: 'muted' }, 'None.'));

  const drawer = Object.hasOwn(DRAWERS, f.detector) ? DRAWERS[f.detector] : null;
  const evBox = h('div', { id: 'evidence', class: 'evidence-box', dataset: { chart: drawer ? f.detector : 'evidence' } });
  const evCard = h('section', { class: 'card' },
    h('div', { class: 'card-head' }, h('h2', {}, 'Evidence'), h('span', { class: 'muted small' }, `${evidence.length} events · time in UTC · ${drawer ? drawer.hint : 'hover a mark for details'}`)),
    evBox);

  const remediation = h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', {}, 'Remediation')),
    h('pre', { id: 'remediation', class: 'prose-pre' }, f.remediation || 'No remediation given.'));

  // A wave names hundreds of nodes and pods: the first ones, the rest folded.
  const objItem = (o) => h('li', {}, h('a', { href: objectHref(f, o) },
    h('span', { class: 'muted' }, (o.resource || '') + ' '), h('span', { class: 'mono' }, [o.namespace, o.name].filter(Boolean).join('/') || '(cluster-scoped)')));
  const OBJECTS_SHOWN = 15;
  const objList = h('ul', { id: 'objects', class: 'object-list' }, ...objects.slice(0, OBJECTS_SHOWN).map(objItem),
    objects.length > OBJECTS_SHOWN ? h('li', {}, h('details', { class: 'more-objects' },
      h('summary', {}, `${objects.length - OBJECTS_SHOWN} more`),
      h('ul', { class: 'object-list' }, ...objects.slice(OBJECTS_SHOWN).map(objItem)))) : null);
  const objCard = h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', {}, 'Objects'), h('span', { class: 'muted small' }, 'open an object’s full history')),
    objects.length ? objList : [h('p', { class: 'muted' }, 'No objects named by this finding.'), objList]);

  const rows = evidence.map((e) => {
    const objKey = [e.namespace, e.name].filter(Boolean).join('/');
    const tr = h('tr', { tabindex: 0, dataset: { auditId: e.audit_id || '' } },
      h('td', { class: 'mono', title: timeTitle(e.time) }, fmtUTC(e.time, { date: false })),
      h('td', {}, h('span', { class: ['role', 'role-' + (/-delete$/.test(e.role) ? 'delete' : /-create$/.test(e.role) ? 'create' : (e.role || '').replace(/[^a-z-]/g, ''))] }, e.role || '')),
      h('td', {}, e.verb || ''),
      h('td', { class: 'ellipsis', title: e.user || '' }, e.user || ''),
      h('td', {}, e.resource && e.name ? h('a', { href: objectHref(f, e) }, e.resource + ' ' + objKey) : (e.resource || '') + (objKey ? ' ' + objKey : '')),
      h('td', { class: 'mono num' }, e.resource_version || ''),
      h('td', { class: 'mono ' + codeClass(e.code) }, e.code === undefined ? '' : String(e.code)),
      h('td', { class: 'mono ellipsis uri', title: e.request_uri || '' }, e.request_uri || ''));
    return tr;
  });
  const evTable = h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', {}, 'Evidence events')),
    h('div', { class: 'table-scroll' }, h('table', { class: 'data nav-rows evidence-table', id: 'evidence-table' },
      h('thead', {}, h('tr', {}, ...['Time (UTC)', 'Role', 'Verb', 'User', 'Object', 'RV', 'Code', 'Request URI'].map((l) => h('th', { scope: 'col' }, l)))),
      h('tbody', {}, ...rows))));

  ctx.main.append(
    h('p', { class: 'crumbs' }, h('a', { href: link('/') }, 'Timeline'), ' / finding'),
    head,
    h('div', { class: 'grid-2' }, subjects, objCard), ...recordCards,
    evCard, remediation, evTable);
  if (drawer) await drawer.draw(evBox, f, evBox.clientWidth, ctx.signal);
  else drawEvidence(evBox, f, evBox.clientWidth);
}
