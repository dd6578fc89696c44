package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Ledger is the ledger a program holds: the worker, the ingress and a library user call
// it, never a Driver. It does, once for every backend, what each call needs besides the
// storage, in this file: for every method it checks the parameters (ErrInvalid, before
// the driver sees them), bounds the call's time (Options.Timeout), records a client
// span "ledger.METHOD" and a measurement of runonce.ledger.call.duration, and wraps
// the driver's error with the operation's name (errors.Is still finds the sentinel).
// Make one with New over a backend's driver, or with Open from a URL. A Ledger is safe
// for concurrent use.
type Ledger struct {
	drv     Driver
	timeout time.Duration
	tracer  trace.Tracer
	calls   metric.Float64Histogram
	// attrs caches a measurement option per method and outcome.
	attrs *sync.Map
}

// Options configure a Ledger. The zero value is usable.
type Options struct {
	// Timeout bounds each call: its context ends Timeout after the call starts, unless
	// the caller's own ends first. Zero leaves calls bounded by the caller's context
	// alone. The worker bounds its calls with worker.Config.LedgerTimeout (WithTimeout).
	Timeout time.Duration
	// TracerProvider records each call's span; nil means the global one
	// (otel.GetTracerProvider), so that a program that sets a global provider gets the
	// ledger's spans without telling the ledger.
	TracerProvider trace.TracerProvider
	// MeterProvider records each call's duration, by method and outcome; nil means the
	// global one (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider
}

// instrumentation is the name of the ledger's tracer and meter.
const instrumentation = "github.com/runonce/runonce/pkg/ledger"

// New returns the ledger in front of d, a backend's driver (each backend package's
// constructor returns one, e.g. memory.New; OpenDriver opens one by URL), configured by
// o (nil: the zero Options).
func New(d Driver, o *Options) *Ledger {
	if o == nil {
		o = &Options{}
	}
	tp, mp := o.TracerProvider, o.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	calls, err := mp.Meter(instrumentation).Float64Histogram("runonce.ledger.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of ledger calls, by method (db.operation.name) and outcome (ok, or the error's kind)."))
	if err != nil {
		otel.Handle(err) // the instrument returned still works (a no-op at worst)
	}
	return &Ledger{drv: d, timeout: o.Timeout, tracer: tp.Tracer(instrumentation), calls: calls, attrs: &sync.Map{}}
}

// WithTimeout returns a ledger over the same driver, with the same telemetry, whose
// calls are each bounded by d (Options.Timeout).
func (l *Ledger) WithTimeout(d time.Duration) *Ledger {
	c := *l
	c.timeout = d
	return &c
}

// Driver returns the backend's driver l calls, e.g. for a backend's own methods.
func (l *Ledger) Driver() Driver { return l.drv }

// call runs one driver call on behalf of method, about run runID ("" for none), whose
// parameters' check found invalid (nil: sound): refused when invalid, else bounded by
// the timeout; under a span, measured, its error wrapped either way.
func call[P, R any](ctx context.Context, l *Ledger, method, runID string, invalid error, p P, fn func(context.Context, P) (R, error)) (R, error) {
	start := time.Now()
	attrs := []attribute.KeyValue{attribute.String("db.operation.name", method)}
	if runID != "" {
		attrs = append(attrs, attribute.String("runonce.run_id", runID))
	}
	ctx, span := l.tracer.Start(ctx, "ledger."+method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	var (
		r   R
		err = invalid
	)
	if err == nil {
		r, err = fn(ctx, p)
	}
	l.calls.Record(ctx, time.Since(start).Seconds(), l.option(method, outcome(err)))
	if err != nil {
		// A lost lease or a conflict is an answer, not a fault, but still worth seeing.
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return r, fmt.Errorf("%s: %w", opName(method), err)
	}
	return r, nil
}

// option is the measurement option of a call of method with outcome o, made once.
func (l *Ledger) option(method, o string) metric.MeasurementOption {
	k := [2]string{method, o}
	if v, ok := l.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := l.attrs.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(
		attribute.String("db.operation.name", method), attribute.String("outcome", o))))
	return v.(metric.MeasurementOption)
}

// outcomes names the sentinel errors in the calls' metric.
var outcomes = []struct {
	err  error
	name string
}{
	{ErrInvalid, "invalid"}, {ErrNotFound, "not_found"}, {ErrLeaseLost, "lease_lost"}, {ErrConflict, "conflict"},
	{ErrWrongStatus, "wrong_status"}, {ErrContended, "contended"}, {ErrTooLarge, "too_large"},
	{ErrUnsupported, "unsupported"}, {ErrNowUnsupported, "now_unsupported"}, {ErrUnavailable, "unavailable"},
	{context.DeadlineExceeded, "deadline_exceeded"}, {context.Canceled, "canceled"},
}

// outcome is err's kind: "ok", a sentinel's name, or "error".
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	for _, o := range outcomes {
		if errors.Is(err, o.err) {
			return o.name
		}
	}
	return "error"
}

// opName spells a method's name as an error's context: "BeginEffect" → "begin effect".
func opName(method string) string {
	var b strings.Builder
	prev := ' '
	for _, r := range method {
		if unicode.IsUpper(r) && !unicode.IsUpper(prev) && prev != ' ' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
		prev = r
	}
	words := strings.Fields(b.String())
	for i, w := range words {
		if w != "IDs" {
			words[i] = strings.ToLower(w)
		}
	}
	return strings.Join(words, " ")
}

// Claim is the ingress claim (Driver.Claim).
func (l *Ledger) Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	return call(ctx, l, "Claim", p.RunID, validateClaim(p), p, l.drv.Claim)
}

// Expedite makes a run its ingress claim created due now (Driver.Expedite).
func (l *Ledger) Expedite(ctx context.Context, p *ExpediteParams) (*Run, error) {
	return call(ctx, l, "Expedite", p.RunID, validateExpedite(p), p, l.drv.Expedite)
}

// Acquire is the worker claim (Driver.Acquire).
func (l *Ledger) Acquire(ctx context.Context, p *AcquireParams) (*AcquireResult, error) {
	return call(ctx, l, "Acquire", p.RunID, validateAcquire(p), p, func(ctx context.Context, p *AcquireParams) (*AcquireResult, error) {
		r, err := l.drv.Acquire(ctx, p)
		if err == nil {
			trace.SpanFromContext(ctx).SetAttributes(attribute.String("runonce.acquire", r.Outcome.String()))
		}
		return r, err
	})
}

// Renew extends the caller's lease (Driver.Renew).
func (l *Ledger) Renew(ctx context.Context, p *RenewParams) (*Run, error) {
	return call(ctx, l, "Renew", p.RunID, firstError(validateFence(&p.Fence), validateProgress(p.RunID, p.Progress)), p, l.drv.Renew)
}

// Complete marks the caller's run completed (Driver.Complete).
func (l *Ledger) Complete(ctx context.Context, p *CompleteParams) (*Run, error) {
	return call(ctx, l, "Complete", p.RunID, firstError(validateFence(&p.Fence), ValidateResult(p.RunID, p.Result), validateProgress(p.RunID, p.Progress)), p, l.drv.Complete)
}

// Release returns the caller's run to queued (Driver.Release).
func (l *Ledger) Release(ctx context.Context, p *ReleaseParams) (*Run, error) {
	return call(ctx, l, "Release", p.RunID, firstError(validateFence(&p.Fence), validateRetryAfter(p.RunID, p.RetryAfter, p.Retention), validateProgress(p.RunID, p.Progress)), p, l.drv.Release)
}

// Fail marks the caller's run failed (Driver.Fail).
func (l *Ledger) Fail(ctx context.Context, p *FailParams) (*Run, error) {
	return call(ctx, l, "Fail", p.RunID, firstError(validateFence(&p.Fence), validateProgress(p.RunID, p.Progress)), p, l.drv.Fail)
}

// Get returns a run or ErrNotFound (Driver.Get).
func (l *Ledger) Get(ctx context.Context, p *GetParams) (*Run, error) {
	return call(ctx, l, "Get", p.RunID, nil, p, l.drv.Get)
}

// BeginEffect records an effect as pending for the caller's attempt (Driver.BeginEffect).
func (l *Ledger) BeginEffect(ctx context.Context, p *BeginEffectParams) (*BeginEffectResult, error) {
	return call(ctx, l, "BeginEffect", p.RunID, validateEffect(&p.Fence, p.Name), p, l.drv.BeginEffect)
}

// CompleteEffect marks an effect done (Driver.CompleteEffect).
func (l *Ledger) CompleteEffect(ctx context.Context, p *CompleteEffectParams) (*Effect, error) {
	return call(ctx, l, "CompleteEffect", p.RunID, firstError(validateEffect(&p.Fence, p.Name), validateEffectRef(p.RunID, p.Name, p.Ref)), p, l.drv.CompleteEffect)
}

// GetEffect returns an effect or ErrNotFound (Driver.GetEffect).
func (l *Ledger) GetEffect(ctx context.Context, p *GetEffectParams) (*Effect, error) {
	return call(ctx, l, "GetEffect", p.RunID, nil, p, l.drv.GetEffect)
}

// ListRescue lists the runs past their deadline (Driver.ListRescue).
func (l *Ledger) ListRescue(ctx context.Context, p *ListRescueParams) ([]*Run, error) {
	return call(ctx, l, "ListRescue", "", nil, p, l.drv.ListRescue)
}

// Rescue returns a listed run to queued (Driver.Rescue).
func (l *Ledger) Rescue(ctx context.Context, p *RescueParams) (*Run, error) {
	return call(ctx, l, "Rescue", p.RunID, validateRunID(p.RunID), p, l.drv.Rescue)
}

// Sweep deletes records past ExpireAt (Driver.Sweep).
func (l *Ledger) Sweep(ctx context.Context, p *SweepParams) (int, error) {
	return call(ctx, l, "Sweep", "", nil, p, l.drv.Sweep)
}

// List lists a page of runs (Driver.List).
func (l *Ledger) List(ctx context.Context, p *ListParams) (*ListResult, error) {
	return call(ctx, l, "List", "", validateList(p), p, l.drv.List)
}

// ListRunIDs lists the IDs of runs by prefix (Driver.ListRunIDs).
func (l *Ledger) ListRunIDs(ctx context.Context, p *ListRunIDsParams) ([]string, error) {
	return call(ctx, l, "ListRunIDs", "", validateListRunIDs(p), p, l.drv.ListRunIDs)
}

// ListEffects lists the effects of a run (Driver.ListEffects).
func (l *Ledger) ListEffects(ctx context.Context, p *ListEffectsParams) ([]*Effect, error) {
	return call(ctx, l, "ListEffects", p.RunID, validateRunID(p.RunID), p, l.drv.ListEffects)
}

// Retry queues a failed run again (Driver.Retry).
func (l *Ledger) Retry(ctx context.Context, p *OperatorParams) (*Run, error) {
	return call(ctx, l, "Retry", p.RunID, validateOperator(p), p, l.drv.Retry)
}

// Cancel cancels a queued or running run (Driver.Cancel).
func (l *Ledger) Cancel(ctx context.Context, p *OperatorParams) (*Run, error) {
	return call(ctx, l, "Cancel", p.RunID, validateOperator(p), p, l.drv.Cancel)
}

// OperatorRelease ends a running run's lease now (Driver.OperatorRelease).
func (l *Ledger) OperatorRelease(ctx context.Context, p *OperatorParams) (*Run, error) {
	return call(ctx, l, "OperatorRelease", p.RunID, validateOperator(p), p, l.drv.OperatorRelease)
}

// ResolveEffect settles an uncertain effect of a failed run (Driver.ResolveEffect).
func (l *Ledger) ResolveEffect(ctx context.Context, p *ResolveEffectParams) (*Run, error) {
	return call(ctx, l, "ResolveEffect", p.RunID, validateResolveEffect(p), p, l.drv.ResolveEffect)
}

// Ping checks that the backend is reachable (Driver.Ping).
func (l *Ledger) Ping(ctx context.Context) error {
	_, err := call(ctx, l, "Ping", "", nil, struct{}{}, func(ctx context.Context, _ struct{}) (struct{}, error) {
		return struct{}{}, l.drv.Ping(ctx)
	})
	return err
}

// Close releases the driver's resources (Driver.Close). It takes no context: it has
// neither a span nor a timeout.
func (l *Ledger) Close() error { return l.drv.Close() }
