// Package auth decides who a request comes from and which clusters' audit
// events it may read. It knows three ways to tell: a bearer token checked
// against a Kubernetes cluster (TokenReview, then one SubjectAccessReview
// per auditlens cluster), browser sign-in with OpenID Connect, and static
// tokens compared in constant time. The HTTP side — cookies, headers,
// redirects — stays in web; this package holds no HTTP handlers.
package auth
