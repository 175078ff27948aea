// Sign-in (shown in place of any page whose data needs credentials): a
// bearer token accepted by serve --api-token/--api-token-file is traded
// once for an HttpOnly session cookie; the token is not kept in the page.

import { h } from './dom.js';
import { signIn } from './api.js';

export function render(ctx, { onSignedIn }) {
  const input = h('input', {
    id: 'signin-token', type: 'password', name: 'token', autocomplete: 'current-password', required: true,
    spellcheck: 'false', 'aria-describedby': 'signin-help', size: 48,
  });
  const msg = h('p', { id: 'signin-error', class: 'error-text', role: 'alert', hidden: true });
  const btn = h('button', { type: 'submit', class: 'primary', id: 'signin-submit' }, 'Sign in');
  const form = h('form', { id: 'signin', class: 'signin-form' },
    h('label', { for: 'signin-token' }, 'Bearer token'), input, btn, msg);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    msg.hidden = true;
    btn.disabled = true;
    try {
      await signIn(input.value);
      input.value = '';
      onSignedIn();
    } catch (e) {
      msg.textContent = e && e.status === 401
        ? 'That token is not accepted. Ask whoever runs auditlens for one of its read tokens.'
        : (e && e.message ? e.message : String(e));
      msg.hidden = false;
      input.select();
    } finally {
      btn.disabled = false;
    }
  });
  ctx.main.append(h('section', { class: 'card signin' },
    h('div', { class: 'card-head' }, h('h1', {}, 'Sign in')),
    h('p', { id: 'signin-help' },
      'This auditlens keeps its audit events behind authentication: they say who did what in the cluster, and from where. ',
      'Paste a read token (one of serve’s --api-token or --api-token-file). The browser keeps a session cookie for 12 hours; the token itself is not stored.'),
    form));
  input.focus();
}
