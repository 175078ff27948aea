package ingest

import (
	"mime"
	"net/http"
)

// fromBrowser refuses a request a web page made. Neither a kube-apiserver's
// audit webhook nor an OpenTelemetry Collector sends Origin or
// Sec-Fetch-Site; a browser sends Origin with every cross-site POST and
// Sec-Fetch-Site with every request. Without this, any page the operator
// opens could post forged events to a receiver on loopback with a
// "simple" request that needs no CORS preflight.
func fromBrowser(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		return errorf(http.StatusForbidden, "requests from web pages are refused (Origin %.64q): only apiservers and collectors send here", o)
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "none" {
		return errorf(http.StatusForbidden, "requests from web pages are refused (Sec-Fetch-Site %.32q): only apiservers and collectors send here", s)
	}
	return nil
}

// jsonOnly refuses a webhook request whose Content-Type is not JSON: an
// apiserver always sends application/json, while the content types a web
// page may post without a preflight (text/plain, forms) are never JSON.
func jsonOnly(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return nil
	}
	return errorf(http.StatusUnsupportedMediaType, "Content-Type %.64q: the audit webhook takes application/json", ct)
}
