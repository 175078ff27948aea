// Reports (/reports): the stored reports, with links to their renderings.

import { h, link, fmtUTC, timeTitle, fmtDuration, parseTime } from './dom.js';
import { api, getJSON } from './api.js';

export async function render(ctx) {
  const list = await getJSON(api('/reports', new URLSearchParams({ limit: '100' })), ctx.signal);
  if (ctx.signal.aborted) return;
  const reports = Array.isArray(list) ? list : [];
  const rows = reports.map((r) => {
    const base = '/api/v1/reports/' + encodeURIComponent(r.id);
    const a = parseTime(r.window_start), b = parseTime(r.window_end);
    return h('tr', { tabindex: 0, dataset: { id: r.id } },
      h('td', {}, h('a', { class: 'report-link', href: link(base, { format: 'html' }), target: '_blank', rel: 'noopener' }, r.name || r.id)),
      h('td', { class: 'mono small', title: timeTitle(r.window_start) }, fmtUTC(r.window_start, { ms: false })),
      h('td', { class: 'mono small', title: timeTitle(r.window_end) }, fmtUTC(r.window_end, { ms: false })),
      h('td', { class: 'small' }, Number.isFinite(a) && Number.isFinite(b) ? fmtDuration(b - a) : ''),
      h('td', { class: 'mono small', title: timeTitle(r.created_at) }, fmtUTC(r.created_at, { ms: false })),
      h('td', { class: 'links' },
        h('a', { href: link(base, { format: 'html' }), target: '_blank', rel: 'noopener' }, 'HTML ↗'), ' ',
        h('a', { href: link(base, { format: 'md' }), target: '_blank', rel: 'noopener' }, 'Markdown'), ' ',
        h('a', { href: link(base, { format: 'json' }), target: '_blank', rel: 'noopener' }, 'JSON'),
        ' ',
        Number.isFinite(a) && Number.isFinite(b) ? h('a', { href: link('/', { since: r.window_start, until: r.window_end }) }, 'timeline') : null));
  });
  const table = h('table', { id: 'reports', class: 'data nav-rows' },
    h('thead', {}, h('tr', {}, ...['Report', 'Window start (UTC)', 'Window end (UTC)', 'Length', 'Created (UTC)', 'Open'].map((l) => h('th', { scope: 'col' }, l)))),
    h('tbody', {}, ...rows));
  table.tBodies[0].addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && ev.target.matches('tr')) {
      const a = ev.target.querySelector('a.report-link');
      if (a) a.click();
    }
  });
  ctx.main.append(h('section', { class: 'card' },
    h('div', { class: 'card-head' }, h('h1', {}, 'Reports'), h('span', { class: 'muted small' }, `${reports.length} stored · newest window first · HTML opens in a new tab`)),
    h('div', { class: 'table-scroll' }, table),
    reports.length ? null : h('p', { class: 'muted empty' }, 'No reports are stored yet. Scheduled reports are configured with serve --config (see the README, Reports).')));
}
