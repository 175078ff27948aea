// The event detail dialog (#detail): the raw event as pretty JSON, its key
// fields with "filter on this" buttons, and a link to the object history.

import { h, link, clear, fmtUTC, fmtLocal } from './dom.js';

export function openDetail(e, { cluster = '', onFilter } = {}) {
  const dlg = document.getElementById('detail');
  if (!dlg) return;
  const o = e.objectRef || {};
  const u = e.user || {};
  const code = e.responseStatus && e.responseStatus.code !== undefined ? String(e.responseStatus.code) : '';
  const t = e.stageTimestamp || e.requestReceivedTimestamp || '';

  document.getElementById('detail-title').textContent =
    [e.verb, o.resource ? o.resource + (o.subresource ? '/' + o.subresource : '') : '', [o.namespace, o.name].filter(Boolean).join('/')].filter(Boolean).join(' ') || 'Event';

  const fields = [
    ['time', fmtUTC(t) + ' UTC', null, fmtLocal(t)],
    ['stage', e.stage, null],
    ['verb', e.verb, 'verb'],
    ['user', u.username, 'user'],
    ['user agent', e.userAgent, 'user_agent'],
    ['source IPs', (e.sourceIPs || []).join(', '), null],
    ['resource', o.resource, 'resource'],
    ['namespace', o.namespace, 'namespace'],
    ['name', o.name, 'name'],
    ['code', code, 'code'],
    ['request URI', e.requestURI, null],
    ['audit ID', e.auditID, null],
  ];
  const dl = clear(document.getElementById('detail-fields'));
  for (const [label, value, param, title] of fields) {
    if (value === undefined || value === null || value === '') continue;
    dl.append(h('dt', {}, label), h('dd', { title: title || null },
      h('span', { class: label === 'request URI' || label === 'audit ID' ? 'mono' : null }, String(value)),
      param && onFilter ? h('button', { type: 'button', class: 'chip small', title: `Filter on ${param} = ${value}`, onclick: () => { dlg.close(); onFilter(param, String(value)); } }, '⊕ filter') : null));
  }

  document.getElementById('detail-json').textContent = JSON.stringify(e, null, 2);

  const a = document.getElementById('detail-object');
  if (o.resource) {
    const q = { cluster, resource: o.resource, namespace: o.namespace || '', name: o.name || '' };
    const tt = Date.parse(t);
    if (Number.isFinite(tt)) {
      q.since = new Date(tt - 3600e3).toISOString();
      q.until = new Date(tt + 3600e3).toISOString();
    }
    a.setAttribute('href', link('/objects', q));
    a.hidden = false;
    a.textContent = 'Object history: ' + o.resource + (o.name ? ' ' + [o.namespace, o.name].filter(Boolean).join('/') : '') + ' →';
  } else {
    a.setAttribute('href', '/objects');
    a.hidden = true;
  }
  if (!dlg.open) dlg.showModal();
  // Focus the JSON, not a button: the Enter that opened the dialog must not
  // press one (a keypress can follow the keydown).
  document.getElementById('detail-json').focus();
}

export function initDetail() {
  const dlg = document.getElementById('detail');
  if (!dlg) return;
  document.getElementById('detail-close').addEventListener('click', () => dlg.close());
  // A click on the backdrop (outside the dialog box) closes it.
  dlg.addEventListener('click', (ev) => {
    if (ev.target !== dlg) return;
    const r = dlg.getBoundingClientRect();
    if (ev.clientX < r.left || ev.clientX > r.right || ev.clientY < r.top || ev.clientY > r.bottom) dlg.close();
  });
  document.getElementById('detail-copy').addEventListener('click', async () => {
    const text = document.getElementById('detail-json').textContent;
    try {
      await navigator.clipboard.writeText(text);
      document.getElementById('detail-copy').textContent = 'Copied';
      setTimeout(() => { document.getElementById('detail-copy').textContent = 'Copy JSON'; }, 1200);
    } catch (_) { /* clipboard not allowed */ }
  });
  // Links inside the dialog navigate within the app; close first.
  dlg.addEventListener('click', (ev) => { if (ev.target.closest('a')) dlg.close(); });
}
