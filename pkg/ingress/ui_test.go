package ingress_test

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/ledger"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "rewrite the dashboard's screenshots in docs/img")

// browser starts headless Chromium (Debian's package; scripts/test.sh installs it) with
// JavaScript disabled: the dashboard must work without it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no chromium under CI=true: scripts/test.sh installs Debian's chromium")
		}
		t.Skip("install chromium (apt-get install chromium) to run the dashboard's browser tests")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel3)
	if err := chromedp.Run(ctx, emulation.SetScriptExecutionDisabled(true)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := t.TempDir()
	if *updateScreenshots {
		dir = filepath.Join("..", "..", "docs", "img")
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[1].open(tb, nil) })
	// A night's runs: completed ones, a failed invoice run with an effect, a queued one.
	for i := range 3 {
		r := b.do(t, http.MethodPost, "/v1/jobs/daily-report", map[string]string{"Idempotency-Key": "report-" + string(rune('a'+i))}, "{}")
		id := r.body["run_id"].(string)
		cur, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: id})
		res, err := b.led.Acquire(t.Context(), &ledger.AcquireParams{Identity: ledger.Identity{RunID: id, PayloadHash: cur.PayloadHash}, AttemptID: uuid.NewString(), Worker: "worker-7f9c/1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.led.Complete(t.Context(), &ledger.CompleteParams{Fence: ledger.Fence{RunID: id, Attempt: 1, AttemptID: res.Run.AttemptID}}); err != nil {
			t.Fatal(err)
		}
	}
	failed := b.failRun(t, "send-invoices", "POST https://billing.internal/run-invoices: 503 Service Unavailable: upstream timed out")
	queued := b.do(t, http.MethodPost, "/v1/jobs/send-reminders", map[string]string{"Idempotency-Key": "reminders-2026-12-01"}, "{}").body["run_id"].(string)

	var title, counts, rows, url1 string
	err := chromedp.Run(ctx,
		chromedp.Navigate(b.srv.URL+"/ui/"),
		chromedp.Title(&title),
		chromedp.Evaluate(`document.querySelector(".counts ul").textContent.replace(/\s+/g, " ")`, &counts),
		chromedp.Text("table.runs tbody", &rows, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if title != "Runs · runonce" || !strings.Contains(counts, "1 failed") || !strings.Contains(counts, "3 completed") || !strings.Contains(counts, "1 queued") {
		t.Fatalf("runs page: title %q, counts %q", title, counts)
	}
	if !strings.Contains(rows, "send-invoices") || !strings.Contains(rows, "daily-report") || !strings.Contains(rows, "503 Service Unavailable") {
		t.Fatalf("runs table = %q", rows)
	}
	screenshot(t, ctx, "dashboard-runs.png")

	// Filter by status with the form.
	var nrows int
	err = chromedp.Run(ctx,
		chromedp.SetValue(`select[name="status"]`, "failed", chromedp.ByQuery),
		chromedp.Click(`form.filters button[type="submit"]`, chromedp.ByQuery),
		// The unfiltered page has the table too: wait for the filtered page, whose
		// status option the server rendered selected (setting the value does not add the
		// attribute).
		chromedp.WaitReady(`select[name="status"] option[value="failed"][selected]`, chromedp.ByQuery),
		chromedp.WaitVisible(`table.runs`, chromedp.ByQuery),
		chromedp.Location(&url1),
		chromedp.Evaluate(`document.querySelectorAll("table.runs tbody tr").length`, &nrows),
		chromedp.Text("table.runs tbody", &rows, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(url1, "status=failed") || nrows != 1 || !strings.Contains(rows, "send-invoices") {
		t.Fatalf("after filtering on failed: %s, %d rows %q", url1, nrows, rows)
	}

	// Open the run: the error first, then its attempts and effects.
	var firstSection, attempts, effects string
	err = chromedp.Run(ctx,
		chromedp.Click(`table.runs tbody a`, chromedp.ByQuery),
		chromedp.WaitVisible(`section.lasterror`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("main h1 + section").className`, &firstSection),
		chromedp.Text(`ol.timeline`, &attempts, chromedp.ByQuery),
		chromedp.Text(`section[aria-labelledby="eff-h"]`, &effects, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if firstSection != "lasterror" || !strings.Contains(attempts, "worker-7f9c/1") && !strings.Contains(attempts, "host-a/1") || !strings.Contains(attempts, "FAILED") && !strings.Contains(attempts, "failed") {
		t.Fatalf("run page: first section %q, attempts %q", firstSection, attempts)
	}
	if !strings.Contains(effects, "send-email") || !strings.Contains(effects, ledger.EffectKey(failed, "send-email")) {
		t.Fatalf("run page effects = %q", effects)
	}
	screenshot(t, ctx, "dashboard-run.png")

	// Retry it from the keyboard: the action's link, a reason, Tab to the button, Enter.
	var flash, status string
	err = chromedp.Run(ctx,
		chromedp.Click(`a.action-retry`, chromedp.ByQuery),
		chromedp.WaitVisible(`textarea#reason`, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "dashboard-confirm.png")
	err = chromedp.Run(ctx,
		chromedp.Focus(`textarea#reason`, chromedp.ByQuery),
		chromedp.SendKeys(`textarea#reason`, "billing is back up", chromedp.ByQuery),
		chromedp.KeyEvent("\t"),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(`p.flash`, chromedp.ByQuery),
		chromedp.Text(`p.flash`, &flash, chromedp.ByQuery),
		chromedp.Text(`main h1 .badge`, &status, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Retried") || !strings.EqualFold(status, "queued") {
		t.Fatalf("after retry: flash %q, status %q", flash, status)
	}
	if r, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: failed}); r.Status != ledger.StatusQueued || r.History[len(r.History)-1].Text != "billing is back up" {
		t.Fatalf("the ledger has the run %s, last event %+v", r.Status, r.History[len(r.History)-1])
	}

	// Settle the uncertain effect of another failed run: it happened, here is what it made.
	uncertain := b.failRun(t, "send-invoices", "the relay's answer was lost")
	var explain string
	err = chromedp.Run(ctx,
		chromedp.Navigate(b.srv.URL+"/ui/runs/"+uncertain),
		chromedp.Click(`td.resolve a.resolve-done`, chromedp.ByQuery),
		chromedp.WaitVisible(`input#ref`, chromedp.ByQuery),
		chromedp.Text(`p.explain`, &explain, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(explain, "may or may not have happened") || !strings.Contains(explain, "execution's name") {
		t.Fatalf("the resolution's confirmation explains %q", explain)
	}
	screenshot(t, ctx, "dashboard-resolve.png")
	err = chromedp.Run(ctx,
		chromedp.SendKeys(`input#ref`, "msg-20261201-7", chromedp.ByQuery),
		chromedp.SendKeys(`textarea#reason`, "the relay's log shows it sent", chromedp.ByQuery),
		chromedp.Click(`form.confirm button`, chromedp.ByQuery),
		chromedp.WaitVisible(`p.flash`, chromedp.ByQuery),
		chromedp.Text(`p.flash`, &flash, chromedp.ByQuery),
		chromedp.Text(`main h1 .badge`, &status, chromedp.ByQuery),
		chromedp.Text(`section[aria-labelledby="eff-h"]`, &effects, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Resolved") || !strings.EqualFold(status, "queued") || !strings.Contains(effects, "msg-20261201-7") {
		t.Fatalf("after the resolution: flash %q, status %q, effects %q", flash, status, effects)
	}
	if e, err := b.led.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: uncertain, Name: "send-email"}); err != nil ||
		e.Status != ledger.EffectDone || e.Ref != "msg-20261201-7" {
		t.Fatalf("the ledger has the effect %+v (%v); want done with the ref", e, err)
	}

	// Cancel the queued run.
	err = chromedp.Run(ctx,
		chromedp.Navigate(b.srv.URL+"/ui/runs/"+queued+"/cancel"),
		chromedp.SendKeys(`textarea#reason`, "reminders go out tomorrow", chromedp.ByQuery),
		chromedp.Click(`form.confirm button`, chromedp.ByQuery),
		chromedp.WaitVisible(`p.flash`, chromedp.ByQuery),
		chromedp.Text(`main h1 .badge`, &status, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.EqualFold(status, "cancelled") {
		t.Fatalf("after cancel the page shows %q", status)
	}
	if r, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: queued}); r.Status != ledger.StatusCancelled {
		t.Fatalf("the ledger has the run %s, want cancelled", r.Status)
	}
}

func TestDashboardRefusesWhatItMust(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	id := b.failRun(t, "job", "boom")
	// postAction posts an action's form (from another site's page when origin is set)
	// and returns the answer's status and page.
	postAction := func(action api.Action, origin string, form url.Values) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/ui/runs/"+id+"/"+string(action), strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Sec-Fetch-Site", "cross-site")
		}
		resp, err := b.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	post := func(origin string, form url.Values) int {
		status, _ := postAction(api.ActionRetry, origin, form)
		return status
	}
	if got := post("https://evil.example", url.Values{"reason": {"x"}}); got != http.StatusForbidden {
		t.Fatalf("a cross-site form post = %d, want 403", got)
	}
	if got := post("", url.Values{}); got != http.StatusBadRequest {
		t.Fatalf("a post without a reason = %d, want 400", got)
	}
	if got := post("", url.Values{"reason": {"x"}, "attempt": {"9"}}); got != http.StatusConflict {
		t.Fatalf("a post for another attempt than the run's = %d, want 409", got)
	}
	if r, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: id}); r.Status != ledger.StatusFailed {
		t.Fatalf("after refused posts the run is %s", r.Status)
	}
	for path, want := range map[string]int{
		"/ui/runs/" + id:                      200,
		"/ui/runs/nope":                       400,
		"/ui/runs/" + strings.Repeat("0", 64): 404,
		"/ui/runs/" + id + "/explode":         404,
		"/ui/?status=lost":                    400,
		"/ui/static/style.css":                200,
		// A resolution's confirmation: a known outcome and an effect of the run.
		"/ui/runs/" + id + "/resolve?effect=send-email&outcome=done":     200,
		"/ui/runs/" + id + "/resolve?effect=send-email&outcome=not_done": 200,
		"/ui/runs/" + id + "/resolve?effect=send-email&outcome=maybe":    400,
		"/ui/runs/" + id + "/resolve?effect=nope&outcome=done":           404,
	} {
		resp, err := b.srv.Client().Get(b.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	// A resolution: the same cross-origin protection, and each bad field named.
	ok := url.Values{"effect": {"send-email"}, "outcome": {"not_done"}, "reason": {"x"}}
	with := func(k, v string) url.Values {
		f := url.Values{}
		for key, vs := range ok {
			f[key] = vs
		}
		f.Set(k, v)
		return f
	}
	for _, c := range []struct {
		origin string
		form   url.Values
		status int
		want   string
	}{
		{"https://evil.example", ok, 403, ""},
		{"", with("outcome", "maybe"), 400, "outcome &#34;maybe&#34;"},
		{"", with("effect", ""), 400, "needs the effect"},
		{"", with("ref", "e-1"), 400, "ref names what the effect made"},
		{"", with("outcome", "done"), 400, "as done needs its ref"},
		{"", with("reason", ""), 400, "a reason is required"},
		{"", with("effect", "send-emial"), 404, "its effects: &#34;send-email&#34; (pending)"},
		{"", with("attempt", "9"), 409, "not 9"},
	} {
		if got, body := postAction(api.ActionResolve, c.origin, c.form); got != c.status || !strings.Contains(body, c.want) {
			t.Errorf("a resolution's post %v from %q = %d, want %d naming %q", c.form, c.origin, got, c.status, c.want)
		}
	}
	if r, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: id}); r.Status != ledger.StatusFailed {
		t.Fatalf("after refused resolutions the run is %s", r.Status)
	}
	reader := setup(t, setupOpts{})
	resp, err := reader.srv.Client().Get(reader.srv.URL + "/ui/runs/" + id + "/retry")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the confirmation page for a reader = %d, want 403", resp.StatusCode)
	}
}

// TestBrowserAtRootGetsTheDashboard: a browser opening the ingress's URL (the -dev
// banner's) is sent to the dashboard; an API client at / still gets the JSON list of
// endpoints.
func TestBrowserAtRootGetsTheDashboard(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	noFollow := *b.srv.Client()
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, c := range []struct {
		method, accept string
		status         int
		location       string
	}{
		{http.MethodGet, "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", http.StatusFound, "/ui/"},
		{http.MethodHead, "text/html", http.StatusFound, "/ui/"},
		{http.MethodGet, "*/*", http.StatusNotFound, ""},
		{http.MethodPost, "text/html", http.StatusNotFound, ""},
	} {
		req, _ := http.NewRequest(c.method, b.srv.URL+"/", nil)
		req.Header.Set("Accept", c.accept)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Location") != c.location {
			t.Errorf("%s / (Accept %s) = %d to %q; want %d to %q", c.method, c.accept, resp.StatusCode, resp.Header.Get("Location"), c.status, c.location)
		}
	}
	if r := b.do(t, http.MethodGet, "/", nil, ""); r.status != http.StatusNotFound || !strings.Contains(r.body["error"].(string), "/ui/") {
		t.Errorf("GET / from an API client = %d %v; want 404 listing the endpoints", r.status, r.body)
	}
}

// TestDashboardWarningsAreAFixedSet: a run's page shows a warning only from its known
// codes, as fixed text; whatever else a link puts in ?warning= is not shown, so a link
// from elsewhere cannot make the dashboard say "the run is stuck: retry it" or worse.
func TestDashboardWarningsAreAFixedSet(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	id := b.failRun(t, "job", "boom")
	page := func(path string) string {
		t.Helper()
		resp, err := b.srv.Client().Get(b.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d", path, resp.StatusCode)
		}
		return string(raw)
	}
	planted := "Security notice: this run is compromised, call +1 555 0100"
	for _, v := range []string{planted, "<b>" + planted + "</b>", "not-republished-" + planted} {
		if got := page("/ui/runs/" + id + "?warning=" + url.QueryEscape(v)); strings.Contains(got, "Security notice") || strings.Contains(got, `role="alert"`) {
			t.Errorf("?warning=%q is shown on the run's page:\n%s", v, got)
		}
	}

	// The one warning an action leaves: a retry whose republish failed.
	b.pub.fail.Store(true)
	resp, err := b.srv.Client().PostForm(b.srv.URL+"/ui/runs/"+id+"/retry", url.Values{"reason": {"relay fixed"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Query().Get("warning") != "not-republished" ||
		!strings.Contains(string(raw), "could not be republished now: the rescuer republishes it after its pickup deadline") {
		t.Fatalf("a retry whose republish failed = %d at %s; want the run's page with the fixed warning:\n%s", resp.StatusCode, resp.Request.URL, raw)
	}
}

func TestDashboardOffersResolutionsOfAFailedRunsPendingEffects(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	id := b.failRun(t, "job", "boom")
	page := func(b *bundle) string {
		resp, err := b.srv.Client().Get(b.srv.URL + "/ui/runs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	done := `href="/ui/runs/` + id + `/resolve?effect=send-email&amp;outcome=done"`
	notDone := `href="/ui/runs/` + id + `/resolve?effect=send-email&amp;outcome=not_done"`
	if p := page(b); !strings.Contains(p, done) || !strings.Contains(p, notDone) {
		t.Fatalf("a failed run's page offers no resolution of its pending effect:\n%s", p)
	}
	reader := setup(t, setupOpts{open: func(testing.TB) ledger.Driver { return b.led.Driver }})
	if p := page(reader); strings.Contains(p, "/resolve?") {
		t.Fatal("a reader's page offers resolutions")
	}
	// Resolved, the run is queued: no resolution is offered.
	if r := b.do(t, http.MethodPost, "/v1/runs/"+id+":resolve", jsonBody, `{"effect":"send-email","outcome":"not_done","reason":"x"}`); r.status != http.StatusOK {
		t.Fatalf(":resolve = %d %v", r.status, r.body)
	}
	if p := page(b); strings.Contains(p, "/resolve?") {
		t.Fatal("a queued run's page offers resolutions")
	}
}
