// Sets html[data-theme] before the first paint (a classic, blocking script:
// the page allows no inline script). app.js wires the #theme button.
(function () {
  var t = null;
  try { t = localStorage.getItem('auditlens-theme'); } catch (e) { /* storage off */ }
  if (t !== 'dark' && t !== 'light') {
    t = window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
  }
  document.documentElement.setAttribute('data-theme', t);
})();
