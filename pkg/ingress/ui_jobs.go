package ingress

import (
	"net/http"
	"net/url"
	"time"

	"github.com/runonce/runonce/pkg/api"
)

// The dashboard's tick audit: /ui/jobs/ lists the scheduled jobs, /ui/jobs/{job} shows a
// page of a job's expected ticks (GET /v1/jobs/{job}/ticks), to operators.

type uiTicksPage struct {
	uiPage
	// Jobs are the scheduled jobs (the index page).
	Jobs []string
	// Audit is a job's page of ticks.
	Audit            *api.TicksJSON
	FromText, ToText string
	Next             string
}

// uiSeconds shows a duration in seconds for people.
func uiSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < time.Second && d > -time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// operatorPage authenticates an operator of a dashboard page, answering a refusal.
func (u *ui) operatorPage(w http.ResponseWriter, r *http.Request, what string) (uiPage, bool) {
	page, ok := u.who(w, r)
	if ok && !page.Operator {
		u.fail(w, http.StatusForbidden, page, what+" needs an operator (-operators)")
		return page, false
	}
	return page, ok
}

func (u *ui) jobs(w http.ResponseWriter, r *http.Request) {
	page, ok := u.operatorPage(w, r, "the tick audit")
	if !ok {
		return
	}
	p := &uiTicksPage{uiPage: page, Jobs: u.h.cfg.Schedules.Jobs()}
	p.Title = "Scheduled jobs"
	u.render(w, http.StatusOK, "ticks", p)
}

func (u *ui) ticks(w http.ResponseWriter, r *http.Request) {
	page, ok := u.operatorPage(w, r, "the tick audit")
	if !ok {
		return
	}
	job := r.PathValue("job")
	q := r.URL.Query()
	for k, vs := range q {
		if len(vs) == 1 && vs[0] == "" {
			q.Del(k) // an empty form field is the default
		}
	}
	tq, err := ParseTicksQuery(q, u.h.cfg.Now())
	if err != nil {
		u.fail(w, http.StatusBadRequest, page, err.Error())
		return
	}
	spec, err := u.h.cfg.Schedules.Spec(job)
	if err != nil {
		u.fail(w, http.StatusNotFound, page, err.Error())
		return
	}
	a, err := u.h.Ticks(r.Context(), spec, tq)
	if err != nil {
		status, msg := ledgerFailure(err, "")
		u.fail(w, status, page, msg)
		return
	}
	p := &uiTicksPage{uiPage: page, Audit: a, FromText: tq.From.Format(time.RFC3339), ToText: tq.To.Format(time.RFC3339)}
	p.Title = "Ticks of " + job
	if a.NextPageToken != "" {
		nq := url.Values{"from": {p.FromText}, "to": {p.ToText}, "page_token": {a.NextPageToken}}
		if tq.Namespace != "" {
			nq.Set("namespace", tq.Namespace)
		}
		p.Next = "/ui/jobs/" + url.PathEscape(job) + "?" + nq.Encode()
	}
	u.render(w, http.StatusOK, "ticks", p)
}
