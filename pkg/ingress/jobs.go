package ingress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/internal/cleantext"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/schedule"
	"github.com/runonce/runonce/pkg/ticks"
)

// The operators' job API: GET /v1/jobs/{job}/ticks (the tick audit), POST
// /v1/jobs/{job}:run (run now) and POST /v1/jobs/{job}:backfill.

// Defaults of the job API.
const (
	// DefaultAuditWindow is the window of an audit that gives no from: the last day.
	DefaultAuditWindow = 24 * time.Hour
	// BackfillPageSize bounds the ticks one backfill request looks at (and so claims):
	// the next page is the answer's next_page_token.
	BackfillPageSize = 100
	// DefaultBackfillRate is Config.BackfillRate's default: claims per second.
	DefaultBackfillRate = 10
	// ManualKeyPrefix starts the key of a run started by hand without one: a keyed run
	// (ledger.KeyedRunID), whose ID no tick's run can have.
	ManualKeyPrefix = "manual:"
)

// operator authenticates an operator of the job API, answering a refusal itself.
func (h *Handler) operator(w http.ResponseWriter, r *http.Request, what string) (*auth.Caller, bool) {
	if h.cfg.Operators == nil {
		writeError(w, http.StatusForbidden, "no operators are configured (-operators): nobody may "+what)
		return nil, false
	}
	c, err := h.cfg.Operators.Authenticate(r.Context(), r)
	if err != nil {
		authError(w, fmt.Errorf("%s needs an operator (-operators): %w", what, err))
		return nil, false
	}
	return c, true
}

// knownJob answers 400 or 404 for a job name the ingress does not accept.
func (h *Handler) knownJob(w http.ResponseWriter, job string) bool {
	if err := jobs.ValidName(job); err != nil {
		writeError(w, http.StatusBadRequest, "bad job name in path: "+err.Error())
		return false
	}
	if h.jobs != nil && !h.jobs[job] {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown job %q: the jobs file does not name it (this ingress accepts %s)", job, h.known))
		return false
	}
	return true
}

// spec returns the job's schedule, answering 404 (no schedule) or 503 (not read yet).
func (h *Handler) spec(w http.ResponseWriter, job string) (*ticks.Spec, bool) {
	spec, err := h.cfg.Schedules.Spec(job)
	switch {
	case errors.Is(err, ticks.ErrNoSchedule):
		writeError(w, http.StatusNotFound, cleantext.Clean(err.Error())+": runonce expects no ticks of it (give the job schedule or scheduler_job in this ingress's jobs file)")
		return nil, false
	case err != nil:
		w.Header().Set("Retry-After", strconv.Itoa(int(h.cfg.RetryAfter/time.Second)))
		writeError(w, http.StatusServiceUnavailable, cleantext.Clean(err.Error())+"; retry later")
		return nil, false
	}
	return spec, true
}

// getTicks serves GET /v1/jobs/{job}/ticks: the tick audit.
func (h *Handler) getTicks(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.operator(w, r, "audit a job's ticks"); !ok {
		return
	}
	job := r.PathValue("job")
	if !h.knownJob(w, job) {
		return
	}
	q, err := ParseTicksQuery(r.URL.Query(), h.cfg.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	spec, ok := h.spec(w, job)
	if !ok {
		return
	}
	out, err := h.Ticks(r.Context(), spec, q)
	if err != nil {
		h.ledgerError(r.Context(), w, "audit the ticks of "+job, "", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// TicksQuery is GET /v1/jobs/{job}/ticks's query, parsed.
type TicksQuery struct {
	Namespace string
	// From and To bound the window; PageFrom is where this page starts.
	From, To, PageFrom time.Time
	PageSize           int
}

// ParseTicksQuery reads GET /v1/jobs/{job}/ticks's query: from and to (RFC 3339; by
// default the last DefaultAuditWindow to now), namespace (the ingress's by default),
// page_size (1 to ticks.MaxPageSize) and page_token. Unknown parameters are refused.
func ParseTicksQuery(q url.Values, now time.Time) (*TicksQuery, error) {
	out := &TicksQuery{}
	var token string
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, fmt.Errorf("query parameter %s is given %d times; give it once", quoted(k), len(vs))
		}
		v := vs[0]
		var err error
		switch k {
		case "from":
			out.From, err = parseTime(v)
		case "to":
			out.To, err = parseTime(v)
		case "namespace":
			out.Namespace = v
			err = validNamespace(v)
		case "page_size":
			out.PageSize, err = strconv.Atoi(v)
			if err == nil && (out.PageSize < 1 || out.PageSize > ticks.MaxPageSize) {
				err = fmt.Errorf("not between 1 and %d", ticks.MaxPageSize)
			}
		case "page_token":
			token = v
		default:
			return nil, fmt.Errorf("unknown query parameter %s: use from, to, namespace, page_size, page_token", quoted(k))
		}
		if err != nil {
			return nil, fmt.Errorf("query parameter %s=%s: %v", k, quoted(v), err)
		}
	}
	if out.To.IsZero() {
		out.To = now
	}
	if out.From.IsZero() {
		out.From = out.To.Add(-DefaultAuditWindow)
	}
	if !out.From.Before(out.To) {
		return nil, fmt.Errorf("from %s is not before to %s", out.From.Format(time.RFC3339), out.To.Format(time.RFC3339))
	}
	out.PageFrom = out.From
	if token != "" {
		t, err := pageToken(token, out.From, out.To)
		if err != nil {
			return nil, err
		}
		out.PageFrom = t
	}
	return out, nil
}

// pageToken reads a page token of the tick audit or a backfill: the time the next page
// starts, within [from, to).
func pageToken(token string, from, to time.Time) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, token)
	if err != nil || t.Before(from) || !t.Before(to) {
		return time.Time{}, fmt.Errorf("page_token %s is not one this window's answer gave: continue with the same from and to", quoted(token))
	}
	return t, nil
}

// Ticks audits a page of spec's ticks (ticks.Reader.Audit).
func (h *Handler) Ticks(ctx context.Context, spec *ticks.Spec, q *TicksQuery) (*api.TicksJSON, error) {
	ns := cmp.Or(q.Namespace, h.cfg.Namespace)
	rd := &ticks.Reader{Ledger: h.cfg.Ledger, Namespace: ns, Timeout: h.cfg.LedgerTimeout}
	a, err := rd.Audit(ctx, &ticks.AuditParams{Spec: spec, From: q.PageFrom, To: q.To, Now: h.cfg.Now(), Limit: q.PageSize})
	if err != nil {
		return nil, err
	}
	out := &api.TicksJSON{Job: spec.Job, Namespace: ns, Schedule: spec.Schedule.Expr(), TimeZone: spec.Schedule.TimeZone(),
		SchedulerJob: spec.SchedulerJob, Source: spec.Source, From: q.From, To: q.To, Ticks: make([]api.TickJSON, 0, len(a.Rows)),
		UnmatchedTruncated: a.Truncated}
	for _, row := range a.Rows {
		t := api.TickJSON{Tick: row.Tick.Time, WallTime: row.Tick.Local.Format("2006-01-02 15:04 MST"), Status: string(row.Status),
			LateSeconds: row.Late.Seconds(), TookSeconds: row.Took.Seconds(), GraceSeconds: row.Grace.Seconds()}
		if row.Tick.DST != schedule.DSTNone {
			t.DST = row.Tick.DST.String()
		}
		if row.Run != nil {
			t.RunID = row.Run.ID
		}
		if row.Status == schedule.StatusMissing {
			out.Missing++
		}
		out.Ticks = append(out.Ticks, t)
	}
	for _, u := range a.Unmatched {
		out.Unmatched = append(out.Unmatched, api.UnmatchedJSON{RunID: u.Run.ID, ScheduleTime: u.Run.ScheduleTime, Status: ledger.Status(u.Run.Status),
			CreatedAt: u.Run.CreatedAt, Reason: u.Reason})
	}
	if !a.Next.IsZero() {
		out.NextPageToken = a.Next.Format(time.RFC3339Nano)
	}
	return out, nil
}

// postJobAction serves POST /v1/jobs/{job}:{action}.
func (h *Handler) postJobAction(w http.ResponseWriter, r *http.Request, job, action string) {
	if action != api.JobActionRun && action != api.JobActionBackfill {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such action %s: POST /v1/jobs/{job}:run or :backfill", quoted(action)))
		return
	}
	what := map[string]string{api.JobActionRun: "start a run by hand", api.JobActionBackfill: "backfill missed ticks"}[action]
	caller, ok := h.operator(w, r, what)
	if !ok || !h.knownJob(w, job) {
		return
	}
	if err := jsonContent(r.Header); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("%v: send a JSON body with Content-Type: application/json; nothing was started", err))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody+maxActionBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes; nothing was started", h.cfg.MaxBody+maxActionBody))
		return
	}
	actor := caller.Email
	if actor == "" {
		actor = "anonymous (authentication off)"
	}
	log := h.log.With(slog.String("job", job), slog.String("actor", cleantext.Clean(actor)))
	if action == api.JobActionRun {
		h.runNow(w, r, job, body, log)
		return
	}
	h.backfill(w, r, job, body, log)
}

// decodeJobBody reads the JSON body of a job action into v (decodeStrict); an empty
// body is {}.
func decodeJobBody(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	return decodeStrict(body, v)
}

// runNow serves POST /v1/jobs/{job}:run: a run keyed by the request's key (or a new
// manual one), never a tick's, so that no scheduled run is swallowed.
func (h *Handler) runNow(w http.ResponseWriter, r *http.Request, job string, body []byte, log *slog.Logger) {
	var req api.RunRequest
	if err := decodeJobBody(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the body is not JSON {\"key\": \"…\", \"payload\": \"…\"}: %v; nothing was started", err))
		return
	}
	key := req.Key
	if key == "" {
		u, err := uuid.NewV7()
		if err != nil {
			writeError(w, http.StatusInternalServerError, "cannot make a key; nothing was started")
			return
		}
		key = ManualKeyPrefix + u.String()
	} else if k, err := parseIdempotencyKey(key); err != nil {
		writeError(w, http.StatusBadRequest, strings.Replace(err.Error(), HeaderIdempotencyKey, "key", 1)+"; nothing was started")
		return
	} else {
		key = k
	}
	payload := []byte(req.Payload)
	if int64(len(payload)) > h.cfg.MaxBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the payload is larger than the limit of %d bytes; nothing was started", h.cfg.MaxBody))
		return
	}
	ns := h.cfg.Namespace
	k := &Key{Identity: ledger.Identity{RunID: ledger.KeyedRunID(ns, job, key), Namespace: ns, Job: job, Key: key,
		PayloadHash: ledger.PayloadHash(payload)}, Source: SourceManual}
	a := h.claim(r.Context(), k, payload)
	a.resp.Key = key
	if a.resp.RunID != "" && a.status < 300 {
		w.Header().Set("Location", "/v1/runs/"+a.resp.RunID)
	}
	if a.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int((h.cfg.RetryAfter+time.Second-1)/time.Second)))
	}
	attrs := []any{slog.String("run_id", a.resp.RunID), slog.String("key", cleantext.Clean(key)), slog.String("outcome", a.outcome), slog.Int("status", a.status)}
	if a.err != nil {
		attrs = append(attrs, slog.String("error", cleantext.Clean(a.err.Error())))
	}
	switch {
	case a.status >= 500:
		log.ErrorContext(r.Context(), "run by hand not started", attrs...)
	default:
		log.InfoContext(r.Context(), "run started by hand", attrs...)
	}
	writeJSON(w, a.status, a.resp)
}

// backfill serves POST /v1/jobs/{job}:backfill: it claims each missing tick of one page
// of the window under the run ID the scheduler's delivery of the tick would have, at
// most BackfillRate a second.
func (h *Handler) backfill(w http.ResponseWriter, r *http.Request, job string, body []byte, log *slog.Logger) {
	ctx := r.Context()
	var req api.BackfillRequest
	if err := decodeJobBody(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the body is not JSON {\"from\": RFC 3339, \"to\": RFC 3339, \"dry_run\": bool}: %v; nothing was claimed", err))
		return
	}
	if req.From.IsZero() || req.To.IsZero() || !req.From.Before(req.To) {
		writeError(w, http.StatusBadRequest, "backfill needs from and to (RFC 3339), from before to; nothing was claimed")
		return
	}
	from := req.From
	if req.PageToken != "" {
		t, err := pageToken(req.PageToken, req.From, req.To)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error()+"; nothing was claimed")
			return
		}
		from = t
	}
	spec, ok := h.spec(w, job)
	if !ok {
		return
	}
	now := h.cfg.Now()
	retention := cmp.Or(h.cfg.Retention, ledger.DefaultRetention)
	if first, ok := spec.Schedule.Next(from.Add(-time.Nanosecond)); ok && first.Time.Before(req.To) && first.Time.Before(now.Add(-retention)) {
		oldest := now.Add(-retention).Truncate(time.Minute).Add(time.Minute)
		writeError(w, http.StatusBadRequest, fmt.Sprintf("tick %s is older than the retention (%s, -retention): its run may have been deleted, and claiming it again could run the tick twice; backfill from %s on; nothing was claimed",
			first.Time.Format(time.RFC3339), retention, oldest.Format(time.RFC3339)))
		return
	}
	payload := spec.Body
	if req.Payload != nil {
		payload = []byte(*req.Payload)
	}
	page, err := h.Ticks(ctx, spec, &TicksQuery{From: req.From, To: req.To, PageFrom: from, PageSize: BackfillPageSize})
	if err != nil {
		h.ledgerError(ctx, w, "audit the ticks of "+job, "", err)
		return
	}
	out := &api.BackfillJSON{Job: job, DryRun: req.DryRun, Ticks: []api.BackfilledJSON{}, NextPageToken: page.NextPageToken}
	for _, t := range page.Ticks {
		if t.Status != string(schedule.StatusMissing) {
			continue
		}
		id := spec.RunID(h.cfg.Namespace, t.Tick)
		if req.DryRun {
			out.Ticks = append(out.Ticks, api.BackfilledJSON{Tick: t.Tick, RunID: id, Outcome: api.BackfillWouldClaim})
			continue
		}
		if err := h.backfillRate.Wait(ctx); err != nil {
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the request ended after %d claims: %v; retry: a tick claimed already is not claimed twice", out.Claimed, err))
			return
		}
		_, created, err := h.StartTick(ctx, spec, t.Tick, payload)
		if err != nil {
			log.WarnContext(ctx, "backfill stopped", slog.Time("tick", t.Tick), slog.Int("claimed", out.Claimed), slog.String("error", cleantext.Clean(err.Error())))
			status := http.StatusServiceUnavailable
			if errors.Is(err, errPayloadMismatch) {
				status = http.StatusUnprocessableEntity
			} else {
				w.Header().Set("Retry-After", strconv.Itoa(int(h.cfg.RetryAfter/time.Second)))
			}
			writeError(w, status, fmt.Sprintf("tick %s was not claimed after %d claims by this request: %v; retry: a tick claimed already is not claimed twice",
				t.Tick.Format(time.RFC3339), out.Claimed, cleantext.Clean(err.Error())))
			return
		}
		outcome := api.BackfillExisted
		if created {
			outcome = api.BackfillClaimed
			out.Claimed++
			log.InfoContext(ctx, "tick backfilled", slog.Time("tick", t.Tick), slog.String("run_id", id))
		}
		out.Ticks = append(out.Ticks, api.BackfilledJSON{Tick: t.Tick, RunID: id, Outcome: outcome})
	}
	writeJSON(w, http.StatusOK, out)
}

// errPayloadMismatch: a tick's run exists with another payload.
var errPayloadMismatch = errors.New("the tick's run exists with another payload")

// StartTick claims and publishes the run of spec's tick at tick with payload, keyed as
// the scheduler's delivery of the tick would be (Spec.RunID: the scheduler job name and
// the tick's UTC time), exactly as POST /v1/jobs/{job} does; created reports a new run,
// false a duplicate. runonce's own scheduler and backfill start ticks through it.
func (h *Handler) StartTick(ctx context.Context, spec *ticks.Spec, tick time.Time, payload []byte) (runID string, created bool, err error) {
	tick = tick.UTC()
	ns := h.cfg.Namespace
	k := &Key{Identity: ledger.Identity{RunID: spec.RunID(ns, tick), Namespace: ns, Job: spec.Job, Key: spec.SchedulerJob,
		ScheduleTime: tick, PayloadHash: ledger.PayloadHash(payload)}, Source: SourceScheduler}
	a := h.claim(ctx, k, payload)
	switch {
	case a.status == http.StatusUnprocessableEntity:
		return a.resp.RunID, false, fmt.Errorf("%w: %s", errPayloadMismatch, a.resp.Error)
	case a.status >= 300:
		return a.resp.RunID, false, errors.Join(errors.New(a.resp.Error), a.err)
	}
	return a.resp.RunID, a.outcome == OutcomeNew, nil
}
