// Sign-in (shown in place of any page whose data needs credentials), in
// the ways serve offers: a link to the OpenID Connect provider's sign-in
// page (serve --oidc-issuer), and a bearer token accepted by serve
// --api-token/--api-token-file or the Kubernetes apiserver, traded once
// for an HttpOnly session cookie (the token is not kept in the page).
// And the page of a client that is signed in but may read nothing (403).

import { h } from './dom.js';
import { signIn } from './api.js';

// here is the page to come back to after the provider's sign-in.
const here = () => location.pathname + location.search;

export function render(ctx, { state, onSignedIn }) {
  const methods = (state && state.methods) || ['token'];
  const card = h('section', { class: 'card signin' },
    h('div', { class: 'card-head' }, h('h1', {}, 'Sign in')),
    h('p', { id: 'signin-help' },
      'This auditlens keeps its audit events behind authentication: they say who did what in the cluster, and from where.'));
  let focus = null;
  if (methods.includes('oidc')) {
    const link = h('a', {
      class: 'button primary signin-sso', id: 'signin-oidc',
      href: '/auth/oidc/login?return=' + encodeURIComponent(here()),
    }, `Sign in with ${state.provider || 'single sign-on'}`);
    card.append(h('p', {}, link));
    focus = link;
  }
  if (methods.includes('token')) {
    if (methods.includes('oidc')) card.append(h('p', { class: 'muted signin-or' }, 'Or with a read token:'));
    const input = h('input', {
      id: 'signin-token', type: 'password', name: 'token', autocomplete: 'current-password', required: true,
      spellcheck: 'false', 'aria-describedby': 'signin-token-help', size: 48,
    });
    const msg = h('p', { id: 'signin-error', class: 'error-text', role: 'alert', hidden: true });
    const btn = h('button', { type: 'submit', class: methods.includes('oidc') ? '' : 'primary', id: 'signin-submit' }, 'Sign in');
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
    card.append(
      h('p', { id: 'signin-token-help' },
        'Paste a read token (one of serve’s --api-token or --api-token-file, or a Kubernetes token when serve checks them). ',
        'The browser keeps a session cookie for 12 hours; the token itself is not stored.'),
      form);
    if (!focus) focus = input;
  }
  ctx.main.append(card);
  if (focus) focus.focus();
}

// forbidden is the page of a client the server knows but lets read
// nothing: who it is (when known), the server's reason, and a way to sign
// in as someone else when this browser holds the session.
export function forbidden(ctx, { state, err, onSignOut }) {
  const user = state && state.user;
  const card = h('section', { class: 'card signin', id: 'forbidden' },
    h('div', { class: 'card-head' }, h('h1', {}, 'No access')),
    user ? h('p', {}, 'Signed in as ', h('strong', { id: 'forbidden-user' }, user), '.') : null,
    h('p', { id: 'forbidden-reason' }, (err && err.detail) || 'You may read no cluster here.'),
    h('p', { class: 'muted' }, 'Whoever runs auditlens decides which clusters each user or group may read (auditlens docs: Access).'));
  if (state && state.via === 'cookie') {
    const btn = h('button', { type: 'button', id: 'forbidden-signout' }, 'Sign in as someone else');
    btn.addEventListener('click', onSignOut);
    card.append(h('p', {}, btn));
  }
  ctx.main.append(card);
}
