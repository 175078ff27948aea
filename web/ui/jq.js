// jq console (/jq): run a jq program over the events the filters select.

import { h, link, fmtNum, clear } from './dom.js';
import { api, getNDJSON, ApiError } from './api.js';
import { filtersForm, filterParams, withDefaults } from './filters.js';

const EXAMPLES = [
  ['watches and their resourceVersion',
    'select(.verb == "watch" and .stage == "ResponseStarted")\n| [.stageTimestamp, .user.username, (.requestURI | capture("resourceVersion=(?<rv>[0-9]+)").rv // "-")]\n| @tsv'],
  ['endpoints deleted or created',
    'select(.objectRef.resource == "endpoints" and (.verb == "delete" or .verb == "create") and .stage == "ResponseComplete")\n| {t: .stageTimestamp, verb, object: "\\(.objectRef.namespace)/\\(.objectRef.name)", user: .user.username}'],
  ['errors (code ≥ 400)',
    'select((.responseStatus.code // 0) >= 400) | {t: .stageTimestamp, verb, uri: .requestURI, code: .responseStatus.code, user: .user.username}'],
  ['who, what, from where',
    '{user: .user.username, ua: .userAgent, ip: .sourceIPs[0], verb, resource: .objectRef.resource}'],
];
const MAX_RENDER = 20000;

function pretty(line) {
  const c = line.charCodeAt(0);
  if (c === 123 || c === 91) { // { or [
    try { return JSON.stringify(JSON.parse(line), null, 2); } catch (_) { return line; }
  }
  return line;
}

export async function render(ctx) {
  const p = ctx.params;
  const program = p.get('jq') || '';
  const raw = p.get('raw') === '1';
  const textarea = h('textarea', {
    id: 'jq-program', name: 'jq', rows: 6, spellcheck: 'false', autocomplete: 'off', 'aria-label': 'jq program',
    placeholder: 'select(.verb == "delete") | {t: .stageTimestamp, user: .user.username, uri: .requestURI}',
  });
  textarea.value = program;
  const limit = h('input', { id: 'f-limit', name: 'limit', type: 'number', min: 1, max: 100000, value: p.get('limit') || '', placeholder: '1000', title: 'events the program runs over (1–100000; default 1000)' });
  const rawBox = h('input', { type: 'checkbox', id: 'jq-raw', name: 'raw', value: '1', checked: raw });
  const order = h('select', { id: 'jq-order', name: 'order' },
    h('option', { value: 'asc', selected: p.get('order') !== 'desc' }, 'oldest first'),
    h('option', { value: 'desc', selected: p.get('order') === 'desc' }, 'newest first'));

  const submit = (q) => {
    const out = new URLSearchParams(q);
    out.delete('jq');
    if (textarea.value.trim()) out.set('jq', textarea.value);
    if (!rawBox.checked) out.delete('raw');
    if (out.get('order') === 'asc') out.delete('order');
    ctx.navigate(link('/jq', out));
  };
  const form = filtersForm(p, {
    extra: [
      h('label', { class: 'field', for: 'f-limit' }, h('span', { class: 'field-label' }, 'Limit (events)'), limit),
      h('label', { class: 'field', for: 'jq-order' }, h('span', { class: 'field-label' }, 'Order'), order),
    ],
    onSubmit: submit, submitLabel: 'Apply filters', action: '/jq',
  });
  // The program lives in the same form so that Run submits everything.
  const run = h('button', { type: 'submit', id: 'jq-run', class: 'primary' }, 'Run');
  const examples = h('select', { 'aria-label': 'Example programs', onchange: (ev) => {
    const ex = EXAMPLES[Number(ev.target.value)];
    if (ex) { textarea.value = ex[1]; textarea.focus(); }
    ev.target.value = '';
  } }, h('option', { value: '' }, 'Examples…'), ...EXAMPLES.map(([n], i) => h('option', { value: String(i) }, n)));
  form.append(h('div', { class: 'jq-box' },
    h('label', { for: 'jq-program', class: 'field-label' }, 'jq program (runs once per event; gojq)'),
    textarea,
    h('div', { class: 'filter-actions' }, run,
      h('span', { class: 'muted small' }, 'Ctrl+Enter'),
      h('label', { class: 'check', for: 'jq-raw' }, rawBox, ' raw strings (like jq -r)'),
      examples)));
  textarea.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      form.requestSubmit(run);
    }
  });

  const status = h('span', { class: 'muted small', id: 'jq-status' });
  const errBox = h('div', { id: 'jq-error', class: 'error-box', role: 'alert', hidden: true });
  const output = h('pre', { id: 'jq-output', class: 'jq-output', tabindex: 0, 'aria-label': 'jq output' });
  ctx.main.append(
    h('section', { class: 'card' },
      h('div', { class: 'card-head' }, h('h1', {}, 'jq console'),
        h('span', { class: 'muted small' }, 'The server bounds every query: the time it runs, the number and size of outputs, and the memory a program may use; a stopped query says which limit it hit. Without since, the last hour is searched.')),
      form),
    h('section', { class: 'card' },
      h('div', { class: 'card-head' }, h('h2', {}, 'Output'), status),
      errBox, output));

  if (!program.trim()) {
    status.textContent = 'Write a program and press Run.';
    return;
  }
  const q = withDefaults(filterParams(p));
  for (const k of ['limit', 'order']) if (p.get(k)) q.set(k, p.get(k));
  q.set('jq', program);
  status.textContent = 'Running…';
  const t0 = performance.now();
  let res;
  try {
    res = await getNDJSON(api('/events', q), ctx.signal);
  } catch (e) {
    if (!(e instanceof ApiError) || e.status === 0 || e.missing) throw e;
    // A program that does not compile, a limit, a busy server: the user's to fix.
    errBox.textContent = e.message.replace(/^\/api\/v1\/events: (\d+ )?/, '');
    errBox.hidden = false;
    status.textContent = 'Failed.';
    return;
  }
  if (ctx.signal.aborted) return;
  const ms = Math.round(performance.now() - t0);
  const lines = res.lines;
  const shown = lines.length > MAX_RENDER ? lines.slice(0, MAX_RENDER) : lines;
  const parts = new Array(shown.length);
  for (let i = 0; i < shown.length; i++) {
    const line = shown[i];
    if (raw && line.charCodeAt(0) === 34) {
      try { parts[i] = JSON.parse(line); continue; } catch (_) { /* keep as is */ }
    }
    parts[i] = pretty(line);
  }
  clear(output).textContent = parts.join('\n');
  status.textContent = `${fmtNum(lines.length)} output${lines.length === 1 ? '' : 's'} in ${ms} ms` +
    (lines.length > MAX_RENDER ? ` (first ${fmtNum(MAX_RENDER)} shown)` : '');
  if (!lines.length) output.textContent = '(no output)';
  if (res.error) {
    errBox.textContent = 'The query stopped: ' + res.error;
    errBox.hidden = false;
  }
}
