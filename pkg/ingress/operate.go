package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/internal/cleantext"
	"github.com/runonce/runonce/pkg/internal/tracehttp"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

// The operators' API: GET /v1/runs (list), GET /v1/runs/{run_id} (one run with its
// history and effects; the run ID or a prefix of it that names one run), POST
// /v1/runs/{run_id}:retry, :cancel, :release and :resolve (Google's AIP-136 custom
// methods; the full run ID).

// maxActionBody bounds the JSON body of an action.
const maxActionBody = 8 << 10

// who authenticates a request to a read endpoint: an operator (Config.Operators) or a
// reader (Config.Auth). It writes the 401/403 itself and returns ok false.
func (h *Handler) who(w http.ResponseWriter, r *http.Request) (c *auth.Caller, operator, ok bool) {
	ctx := r.Context()
	if h.cfg.Operators != nil {
		if c, err := h.cfg.Operators.Authenticate(ctx, r); err == nil {
			return c, true, true
		}
	}
	c, err := h.cfg.Auth.Authenticate(ctx, r)
	if err != nil {
		authError(w, err)
		return nil, false, false
	}
	return c, false, true
}

// isOperator reports whether Config.Operators authenticates the request's caller.
func (h *Handler) isOperator(ctx context.Context, r *http.Request) bool {
	if h.cfg.Operators == nil {
		return false
	}
	_, err := h.cfg.Operators.Authenticate(ctx, r)
	return err == nil
}

func authError(w http.ResponseWriter, err error) {
	status := http.StatusUnauthorized
	if errors.Is(err, auth.ErrForbidden) {
		status = http.StatusForbidden
	}
	writeError(w, status, err.Error())
}

// ledgerError answers a failed ledger call: what it means for the request, and that the
// run is untouched where it is.
func (h *Handler) ledgerError(ctx context.Context, w http.ResponseWriter, what, runID string, err error) {
	switch {
	case errors.Is(err, ledger.ErrInvalid):
		writeError(w, http.StatusBadRequest, cleantext.Clean(err.Error()))
	case errors.As(err, new(*errAbsentEffect)):
		writeError(w, http.StatusNotFound, err.Error()+"; the run is unchanged")
	case errors.Is(err, ledger.ErrNotFound):
		writeError(w, http.StatusNotFound, notFound(runID))
	case errors.Is(err, ledger.ErrWrongStatus), errors.Is(err, ledger.ErrConflict):
		writeError(w, http.StatusConflict, cleantext.Clean(err.Error())+"; the run is unchanged")
	case errors.Is(err, ledger.ErrUnsupported):
		writeError(w, http.StatusNotImplemented, cleantext.Clean(err.Error()))
	default:
		h.log.ErrorContext(ctx, what, "error", cleantext.Clean(err.Error()))
		w.Header().Set("Retry-After", strconv.Itoa(int(h.cfg.RetryAfter/time.Second)))
		writeError(w, http.StatusServiceUnavailable, "the ledger is unavailable ("+what+"); nothing was changed, retry later")
	}
}

// notFound says that no run is idOrPrefix, or starts with it.
func notFound(idOrPrefix string) string {
	if ledger.ValidRunID(idOrPrefix) || idOrPrefix == "" {
		return fmt.Sprintf("no run %s (never claimed, or deleted after its retention)", idOrPrefix)
	}
	return fmt.Sprintf("no run ID starts with %s (never claimed, or deleted after its retention)", idOrPrefix)
}

// badRunID is the 400 of a path whose run ID is neither a run ID nor (where prefixes are
// taken) a prefix of one.
func badRunID(id string, prefixes bool) string {
	if !prefixes {
		return fmt.Sprintf("run ID %s is not 64 lower-case hex digits", quoted(id))
	}
	return fmt.Sprintf("run ID %s is neither 64 lower-case hex digits nor a prefix of at least %d of them", quoted(id), ledger.MinRunIDPrefix)
}

// lookup returns the ID of the run that the path's run_id names: the ID itself, or the
// one run whose ID starts with it (ledger.LookupRunID). When not ok it has answered:
// 400 for a malformed ID or prefix, 404 for no run, 409 with the candidates when the
// prefix names several, 503 when the ledger does not answer.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request) (id string, ok bool) {
	ctx := r.Context()
	in := r.PathValue("run_id")
	if !ledger.ValidRunID(in) && ledger.ValidRunIDPrefix(in) != nil {
		writeError(w, http.StatusBadRequest, badRunID(in, true))
		return "", false
	}
	lctx, cancel := context.WithTimeout(ctx, h.cfg.LedgerTimeout)
	defer cancel()
	id, err := ledger.LookupRunID(lctx, h.cfg.Ledger, in)
	var amb *ledger.AmbiguousError
	switch {
	case errors.As(err, &amb):
		writeJSON(w, http.StatusConflict, api.AmbiguousJSON{Error: amb.Error(), Candidates: amb.Candidates, More: amb.More})
		return "", false
	case err != nil:
		h.ledgerError(ctx, w, "look up run "+in, in, err)
		return "", false
	}
	return id, true
}

// listRuns serves GET /v1/runs.
func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	_, operator, ok := h.who(w, r)
	if !ok {
		return
	}
	p, err := ParseListQuery(r.URL.Query(), h.cfg.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	lctx, cancel := context.WithTimeout(ctx, h.cfg.LedgerTimeout)
	defer cancel()
	res, err := h.cfg.Ledger.List(lctx, p)
	if err != nil {
		h.ledgerError(ctx, w, "list runs", "", err)
		return
	}
	out := api.ListJSON{Runs: make([]*api.RunJSON, 0, len(res.Runs)), NextPageToken: res.Next}
	for _, run := range res.Runs {
		rj := api.NewRunJSON(run)
		if !operator {
			rj.HideErrors()
		}
		out.Runs = append(out.Runs, rj)
	}
	writeJSON(w, http.StatusOK, out)
}

// ParseListQuery reads GET /v1/runs's query: status, job, namespace, since (a Go
// duration: created within it), created_after, created_before, updated_after,
// updated_before (RFC 3339), page_size and page_token. Unknown parameters are refused.
func ParseListQuery(q url.Values, now time.Time) (*ledger.ListParams, error) {
	p := &ledger.ListParams{}
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, fmt.Errorf("query parameter %s is given %d times; give it once", quoted(k), len(vs))
		}
		v := vs[0]
		var err error
		switch k {
		case "status":
			p.Status = ledger.Status(v)
			if !p.Status.Valid() {
				err = fmt.Errorf("not one of %v", ledger.Statuses())
			}
		case "job":
			p.Job = v
		case "namespace":
			p.Namespace = v
		case "since":
			var d time.Duration
			if d, err = time.ParseDuration(v); err == nil && d <= 0 {
				err = errors.New("not a positive duration")
			}
			p.CreatedAfter = now.Add(-d)
		case "created_after":
			p.CreatedAfter, err = parseTime(v)
		case "created_before":
			p.CreatedBefore, err = parseTime(v)
		case "updated_after":
			p.UpdatedAfter, err = parseTime(v)
		case "updated_before":
			p.UpdatedBefore, err = parseTime(v)
		case "page_size":
			p.PageSize, err = strconv.Atoi(v)
			if err == nil && (p.PageSize < 1 || p.PageSize > ledger.MaxPageSize) {
				err = fmt.Errorf("not between 1 and %d", ledger.MaxPageSize)
			}
		case "page_token":
			p.Cursor = v
		default:
			return nil, fmt.Errorf("unknown query parameter %s: use status, job, namespace, since, created_after, created_before, updated_after, updated_before, page_size, page_token", quoted(k))
		}
		if err != nil {
			return nil, fmt.Errorf("query parameter %s=%s: %v", k, quoted(v), err)
		}
	}
	if p.ByUpdated() && (!p.CreatedAfter.IsZero() || !p.CreatedBefore.IsZero()) {
		return nil, errors.New("filter by created_* (or since) or by updated_*, not both")
	}
	return p, nil
}

func parseTime(v string) (time.Time, error) {
	t, err := ParseRFC3339(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("not an RFC 3339 time (e.g. 2026-10-16T12:00:00Z): %v", err)
	}
	return t, nil
}

// getRunDetail serves GET /v1/runs/{run_id}: the record, its history and its effects;
// with view=full (operators only) its payload too. The run ID may be a prefix of at
// least ledger.MinRunIDPrefix digits that names one run: the answer is that run's, with
// its full URL in Content-Location.
func (h *Handler) getRunDetail(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	_, operator, ok := h.who(w, r)
	if !ok {
		return
	}
	full := false
	for k, vs := range r.URL.Query() {
		switch {
		case k == "view" && len(vs) == 1 && (vs[0] == "basic" || vs[0] == ""):
		case k == "view" && len(vs) == 1 && vs[0] == "full":
			full = true
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %s: the only one is view=basic or view=full", quoted(k)))
			return
		}
	}
	if full && !operator {
		writeError(w, http.StatusForbidden, "view=full shows the payload: only operators (-operators) may ask for it")
		return
	}
	id, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if id != r.PathValue("run_id") {
		w.Header().Set("Content-Location", "/v1/runs/"+id)
	}
	gctx, cancel := context.WithTimeout(ctx, h.cfg.LedgerTimeout)
	defer cancel()
	d, err := h.detail(gctx, id, full)
	if err != nil {
		h.ledgerError(ctx, w, "get run", id, err)
		return
	}
	if !operator {
		d.HideErrors()
	}
	writeJSON(w, http.StatusOK, d)
}

// Detail reads what GET /v1/runs/{run_id} shows of a run; withPayload adds its payload.
func (h *Handler) detail(ctx context.Context, id string, withPayload bool) (*api.RunDetailJSON, error) {
	run, err := h.cfg.Ledger.Get(ctx, &ledger.GetParams{RunID: id})
	if err != nil {
		return nil, err
	}
	d := &api.RunDetailJSON{RunJSON: api.NewRunJSON(run), History: run.History, Attempts: ledger.Attempts(run.History)}
	// The start a Google Cloud API target recorded under the run's effect
	// (worker.RunEffect); a run without one shows none.
	if d.Execution, err = ledger.FindRef(ctx, h.cfg.Ledger, id, runEffect); err != nil {
		h.log.WarnContext(ctx, "get run: the execution's name could not be read", "run_id", id, "error", cleantext.Clean(err.Error()))
	}
	effs, err := h.cfg.Ledger.ListEffects(ctx, &ledger.ListEffectsParams{RunID: id})
	switch {
	case errors.Is(err, ledger.ErrUnsupported): // this backend lists none
	case err != nil:
		h.log.WarnContext(ctx, "get run: its effects could not be listed", "run_id", id, "error", cleantext.Clean(err.Error()))
	}
	for _, e := range effs {
		d.Effects = append(d.Effects, api.EffectJSON{Name: e.Name, Key: e.Key, Status: e.Status, Attempt: e.Attempt, Ref: e.Ref, Created: e.CreatedAt, DoneAt: e.DoneAt})
	}
	if withPayload {
		d.Payload = api.NewPayloadJSON(run.Payload)
	}
	return d, nil
}

// postRun serves POST /v1/runs/{run_id}:{action}.
func (h *Handler) postRun(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, name, _ := strings.Cut(r.PathValue("run_id"), ":")
	action := api.Action(name)
	if !action.Valid() {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such action %s: POST /v1/runs/{run_id}:retry, :cancel, :release or :resolve", quoted(name)))
		return
	}
	if h.cfg.Operators == nil {
		writeError(w, http.StatusForbidden, "no operators are configured (-operators): nobody may retry, cancel, release or resolve runs")
		return
	}
	caller, err := h.cfg.Operators.Authenticate(ctx, r)
	if err != nil {
		authError(w, fmt.Errorf("%s needs an operator (-operators): %w", action, err))
		return
	}
	if !ledger.ValidRunID(id) {
		writeError(w, http.StatusBadRequest, badRunID(id, false)+": an action names the run by its full ID")
		return
	}
	if err := jsonContent(r.Header); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("%v: send the body {\"reason\": \"…\"} with Content-Type: application/json; the run is unchanged", err))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes: send {\"reason\": \"…\"}", maxActionBody))
		return
	}
	actor := caller.Email
	if actor == "" {
		actor = "anonymous (authentication off)"
	}
	op := ledger.OperatorParams{RunID: id, Actor: actor, PickupTimeout: h.cfg.PickupTimeout, Retention: h.cfg.Retention}
	if action == api.ActionResolve {
		var req api.ResolveRequest
		if err := decodeStrict(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(`the body is not JSON {"effect": "…", "outcome": "done" or "not_done", "ref": "…", "reason": "…", "attempt": N}: %v; the run is unchanged`, err))
			return
		}
		if err := req.Check(); err != nil {
			writeError(w, http.StatusBadRequest, err.Error()+"; the run is unchanged")
			return
		}
		op.Reason, op.Attempt = req.Reason, req.Attempt
		out, err := h.Resolve(ctx, &ledger.ResolveEffectParams{OperatorParams: op, Effect: req.Effect, Done: req.Outcome == api.OutcomeDone, Ref: req.Ref})
		if err != nil {
			h.ledgerError(ctx, w, "resolve an effect of run", id, h.absentEffect(ctx, id, req.Effect, err))
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	var req api.ActionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the body is not JSON {\"reason\": \"…\", \"attempt\": N}: %v", err))
		return
	}
	if strings.TrimSpace(req.Reason) == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s needs a reason: send {\"reason\": \"why\"}; the run is unchanged", action))
		return
	}
	op.Reason, op.Attempt = req.Reason, req.Attempt
	out, status, err := h.Act(ctx, action, &op)
	if err != nil {
		h.ledgerError(ctx, w, string(action)+" run", id, err)
		return
	}
	writeJSON(w, status, out)
}

// decodeStrict decodes one JSON object into v, refusing fields v does not have (a
// misspelt field of an action must not be ignored) and anything after it.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// errAbsentEffect is ledger.ErrNotFound for a run that exists without the effect named.
type errAbsentEffect struct {
	runID, effect string
	names         []string
}

func (e *errAbsentEffect) Unwrap() error { return ledger.ErrNotFound }

func (e *errAbsentEffect) Error() string {
	if len(e.names) == 0 {
		return fmt.Sprintf("run %s has no effect %s: it recorded none", e.runID, quoted(e.effect))
	}
	return fmt.Sprintf("run %s has no effect %s; its effects: %s", e.runID, quoted(e.effect), strings.Join(e.names, ", "))
}

// absentEffect turns a resolution's ledger.ErrNotFound, when the run exists, into an
// *errAbsentEffect naming the run's effects (the ledger's ErrNotFound is about the run
// or the effect); other errors are returned as they are.
func (h *Handler) absentEffect(ctx context.Context, runID, effect string, err error) error {
	if !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	if _, gerr := h.cfg.Ledger.Get(ctx, &ledger.GetParams{RunID: runID}); gerr != nil {
		return err
	}
	e := &errAbsentEffect{runID: runID, effect: effect}
	effs, _ := h.cfg.Ledger.ListEffects(ctx, &ledger.ListEffectsParams{RunID: runID})
	for _, x := range effs {
		e.names = append(e.names, fmt.Sprintf("%s (%s)", quoted(x.Name), x.Status))
	}
	return e
}

// Act applies an operator's action to a run and, for a retry or a release, republishes
// it. A failed republish is not an error: the run is queued with a pickup deadline,
// and the rescuer republishes it after that (the answer's warning says so).
func (h *Handler) Act(ctx context.Context, action api.Action, p *ledger.OperatorParams) (*api.ActionJSON, int, error) {
	actx, cancel := context.WithTimeout(ctx, h.cfg.LedgerTimeout)
	defer cancel()
	var (
		run *ledger.Run
		err error
	)
	switch action {
	case api.ActionRetry:
		run, err = h.cfg.Ledger.Retry(actx, p)
	case api.ActionCancel:
		run, err = h.cfg.Ledger.Cancel(actx, p)
	case api.ActionRelease:
		run, err = h.cfg.Ledger.OperatorRelease(actx, p)
	default:
		return nil, 0, fmt.Errorf("%w: no such action %q", ledger.ErrInvalid, action)
	}
	log := h.actionLog(action, p)
	if err != nil {
		log.WarnContext(ctx, "operator action refused", slog.String("error", cleantext.Clean(err.Error())))
		return nil, 0, err
	}
	if action == api.ActionCancel {
		log.InfoContext(ctx, "run cancelled by an operator")
		return &api.ActionJSON{RunJSON: api.NewRunJSON(run)}, http.StatusOK, nil
	}
	return h.republish(ctx, log, run), http.StatusOK, nil
}

// Resolve settles an effect a failed run left uncertain (ledger.Ledger.ResolveEffect),
// which queues the run again, and republishes it as Act does a retried run.
func (h *Handler) Resolve(ctx context.Context, p *ledger.ResolveEffectParams) (*api.ActionJSON, error) {
	actx, cancel := context.WithTimeout(ctx, h.cfg.LedgerTimeout)
	defer cancel()
	run, err := h.cfg.Ledger.ResolveEffect(actx, p)
	log := h.actionLog(api.ActionResolve, &p.OperatorParams).With(slog.String("effect", cleantext.Clean(p.Effect)), slog.Bool("happened", p.Done))
	if p.Ref != "" {
		log = log.With(slog.String("effect_ref", cleantext.Clean(p.Ref)))
	}
	if err != nil {
		log.WarnContext(ctx, "operator action refused", slog.String("error", cleantext.Clean(err.Error())))
		return nil, err
	}
	return h.republish(ctx, log, run), nil
}

func (h *Handler) actionLog(action api.Action, p *ledger.OperatorParams) *slog.Logger {
	return h.log.With(slog.String("action", string(action)), slog.String("run_id", p.RunID), slog.String("actor", cleantext.Clean(p.Actor)), slog.String("reason", cleantext.Clean(p.Reason)))
}

// republish publishes run, which an operator's action queued, and answers the action.
func (h *Handler) republish(ctx context.Context, log *slog.Logger, run *ledger.Run) *api.ActionJSON {
	out := &api.ActionJSON{RunJSON: api.NewRunJSON(run)}
	msg := queue.RunMessage(run)
	msg.Traceparent = tracehttp.Traceparent(ctx)
	published := h.publish(ctx, msg) == nil
	out.Republished = &published
	if !published {
		out.Warning = fmt.Sprintf("the run is queued but could not be republished now; the rescuer republishes it after its pickup deadline (%s)", run.Deadline.Format(time.RFC3339))
		log.WarnContext(ctx, "operator action done; republish failed, the rescuer will republish the run", slog.Time("pickup_deadline", run.Deadline))
	} else {
		log.InfoContext(ctx, "operator action done; run republished")
	}
	return out
}
