// SVG charts: the stacked request histogram, the evidence timeline of a
// finding and the watch strip of an object's history. Built with
// createElementNS only; labels are text nodes.

import { h, s, clear, fmtUTC, fmtNum, parseTime, shortUA, fmtDuration } from './dom.js';

// ---- scales and ticks -----------------------------------------------------

const SEC = 1000, MIN = 60 * SEC, HOUR = 60 * MIN, DAY = 24 * HOUR;
const TIME_STEPS = [
  1, 2, 5, 10, 20, 50, 100, 200, 500,
  SEC, 2 * SEC, 5 * SEC, 10 * SEC, 15 * SEC, 30 * SEC,
  MIN, 2 * MIN, 5 * MIN, 10 * MIN, 15 * MIN, 30 * MIN,
  HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR,
  DAY, 2 * DAY, 7 * DAY, 14 * DAY, 30 * DAY,
];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const pad = (n, w = 2) => String(n).padStart(w, '0');

export function linear(d0, d1, r0, r1) {
  const k = d1 === d0 ? 0 : (r1 - r0) / (d1 - d0);
  const f = (v) => r0 + (v - d0) * k;
  f.invert = (px) => (k === 0 ? d0 : d0 + (px - r0) / k);
  return f;
}

// timeTicks returns [{t, label, date}] at round UTC times, about one per
// minPx pixels.
export function timeTicks(t0, t1, widthPx, minPx = 90) {
  const span = t1 - t0;
  if (!(span > 0)) return [];
  const maxTicks = Math.max(2, Math.floor(widthPx / minPx));
  const step = TIME_STEPS.find((st) => span / st <= maxTicks) || Math.ceil(span / maxTicks / DAY) * DAY;
  const out = [];
  let prevDay = '';
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const d = new Date(t);
    let label;
    if (step < SEC) label = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.${pad(d.getUTCMilliseconds(), 3)}`;
    else if (step < MIN) label = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
    else if (step < DAY) label = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`;
    else label = `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()}`;
    const day = `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()}`;
    const date = step < DAY && day !== prevDay ? day : '';
    prevDay = day;
    out.push({ t, label, date });
  }
  return out;
}

// niceTicks returns round values covering [lo, hi], about n of them.
export function niceTicks(lo, hi, n = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toFixed(10));
  return out;
}

export function timeAxis(g, x, t0, t1, y, width, left, { grid = 0 } = {}) {
  const ticks = timeTicks(t0, t1, width - left);
  g.appendChild(s('line', { class: 'axis-line', x1: x(t0), x2: x(t1), y1: y, y2: y }));
  for (const tk of ticks) {
    const px = x(tk.t);
    if (grid) g.appendChild(s('line', { class: 'grid', x1: px, x2: px, y1: grid, y2: y }));
    g.appendChild(s('line', { class: 'tick', x1: px, x2: px, y1: y, y2: y + 4 }));
    const label = s('text', { class: 'tick-label', x: px, y: y + 16, 'text-anchor': 'middle' }, tk.label);
    g.appendChild(label);
    if (tk.date) g.appendChild(s('text', { class: 'tick-label tick-date', x: px, y: y + 28, 'text-anchor': 'middle' }, tk.date));
  }
}

// ---- tooltip --------------------------------------------------------------

export function tooltip() {
  let el = document.getElementById('tooltip');
  if (!el) {
    el = h('div', { id: 'tooltip', role: 'tooltip', hidden: true });
    document.body.appendChild(el);
  }
  return {
    show(clientX, clientY, ...content) {
      clear(el);
      for (const c of content) el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
      el.hidden = false;
      const r = el.getBoundingClientRect();
      let lx = clientX + 14, ly = clientY + 14;
      if (lx + r.width > window.innerWidth - 8) lx = clientX - r.width - 14;
      if (ly + r.height > window.innerHeight - 8) ly = clientY - r.height - 14;
      el.style.left = Math.max(4, lx) + 'px';
      el.style.top = Math.max(4, ly) + 'px';
    },
    hide() { el.hidden = true; },
  };
}

// seriesClass maps series i of n to a palette class; "(other)" is grey.
export function seriesClass(key, i) {
  return key === '(other)' ? 's-other' : 's' + (i % 9);
}

// ---- stacked histogram ----------------------------------------------------

// drawHistogram renders data (the /api/v1/histogram answer) into container.
// opts: width, onZoom(t0, t1) after a drag or keyboard zoom,
// onZoomOut(), onSeries(key) when a legend entry is chosen.
export function drawHistogram(container, data, opts) {
  const width = Math.max(320, opts.width || 800);
  const height = 220;
  const m = { l: 52, r: 14, t: 12, b: 36 };
  const t0 = parseTime(data.since), t1 = parseTime(data.until);
  const step = data.step_ms || ((t1 - t0) / Math.max(1, data.buckets.length));
  const series = data.series || [];
  const buckets = data.buckets || [];
  const n = buckets.length;
  const totals = new Array(n);
  let ymax = 0;
  for (let i = 0; i < n; i++) {
    let sum = 0;
    const c = buckets[i].counts || [];
    for (let j = 0; j < c.length; j++) sum += c[j];
    totals[i] = sum;
    if (sum > ymax) ymax = sum;
  }
  const x = linear(t0, t1, m.l, width - m.r);
  const yt = niceTicks(0, Math.max(ymax, 1), 4).filter(Number.isInteger);
  const ytop = Math.max(yt[yt.length - 1], 1);
  const y = linear(0, ytop, height - m.b, m.t);
  const cls = series.map((se, i) => seriesClass(se.key, i));

  const svg = s('svg', {
    class: 'chart histogram', width, height, viewBox: `0 0 ${width} ${height}`,
    role: 'img', tabindex: 0,
    'aria-label': `Audit events over time, stacked by ${data.by}: ${fmtNum(data.total)} events. Arrow keys inspect buckets, Enter zooms in, minus zooms out.`,
  });
  const axes = s('g', { class: 'axes' });
  for (const v of yt) {
    axes.appendChild(s('line', { class: 'grid', x1: m.l, x2: width - m.r, y1: y(v), y2: y(v) }));
    axes.appendChild(s('text', { class: 'tick-label', x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, fmtNum(v)));
  }
  timeAxis(axes, x, t0, t1, height - m.b, width, m.l);
  svg.appendChild(axes);

  const bars = s('g', { class: 'bars' });
  const bw = (width - m.l - m.r) / Math.max(1, n);
  const gap = bw > 4 ? 1 : 0;
  for (let i = 0; i < n; i++) {
    if (!totals[i]) continue;
    const c = buckets[i].counts || [];
    const bx = m.l + i * bw + gap / 2;
    let acc = 0;
    for (let j = 0; j < c.length; j++) {
      const v = c[j];
      if (!v) continue;
      const yTop = y(acc + v), yBot = y(acc);
      acc += v;
      bars.appendChild(s('rect', {
        class: 'bar ' + cls[j], 'data-series': series[j] ? series[j].key : '', x: bx.toFixed(2),
        y: yTop.toFixed(2), width: Math.max(1, bw - gap).toFixed(2), height: Math.max(0.5, yBot - yTop).toFixed(2),
      }));
    }
  }
  svg.appendChild(bars);
  if (!data.total) {
    svg.appendChild(s('text', { class: 'empty-label', x: (m.l + width - m.r) / 2, y: height / 2 - 10, 'text-anchor': 'middle' },
      'No events in this window'));
  }

  // Interaction: hover band, selection, overlay that takes the pointer.
  const band = s('rect', { class: 'hover-band', x: 0, y: m.t, width: Math.max(1, bw), height: height - m.t - m.b, visibility: 'hidden' });
  const sel = s('rect', { class: 'selection', x: 0, y: m.t, width: 0, height: height - m.t - m.b, visibility: 'hidden' });
  const overlay = s('rect', { class: 'overlay', x: m.l, y: m.t, width: width - m.l - m.r, height: height - m.t - m.b });
  svg.append(band, sel, overlay);

  const tip = tooltip();
  let cursor = -1;
  const showBucket = (i, cx, cy) => {
    if (i < 0 || i >= n) return;
    cursor = i;
    band.setAttribute('x', (m.l + i * bw).toFixed(2));
    band.setAttribute('visibility', 'visible');
    const bt = t0 + i * step;
    const rows = [];
    const c = buckets[i].counts || [];
    for (let j = c.length - 1; j >= 0; j--) {
      if (!c[j]) continue;
      rows.push(h('div', { class: 'tip-row' }, h('span', { class: 'sw ' + cls[j] }), h('span', { class: 'tip-key' }, series[j] ? series[j].key : '?'), h('span', { class: 'tip-val' }, fmtNum(c[j]))));
    }
    tip.show(cx, cy,
      h('div', { class: 'tip-title' }, `${fmtUTC(bt, { ms: step < SEC })} – ${fmtUTC(bt + step, { ms: step < SEC, date: false })} UTC`),
      h('div', { class: 'tip-sub' }, `local ${new Date(bt).toLocaleTimeString(undefined, { hour12: false })} · step ${fmtDuration(step)}`),
      ...rows,
      h('div', { class: 'tip-total' }, h('span', {}, 'total'), h('span', { class: 'tip-val' }, fmtNum(totals[i]))));
  };
  const hide = () => { band.setAttribute('visibility', 'hidden'); tip.hide(); };
  const pxOf = (ev) => {
    const r = svg.getBoundingClientRect();
    return Math.min(width - m.r, Math.max(m.l, (ev.clientX - r.left) * (width / r.width)));
  };
  let drag = null;
  overlay.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 0) return;
    drag = { x0: pxOf(ev) };
    overlay.setPointerCapture(ev.pointerId);
    ev.preventDefault();
  });
  overlay.addEventListener('pointermove', (ev) => {
    const px = pxOf(ev);
    if (drag) {
      const a = Math.min(drag.x0, px), b = Math.max(drag.x0, px);
      sel.setAttribute('x', a.toFixed(1));
      sel.setAttribute('width', (b - a).toFixed(1));
      sel.setAttribute('visibility', 'visible');
      tip.show(ev.clientX, ev.clientY, h('div', { class: 'tip-title' }, `${fmtUTC(x.invert(a), { ms: false })} – ${fmtUTC(x.invert(b), { ms: false, date: false })} UTC`), h('div', { class: 'tip-sub' }, 'release to zoom'));
      return;
    }
    showBucket(Math.floor((px - m.l) / bw), ev.clientX, ev.clientY);
  });
  const endDrag = (ev, cancel) => {
    if (!drag) return;
    const px = pxOf(ev);
    const a = Math.min(drag.x0, px), b = Math.max(drag.x0, px);
    drag = null;
    sel.setAttribute('visibility', 'hidden');
    hide();
    if (!cancel && b - a >= 4 && opts.onZoom) opts.onZoom(x.invert(a), x.invert(b));
  };
  overlay.addEventListener('pointerup', (ev) => endDrag(ev, false));
  overlay.addEventListener('pointercancel', (ev) => endDrag(ev, true));
  overlay.addEventListener('pointerleave', () => { if (!drag) hide(); });
  svg.addEventListener('blur', hide);
  svg.addEventListener('keydown', (ev) => {
    const r = svg.getBoundingClientRect();
    const at = (i) => showBucket(i, r.left + (m.l + (i + 0.5) * bw) * (r.width / width), r.top + r.height * 0.3);
    if (ev.key === 'ArrowRight' || ev.key === 'ArrowLeft') {
      const d = (ev.key === 'ArrowRight' ? 1 : -1) * (ev.shiftKey ? 10 : 1);
      at(Math.min(n - 1, Math.max(0, (cursor < 0 ? (d > 0 ? -1 : n) : cursor) + d)));
      ev.preventDefault();
    } else if (ev.key === 'Enter' && cursor >= 0 && opts.onZoom) {
      const k = Math.max(2, Math.round(n / 16));
      const a = Math.max(0, cursor - k), b = Math.min(n, cursor + k + 1);
      hide();
      opts.onZoom(t0 + a * step, t0 + b * step);
      ev.preventDefault();
    } else if ((ev.key === '-' || ev.key === '_') && opts.onZoomOut) {
      hide();
      opts.onZoomOut();
      ev.preventDefault();
    } else if (ev.key === 'Escape') {
      hide();
    }
  });

  const legend = h('ul', { class: 'legend', 'aria-label': 'Series' });
  series.forEach((se, i) => {
    const body = [h('span', { class: 'sw ' + cls[i] }), h('span', { class: 'lg-key' }, se.key), h('span', { class: 'lg-total' }, fmtNum(se.total))];
    legend.appendChild(h('li', {},
      se.key === '(other)' || !opts.onSeries
        ? h('span', { class: 'lg-item' }, ...body)
        : h('button', { type: 'button', class: 'lg-item', title: `Filter on ${data.by} = ${se.key}`, onclick: () => opts.onSeries(se.key) }, ...body)));
  });

  clear(container);
  container.append(svg, legend);
  return svg;
}

// ---- finding evidence -----------------------------------------------------

const UPPER_ROLES = ['static-watch', 'rv-advanced', 'watch-before', 'watch-regressed'];
const ROLE_LABEL = {
  'static-watch': 'culprit’s watch restarts (stale resourceVersions: a low line)',
  'rv-advanced': 'other clients and writes (resourceVersion moves on: rising line)',
  'watch-before': 'watch from the highest resourceVersion used before',
  'watch-regressed': 'watch resumed from a lower resourceVersion',
};

const rvNum = (e) => {
  const v = e.resource_version;
  if (v === undefined || v === null || v === '') return NaN;
  const n = Number(v);
  return Number.isFinite(n) ? n : NaN;
};
const laneKind = (role) => (/-delete$/.test(role) ? 'delete' : /-create$/.test(role) ? 'create' : 'other');

function evTitle(e) {
  const obj = [e.resource, [e.namespace, e.name].filter(Boolean).join('/')].filter(Boolean).join(' ');
  const rv = e.resource_version ? ` · RV ${e.resource_version}` : '';
  return `${e.role}: ${e.verb} ${obj}\n${fmtUTC(e.time)} UTC${rv} · code ${e.code ?? '—'}\n${e.user || ''}`;
}

// drawEvidence draws a finding's evidence: RVs over time above, one lane
// per object below, on one time axis. Returns false when there is none.
export function drawEvidence(container, finding, width) {
  const ev = (finding.evidence || []).filter((e) => Number.isFinite(parseTime(e.time)));
  clear(container);
  if (!ev.length) {
    container.appendChild(h('p', { class: 'muted' }, 'This finding has no evidence events.'));
    return false;
  }
  width = Math.max(480, width || 900);
  const upper = ev.filter((e) => Number.isFinite(rvNum(e)) && (UPPER_ROLES.includes(e.role) || laneKind(e.role) === 'other'));
  // RVs carried by the rest of the evidence (writes such as endpoints
  // creates): the cluster's resourceVersion moving on, drawn faintly.
  const observed = upper.length ? ev.filter((e) => !upper.includes(e) && Number.isFinite(rvNum(e))) : [];
  const laneEv = ev.filter((e) => !upper.includes(e));
  const lanes = new Map();
  for (const e of laneEv) {
    const kind = laneKind(e.role);
    const key = kind === 'other' ? e.role : `${e.namespace || ''}/${e.name || ''}`;
    if (!lanes.has(key)) lanes.set(key, { key, kind, items: [] });
    lanes.get(key).items.push(e);
  }
  const laneList = [...lanes.values()].sort((a, b) => a.key.localeCompare(b.key));

  let t0 = Infinity, t1 = -Infinity;
  for (const e of ev) { const t = parseTime(e.time); if (t < t0) t0 = t; if (t > t1) t1 = t; }
  const span = Math.max(t1 - t0, 2000);
  const mid = (t0 + t1) / 2;
  t0 = mid - span * 0.53; t1 = mid + span * 0.53;

  const m = { l: 150, r: 24, t: 16 };
  const upperH = upper.length ? 190 : 0;
  const laneH = 32;
  const lanesTop = m.t + upperH + (upper.length ? 24 : 0);
  const axisY = lanesTop + laneList.length * laneH + 8;
  const height = axisY + 40;
  const x = linear(t0, t1, m.l, width - m.r);

  const svg = s('svg', { class: 'chart evidence', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': 'Evidence timeline: resourceVersions of watches and writes over time, and object deletions and creations' });

  // Guides at each watch restart, through every panel.
  const guides = s('g', { class: 'guides' });
  for (const e of ev) {
    if (e.role !== 'static-watch' && e.role !== 'watch-regressed') continue;
    const px = x(parseTime(e.time));
    guides.appendChild(s('line', { class: 'guide', x1: px, x2: px, y1: m.t, y2: axisY }));
  }
  svg.appendChild(guides);

  if (upper.length) {
    const rvs = upper.concat(observed).map(rvNum);
    let lo = Math.min(...rvs), hi = Math.max(...rvs);
    const padv = Math.max((hi - lo) * 0.15, 5);
    lo -= padv; hi += padv;
    const yt = niceTicks(lo, hi, 4);
    const y = linear(lo, hi, m.t + upperH, m.t);
    const g = s('g', { class: 'panel-rv' });
    g.appendChild(s('text', { class: 'axis-title', x: 12, y: m.t + 10 }, 'resourceVersion'));
    for (const v of yt) {
      if (v < lo || v > hi) continue;
      g.appendChild(s('line', { class: 'grid', x1: m.l, x2: width - m.r, y1: y(v), y2: y(v) }));
      g.appendChild(s('text', { class: 'tick-label mono', x: m.l - 8, y: y(v) + 4, 'text-anchor': 'end' }, String(v)));
    }
    g.appendChild(s('line', { class: 'axis-line', x1: m.l, x2: m.l, y1: m.t, y2: m.t + upperH }));
    const byRole = new Map();
    for (const e of upper) {
      const r = UPPER_ROLES.includes(e.role) ? e.role : 'other-role';
      if (!byRole.has(r)) byRole.set(r, []);
      byRole.get(r).push(e);
    }
    for (const arr of byRole.values()) arr.sort((a, b) => parseTime(a.time) - parseTime(b.time));
    const pts = (arr) => arr.map((e) => `${x(parseTime(e.time)).toFixed(1)},${y(rvNum(e)).toFixed(1)}`);
    if (observed.length) {
      const obs = observed.slice().sort((a, b) => parseTime(a.time) - parseTime(b.time));
      if (obs.length > 1) g.appendChild(s('polyline', { class: 'series-line line-rv-observed', points: pts(obs).join(' ') }));
      for (const e of obs) {
        g.appendChild(s('circle', { class: 'point rv-observed', cx: x(parseTime(e.time)).toFixed(1), cy: y(rvNum(e)).toFixed(1), r: 3, 'data-audit-id': e.audit_id || '' },
          s('title', {}, evTitle(e))));
      }
    }
    for (const role of ['rv-advanced', 'static-watch']) {
      const arr = byRole.get(role);
      if (arr && arr.length > 1) g.appendChild(s('polyline', { class: 'series-line line-' + role, points: pts(arr).join(' ') }));
    }
    // Regression: arrow from each "before" to the following "regressed".
    const before = byRole.get('watch-before') || [];
    for (const r of byRole.get('watch-regressed') || []) {
      const tr = parseTime(r.time);
      const b = before.filter((e) => parseTime(e.time) <= tr).pop() || before[0];
      if (!b) continue;
      g.appendChild(s('line', { class: 'regress-arrow', x1: x(parseTime(b.time)), y1: y(rvNum(b)), x2: x(tr), y2: y(rvNum(r)) }));
    }
    for (const [role, arr] of byRole) {
      for (const e of arr) {
        const cx = x(parseTime(e.time)), cy = y(rvNum(e));
        g.appendChild(s('circle', { class: 'point ' + role, cx: cx.toFixed(1), cy: cy.toFixed(1), r: 5.5, 'data-audit-id': e.audit_id || '' },
          s('title', {}, evTitle(e))));
      }
    }
    // Label the RV of each series once, at its last point.
    for (const [role, arr] of byRole) {
      const seen = new Set();
      for (const e of arr.slice().reverse()) {
        const v = rvNum(e);
        if (seen.has(v)) continue;
        seen.add(v);
        const cx = x(parseTime(e.time)), cy = y(v);
        const right = cx < width - 90;
        g.appendChild(s('text', { class: 'point-label mono label-' + role, x: right ? cx + 9 : cx - 9, y: cy - 8, 'text-anchor': right ? 'start' : 'end' }, 'RV ' + e.resource_version));
        if (seen.size >= 3) break;
      }
    }
    svg.appendChild(g);
  }

  laneList.forEach((lane, i) => {
    const ly = lanesTop + i * laneH + laneH / 2;
    const g = s('g', { class: 'lane', 'data-object': lane.key });
    if (i % 2 === 0) g.appendChild(s('rect', { class: 'lane-bg', x: m.l, y: ly - laneH / 2, width: width - m.l - m.r, height: laneH }));
    g.appendChild(s('text', { class: 'lane-label mono', x: m.l - 8, y: ly + 4, 'text-anchor': 'end' }, lane.key.length > 22 ? '…' + lane.key.slice(-21) : lane.key,
      s('title', {}, lane.key)));
    g.appendChild(s('line', { class: 'lane-line', x1: m.l, x2: width - m.r, y1: ly, y2: ly }));
    // The object's outage: from each delete to the next create.
    const items = lane.items.slice().sort((a, b) => parseTime(a.time) - parseTime(b.time));
    for (let k = 0; k < items.length; k++) {
      if (laneKind(items[k].role) !== 'delete') continue;
      const next = items.slice(k + 1).find((e) => laneKind(e.role) === 'create');
      if (!next) continue;
      const a = parseTime(items[k].time), b = parseTime(next.time);
      g.appendChild(s('line', { class: 'outage', x1: x(a).toFixed(1), x2: x(b).toFixed(1), y1: ly, y2: ly },
        s('title', {}, `${lane.key} gone for ${fmtDuration(b - a)}`)));
    }
    for (const e of lane.items) {
      const px = x(parseTime(e.time));
      const kind = laneKind(e.role);
      const title = s('title', {}, evTitle(e));
      if (kind === 'delete') {
        const d = 4.5, cy = ly - 5;
        g.appendChild(s('path', { class: 'marker delete', d: `M${(px - d).toFixed(1)},${cy - d}L${(px + d).toFixed(1)},${cy + d}M${(px - d).toFixed(1)},${cy + d}L${(px + d).toFixed(1)},${cy - d}`, 'data-audit-id': e.audit_id || '' }, title));
      } else if (kind === 'create') {
        g.appendChild(s('circle', { class: 'marker create', cx: px.toFixed(1), cy: ly + 5, r: 4.5, 'data-audit-id': e.audit_id || '' }, title));
      } else {
        g.appendChild(s('rect', { class: 'marker other', x: (px - 4).toFixed(1), y: ly - 4, width: 8, height: 8, 'data-audit-id': e.audit_id || '' }, title));
      }
    }
    svg.appendChild(g);
  });
  if (laneList.length) {
    svg.appendChild(s('text', { class: 'axis-title', x: 12, y: lanesTop - 6 }, 'objects'));
  }

  const ax = s('g', { class: 'axes' });
  timeAxis(ax, x, t0, t1, axisY, width, m.l);
  ax.appendChild(s('text', { class: 'axis-title', x: 12, y: axisY + 16 }, 'time (UTC)'));
  svg.appendChild(ax);

  const roles = new Set(ev.map((e) => e.role));
  const legend = h('ul', { class: 'legend evidence-legend', 'aria-label': 'Legend' });
  for (const role of UPPER_ROLES) {
    if (!upper.some((e) => e.role === role)) continue;
    legend.appendChild(h('li', {}, h('span', { class: 'lg-item' }, h('span', { class: 'lg-mark mark-' + role }), h('span', { class: 'lg-key mono' }, role), h('span', { class: 'lg-desc' }, ROLE_LABEL[role]))));
  }
  if (observed.length) legend.appendChild(h('li', {}, h('span', { class: 'lg-item' }, h('span', { class: 'lg-mark mark-rv-observed' }), h('span', { class: 'lg-key' }, 'RV of the other evidence (writes)'))));
  if ([...roles].some((r) => /-delete$/.test(r))) legend.appendChild(h('li', {}, h('span', { class: 'lg-item' }, h('span', { class: 'lg-mark mark-delete' }, '✕'), h('span', { class: 'lg-key' }, 'deleted'))));
  if ([...roles].some((r) => /-create$/.test(r))) legend.appendChild(h('li', {}, h('span', { class: 'lg-item' }, h('span', { class: 'lg-mark mark-create' }, '●'), h('span', { class: 'lg-key' }, 'created'))));
  if (svg.querySelector('.outage')) legend.appendChild(h('li', {}, h('span', { class: 'lg-item' }, h('span', { class: 'lg-mark mark-outage' }), h('span', { class: 'lg-key' }, 'object missing'))));
  if (guides.childNodes.length) legend.appendChild(h('li', {}, h('span', { class: 'lg-item' }, h('span', { class: 'lg-mark mark-guide' }), h('span', { class: 'lg-key' }, 'watch restart'))));

  const scroll = h('div', { class: 'chart-scroll' }, svg);
  container.append(scroll, legend);
  return true;
}

// ---- object history strip -------------------------------------------------

const VERBS = ['create', 'update', 'patch', 'delete', 'deletecollection', 'get', 'list', 'watch'];

// ---- object history: watchers and their restarts -------------------------

// watcherName is how a watcher is labelled: its program and resource.
export function watcherName(w) {
  return `${w.program || shortUA(w.user_agent) || w.user || '?'} · ${w.resource || '?'}`;
}

// staticRV returns the resourceVersion a watcher's restarts keep asking for
// (two or more restarts in a row from the same one, the last such run), or ''.
export function staticRV(w) {
  const rs = Array.isArray(w.restarts) ? w.restarts : [];
  let last = '';
  for (let i = 1; i < rs.length; i++) {
    if (rs[i].resource_version && rs[i].resource_version === rs[i - 1].resource_version) last = rs[i].resource_version;
  }
  return last;
}

function restartTitle(w, r, next) {
  const a = parseTime(r.start), b = parseTime(r.end);
  const end = r.end ? `${fmtUTC(r.end)} UTC (${fmtDuration(b - a)})` : (next ? 'end not recorded' : 'still open');
  return `watch ${w.resource} from resourceVersion ${r.resource_version || '(none: the latest)'}\n` +
    `started ${fmtUTC(r.start)} UTC → ${end}\n${w.user || ''}\n${w.user_agent || ''}\n` +
    `from ${r.source_ip || '?'}${r.apiserver ? ' via ' + r.apiserver : ''} · code ${r.code || '—'} · audit ID ${r.audit_id || ''}`;
}

// drawWatcherStrip draws the object's requests as ticks and, one lane per
// watcher, its watch requests as bars with a mark at every (re)start
// labelled with the resourceVersion it resumed from. opts.culprit(w) says
// whether a finding names the watcher: its lane is emphasised, and dashed
// guides run from its restarts up to the object's requests.
export function drawWatcherStrip(container, events, watchers, width, opts = {}) {
  clear(container);
  const culprit = opts.culprit || (() => false);
  const times = events.map((e) => parseTime(e.time)).filter(Number.isFinite);
  const starts = [];
  for (const w of watchers) for (const r of w.restarts || []) { const a = parseTime(r.start); if (Number.isFinite(a)) starts.push(a); }
  if (!times.length && !starts.length) return;
  width = Math.max(480, width || 900);
  const all = times.length ? times : starts;
  const e0 = Math.min(...all), e1 = Math.max(...all);
  const espan = Math.max(e1 - e0, 10 * SEC);
  // Watches can be open for hours: keep the events readable.
  const lo = e0 - espan * 0.25, hi = e1 + espan * 0.25;
  let t0 = e0, t1 = e1;
  for (const a of starts) { t0 = Math.min(t0, Math.max(a, lo)); t1 = Math.max(t1, Math.min(a, hi)); }
  const pad = Math.max((t1 - t0) * 0.03, 500);
  t0 -= pad; t1 += pad;
  const MAXW = 20;
  const shown = watchers.slice(0, MAXW);
  const m = { l: 250, r: 24, t: 10 };
  const laneH = 38;
  const evY = m.t + 14;
  const top = evY + 44;
  const axisY = top + Math.max(0, shown.length - 1) * laneH + 20;
  const height = axisY + 38;
  const x = linear(t0, t1, m.l, width - m.r);
  const svg = s('svg', { class: 'chart strip watchers', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': 'The object’s requests as ticks; below, one lane per watcher of the resource with a mark at each watch restart, labelled with the resourceVersion it asked for. The list under the chart says the same.' });
  svg.appendChild(s('text', { class: 'lane-label', x: m.l - 8, y: evY + 4, 'text-anchor': 'end' }, 'object requests'));
  svg.appendChild(s('line', { class: 'lane-line', x1: m.l, x2: width - m.r, y1: evY, y2: evY }));
  const guides = s('g', { class: 'guides' });
  svg.appendChild(guides);
  const ticks = s('g', { class: 'ticks' });
  for (const e of events) {
    const t = parseTime(e.time);
    if (!Number.isFinite(t)) continue;
    const verb = VERBS.includes(e.verb) ? e.verb : 'other';
    const px = x(t);
    ticks.appendChild(s('line', { class: 'ev-tick verb-' + verb, x1: px, x2: px, y1: evY - 9, y2: evY + 9 },
      s('title', {}, `${e.verb} ${fmtUTC(e.time)} UTC\n${e.user || ''}\n${e.user_agent || ''}\ncode ${e.code ?? '—'} · RV ${e.resource_version || '—'}`)));
  }
  svg.appendChild(ticks);
  shown.forEach((w, i) => {
    const ly = top + i * laneH;
    const rs = Array.isArray(w.restarts) ? w.restarts : [];
    const isCulprit = culprit(w);
    const g = s('g', { class: ['watcher', isCulprit ? 'culprit' : ''], dataset: { resource: w.resource || '', program: w.program || '' } });
    if (i % 2 === 0) g.appendChild(s('rect', { class: 'lane-bg', x: 0, y: ly - 22, width, height: laneH }));
    const prog = w.program || shortUA(w.user_agent) || w.user || '?';
    g.appendChild(s('text', { class: 'lane-label', x: m.l - 8, y: ly - 2, 'text-anchor': 'end' }, prog.length > 30 ? prog.slice(0, 29) + '…' : prog,
      s('title', {}, `${w.user || ''}\n${w.user_agent || ''}`)));
    const rv = staticRV(w);
    const res = (w.resource || '?').length > 16 ? w.resource.slice(0, 15) + '…' : (w.resource || '?');
    const sub = `${res} · ` + (rv ? `RV ${rv.length > 12 ? rv.slice(0, 11) + '…' : rv} again and again` : `${w.watches} watch${w.watches === 1 ? '' : 'es'}, ${w.resource_versions} RV${w.resource_versions === 1 ? '' : 's'}`);
    g.appendChild(s('text', { class: ['lane-sub', rv ? 'same-rv' : ''], x: m.l - 8, y: ly + 11, 'text-anchor': 'end' }, sub));
    let lastLabelX = -Infinity;
    rs.forEach((r, j) => {
      const a = parseTime(r.start);
      if (!Number.isFinite(a) || a > t1) return;
      const next = rs[j + 1];
      let b = r.end ? parseTime(r.end) : (next ? parseTime(next.start) : t1);
      if (!Number.isFinite(b)) b = t1;
      if (b < t0) return;
      const xa = x(Math.max(a, t0)), xb = x(Math.min(b, t1));
      const failed = Number(r.code) >= 400;
      g.appendChild(s('rect', { class: ['watch-bar', r.end ? '' : 'open', failed ? 'failed' : ''], x: xa.toFixed(1), y: ly - 4, width: Math.max(1.5, xb - xa).toFixed(1), height: 8, rx: 2 }));
      if (a < t0) return; // started before the chart: no restart to mark
      const same = j > 0 && r.resource_version && r.resource_version === rs[j - 1].resource_version;
      const title = restartTitle(w, r, next);
      const mark = s('g', { class: ['restart', same ? 'same-rv' : '', failed ? 'failed' : ''], dataset: { rv: r.resource_version || '', auditId: r.audit_id || '' } },
        s('title', {}, title),
        s('path', { d: `M${xa.toFixed(1)},${ly - 7} l5,7 l-5,7 l-5,-7 z` }));
      g.appendChild(mark);
      const label = r.resource_version || '∅';
      const lw = label.length * 6.6 + 8;
      if (xa - lastLabelX >= lw && xa + lw / 2 <= width) {
        g.appendChild(s('text', { class: ['restart-rv', same ? 'same-rv' : ''], x: xa.toFixed(1), y: ly - 10, 'text-anchor': 'middle' }, label));
        lastLabelX = xa;
      }
      if (isCulprit) guides.appendChild(s('line', { class: 'guide', x1: xa.toFixed(1), x2: xa.toFixed(1), y1: evY + 10, y2: ly - 20 }));
    });
    svg.appendChild(g);
  });
  const ax = s('g', { class: 'axes' });
  timeAxis(ax, x, t0, t1, axisY, width, m.l);
  ax.appendChild(s('text', { class: 'axis-title', x: 8, y: axisY + 16 }, 'time (UTC)'));
  svg.appendChild(ax);
  container.appendChild(h('div', { class: 'chart-scroll' }, svg));
  if (watchers.length > MAXW) container.appendChild(h('p', { class: 'muted small' }, `Showing the ${MAXW} most active of ${watchers.length} watchers in the chart; all are listed below.`));
}
