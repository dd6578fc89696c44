package ingress_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// browser posts body to path as a browser would: with Origin and Sec-Fetch-Site (when
// given) and the Content-Type of a form, a fetch or a script. It returns the status
// and the body (its error, when it is JSON with one).
func (b *bundle) browser(t *testing.T, path, origin, site, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if site != "" {
		req.Header.Set("Sec-Fetch-Site", site)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Error string }
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return resp.StatusCode, e.Error
	}
	return resp.StatusCode, string(raw)
}

// runningRun posts a run of job and claims it, through the ledger, as a worker does.
func (b *bundle) runningRun(t *testing.T, job string) string {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/jobs/"+job, map[string]string{"Idempotency-Key": uuid.NewString()}, `{}`)
	id, _ := r.body["run_id"].(string)
	cur, err := b.led.Get(t.Context(), &ledger.GetParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.led.Acquire(t.Context(), &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: cur.PayloadHash}, AttemptID: uuid.NewString(), Worker: "host-a/1"})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire: %v %v", res, err)
	}
	return id
}

// TestNoWebPageCanDriveTheAPI: a page on another site that an operator visits posts
// "simple" requests (text/plain or form bodies, no preflight) to every state-changing
// route. Each is refused with a 403 naming the problem and changes nothing; the same
// requests from a page of the ingress's own origin, or from a client that is not a
// browser, still work.
func TestNoWebPageCanDriveTheAPI(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	failed := b.failRun(t, "job", "boom")
	queued := b.do(t, http.MethodPost, "/v1/jobs/job", map[string]string{"Idempotency-Key": uuid.NewString()}, `{}`).body["run_id"].(string)
	running := b.runningRun(t, "job")
	status := func(id string) ledger.Status {
		r, err := b.led.Get(t.Context(), &ledger.GetParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	const evil = "https://evil.example"
	newKey := `{"job_key":"planted-by-a-web-page"}`
	reason := `{"reason":"a web page says so"}`
	form := url.Values{"reason": {"a web page says so"}}.Encode()
	routes := []struct {
		name, path, contentType, body string
	}{
		{"post a run keyed by its body", "/v1/jobs/job", "text/plain", newKey},
		{"retry", "/v1/runs/" + failed + ":retry", "text/plain", reason},
		{"cancel", "/v1/runs/" + queued + ":cancel", "text/plain", reason},
		{"release", "/v1/runs/" + running + ":release", "text/plain", reason},
		{"the dashboard's retry form", "/ui/runs/" + failed + "/retry", "application/x-www-form-urlencoded", form},
		{"the dashboard's cancel form", "/ui/runs/" + queued + "/cancel", "application/x-www-form-urlencoded", form},
	}
	published := b.published()
	for _, r := range routes {
		for _, browser := range []struct{ name, site string }{
			{"a browser that sends Sec-Fetch-Site", "cross-site"},
			{"an older browser that sends only Origin", ""},
		} {
			got, body := b.browser(t, r.path, evil, browser.site, r.contentType, r.body)
			if got != http.StatusForbidden || !strings.Contains(body, "cross-origin request refused") || !strings.Contains(body, evil) {
				t.Errorf("%s from %s, %s: %d %.300s; want 403 naming the cross-origin request and its origin", r.name, evil, browser.name, got, body)
			}
		}
	}
	if got := b.published(); got != published {
		t.Errorf("the refused requests published %d messages", got-published)
	}
	if _, err := b.led.Get(t.Context(), &ledger.GetParams{RunID: ledger.KeyedRunID("proj/us-central1", "job", "planted-by-a-web-page")}); err == nil {
		t.Error("a cross-site post created a run")
	}
	for id, want := range map[string]ledger.Status{failed: ledger.StatusFailed, queued: ledger.StatusQueued, running: ledger.StatusRunning} {
		if got := status(id); got != want {
			t.Errorf("after the refused requests run %s is %s, want %s", id[:12], got, want)
		}
	}

	// A page of the ingress's own origin (the dashboard, a same-origin script) acts.
	self := b.srv.URL
	if got, body := b.browser(t, "/v1/runs/"+failed+":retry", self, "same-origin", "application/json", reason); got != http.StatusOK {
		t.Errorf("a same-origin :retry = %d %s, want 200", got, body)
	}
	if got, body := b.browser(t, "/v1/runs/"+running+":release", self, "", "application/json", reason); got != http.StatusOK {
		t.Errorf("a same-origin :release from an older browser (Origin only) = %d %s, want 200", got, body)
	}
	if got, body := b.browser(t, "/ui/runs/"+queued+"/cancel", self, "same-origin", "application/x-www-form-urlencoded", form); got != http.StatusOK {
		t.Errorf("the dashboard's own cancel form = %d %.300s, want 200 (the run's page after the redirect)", got, body)
	}
	// A client that is not a browser (curl, Cloud Scheduler, the CLI) sends no Origin.
	if got, body := b.browser(t, "/v1/jobs/job", "", "", "application/json", newKey); got != http.StatusAccepted {
		t.Errorf("a non-browser post keyed by its JSON body = %d %s, want 202", got, body)
	}
	for id, want := range map[string]ledger.Status{failed: ledger.StatusQueued, queued: ledger.StatusCancelled, running: ledger.StatusQueued} {
		if got := status(id); got != want {
			t.Errorf("after the allowed requests run %s is %s, want %s", id[:12], got, want)
		}
	}
}

// TestActionsTakeOnlyAJSONBody: an operator's action reads its body only when it is
// declared JSON (a web page cannot post application/json without a preflight), with
// parameters allowed; anything else is 415 naming the Content-Type.
func TestActionsTakeOnlyAJSONBody(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	id := b.failRun(t, "job", "boom")
	for _, c := range []struct{ contentType, want string }{
		{"text/plain", `Content-Type "text/plain" is not application/json`},
		{"application/x-www-form-urlencoded", `Content-Type "application/x-www-form-urlencoded" is not application/json`},
		{"multipart/form-data; boundary=x", `is not application/json`},
		{"", "the request has no Content-Type"},
		{"application/json; charset", "cannot be read"},
	} {
		got, body := b.browser(t, "/v1/runs/"+id+":retry", "", "", c.contentType, `{"reason":"r"}`)
		if got != http.StatusUnsupportedMediaType || !strings.Contains(body, c.want) || !strings.Contains(body, "the run is unchanged") {
			t.Errorf(":retry with Content-Type %q = %d %s; want 415 saying %q", c.contentType, got, body, c.want)
		}
	}
	if r, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: id}); r.Status != ledger.StatusFailed {
		t.Fatalf("after the refused actions the run is %s, want failed", r.Status)
	}
	if got, body := b.browser(t, "/v1/runs/"+id+":retry", "", "", "Application/JSON; charset=utf-8", `{"reason":"r"}`); got != http.StatusOK {
		t.Fatalf(":retry with Content-Type application/json and a charset = %d %s, want 200", got, body)
	}
}
