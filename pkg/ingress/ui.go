package ingress

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/internal/cleantext"
	"github.com/runonce/runonce/pkg/ledger"
)

// The dashboard, under /ui/: server-rendered pages (html/template, embedded assets, no
// JavaScript) on the same ledger, authentication and actions as the API.

//go:embed ui/*.tmpl ui/static/*
var uiFiles embed.FS

// maxCounted bounds the runs counted per status on the dashboard's first page.
const maxCounted = 1000

// uiSinces are the "created within" choices of the runs page.
var uiSinces = []string{"1h", "24h", "168h"}

type uiPage struct {
	Title, Flash, Error string
	Caller              string
	Operator            bool
	// Candidates are the runs an ambiguous run ID prefix names (an error page's links).
	Candidates []string
}

type uiCount struct {
	Status ledger.Status
	N      string
}

type uiRunsPage struct {
	uiPage
	Filter struct {
		Status, Job, Namespace, Since string
	}
	Statuses    []ledger.Status
	Sinces      []string
	Counts      []uiCount
	Runs        []*api.RunJSON
	First, Next string
}

type uiRunPage struct {
	uiPage
	*api.RunDetailJSON
	// Run is the run's record (the same as the embedded detail's).
	Run     *api.RunDetailJSON
	Actions []api.Action
	// Resolvable: the run is failed and the caller an operator, so each pending effect
	// offers its resolutions.
	Resolvable bool
}

type uiConfirmPage struct {
	uiPage
	Run       *api.RunJSON
	Action    api.Action
	Explain   string
	Button    string
	MaxReason int
	// Effect and Outcome are a resolution's (api.ActionResolve); MaxRef bounds its ref.
	Effect  *api.EffectJSON
	Outcome string
	MaxRef  int
}

type ui struct {
	h     *Handler
	pages map[string]*template.Template
}

func newUI(h *Handler) (*ui, error) {
	funcs := template.FuncMap{
		"short":   func(id string) string { return id[:min(12, len(id))] },
		"clip":    func(s string, n int) string { return clipRunes(s, n) },
		"title":   func(a api.Action) string { return strings.ToUpper(string(a[:1])) + string(a[1:]) },
		"when":    func(t time.Time) template.HTML { return when(t, h.cfg.Now()) },
		"json":    indentJSON,
		"seconds": uiSeconds,
		// query encodes key, value pairs as a URL query (escaped here: the template
		// only normalises a URL).
		"query": func(kv ...string) template.URL {
			q := url.Values{}
			for i := 0; i+1 < len(kv); i += 2 {
				q.Set(kv[i], kv[i+1])
			}
			return template.URL(q.Encode())
		},
	}
	u := &ui{h: h, pages: map[string]*template.Template{}}
	for _, name := range []string{"runs", "run", "confirm", "error", "ticks"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(uiFiles, "ui/layout.tmpl", "ui/"+name+".tmpl")
		if err != nil {
			return nil, fmt.Errorf("ingress: dashboard template %s: %w", name, err)
		}
		u.pages[name] = t
	}
	return u, nil
}

func (u *ui) routes(mux *routeMux) {
	static, _ := fs.Sub(uiFiles, "ui/static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusMovedPermanently) })
	mux.HandleFunc("GET /ui/{$}", u.runs)
	mux.HandleFunc("GET /ui/runs/{run_id}", u.run)
	mux.HandleFunc("GET /ui/jobs/{$}", u.jobs)
	mux.HandleFunc("GET /ui/jobs/{job}", u.ticks)
	mux.HandleFunc("GET /ui/runs/{run_id}/{action}", u.confirm)
	// A form post from another site must not act with the operator's credentials: the
	// Handler refuses it before any route (Handler.sameOrigin).
	mux.HandleFunc("POST /ui/runs/{run_id}/{action}", u.act)
}

// when renders a time for people: relative, with the absolute UTC time under it and
// in the machine-readable attribute.
func when(t time.Time, now time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	abs := t.UTC().Format("2006-01-02 15:04:05 UTC")
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s<span class="abs">%s</span></time>`,
		t.UTC().Format(time.RFC3339Nano), abs, template.HTMLEscapeString(relative(t, now)), abs))
}

func relative(t, now time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh %dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// indentJSON lays a stored JSON value (a run's result) out for reading; one that does
// not parse is shown as it is.
func indentJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

func clipRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (u *ui) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := u.pages[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		u.h.log.Error("dashboard: render", "page", name, "error", err.Error())
		http.Error(w, "the page could not be rendered: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (u *ui) fail(w http.ResponseWriter, status int, p uiPage, msg string) {
	p.Title, p.Error = http.StatusText(status), msg
	u.render(w, status, "error", &p)
}

// who authenticates a dashboard request as the API does, answering a refusal with a
// page.
func (u *ui) who(w http.ResponseWriter, r *http.Request) (uiPage, bool) {
	ctx := r.Context()
	if u.h.cfg.Operators != nil {
		if c, err := u.h.cfg.Operators.Authenticate(ctx, r); err == nil {
			return uiPage{Caller: c.Email, Operator: true}, true
		}
	}
	c, err := u.h.cfg.Auth.Authenticate(ctx, r)
	if err != nil {
		status := http.StatusUnauthorized
		if errors.Is(err, auth.ErrForbidden) {
			status = http.StatusForbidden
		}
		u.fail(w, status, uiPage{}, err.Error())
		return uiPage{}, false
	}
	return uiPage{Caller: c.Email}, true
}

// ledgerFailure maps a ledger error to a status and a sentence, as the API does.
func ledgerFailure(err error, runID string) (int, string) {
	switch {
	case errors.Is(err, ledger.ErrInvalid):
		return http.StatusBadRequest, err.Error()
	case errors.As(err, new(*errAbsentEffect)):
		return http.StatusNotFound, err.Error() + "; the run is unchanged"
	case errors.Is(err, ledger.ErrNotFound):
		return http.StatusNotFound, notFound(runID)
	case errors.Is(err, ledger.ErrWrongStatus), errors.Is(err, ledger.ErrConflict):
		return http.StatusConflict, err.Error() + "; the run is unchanged"
	case errors.Is(err, ledger.ErrUnsupported):
		return http.StatusNotImplemented, err.Error()
	}
	return http.StatusServiceUnavailable, "the ledger is unavailable; nothing was changed, retry later"
}

func (u *ui) runs(w http.ResponseWriter, r *http.Request) {
	page, ok := u.who(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	q := r.URL.Query()
	// Empty form fields filter nothing.
	for k, vs := range q {
		if len(vs) == 1 && vs[0] == "" {
			q.Del(k)
		}
	}
	p := &uiRunsPage{uiPage: page, Statuses: ledger.Statuses(), Sinces: uiSinces}
	p.Title = "Runs"
	p.Filter.Status, p.Filter.Job, p.Filter.Namespace, p.Filter.Since = q.Get("status"), q.Get("job"), q.Get("namespace"), q.Get("since")
	lp, err := ParseListQuery(q, u.h.cfg.Now())
	if err != nil {
		u.fail(w, http.StatusBadRequest, page, err.Error())
		return
	}
	lctx, cancel := context.WithTimeout(ctx, u.h.cfg.LedgerTimeout)
	defer cancel()
	res, err := u.h.cfg.Ledger.List(lctx, lp)
	if err != nil {
		status, msg := ledgerFailure(err, "")
		if status == http.StatusServiceUnavailable {
			u.h.log.ErrorContext(ctx, "dashboard: list runs", "error", cleantext.Clean(err.Error()))
		}
		u.fail(w, status, page, msg)
		return
	}
	for _, run := range res.Runs {
		rj := api.NewRunJSON(run)
		if !page.Operator {
			rj.HideErrors()
		}
		p.Runs = append(p.Runs, rj)
	}
	if res.Next != "" {
		nq := cloneValues(q)
		nq.Set("page_token", res.Next)
		p.Next = "/ui/?" + nq.Encode()
	}
	if q.Has("page_token") {
		fq := cloneValues(q)
		fq.Del("page_token")
		p.First = "/ui/?" + fq.Encode()
	}
	p.Counts = u.counts(lctx)
	u.render(w, http.StatusOK, "runs", p)
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// counts counts the runs of each status created in the last 24 hours, up to maxCounted
// each (one indexed listing per status).
func (u *ui) counts(ctx context.Context) []uiCount {
	since := u.h.cfg.Now().Add(-24 * time.Hour)
	var out []uiCount
	for _, s := range ledger.Statuses() {
		n, cursor, more := 0, "", true
		for more && n < maxCounted {
			res, err := u.h.cfg.Ledger.List(ctx, &ledger.ListParams{Status: s, CreatedAfter: since, PageSize: ledger.MaxPageSize, Cursor: cursor})
			if err != nil {
				return nil
			}
			n += len(res.Runs)
			cursor, more = res.Next, res.Next != ""
		}
		c := uiCount{Status: s, N: strconv.Itoa(n)}
		if more {
			c.N = strconv.Itoa(n) + "+"
		}
		out = append(out, c)
	}
	return out
}

// actionsFor are the actions a run's status allows.
func actionsFor(s ledger.Status) []api.Action {
	switch s {
	case ledger.StatusFailed:
		return []api.Action{api.ActionRetry}
	case ledger.StatusQueued:
		return []api.Action{api.ActionCancel}
	case ledger.StatusRunning:
		return []api.Action{api.ActionCancel, api.ActionRelease}
	}
	return nil
}

func (u *ui) run(w http.ResponseWriter, r *http.Request) {
	page, ok := u.who(w, r)
	if !ok {
		return
	}
	id := r.PathValue("run_id")
	ctx, cancel := context.WithTimeout(r.Context(), u.h.cfg.LedgerTimeout)
	defer cancel()
	if !ledger.ValidRunID(id) {
		u.redirectPrefix(ctx, w, r, page, id)
		return
	}
	d, err := u.h.detail(ctx, id, page.Operator)
	if err != nil {
		status, msg := ledgerFailure(err, id)
		u.fail(w, status, page, msg)
		return
	}
	if !page.Operator {
		d.HideErrors()
	}
	p := &uiRunPage{uiPage: page, RunDetailJSON: d, Run: d}
	p.Title = d.Job + " " + id[:12]
	if page.Operator {
		p.Actions = actionsFor(d.Status)
		p.Resolvable = d.Status == ledger.StatusFailed
	}
	switch done := api.Action(r.URL.Query().Get("done")); done {
	case api.ActionRetry:
		p.Flash = "Retried: the run is queued again with a fresh attempt budget."
	case api.ActionCancel:
		p.Flash = "Cancelled: the run will not run; a running attempt stops at its next renewal."
	case api.ActionRelease:
		p.Flash = "Released: the run is queued again and republished."
	case api.ActionResolve:
		p.Flash = "Resolved: the effect's outcome is recorded, and the run is queued again with a fresh attempt budget and republished."
	}
	// Only a known warning code is shown, as its fixed text: the page never shows what
	// a link says, so a link from elsewhere cannot put words in the dashboard's mouth.
	p.Error = uiWarnings[r.URL.Query().Get("warning")]
	u.render(w, http.StatusOK, "run", p)
}

// redirectPrefix answers /ui/runs/{prefix}: a redirect to the page of the one run whose
// ID starts with prefix (the tables show 12 digits), a page listing the candidates when
// several do, or the refusal's page.
func (u *ui) redirectPrefix(ctx context.Context, w http.ResponseWriter, r *http.Request, page uiPage, prefix string) {
	if ledger.ValidRunIDPrefix(prefix) != nil {
		u.fail(w, http.StatusBadRequest, page, badRunID(prefix, true))
		return
	}
	id, err := ledger.LookupRunID(ctx, u.h.cfg.Ledger, prefix)
	var amb *ledger.AmbiguousError
	switch {
	case errors.As(err, &amb):
		page.Candidates = amb.Candidates
		u.fail(w, http.StatusConflict, page, amb.Error())
		return
	case err != nil:
		status, msg := ledgerFailure(err, prefix)
		u.fail(w, status, page, msg)
		return
	}
	target := "/ui/runs/" + id
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, target, http.StatusFound)
}

// warnNotRepublished is the warning code of an action whose republish failed.
const warnNotRepublished = "not-republished"

// uiWarnings are the warnings a run's page shows after an action, by the code in its
// ?warning=; any other value shows nothing.
var uiWarnings = map[string]string{
	warnNotRepublished: "The run is queued but could not be republished now: the rescuer republishes it after its pickup deadline.",
}

var explanations = map[api.Action]string{
	api.ActionRetry:   "The run goes back to queued with a fresh attempt budget and is republished. Effects it already did stay done: they are not done again.",
	api.ActionCancel:  "The run becomes cancelled and never runs again. If an attempt is running, it learns at its next lease renewal; nothing it writes after that lands.",
	api.ActionRelease: "Use this when the worker holding the run is gone. Its lease ends now, the run is queued again and republished; the old holder can no longer write.",
	api.ActionResolve: "An attempt began this effect and never recorded its end: it may or may not have happened. Say which once you know (the downstream's logs, the execution's list).",
}

// resolutions explain each outcome of a resolution, and name its button.
var resolutions = map[string]struct{ explain, button string }{
	api.OutcomeDone: {"The effect is recorded as done, with what it made if you name it: the next attempt skips it, or follows the execution you name. " +
		"For a Google Cloud API target's start, give the execution's name: a start recorded done without one counts as refused, and the next attempt starts anew. " +
		"The run is queued again with a fresh attempt budget and republished.", "It happened: record it"},
	api.OutcomeNotDone: {"The effect is recorded as not begun: the next attempt does it again, under the same key. " +
		"The run is queued again with a fresh attempt budget and republished.", "It did not happen: do it again"},
}

// action reads the run and the action of a confirm or act request (what: "page" or
// "action", for the 404) and checks that the caller is an operator. When not ok it has
// answered.
func (u *ui) action(w http.ResponseWriter, r *http.Request, what string) (page uiPage, id string, action api.Action, ok bool) {
	page, ok = u.who(w, r)
	if !ok {
		return page, "", "", false
	}
	id, action = r.PathValue("run_id"), api.Action(r.PathValue("action"))
	if _, known := explanations[action]; !known || !ledger.ValidRunID(id) {
		u.fail(w, http.StatusNotFound, page, "no such "+what+": the actions are retry, cancel and release of a run, and resolve of its effect")
		return page, "", "", false
	}
	if !page.Operator {
		u.fail(w, http.StatusForbidden, page, "only operators (-operators) may "+string(action)+" runs")
		return page, "", "", false
	}
	return page, id, action, true
}

func (u *ui) confirm(w http.ResponseWriter, r *http.Request) {
	page, id, action, ok := u.action(w, r, "page")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), u.h.cfg.LedgerTimeout)
	defer cancel()
	run, err := u.h.cfg.Ledger.Get(ctx, &ledger.GetParams{RunID: id})
	if err != nil {
		status, msg := ledgerFailure(err, id)
		u.fail(w, status, page, msg)
		return
	}
	p := &uiConfirmPage{uiPage: page, Run: api.NewRunJSON(run), Action: action, Explain: explanations[action], MaxReason: ledger.MaxReason,
		Button: strings.ToUpper(string(action[:1])) + string(action[1:]) + " the run"}
	p.Title = string(action) + " " + id[:12]
	if action == api.ActionResolve {
		q := r.URL.Query()
		p.Outcome = q.Get("outcome")
		how, known := resolutions[p.Outcome]
		if !known {
			u.fail(w, http.StatusBadRequest, page, fmt.Sprintf("outcome %s is not %q or %q", quoted(p.Outcome), api.OutcomeDone, api.OutcomeNotDone))
			return
		}
		e, err := u.h.cfg.Ledger.GetEffect(ctx, &ledger.GetEffectParams{RunID: id, Name: q.Get("effect")})
		if err != nil {
			status, msg := ledgerFailure(u.h.absentEffect(ctx, id, q.Get("effect"), err), id)
			u.fail(w, status, page, msg)
			return
		}
		p.Effect = &api.EffectJSON{Name: e.Name, Key: e.Key, Status: e.Status, Attempt: e.Attempt, Ref: e.Ref, Created: e.CreatedAt}
		p.Explain += " " + how.explain
		p.Button, p.MaxRef = how.button, ledger.MaxEffectRef
		p.Title = "resolve " + e.Name + " of " + id[:12]
	}
	u.render(w, http.StatusOK, "confirm", p)
}

func (u *ui) act(w http.ResponseWriter, r *http.Request) {
	page, id, action, ok := u.action(w, r, "action")
	if !ok {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxActionBody)
	if err := r.ParseForm(); err != nil {
		u.fail(w, http.StatusBadRequest, page, "the form could not be read: "+err.Error())
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	attempt, _ := strconv.ParseInt(r.PostForm.Get("attempt"), 10, 64)
	if reason == "" {
		u.fail(w, http.StatusBadRequest, page, "a reason is required; the run is unchanged")
		return
	}
	actor := page.Caller
	if actor == "" {
		actor = "anonymous (authentication off)"
	}
	op := ledger.OperatorParams{
		RunID: id, Actor: actor, Reason: reason, Attempt: attempt,
		PickupTimeout: u.h.cfg.PickupTimeout, Retention: u.h.cfg.Retention,
	}
	var (
		out *api.ActionJSON
		err error
	)
	if action == api.ActionResolve {
		req := api.ResolveRequest{Effect: r.PostForm.Get("effect"), Outcome: r.PostForm.Get("outcome"), Ref: strings.TrimSpace(r.PostForm.Get("ref")), Reason: reason}
		if err := req.Check(); err != nil {
			u.fail(w, http.StatusBadRequest, page, err.Error()+"; the run is unchanged")
			return
		}
		out, err = u.h.Resolve(r.Context(), &ledger.ResolveEffectParams{OperatorParams: op, Effect: req.Effect, Done: req.Outcome == api.OutcomeDone, Ref: req.Ref})
		err = u.h.absentEffect(r.Context(), id, req.Effect, err)
	} else {
		out, _, err = u.h.Act(r.Context(), action, &op)
	}
	if err != nil {
		status, msg := ledgerFailure(err, id)
		u.fail(w, status, page, msg)
		return
	}
	target := "/ui/runs/" + id + "?done=" + string(action)
	if out.Republished != nil && !*out.Republished {
		target += "&warning=" + warnNotRepublished
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}
