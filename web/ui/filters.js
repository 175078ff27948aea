// The filters form shared by the timeline and the jq console. Every filter
// lives in the URL query, so a link reproduces the view.

import { h } from './dom.js';
import { api, getJSON } from './api.js';

export const FILTERS = [
  { name: 'since', label: 'Since', ph: '1h · 2026-11-29T14:00:00Z', help: 'RFC 3339 time or a duration before now (15m, 24h, 7d)' },
  { name: 'until', label: 'Until', ph: 'now', help: 'RFC 3339 time or a duration before now; exclusive' },
  { name: 'cluster', label: 'Cluster', ph: 'any', help: 'comma-separated values', values: true },
  { name: 'apiserver', label: 'API server', ph: 'any', help: 'which kube-apiserver of the cluster sent the events (HA control planes); comma-separated values', values: true },
  { name: 'verb', label: 'Verb', ph: 'get,list,watch…', help: 'comma-separated values', values: true },
  { name: 'resource', label: 'Resource', ph: 'pods', help: 'comma-separated values', values: true },
  { name: 'namespace', label: 'Namespace', ph: 'any', help: 'comma-separated values', values: true },
  { name: 'name', label: 'Name', ph: 'any', help: 'comma-separated values', values: true },
  { name: 'user', label: 'User', ph: 'system:serviceaccount:*', help: 'one value; a trailing * matches a prefix', values: true },
  { name: 'user_agent', label: 'User agent', ph: 'kubectl/*', help: 'one value; a trailing * matches a prefix', values: true },
  { name: 'code', label: 'Code', ph: '200,404', help: 'HTTP status codes, comma-separated (0: no response yet)', values: true },
];
const NAMES = FILTERS.map((f) => f.name).concat(['stage', 'level']);

export const DEFAULT_SINCE = '1h';

// filterParams returns only the filter parameters of p (repeats kept).
export function filterParams(p) {
  const out = new URLSearchParams();
  for (const [k, v] of p) if (NAMES.includes(k) && v !== '') out.append(k, v);
  return out;
}

// withDefaults returns the filters the API is asked with: since defaults to
// the last hour, as the histogram does.
export function withDefaults(fq) {
  const q = new URLSearchParams(fq);
  if (!q.has('since')) q.set('since', DEFAULT_SINCE);
  return q;
}

const valuesCache = new Map();
let valuesMissing = false;

async function fillDatalist(form, input, dl) {
  if (valuesMissing) return;
  const fd = formParams(form);
  fd.delete(input.name);
  if (!fd.has('since')) fd.set('since', DEFAULT_SINCE);
  for (const k of [...fd.keys()]) if (!NAMES.includes(k)) fd.delete(k);
  fd.set('field', input.name);
  fd.set('limit', '50');
  const url = api('/values', fd);
  if (dl.dataset.url === url) return;
  dl.dataset.url = url;
  try {
    let vals = valuesCache.get(url);
    if (!vals) {
      vals = await getJSON(url);
      valuesCache.set(url, vals);
    }
    const frag = document.createDocumentFragment();
    for (const v of Array.isArray(vals) ? vals : []) {
      frag.appendChild(h('option', { value: String(v.value), label: `${v.value}  (${Number(v.count).toLocaleString('en-US')})` }));
    }
    dl.replaceChildren(frag);
  } catch (e) {
    if (e.missing) valuesMissing = true;
    dl.dataset.url = '';
  }
}

// formParams serialises a form: non-empty fields, repeats kept.
export function formParams(form) {
  const out = new URLSearchParams();
  for (const [k, v] of new FormData(form)) {
    const t = String(v).trim();
    if (t !== '') out.append(k, t);
  }
  return out;
}

// filtersForm builds form#filters from the query p. extra: more controls
// placed before the buttons. onSubmit(params) gets the form's parameters.
export function filtersForm(p, { extra = [], onSubmit, submitLabel = 'Apply', ranges = true, action = '/' } = {}) {
  const fields = [];
  for (const f of FILTERS) {
    const vals = p.getAll(f.name);
    const list = vals.length ? vals : [''];
    list.forEach((v, i) => {
      const id = `f-${f.name}${i ? '-' + i : ''}`;
      const input = h('input', {
        id, name: f.name, type: 'text', value: v, placeholder: f.ph, title: f.help,
        autocomplete: 'off', spellcheck: 'false', list: f.values ? `dl-${f.name}` : null,
      });
      fields.push(h('label', { class: 'field', for: id }, h('span', { class: 'field-label' }, f.label + (i ? ` (${i + 1})` : '')), input));
    });
  }
  const datalists = FILTERS.filter((f) => f.values).map((f) => h('datalist', { id: `dl-${f.name}` }));
  const form = h('form', { id: 'filters', class: 'filters', method: 'get', action, role: 'search', 'aria-label': 'Filters', autocomplete: 'off' },
    h('div', { class: 'filter-grid' }, ...fields, ...extra),
    h('div', { class: 'filter-actions' },
      h('button', { type: 'submit', class: 'primary' }, submitLabel),
      h('button', { type: 'button', class: 'ghost', onclick: () => {
        for (const el of form.querySelectorAll('.filter-grid input')) el.value = '';
      } }, 'Clear'),
      ranges ? h('span', { class: 'ranges', role: 'group', 'aria-label': 'Quick time ranges' },
        h('span', { class: 'muted small' }, 'last'),
        ...['15m', '1h', '6h', '24h', '7d'].map((r) => h('button', { type: 'button', class: 'chip', title: `since=${r}, until=now`, onclick: () => {
          form.elements.since.value = r;
          form.elements.until.value = '';
          form.requestSubmit();
        } }, r))) : null,
      h('span', { class: 'muted small tz-note' }, 'Times are UTC.')),
    ...datalists);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    onSubmit(formParams(form));
  });
  form.addEventListener('focusin', (ev) => {
    const input = ev.target;
    if (input instanceof HTMLInputElement && input.list) fillDatalist(form, input, input.list);
  });
  return form;
}
