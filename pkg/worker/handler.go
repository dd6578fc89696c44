package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Job is one attempt at one run, as a handler sees it.
type Job struct {
	RunID     string
	Namespace string
	// Name is the job's name: the {job} of the ingress path.
	Name string
	// Key is the caller's identity of the run: the scheduler's job name, or the
	// Idempotency-Key / job_key.
	Key string
	// ScheduleTime is the scheduler's UTC schedule time; zero for keyed runs.
	ScheduleTime time.Time
	// Attempt is the attempt number (1 for the first claim).
	Attempt   int64
	AttemptID string
	// DeliveryAttempt is Pub/Sub's delivery count where a dead-letter policy provides
	// it, else 0.
	DeliveryAttempt int
	// Payload is the caller's payload, unchanged.
	Payload []byte
}

// Handler runs a job. Its error decides the run: nil completes it, Permanent fails it,
// anything else releases it for a retry. It must return when ctx is cancelled.
type Handler interface {
	HandleJob(ctx context.Context, j *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, j *Job) error

// HandleJob calls f.
func (f HandlerFunc) HandleJob(ctx context.Context, j *Job) error { return f(ctx, j) }

// Middleware wraps a handler.
type Middleware func(Handler) Handler

// Policy is one job's own bounds; a zero field means the worker's Config default.
type Policy struct {
	// MaxAttempts bounds the attempts of a run of the job.
	MaxAttempts int
	// MaxRunTime bounds how long one attempt of the job runs.
	MaxRunTime time.Duration
}

// Router is a Handler that knows which jobs it runs and their bounds; *Mux is one. The
// worker asks it before it claims a run: a delivery of a job it does not run is not an
// attempt, and is left to a worker that runs the job. A Handler that is not a Router
// runs every job, under the Config's bounds. A handler that wraps a Router (a
// middleware outside a Mux) must implement Router too, by asking the wrapped one, or
// the jobs' bounds are lost; Mux.Use wraps inside the mux and keeps them.
type Router interface {
	Handler
	// JobPolicy returns the job's bounds and whether this handler runs the job.
	JobPolicy(job string) (Policy, bool)
	// Jobs lists the jobs it runs.
	Jobs() []string
}

// Mux routes jobs to handlers by job name. The zero value is an empty mux, ready to
// use, as NewMux's is. Registering a name twice, or a nil handler, panics. A Mux is a Router: a delivery of a job with no handler is not an attempt, and
// waits for a worker that has one (a newer worker, in a rolling deploy), at most
// Config.UnhandledAfter.
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]route
	mw       []Middleware
}

type route struct {
	h           Handler
	maxAttempts int
	maxRunTime  time.Duration
}

// NewMux returns an empty mux.
func NewMux() *Mux { return &Mux{handlers: map[string]route{}} }

// HandleOptions tune one job.
type HandleOptions struct {
	// MaxAttempts bounds the attempts of a run of this job; zero means the worker's
	// default.
	MaxAttempts int
	// MaxRunTime bounds how long one attempt of this job runs; zero means the worker's
	// Config.MaxRunTime.
	MaxRunTime time.Duration
}

// Handle registers h for the job name.
func (m *Mux) Handle(name string, h Handler) { m.HandleWith(name, h, nil) }

// HandleFunc registers f for the job name.
func (m *Mux) HandleFunc(name string, f func(ctx context.Context, j *Job) error) {
	m.Handle(name, HandlerFunc(f))
}

// HandleWith registers h for the job name with options.
func (m *Mux) HandleWith(name string, h Handler, o *HandleOptions) {
	if h == nil {
		panic("worker: nil handler for job " + name)
	}
	if o == nil {
		o = &HandleOptions{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[name]; dup {
		panic("worker: job " + name + " registered twice")
	}
	if m.handlers == nil {
		m.handlers = map[string]route{}
	}
	m.handlers[name] = route{h: h, maxAttempts: o.MaxAttempts, maxRunTime: o.MaxRunTime}
}

// JobPolicy returns the job's own bounds (zero fields: the worker's defaults) and
// whether the mux has a handler for it.
func (m *Mux) JobPolicy(name string) (Policy, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.handlers[name]
	return Policy{MaxAttempts: r.maxAttempts, MaxRunTime: r.maxRunTime}, ok
}

// Use appends middleware applied to every handler of the mux, outermost first.
func (m *Mux) Use(mw ...Middleware) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mw = append(m.mw, mw...)
}

// Jobs lists the registered job names, sorted.
func (m *Mux) Jobs() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.handlers))
	for name := range m.handlers {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// ErrNoHandler is returned for a job no handler is registered for.
var ErrNoHandler = errors.New("worker: no handler registered for this job")

// HandleJob routes j to its handler through the middleware.
func (m *Mux) HandleJob(ctx context.Context, j *Job) error {
	m.mu.RLock()
	r, ok := m.handlers[j.Name]
	mw := m.mw
	m.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoHandler, j.Name)
	}
	h := r.h
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h.HandleJob(ctx, j)
}

// ErrPermanent marks an error that fails the run for good.
var ErrPermanent = errors.New("worker: permanent failure")

// Permanent marks err as permanent: the run fails and is not retried.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// RetryAfterError asks for a retry no sooner than Delay.
type RetryAfterError struct {
	Delay time.Duration
	Err   error
}

// RetryAfter returns an error that releases the run and delays its next attempt by d.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{Delay: d, Err: err} }

func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %s", e.Delay)
	}
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.Delay)
}

// Unwrap returns the cause.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// PanicError is a recovered panic of a handler; it releases the run for a retry.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("worker: job panicked: %v", e.Value) }
