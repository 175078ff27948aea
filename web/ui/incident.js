// Cluster-wide incidents on the finding page. A heartbeat-loss finding is
// drawn as one lane per node: its heartbeats as ticks, the gap shaded, and
// marks where the node-lifecycle controller marked it NotReady and tainted
// it and where it came back; the evicted pods below. An rv-rollback finding
// is drawn as the cluster's resourceVersion over time with the drop, and
// the clients that kept asking for resourceVersions above the new head.
// Each reads, besides the finding's evidence, what the API has around it
// (/api/v1/heartbeats, /api/v1/resourceversions); without those endpoints
// the evidence alone is drawn. Every string from an event is a text node.

import { h, s, clear, fmtUTC, fmtDuration, parseTime, isoParam } from './dom.js';
import { api, getJSON } from './api.js';
import { linear, niceTicks, timeAxis } from './chart.js';

export const MAX_NODE_LANES = 40;
const OTHER_NODES = 3;
const NODE_ROLES = ['last-heartbeat', 'heartbeat-resumed', 'not-ready', 'taint'];
const NODE_USER = 'system:node:';

const byName = (a, b) => a.localeCompare(b, 'en', { numeric: true });
const timeOf = (e) => parseTime(e.time);
const clip = (str, n) => (str.length > n ? str.slice(0, n - 1) + '…' : str);

function evidenceOf(f) {
  return (Array.isArray(f.evidence) ? f.evidence : []).filter((e) => Number.isFinite(timeOf(e)))
    .sort((a, b) => timeOf(a) - timeOf(b));
}

// timeRange is the finding's span and its evidence's, with a margin on
// both sides (at least minMargin) so that what came before and after shows.
function timeRange(f, ev, minMargin) {
  const ts = ev.map(timeOf).concat([parseTime(f.first_seen), parseTime(f.last_seen)]).filter(Number.isFinite);
  if (!ts.length) return null;
  const a = Math.min(...ts), b = Math.max(...ts);
  const margin = Math.max((b - a) * 0.15, minMargin);
  return [Math.floor((a - margin) / 1000) * 1000, Math.ceil((b + margin) / 1000) * 1000];
}

function evTitle(e) {
  const obj = [e.resource, [e.namespace, e.name].filter(Boolean).join('/')].filter(Boolean).join(' ');
  const rv = e.resource_version ? ` · RV ${e.resource_version}` : '';
  return `${e.role}: ${e.verb || ''} ${obj}\n${fmtUTC(e.time)} UTC${rv} · code ${e.code || '—'}\n${e.user || ''}`;
}

// fetchOptional reads an endpoint; null (and a note) when the server cannot
// answer, so that the evidence still shows.
async function fetchOptional(url, signal, notes, what) {
  try {
    return await getJSON(url, signal);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    notes.push(`${what} could not be read (${e && e.message ? e.message : e}); only the finding’s evidence is drawn.`);
    return null;
  }
}

function legendItem(cls, text, mark) {
  return h('li', {}, h('span', { class: 'lg-item' }, h('span', { class: 'lg-mark ' + cls }, mark || ''), h('span', { class: 'lg-key' }, text)));
}

// mark draws an evidence event as a small shape at (px, py).
function mark(shape, cls, px, py, e) {
  const attrs = { class: 'mark ' + cls, 'data-role': e.role || '', 'data-audit-id': e.audit_id || '' };
  const title = s('title', {}, evTitle(e));
  const x = px.toFixed(1);
  switch (shape) {
    case 'triangle':
      return s('path', { ...attrs, d: `M${x},${py - 6} l6,10 l-12,0 z` }, title);
    case 'square':
      return s('rect', { ...attrs, x: (px - 4.5).toFixed(1), y: py - 4.5, width: 9, height: 9 }, title);
    case 'cross':
      return s('path', { ...attrs, d: `M${(px - 4).toFixed(1)},${py - 4}l8,8M${(px - 4).toFixed(1)},${py + 4}l8,-8` }, title);
    case 'bar':
      return s('rect', { ...attrs, x: (px - 1.5).toFixed(1), y: py - 10, width: 3, height: 20 }, title);
    case 'ring':
      return s('circle', { ...attrs, cx: x, cy: py, r: 4 }, title);
    default:
      return s('circle', { ...attrs, cx: x, cy: py, r: 5 }, title);
  }
}

function note(container, text) {
  container.appendChild(h('p', { class: 'muted small incident-note' }, text));
}

// ---- heartbeat-loss ---------------------------------------------------------

// gapsOf pairs each last-heartbeat of a node with the heartbeat that
// followed it (its heartbeat-resumed evidence, else its next beat read
// from the API, else none: still lost at the end of the range).
function gapsOf(items, beats) {
  const out = [];
  const lastBeats = items.filter((e) => e.role === 'last-heartbeat');
  const resumed = items.filter((e) => e.role === 'heartbeat-resumed');
  for (const lb of lastBeats) {
    const a = timeOf(lb);
    const r = resumed.find((e) => timeOf(e) > a);
    let b = r ? timeOf(r) : NaN;
    if (!r && beats) {
      const next = beats.find((bt) => parseTime(bt.time) > a + 1);
      if (next) b = parseTime(next.time);
    }
    out.push({ a, b });
  }
  return out;
}

// typicalInterval is the median interval of a node's Lease renewals (of
// its status posts when it has no Lease: before Kubernetes 1.14).
function typicalInterval(beats) {
  const kind = beats.some((b) => b.kind === 'lease') ? 'lease' : 'status';
  const ts = beats.filter((b) => b.kind === kind).map((b) => parseTime(b.time));
  const d = [];
  for (let i = 1; i < ts.length; i++) d.push(ts[i] - ts[i - 1]);
  if (!d.length) return NaN;
  d.sort((a, b) => a - b);
  return d[Math.floor(d.length / 2)];
}

export async function drawHeartbeatLanes(container, f, width, signal) {
  clear(container);
  const ev = evidenceOf(f);
  const range = timeRange(f, ev, 60e3);
  if (!range) {
    container.appendChild(h('p', { class: 'muted' }, 'This finding has no time range to draw.'));
    return false;
  }
  const [t0, t1] = range;
  const byNode = new Map();
  const nodeItems = (n) => {
    if (!byNode.has(n)) byNode.set(n, []);
    return byNode.get(n);
  };
  for (const o of Array.isArray(f.objects) ? f.objects : []) if (o.resource === 'nodes' && o.name) nodeItems(o.name);
  const evictions = [], relists = [], rest = [];
  for (const e of ev) {
    if (NODE_ROLES.includes(e.role) && e.name) nodeItems(e.name).push(e);
    else if (e.role === 'eviction') evictions.push(e);
    else if (e.role === 'relist' && (e.user || '').startsWith(NODE_USER) && byNode.has(e.user.slice(NODE_USER.length))) nodeItems(e.user.slice(NODE_USER.length)).push(e);
    else if (e.role === 'relist') relists.push(e);
    else rest.push(e);
  }
  const lost = [...byNode.keys()].sort(byName);
  const shown = lost.slice(0, MAX_NODE_LANES);
  // A finding without lost nodes is the audit feed's own silence (the
  // detector tells it apart from a heartbeat loss): draw nodes that were
  // heartbeating, and the silence across all of them.
  const feedGap = lost.length === 0;

  const notes = [];
  let data = null;
  if (f.cluster) {
    const q = new URLSearchParams({ cluster: f.cluster, since: isoParam(t0), until: isoParam(t1), others: String(feedGap ? 8 : OTHER_NODES) });
    for (const n of shown) q.append('node', n);
    data = await fetchOptional(api('/heartbeats', q), signal, notes, 'The nodes’ heartbeats');
    if (signal && signal.aborted) return false;
  }
  const beatsOf = new Map();
  const others = [];
  for (const nb of data && Array.isArray(data.nodes) ? data.nodes : []) {
    beatsOf.set(nb.node, Array.isArray(nb.beats) ? nb.beats : []);
    if (nb.other) others.push(nb.node);
  }

  width = Math.max(560, width || 900);
  const m = { l: 200, r: 24, t: 22 };
  const laneH = 34;
  const lanes = [
    ...shown.map((n) => ({ kind: 'node', node: n })),
    ...others.map((n) => ({ kind: 'other', node: n })),
    ...(evictions.length ? [{ kind: 'eviction' }] : []),
    ...(relists.length ? [{ kind: 'relist' }] : []),
    ...(rest.length ? [{ kind: 'rest' }] : []),
  ];
  // A little room before the others and the consequences.
  const gapBefore = (i) => (i > 0 && lanes[i].kind !== lanes[i - 1].kind && lanes[i - 1].kind === 'node' ? 22 : 0);
  const laneY = [];
  let yAcc = m.t;
  lanes.forEach((l, i) => { yAcc += gapBefore(i); laneY.push(yAcc + laneH / 2); yAcc += laneH; });
  const axisY = yAcc + 8;
  const height = axisY + 40;
  const x = linear(t0, t1, m.l, width - m.r);
  const inRange = (t) => t >= t0 && t <= t1;

  const summary0 = [];
  const overlay = []; // drawn over the lanes
  const svg = s('svg', { class: 'chart incident heartbeats', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': 'One lane per node: its heartbeats as ticks, the time without heartbeats shaded, and marks where it was marked NotReady, tainted and came back; evicted pods below. The list under the chart says the same.' });
  svg.appendChild(s('text', { class: 'axis-title', x: 12, y: 12 }, feedGap ? 'nodes seen heartbeating' : `nodes that stopped heartbeating (${lost.length})`));
  const fa = parseTime(f.first_seen), fb = parseTime(f.last_seen);
  if (feedGap && Number.isFinite(fa) && Number.isFinite(fb) && fb > fa) {
    const xa = x(Math.max(fa, t0)), xb = x(Math.min(fb, t1));
    overlay.push(s('rect', { class: 'feed-gap', x: xa.toFixed(1), y: m.t - 4, width: Math.max(1, xb - xa).toFixed(1), height: yAcc - m.t + 8 },
      s('title', {}, `no event at all from cluster ${f.cluster || '?'} from ${fmtUTC(fa)} to ${fmtUTC(fb, { date: false })} UTC (${fmtDuration(fb - fa)}): the audit feed was silent, not only the kubelets`)));
    overlay.push(s('text', { class: 'feed-gap-label', x: ((xa + xb) / 2).toFixed(1), y: m.t - 8, 'text-anchor': 'middle' }, `audit feed silent for ${fmtDuration(fb - fa)}`));
    summary0.push(h('li', { class: 'feed-gap' }, h('strong', {}, 'Audit feed silent'), ` from ${fmtUTC(fa, { date: false })} to ${fmtUTC(fb, { date: false })} UTC (${fmtDuration(fb - fa)}): no event from any client, the kubelets’ heartbeats included.`));
  }
  const drop = lost.length ? Math.min(...lost.flatMap((n) => byNode.get(n).filter((e) => e.role === 'last-heartbeat').map(timeOf))) : NaN;
  if (Number.isFinite(drop) && inRange(drop)) {
    svg.appendChild(s('line', { class: 'wave-guide', x1: x(drop), x2: x(drop), y1: m.t - 4, y2: axisY }));
  }

  const summary = summary0;
  lanes.forEach((lane, i) => {
    const ly = laneY[i];
    const g = s('g', { class: ['lane', lane.kind + '-lane'], dataset: { node: lane.node || '', kind: lane.kind } });
    if (i % 2 === 0) g.appendChild(s('rect', { class: 'lane-bg', x: 0, y: ly - laneH / 2, width, height: laneH }));
    g.appendChild(s('line', { class: 'lane-line', x1: m.l, x2: width - m.r, y1: ly, y2: ly }));
    if (lane.kind === 'node' || lane.kind === 'other') {
      const beats = (beatsOf.get(lane.node) || []).filter((b) => inRange(parseTime(b.time)));
      const items = lane.kind === 'node' ? byNode.get(lane.node) : [];
      const every = typicalInterval(beats);
      g.appendChild(s('text', { class: 'lane-label', x: m.l - 8, y: ly - 1, 'text-anchor': 'end' }, clip(lane.node, 28), s('title', {}, lane.node)));
      const gaps = lane.kind === 'node' ? gapsOf(items, beatsOf.get(lane.node)) : [];
      const everyText = Number.isFinite(every) ? `beats every ${fmtDuration(every >= 10e3 ? Math.round(every / 1000) * 1000 : every)}` : '';
      const sub = lane.kind === 'other' && !feedGap ? 'kept heartbeating' : (everyText || (data ? 'no heartbeats read' : ''));
      g.appendChild(s('text', { class: 'lane-sub', x: m.l - 8, y: ly + 11, 'text-anchor': 'end' }, sub));
      for (const gp of gaps) {
        const open = !Number.isFinite(gp.b);
        const a = Math.max(gp.a, t0), b = open ? t1 : Math.min(gp.b, t1);
        if (b <= a) continue;
        const w = x(b) - x(a);
        const text = open ? `${lane.node}: no heartbeat since ${fmtUTC(gp.a)} UTC (still none at the end of the range)`
          : `${lane.node}: no heartbeat for ${fmtDuration(gp.b - gp.a)} (${fmtUTC(gp.a)} – ${fmtUTC(gp.b, { date: false })} UTC)`;
        g.appendChild(s('rect', { class: ['gap', open ? 'open' : ''], x: x(a).toFixed(1), y: ly - laneH / 2 + 4, width: Math.max(1, w).toFixed(1), height: laneH - 8,
          dataset: { from: isoParam(gp.a), to: open ? '' : isoParam(gp.b) } }, s('title', {}, text)));
        if (w > 70) g.appendChild(s('text', { class: 'gap-label', x: (x(a) + w / 2).toFixed(1), y: ly - 7, 'text-anchor': 'middle' }, open ? 'no heartbeat' : fmtDuration(gp.b - gp.a)));
      }
      // One path per kind of tick: thousands of beats stay cheap.
      const paths = { lease: '', status: '', failed: '' };
      for (const b of beats) {
        const px = x(parseTime(b.time)).toFixed(1);
        const k = Number(b.code) >= 400 ? 'failed' : (b.kind === 'status' ? 'status' : 'lease');
        paths[k] += k === 'status' ? `M${px},${ly + 1}V${ly + 9}` : `M${px},${ly - 6}V${ly + 6}`;
      }
      for (const [k, d] of Object.entries(paths)) {
        if (d) g.appendChild(s('path', { class: 'beats beat-' + k, d }, s('title', {}, `${lane.node}: ${k === 'lease' ? 'Lease renewals' : k === 'status' ? 'node status posts' : 'heartbeats answered 409 Conflict (renewals from a stale resourceVersion)'}`)));
      }
      g.dataset.beats = String(beats.length);
      for (const e of items) {
        const px = x(timeOf(e));
        if (e.role === 'not-ready') g.appendChild(mark('triangle', 'not-ready', px, ly - 2, e));
        else if (e.role === 'taint') g.appendChild(mark('square', 'taint', px, ly + 2, e));
        else if (e.role === 'heartbeat-resumed') g.appendChild(mark('dot', 'resumed', px, ly, e));
        else if (e.role === 'last-heartbeat') g.appendChild(mark('bar', 'last-heartbeat', px, ly, e));
        else g.appendChild(mark('ring', 'relist', px, ly, e));
      }
      if (lane.kind === 'node') {
        const parts = [];
        for (const gp of gaps) {
          parts.push(Number.isFinite(gp.b) ? `no heartbeat from ${fmtUTC(gp.a, { date: false })} to ${fmtUTC(gp.b, { date: false })} UTC (${fmtDuration(gp.b - gp.a)})`
            : `no heartbeat since ${fmtUTC(gp.a, { date: false })} UTC`);
        }
        const at = (role) => items.filter((e) => e.role === role).map((e) => fmtUTC(e.time, { date: false, ms: false }));
        if (at('not-ready').length) parts.push('NotReady at ' + at('not-ready').join(', '));
        if (at('taint').length) parts.push('taint written at ' + at('taint').join(', '));
        summary.push(h('li', { dataset: { node: lane.node } }, h('strong', { class: 'mono' }, lane.node), ': ', parts.join('; ') || 'named by the finding'));
      }
    } else {
      const list = lane.kind === 'eviction' ? evictions : lane.kind === 'relist' ? relists : rest;
      const label = lane.kind === 'eviction' ? `pods evicted (${evictions.length})` : lane.kind === 'relist' ? `relists (${relists.length})` : `other evidence (${rest.length})`;
      g.appendChild(s('text', { class: 'lane-label', x: m.l - 8, y: ly + 4, 'text-anchor': 'end' }, label));
      for (const e of list) {
        const px = x(timeOf(e));
        g.appendChild(lane.kind === 'eviction' ? mark('cross', 'eviction', px, ly, e) : mark('ring', lane.kind === 'relist' ? 'relist' : 'other', px, ly, e));
      }
    }
    svg.appendChild(g);
  });

  svg.append(...overlay);
  const ax = s('g', { class: 'axes' });
  timeAxis(ax, x, t0, t1, axisY, width, m.l);
  ax.appendChild(s('text', { class: 'axis-title', x: 12, y: axisY + 16 }, 'time (UTC)'));
  svg.appendChild(ax);

  // The legend names what the chart shows.
  const has = (sel) => svg.querySelector(sel) !== null;
  const legend = h('ul', { class: 'legend evidence-legend', 'aria-label': 'Legend' },
    has('.beat-lease') ? legendItem('mark-beat', 'Lease renewal') : null, has('.beat-status') ? legendItem('mark-beat status', 'node status post') : null,
    has('.beat-failed') ? legendItem('mark-beat failed', 'heartbeat answered 409 Conflict (a stale resourceVersion)') : null,
    has('rect.gap') ? legendItem('mark-gap', 'no heartbeat') : null, has('.feed-gap') ? legendItem('mark-feed-gap', 'no event at all (audit feed gap)') : null,
    has('.mark.last-heartbeat') ? legendItem('mark-last', 'last heartbeat') : null, has('.mark.not-ready') ? legendItem('mark-not-ready', 'marked NotReady') : null,
    has('.mark.taint') ? legendItem('mark-taint', 'taint written (added, or removed on return)') : null,
    has('.mark.resumed') ? legendItem('mark-resumed', 'heartbeat resumed') : null,
    evictions.length ? legendItem('mark-eviction', 'pod evicted', '✕') : null,
    has('.mark.relist') ? legendItem('mark-relist', 'relist') : null,
    others.length && !feedGap ? legendItem('mark-other-node', 'a node that kept heartbeating, for contrast') : null);

  if (evictions.length) {
    const pods = evictions.map((e) => [e.namespace, e.name].filter(Boolean).join('/'));
    summary.push(h('li', { class: 'evictions' }, h('strong', {}, `${evictions.length} pod${evictions.length === 1 ? '' : 's'} evicted`), ': ',
      h('span', { class: 'mono' }, pods.slice(0, 12).join(', ') + (pods.length > 12 ? ', …' : ''))));
  }
  container.append(h('div', { class: 'chart-scroll' }, svg), legend,
    h('ul', { id: 'incident-summary', class: 'watcher-summary small', 'aria-label': 'Nodes and what happened to them' }, ...summary));
  if (lost.length > shown.length) note(container, `${lost.length - shown.length} more nodes stopped heartbeating; the chart shows the first ${shown.length} by name, the Objects list names them all.`);
  for (const n of notes) note(container, n);
  return true;
}

// ---- rv-rollback ------------------------------------------------------------

const rvOf = (e) => {
  const v = e && e.resource_version;
  if (v === undefined || v === null || v === '' || !/^\d+$/.test(String(v))) return NaN;
  return Number(v);
};

// clientName shortens a user for a label: "system:serviceaccount:kube-system:x" → "x (sa)".
function clientName(user) {
  const u = user || '?';
  const sa = /^system:serviceaccount:[^:]+:(.+)$/.exec(u);
  if (sa) return sa[1] + ' (sa)';
  return u.replace(/^system:/, '');
}

export async function drawRVRollback(container, f, width, signal) {
  clear(container);
  const ev = evidenceOf(f);
  const range = timeRange(f, ev, 60e3);
  if (!range) {
    container.appendChild(h('p', { class: 'muted' }, 'This finding has no time range to draw.'));
    return false;
  }
  const [t0, t1] = range;
  width = Math.max(560, width || 900);
  const m = { l: 150, r: 170, t: 16 };
  const notes = [];
  let line = null;
  if (f.cluster) {
    const buckets = Math.max(30, Math.min(400, Math.round((width - m.l - m.r) / 5)));
    const q = new URLSearchParams({ cluster: f.cluster, since: isoParam(t0), until: isoParam(t1), buckets: String(buckets) });
    line = await fetchOptional(api('/resourceversions', q), signal, notes, 'The cluster’s resourceVersions');
    if (signal && signal.aborted) return false;
  }
  const step = line && line.step_ms ? line.step_ms : 0;
  const heads = [], asked = [];
  for (const b of line && Array.isArray(line.buckets) ? line.buckets : []) {
    const t = parseTime(b.t) + step / 2;
    if (Number(b.head) > 0) heads.push([t, Number(b.head)]);
    if (Number(b.asked) > 0) asked.push([t, Number(b.asked)]);
  }
  const sj = f.subjects || {};
  const role = (r) => ev.filter((e) => e.role === r);
  const before = role('head-before').filter((e) => Number.isFinite(rvOf(e)));
  const after = role('head-after').filter((e) => Number.isFinite(rvOf(e)));
  const future = role('future-watch').filter((e) => Number.isFinite(rvOf(e)));
  const conflictsRV = role('conflict').filter((e) => Number.isFinite(rvOf(e)));
  const upperRoles = new Set(['head-before', 'head-after', 'future-watch']);
  const laneEv = ev.filter((e) => !(upperRoles.has(e.role) && Number.isFinite(rvOf(e))) && !conflictsRV.includes(e));
  const laneRoles = [...new Set(laneEv.map((e) => e.role || 'other'))].sort((a, b) => {
    const order = ['conflict', 'relist', 'churn'];
    return ((order.indexOf(a) + 1) || 9) - ((order.indexOf(b) + 1) || 9) || a.localeCompare(b);
  });

  const prevRV = Number(sj.previous_resource_version), newRV = Number(sj.resource_version);
  // The detector's account of the stuck clients: each program, the
  // resourceVersions above the new head it asked for, and for how long.
  const stuck = (Array.isArray(sj.stuck) ? sj.stuck : []).map((c) => ({
    program: String(c.program || '?'), instances: Number(c.instances) || 0, resources: Array.isArray(c.resources) ? c.resources.map(String) : [],
    lo: rvOf({ resource_version: c.min_rv }), hi: rvOf({ resource_version: c.max_rv }), from: parseTime(c.from), until: parseTime(c.until),
  })).filter((c) => Number.isFinite(c.lo) && Number.isFinite(c.hi) && Number.isFinite(c.from));
  const rvs = [...heads.map((p) => p[1]), ...asked.map((p) => p[1]), ...before.map(rvOf), ...after.map(rvOf), ...future.map(rvOf), ...conflictsRV.map(rvOf),
    ...stuck.flatMap((c) => [c.lo, c.hi]),
    ...[prevRV, newRV].filter((v) => Number.isFinite(v) && v > 0)];
  if (!rvs.length) {
    notes.push('Neither the finding nor the store shows a resourceVersion in this range.');
  }
  const lo0 = rvs.length ? Math.min(...rvs) : 0, hi0 = rvs.length ? Math.max(...rvs) : 1;
  const padv = Math.max((hi0 - lo0) * 0.08, 5);
  const lo = Math.max(0, lo0 - padv), hi = hi0 + padv;
  const upperH = 260;
  const laneH = 30;
  const lanesTop = m.t + upperH + 28;
  const axisY = lanesTop + laneRoles.length * laneH + 8;
  const height = axisY + 40;
  const x = linear(t0, t1, m.l, width - m.r);
  const y = linear(lo, hi, m.t + upperH, m.t);
  const clampX = (t) => x(Math.min(Math.max(t, t0), t1));
  const pts = (arr) => arr.map(([t, v]) => `${clampX(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');

  const svg = s('svg', { class: 'chart incident rv-line', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': 'The cluster’s highest resourceVersion over time, its drop, and the clients that asked for resourceVersions above the new head. The list under the chart says the same.' });
  const g = s('g', { class: 'panel-rv' });
  g.appendChild(s('text', { class: 'axis-title', x: 12, y: m.t + 10 }, 'resourceVersion'));
  for (const v of niceTicks(lo, hi, 5)) {
    if (v < lo || v > hi) continue;
    g.appendChild(s('line', { class: 'grid', x1: m.l, x2: width - m.r, y1: y(v), y2: y(v) }));
    g.appendChild(s('text', { class: 'tick-label mono', x: m.l - 8, y: y(v) + 4, 'text-anchor': 'end' }, String(v)));
  }
  g.appendChild(s('line', { class: 'axis-line', x1: m.l, x2: m.l, y1: m.t, y2: m.t + upperH }));

  // The drop: from the last head before to the first head after.
  const hb = before.length ? before[before.length - 1] : null;
  const ha = after.length ? after.find((e) => !hb || timeOf(e) >= timeOf(hb)) || after[0] : null;
  const dropT = ha ? timeOf(ha) : NaN;
  // A safe restore (--bump-revision) makes the head jump up instead.
  const dropped = hb && ha && rvOf(ha) < rvOf(hb);
  if (dropped) {
    // The band of resourceVersions handed out before the restore and not
    // reached again: a client asking for one is "in the future".
    const top = rvOf(hb);
    const edge = [[dropT, rvOf(ha)], ...heads.filter(([t]) => t > dropT).map(([t, v]) => [t, Math.min(v, top)])];
    const P = ([t, v]) => `${clampX(t).toFixed(1)},${y(v).toFixed(1)}`;
    const poly = [P([dropT, top]), P([t1, top]), P([t1, edge[edge.length - 1][1]]), ...edge.slice().reverse().map(P)];
    g.appendChild(s('polygon', { class: 'future-band', points: poly.join(' ') },
      s('title', {}, `resourceVersions ${rvOf(ha)}–${top} were handed out before the restore: a client that asks for one is ahead of the cluster`)));
  }
  // What watches asked for, per bucket: dots, not a line (the highest ask
  // of a bucket jumps between a stuck client's and everyone else's).
  if (asked.length) {
    g.appendChild(s('path', { class: 'rv-asked', d: asked.map(([t, v]) => `M${clampX(t).toFixed(1)},${y(v).toFixed(1)}h0.01`).join('') },
      s('title', {}, 'the highest resourceVersion a watch asked for, per time bucket')));
  }
  if (heads.length > 1) {
    // Break the line at the drop: the head does not pass through the values between.
    // A bucket that holds the drop mixes both sides: in neither part.
    const pre = Number.isFinite(dropT) ? heads.filter(([t]) => t + step / 2 <= dropT) : heads;
    const post = Number.isFinite(dropT) ? heads.filter(([t]) => t - step / 2 >= dropT) : [];
    if (hb && pre.length) pre.push([timeOf(hb), rvOf(hb)]);
    if (ha) post.unshift([timeOf(ha), rvOf(ha)]);
    for (const part of [pre, post]) {
      part.sort((a, b) => a[0] - b[0]);
      if (part.length > 1) g.appendChild(s('polyline', { class: 'rv-head', points: pts(part) }));
    }
  }
  for (const [t, v] of heads) {
    g.appendChild(s('circle', { class: 'rv-head-point', cx: clampX(t).toFixed(1), cy: y(v).toFixed(1), r: 1.8 },
      s('title', {}, `${fmtUTC(t - step / 2, { ms: false })} UTC: highest resourceVersion ${v}`)));
  }
  if (hb && ha) {
    const xa = x(timeOf(hb)), xb = x(dropT);
    g.appendChild(s('line', { class: 'drop-arrow', x1: xa.toFixed(1), y1: y(rvOf(hb)).toFixed(1), x2: xb.toFixed(1), y2: (y(rvOf(ha)) - (rvOf(ha) < rvOf(hb) ? 6 : -6)).toFixed(1) }));
    const dir = dropped ? 1 : -1; // the arrow's head points down for a drop, up for a jump
    g.appendChild(s('path', { class: 'drop-head', d: `M${xb.toFixed(1)},${y(rvOf(ha)).toFixed(1)} l-5,${-9 * dir} l10,0 z` }));
    const by = Math.abs(rvOf(hb) - rvOf(ha));
    g.appendChild(s('text', { class: 'drop-label', x: (xb + 8).toFixed(1), y: ((y(rvOf(hb)) + y(rvOf(ha))) / 2).toFixed(1) }, `${dropped ? 'dropped' : 'jumped'} by ${by}`));
  }
  for (const e of before) {
    g.appendChild(mark('dot', 'head-before', x(timeOf(e)), y(rvOf(e)), e));
  }
  for (const e of after) {
    g.appendChild(mark('dot', 'head-after', x(timeOf(e)), y(rvOf(e)), e));
  }
  if (hb) g.appendChild(s('text', { class: 'point-label mono label-head-before', x: (x(timeOf(hb)) - 8).toFixed(1), y: (y(rvOf(hb)) - 9).toFixed(1), 'text-anchor': 'end' }, 'head ' + hb.resource_version));
  if (ha) g.appendChild(s('text', { class: 'point-label mono label-head-after', x: (x(dropT) + 8).toFixed(1), y: (y(rvOf(ha)) + 16).toFixed(1) }, 'head ' + ha.resource_version));

  // The clients above: the detector's stuck programs, each a band from
  // its first to its last request at the resourceVersions it asked for;
  // else one series per client of the future-watch evidence. Labelled at
  // the right edge.
  const clients = new Map();
  for (const e of future) {
    const k = e.user || '?';
    if (!clients.has(k)) clients.set(k, []);
    clients.get(k).push(e);
  }
  const labels = [];
  if (stuck.length) {
    for (const e of future) g.appendChild(mark('dot', 'future-watch', x(timeOf(e)), y(rvOf(e)), e));
    stuck.slice().sort((a, b) => b.hi - a.hi || byName(a.program, b.program)).forEach((c, i) => {
      const cls = 'c' + (i % 9);
      const cg = s('g', { class: 'client stuck', dataset: { user: c.program } });
      const until = Number.isFinite(c.until) ? c.until : c.from;
      const xa = clampX(c.from), xb = Math.max(clampX(until), xa + 2), ya = y(c.hi), yb = Math.max(y(c.lo), ya + 3);
      cg.appendChild(s('rect', { class: 'client-band ' + cls, x: xa.toFixed(1), y: ya.toFixed(1), width: (xb - xa).toFixed(1), height: (yb - ya).toFixed(1) },
        s('title', {}, `${c.program}${c.instances > 1 ? ` (${c.instances} instances)` : ''} on ${c.resources.join(', ')}: asked for resourceVersions ` +
          `${c.lo}–${c.hi}, above the new head, from ${fmtUTC(c.from)} to ${fmtUTC(until, { date: false })} UTC (${fmtDuration(until - c.from)})`)));
      labels.push({ g: cg, cls, name: c.program + (c.instances > 1 ? ` ×${c.instances}` : ''), y: (ya + yb) / 2, x: xb, title: `${c.program}: resourceVersions ${c.lo}–${c.hi}` });
      g.appendChild(cg);
    });
  } else {
    [...clients.entries()].sort((a, b) => rvOf(b[1][0]) - rvOf(a[1][0]) || byName(a[0], b[0])).forEach(([user, list], i) => {
      const cg = s('g', { class: 'client', dataset: { user } });
      const cls = 'c' + (i % 9);
      const p = list.map((e) => [timeOf(e), rvOf(e)]);
      if (p.length > 1) cg.appendChild(s('polyline', { class: 'client-line ' + cls, points: pts(p) }));
      for (const e of list) cg.appendChild(mark('dot', 'future-watch ' + cls, x(timeOf(e)), y(rvOf(e)), e));
      const last = list[list.length - 1];
      labels.push({ g: cg, cls, name: clientName(user), y: y(rvOf(last)), x: x(timeOf(last)), title: `${user} asked for resourceVersion ${last.resource_version}` });
      g.appendChild(cg);
    });
  }
  // Labels in the right margin, pushed apart so that none overlaps.
  labels.sort((a, b) => a.y - b.y);
  let prevY = -Infinity;
  for (const l of labels) {
    const ly = Math.max(l.y, prevY + 13);
    prevY = ly;
    const lx = width - m.r + 8;
    l.g.appendChild(s('line', { class: 'client-leader ' + l.cls, x1: l.x.toFixed(1), x2: (lx - 3).toFixed(1), y1: l.y.toFixed(1), y2: (ly - 4).toFixed(1) }));
    l.g.appendChild(s('text', { class: 'client-label ' + l.cls, x: lx, y: ly.toFixed(1) }, clip(l.name, 24), s('title', {}, l.title)));
  }
  for (const e of conflictsRV) g.appendChild(mark('cross', 'conflict', x(timeOf(e)), y(rvOf(e)), e));
  svg.appendChild(g);

  if (Number.isFinite(dropT)) {
    svg.appendChild(s('line', { class: 'wave-guide', x1: x(dropT), x2: x(dropT), y1: m.t, y2: axisY }));
  }
  const LANE_LABEL = { conflict: 'conflicts (409)', relist: 'relists', churn: 'objects churned' };
  laneRoles.forEach((r, i) => {
    const ly = lanesTop + i * laneH + laneH / 2;
    const list = laneEv.filter((e) => (e.role || 'other') === r);
    const lg = s('g', { class: 'lane', dataset: { role: r } });
    if (i % 2 === 0) lg.appendChild(s('rect', { class: 'lane-bg', x: m.l, y: ly - laneH / 2, width: width - m.l - m.r, height: laneH }));
    lg.appendChild(s('line', { class: 'lane-line', x1: m.l, x2: width - m.r, y1: ly, y2: ly }));
    lg.appendChild(s('text', { class: 'lane-label', x: m.l - 8, y: ly + 4, 'text-anchor': 'end' }, `${LANE_LABEL[r] || clip(r, 16)} (${list.length})`));
    for (const e of list) {
      const px = x(timeOf(e));
      if (r === 'conflict') lg.appendChild(mark('cross', 'conflict', px, ly, e));
      else if (r === 'churn' && /^delete/.test(e.verb || '')) lg.appendChild(mark('cross', 'churn-delete', px, ly, e));
      else if (r === 'churn') lg.appendChild(mark('dot', 'churn-write', px, ly, e));
      else lg.appendChild(mark('ring', r === 'relist' ? 'relist' : 'other', px, ly, e));
    }
    svg.appendChild(lg);
  });

  const ax = s('g', { class: 'axes' });
  timeAxis(ax, x, t0, t1, axisY, width, m.l);
  ax.appendChild(s('text', { class: 'axis-title', x: 12, y: axisY + 16 }, 'time (UTC)'));
  svg.appendChild(ax);

  const legend = h('ul', { class: 'legend evidence-legend', 'aria-label': 'Legend' },
    heads.length ? legendItem('mark-rv-head', 'highest resourceVersion the apiserver answered with') : null,
    asked.length ? legendItem('mark-rv-asked', 'highest resourceVersion a watch asked for') : null,
    hb ? legendItem('mark-head-before', 'head before the drop') : null,
    ha ? legendItem('mark-head-after', 'head after the drop') : null,
    dropped ? legendItem('mark-future-band', 'resourceVersions handed out before the restore') : null,
    stuck.length ? legendItem('mark-client-band', 'a client stuck above the new head (first to last request)') : null,
    future.length ? legendItem('mark-future-watch' + (stuck.length ? ' stuck' : ''), stuck.length ? 'a watch from above the new head' : 'a client watching from above the new head') : null,
    ev.some((e) => e.role === 'conflict') ? legendItem('mark-conflict', 'conflict (409)', '✕') : null);

  const summary = [];
  if (hb || ha || Number.isFinite(prevRV)) {
    const b = hb ? rvOf(hb) : prevRV, a = ha ? rvOf(ha) : newRV;
    summary.push(h('li', { class: 'drop' }, h('strong', {}, 'Head '), h('span', { class: 'mono' }, String(b)),
      hb ? ` at ${fmtUTC(hb.time, { date: false })} UTC` : '', ' → ', h('span', { class: 'mono' }, String(a)),
      ha ? ` at ${fmtUTC(ha.time, { date: false })} UTC` : '', Number.isFinite(a) && Number.isFinite(b) ? (a < b ? ` (dropped by ${b - a})` : ` (jumped by ${a - b})`) : ''));
  }
  for (const c of stuck) {
    const until = Number.isFinite(c.until) ? c.until : c.from;
    summary.push(h('li', { class: 'client-line-text', dataset: { user: c.program } }, h('strong', { class: 'mono' }, c.program),
      c.instances > 1 ? ` (${c.instances} instances)` : '', ` on ${c.resources.join(', ')}: asked for resourceVersions `,
      h('span', { class: 'mono' }, c.lo === c.hi ? String(c.lo) : `${c.lo}–${c.hi}`),
      `, above the new head, ${fmtUTC(c.from, { date: false, ms: false })} – ${fmtUTC(until, { date: false, ms: false })} UTC (${fmtDuration(until - c.from)})`));
  }
  for (const [user, list] of stuck.length ? [] : clients) {
    const rvList = [...new Set(list.map((e) => e.resource_version))];
    const a = timeOf(list[0]), b = timeOf(list[list.length - 1]);
    summary.push(h('li', { class: 'client-line-text', dataset: { user } }, h('strong', { class: 'mono' }, user), ': watched from resourceVersion ',
      h('span', { class: 'mono' }, rvList.slice(0, 5).join(', ') + (rvList.length > 5 ? ', …' : '')),
      ` (${list.length} watch${list.length === 1 ? '' : 'es'}, ${fmtUTC(a, { date: false, ms: false })}${b > a ? ' – ' + fmtUTC(b, { date: false, ms: false }) : ''} UTC), above the new head`));
  }
  for (const r of laneRoles) {
    const n = laneEv.filter((e) => (e.role || 'other') === r).length;
    summary.push(h('li', {}, `${n} ${LANE_LABEL[r] || r}`));
  }
  container.append(h('div', { class: 'chart-scroll' }, svg), legend,
    h('ul', { id: 'incident-summary', class: 'watcher-summary small', 'aria-label': 'The drop and the clients above it' }, ...summary));
  for (const n of notes) note(container, n);
  return true;
}
