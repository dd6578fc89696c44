// Package sameorigin refuses requests that a browser sends from a page of another
// origin to an endpoint that changes state: the ingress's (posting a run, an operator's
// action, a dashboard form) and the worker's push endpoint.
//
// Authentication cannot refuse them. A form on any web page can post a text/plain,
// form or multipart body to any URL without a CORS preflight, and the browser sends it
// with the visitor's cookies and through the visitor's network: with -auth none (and
// -dev), or behind a proxy that adds the visitor's token, the page acts as the visitor.
// Run IDs of scheduled runs are predictable, so such a page could retry, cancel or
// release runs, or post new ones.
package sameorigin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/runonce/runonce/pkg/internal/cleantext"
	"github.com/runonce/runonce/pkg/internal/jsonhttp"
)

// ErrCrossOrigin wraps every refusal of Check.
var ErrCrossOrigin = errors.New("cross-origin request refused")

// Check refuses a request that a browser sent from a page of another origin with a
// method other than GET, HEAD and OPTIONS, as net/http's CrossOriginProtection judges
// it: by Sec-Fetch-Site (same-origin and none pass), else by an Origin header, which
// must name the request's host. A request with neither header (curl, Cloud Scheduler,
// Pub/Sub push, Go's http.Client) is not a browser's and passes. The error wraps
// ErrCrossOrigin and names the method, the path and the headers that refused it.
func Check(r *http.Request) error {
	var p http.CrossOriginProtection
	if err := p.Check(r); err != nil {
		return fmt.Errorf("%w: a browser sent %s %s from a page of another origin (Origin %s, Sec-Fetch-Site %s), "+
			"and a page on another site must not act on runs with its visitor's access; "+
			"call this endpoint from a page of this origin, or from a client that is not a browser (one that sends no Origin header): %v",
			ErrCrossOrigin, cleantext.Clean(r.Method), cleantext.Clean(r.URL.Path), quoted(r.Header.Get("Origin")), quoted(r.Header.Get("Sec-Fetch-Site")), err)
	}
	return nil
}

func quoted(v string) string { return `"` + cleantext.Clean(v) + `"` }

// Middleware lets a request through to next unless Check refuses it: then it answers
// 403 with a JSON body {"error": …} that names the problem.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := Check(r); err != nil {
			jsonhttp.Error(w, http.StatusForbidden, err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}
