// Package auth decides who a request comes from and which clusters' audit
// events it may read (a Principal). It knows each way to tell: serve's own
// read tokens (compared in constant time), a bearer token checked against
// a Kubernetes cluster (TokenReview, then one SubjectAccessReview per
// auditlens cluster), the user and groups a trusted authenticating proxy
// sends, browser sign-in with OpenID Connect (groups mapped to clusters),
// and the sessions a signed-in browser holds. The HTTP side — cookies,
// headers, redirects, pages — stays in web; this package has no handlers.
package auth
