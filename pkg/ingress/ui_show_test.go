package ingress_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// page GETs a dashboard page and returns its HTML.
func (b *bundle) page(t *testing.T, path string, hdr map[string]string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d\n%s", path, resp.StatusCode, body)
	}
	return string(body)
}

// acquire starts the next attempt of run id through the ledger, as a worker's claim does.
func (b *bundle) acquire(t *testing.T, id string) ledger.Fence {
	t.Helper()
	cur, err := b.led.Get(t.Context(), &ledger.GetParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.led.Acquire(t.Context(), &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: cur.PayloadHash}, AttemptID: uuid.NewString(), Worker: "host-a/1"})
	if err != nil || res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire: %v %v", res, err)
	}
	return ledger.Fence{RunID: id, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
}

// tableRow returns the row of the runs table that links to run id (by its first 12
// digits at least).
func tableRow(html, id string) string {
	i := strings.Index(html, `href="/ui/runs/`+id[:12])
	if i < 0 {
		return ""
	}
	start := strings.LastIndex(html[:i], "<tr>")
	end := strings.Index(html[i:], "</tr>")
	return html[start : i+end]
}

// TestDashboardShowsTheErrorThatExplainsTheStatus: the runs table and a run's page show
// the last error of a failed run and of a run queued again after an error, not an
// earlier attempt's error of a run that completed since, which stays in its attempts.
func TestDashboardShowsTheErrorThatExplainsTheStatus(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	const old, again = "worker: shutting down", "smtp: 421 try again later"
	post := func(job string) string {
		return b.do(t, http.MethodPost, "/v1/jobs/"+job, map[string]string{"Idempotency-Key": uuid.NewString()}, "{}").body["run_id"].(string)
	}
	completed := post("report")
	if _, err := b.led.Release(t.Context(), &ledger.ReleaseParams{Fence: b.acquire(t, completed), Error: old}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.led.Complete(t.Context(), &ledger.CompleteParams{Fence: b.acquire(t, completed)}); err != nil {
		t.Fatal(err)
	}
	queued := post("mail")
	if _, err := b.led.Release(t.Context(), &ledger.ReleaseParams{Fence: b.acquire(t, queued), Error: again}); err != nil {
		t.Fatal(err)
	}
	failed := b.failRun(t, "invoice", "smtp: 554 rejected")

	list := b.page(t, "/ui/", nil)
	if strings.Contains(tableRow(list, completed), old) || !strings.Contains(tableRow(list, queued), again) || !strings.Contains(tableRow(list, failed), "smtp: 554 rejected") {
		t.Fatalf("runs table: completed %q\nqueued %q\nfailed %q\nwant the errors of the queued and the failed runs only",
			tableRow(list, completed), tableRow(list, queued), tableRow(list, failed))
	}
	for id, want := range map[string]string{completed: "", queued: again, failed: "smtp: 554 rejected"} {
		p := b.page(t, "/ui/runs/"+id, nil)
		shown := strings.Contains(p, `class="lasterror"`)
		if shown != (want != "") || want != "" && !strings.Contains(p, "<pre>"+want+"</pre>") {
			t.Errorf("run page of %s: error section shown %v, want %q", id[:12], shown, want)
		}
	}
	if p := b.page(t, "/ui/runs/"+completed, nil); !strings.Contains(p[strings.Index(p, `id="att-h"`):], old) {
		t.Errorf("the completed run's page lost the old error from its attempts")
	}
}

// TestDashboardShowsTheResult: a completed run's page shows its result to whoever may read
// the run (as GET /v1/runs/{run_id} does), while its payload stays for operators.
func TestDashboardShowsTheResult(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{}) // no operators: the caller is a reader
	id := b.do(t, http.MethodPost, "/v1/jobs/report", map[string]string{"Idempotency-Key": "r-1"}, `{"secret":"payload"}`).body["run_id"].(string)
	if _, err := b.led.Complete(t.Context(), &ledger.CompleteParams{Fence: b.acquire(t, id), Result: []byte(`{"greeting":"hello, once per run","attempt":1}`)}); err != nil {
		t.Fatal(err)
	}
	p := b.page(t, "/ui/runs/"+id, nil)
	want := "{\n  &#34;greeting&#34;: &#34;hello, once per run&#34;,\n  &#34;attempt&#34;: 1\n}"
	if !strings.Contains(p, `<h2 id="res-h">Result</h2>`) || !strings.Contains(p, want) {
		t.Fatalf("the run page lacks the result laid out:\n%s", p)
	}
	if strings.Contains(p, "payload&#34;") || strings.Contains(p, `id="pl-h"`) {
		t.Fatalf("a reader sees the payload:\n%s", p)
	}
	other := b.do(t, http.MethodPost, "/v1/jobs/report", map[string]string{"Idempotency-Key": "r-2"}, "{}").body["run_id"].(string)
	if p := b.page(t, "/ui/runs/"+other, nil); strings.Contains(p, `id="res-h"`) {
		t.Fatalf("a run without a result shows a result section")
	}
}
