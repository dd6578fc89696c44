package receiver

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/sethvargo/go-retry"
)

// The response headers the receiver sets.
const (
	// HeaderReplayed marks a replayed response: "Idempotent-Replayed: true" (the name
	// Stripe's API uses; the draft names none).
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderBodyOmitted marks a replay of a response whose body was longer than
	// Options.MaxResponseBody: the status and headers are the original's, the body is
	// empty.
	HeaderBodyOmitted = "Idempotent-Body-Omitted"
)

// Defaults of Options.
const (
	DefaultLease           = 30 * time.Second
	DefaultMaxHandlerTime  = 10 * time.Minute
	DefaultRetention       = 14 * 24 * time.Hour
	DefaultMaxRequestBody  = 1 << 20
	DefaultMaxResponseBody = 64 << 10
	DefaultStoreTimeout    = 10 * time.Second
)

// MaxStoredBody is the largest Options.MaxResponseBody: what every store's record holds
// (a Firestore document is at most 1 MiB).
const MaxStoredBody = 512 << 10

// DefaultStoreHeaders are the response headers kept with a response and replayed.
// Set-Cookie and other per-client headers are left out on purpose.
var DefaultStoreHeaders = []string{"Content-Type", "Content-Encoding", "Content-Language", "Location", "ETag", "Last-Modified"}

// DefaultStoreStatus reports whether a response with the status is stored and replayed:
// every final status below 500 except 401, 403, 408, 425 and 429, which say that the
// request was not processed (not authorised, or not yet) and that a retry may be.
// 5xx are not stored: the handler says it failed, and a retry executes again.
func DefaultStoreStatus(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 200 && status < 500
}

// Options configure a Receiver. A nil *Options is the zero value, which is ready to use:
// every request of POST and PATCH needs an Idempotency-Key, run headers are ignored.
type Options struct {
	// Lease is how long a claimed key stays in flight without renewal: the receiver
	// renews it every third of it while the handler runs, so it bounds how long a key
	// stays blocked after its process died (every request with the key is answered 409
	// until then). Default DefaultLease (30s).
	Lease time.Duration
	// MaxHandlerTime bounds a handler: past it, its context is cancelled
	// (ErrHandlerTimeout) and the lease is no longer renewed, so a handler that hangs
	// does not block its key for ever. Default DefaultMaxHandlerTime (10m).
	MaxHandlerTime time.Duration
	// Retention is how long a key's record, and a run's fence, count after their last
	// write: a retry later than that executes again. It must outlast the caller's
	// retries (for runonce, its -retention). Default DefaultRetention (14 days, runonce's
	// default retention).
	Retention time.Duration
	// MaxRequestBody bounds the request body, which the receiver reads whole to
	// fingerprint it (a larger one is answered 413). Default DefaultMaxRequestBody (1 MiB).
	MaxRequestBody int64
	// MaxResponseBody bounds the body stored with a response: a longer body still goes
	// to the client, but replays carry none (HeaderBodyOmitted). Default
	// DefaultMaxResponseBody (64 KiB), at most MaxStoredBody.
	MaxResponseBody int
	// StoreHeaders are the response headers stored and replayed. Default
	// DefaultStoreHeaders.
	StoreHeaders []string
	// StoreStatus reports whether a response with the status is stored and replayed;
	// one that is not releases the key, and the next request with it executes again.
	// Default DefaultStoreStatus (no 5xx).
	StoreStatus func(status int) bool
	// KeyOptional lets a request without an Idempotency-Key through to the handler,
	// without deduplication (but fenced, when it carries trusted run headers). By
	// default such a request is answered 400, as the draft says of an operation that
	// requires the key.
	KeyOptional bool
	// Methods are the methods the receiver applies to; requests of other methods go
	// straight to the handler. Default POST and PATCH (the methods that are not
	// idempotent, RFC 9110).
	Methods []string
	// Tenant names the caller a request comes from (the authenticated caller): part of
	// every key's and run's scope, so that two callers' keys never meet. Default: one
	// tenant for all.
	Tenant func(r *http.Request) string
	// TrustRunHeaders reports whether the request's X-Runonce-Run-Id and
	// X-Runonce-Attempt may be believed: the fence is only as trustworthy as the caller's
	// authentication, so return true only for a request your authentication admitted
	// as the runonce worker (e.g. its service account's verified OIDC token, or a
	// service only the worker can invoke). Nil: run headers are ignored, and nothing is
	// fenced.
	TrustRunHeaders func(r *http.Request) bool
	// StoreTimeout bounds each call to the store. Default DefaultStoreTimeout (10s).
	StoreTimeout time.Duration
	// ProblemBase is the URL of the page describing the receiver's problem types.
	// Default DefaultProblemBase.
	ProblemBase string
	// Logger receives the receiver's logs. Defaults to slog.Default(), as the worker's
	// and the ingress's do; slog.New(slog.DiscardHandler) silences them.
	Logger *slog.Logger
}

// ErrHandlerTimeout is the cause of a handler's context cancelled after
// Options.MaxHandlerTime.
var ErrHandlerTimeout = errors.New("receiver: the handler ran longer than MaxHandlerTime")

// Receiver is a middleware that executes each request with an Idempotency-Key at most
// once per key and scope, stores its response and replays it, and fences runonce's
// superseded attempts. It is safe for concurrent use.
type Receiver struct {
	store   Store
	opts    Options
	methods []string
}

// New returns a Receiver over store.
func New(store Store, opts *Options) (*Receiver, error) {
	if store == nil {
		return nil, errors.New("receiver: New needs a store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Lease = cmp.Or(o.Lease, DefaultLease)
	o.MaxHandlerTime = cmp.Or(o.MaxHandlerTime, DefaultMaxHandlerTime)
	o.Retention = cmp.Or(o.Retention, DefaultRetention)
	o.MaxRequestBody = cmp.Or(o.MaxRequestBody, DefaultMaxRequestBody)
	o.MaxResponseBody = cmp.Or(o.MaxResponseBody, DefaultMaxResponseBody)
	o.StoreTimeout = cmp.Or(o.StoreTimeout, DefaultStoreTimeout)
	o.ProblemBase = cmp.Or(o.ProblemBase, DefaultProblemBase)
	if o.StoreHeaders == nil {
		o.StoreHeaders = DefaultStoreHeaders
	}
	if o.StoreStatus == nil {
		o.StoreStatus = DefaultStoreStatus
	}
	if o.Tenant == nil {
		o.Tenant = func(*http.Request) string { return "" }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.Lease < 0, o.MaxHandlerTime < 0, o.Retention < 0, o.MaxRequestBody < 0, o.MaxResponseBody < 0, o.StoreTimeout < 0:
		return nil, errors.New("receiver: Options has a negative duration or limit")
	case o.Lease < 100*time.Millisecond:
		return nil, fmt.Errorf("receiver: lease %s is shorter than 100ms: it is renewed every third of it", o.Lease)
	case o.Retention < o.Lease:
		return nil, fmt.Errorf("receiver: retention %s is shorter than the lease %s: a claim would expire while in flight", o.Retention, o.Lease)
	case o.MaxResponseBody > MaxStoredBody:
		return nil, fmt.Errorf("receiver: MaxResponseBody %d is more than the %d bytes every store holds", o.MaxResponseBody, MaxStoredBody)
	}
	keep := make([]string, 0, len(o.StoreHeaders))
	for _, h := range o.StoreHeaders {
		keep = append(keep, http.CanonicalHeaderKey(h))
	}
	o.StoreHeaders = keep
	methods := o.Methods
	if methods == nil {
		methods = []string{http.MethodPost, http.MethodPatch}
	}
	for _, m := range methods {
		if m == "" {
			return nil, errors.New("receiver: Options.Methods has an empty method")
		}
	}
	return &Receiver{store: store, opts: o, methods: slices.Clone(methods)}, nil
}

// Wrap returns next behind the receiver.
func (rc *Receiver) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rc.serve(w, r, next) })
}

// Info is what the receiver tells the handler about its request.
type Info struct {
	// Key is the request's Idempotency-Key as the client sent it; empty without one.
	Key string
	// RunID and Attempt are the trusted run headers; empty and 0 without them.
	RunID   string
	Attempt int64
}

type infoKey struct{}

// FromContext returns the receiver's Info of the request whose context ctx is (or
// descends from); ok is false outside a receiver.
func FromContext(ctx context.Context) (Info, bool) {
	i, ok := ctx.Value(infoKey{}).(Info)
	return i, ok
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !slices.Contains(rc.methods, r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	key, err := parseKey(r.Header)
	if err != nil {
		rc.writeProblem(w, ProblemMalformedKey, problem{Status: http.StatusBadRequest, Title: "Idempotency-Key is malformed", Detail: err.Error()}, 0)
		return
	}
	tenant := rc.opts.Tenant(r)
	var info Info
	info.Key = key
	p := &ClaimParams{Lease: rc.opts.Lease, Retention: rc.opts.Retention}
	if rc.opts.TrustRunHeaders != nil && rc.opts.TrustRunHeaders(r) {
		runID, attempt, ok, err := parseRun(r.Header)
		if err != nil {
			rc.writeProblem(w, ProblemMalformedRun, problem{Status: http.StatusBadRequest, Title: "The run headers are malformed", Detail: err.Error()}, 0)
			return
		}
		if ok {
			info.RunID, info.Attempt = runID, attempt
			p.Fence = &Fence{Run: ScopedRun(tenant, runID), Attempt: attempt}
		}
	}
	if key == "" {
		if !rc.opts.KeyOptional {
			rc.writeProblem(w, ProblemMissingKey, problem{Status: http.StatusBadRequest, Title: "Idempotency-Key is missing",
				Detail: fmt.Sprintf("%s %s executes once per Idempotency-Key: send one that names the operation, the same on every retry", r.Method, r.URL.Path)}, 0)
			return
		}
		if p.Fence == nil {
			next.ServeHTTP(w, r)
			return
		}
	} else {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rc.opts.MaxRequestBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				rc.writeProblem(w, ProblemBodyTooLarge, problem{Status: http.StatusRequestEntityTooLarge, Title: "The request body is too large",
					Detail: fmt.Sprintf("the body is over the %d bytes this service reads to fingerprint a request", tooLarge.Limit)}, 0)
				return
			}
			http.Error(w, "receiver: reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		p.Key = ScopedKey(tenant, r.Method, r.URL.Path, key)
		p.Fingerprint = Fingerprint(r.URL.RawQuery, body)
	}
	p.Token = uuid.NewString()
	log := rc.opts.Logger.With(slog.String("method", r.Method), slog.String("path", r.URL.Path))
	if p.Key != "" {
		log = log.With(slog.String("scoped_key", p.Key))
	}
	if info.RunID != "" {
		log = log.With(slog.String("run_id", info.RunID), slog.Int64("attempt", info.Attempt))
	}

	ctx, cancel := context.WithTimeout(r.Context(), rc.opts.StoreTimeout)
	c, err := rc.store.Claim(ctx, p)
	cancel()
	if err != nil {
		log.ErrorContext(r.Context(), "receiver: claim failed; answered 503, nothing executed", slog.Any("error", err))
		rc.writeProblem(w, ProblemStoreUnavailable, problem{Status: http.StatusServiceUnavailable, Title: "The idempotency store is unavailable",
			Detail: "nothing was executed: retry with the same Idempotency-Key"}, time.Second)
		return
	}
	switch c.Outcome {
	case OutcomeFenced:
		log.WarnContext(r.Context(), "receiver: refused a superseded attempt", slog.Int64("newer_attempt", c.Attempt))
		rc.writeProblem(w, ProblemStaleAttempt, problem{Status: http.StatusConflict, Title: "A newer attempt of this run has been seen",
			Detail:       fmt.Sprintf("attempt %d of run %s is superseded: attempt %d of the run has reached this service, so this one may not act", info.Attempt, info.RunID, c.Attempt),
			RunID:        info.RunID,
			Attempt:      info.Attempt,
			NewerAttempt: c.Attempt}, 0)
	case OutcomeMismatch:
		rc.writeProblem(w, ProblemKeyReused, problem{Status: http.StatusUnprocessableEntity, Title: "Idempotency-Key is already used",
			Detail: "this Idempotency-Key was used with another request body or query: a key names one request; use a new key for another"}, 0)
	case OutcomeInFlight:
		var held int64
		if c.Record != nil {
			held = c.Record.Attempt
		}
		rc.writeProblem(w, ProblemInFlight, problem{Status: http.StatusConflict, Title: "A request is outstanding for this Idempotency-Key",
			Detail:        "a request with this Idempotency-Key is being processed: retry after Retry-After to get its response",
			HeldByAttempt: held}, max(c.LeaseLeft, time.Second))
	case OutcomeCompleted:
		replay(w, c.Record.Response)
	case OutcomeClaimed:
		r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
		if p.Key == "" {
			next.ServeHTTP(w, r)
			return
		}
		rc.execute(w, r, next, p, log)
	default:
		log.ErrorContext(r.Context(), "receiver: the store answered an unknown outcome; answered 503", slog.String("outcome", string(c.Outcome)))
		rc.writeProblem(w, ProblemStoreUnavailable, problem{Status: http.StatusServiceUnavailable, Title: "The idempotency store is unavailable",
			Detail: "the store answered an unknown outcome"}, time.Second)
	}
}

// replay writes a stored response, marked as a replay.
func replay(w http.ResponseWriter, resp *Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = slices.Clone(v)
	}
	h.Set(HeaderReplayed, "true")
	if resp.BodyOmitted {
		h.Set(HeaderBodyOmitted, "true")
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// execute runs the handler of a claimed key while a keeper renews the lease, then stores
// its response or releases the key. The handler's context is not cancelled when the
// client goes away: the client's retry is to get the stored response, so the handler
// runs to its end, bounded by MaxHandlerTime and cancelled if the lease is lost.
func (rc *Receiver) execute(w http.ResponseWriter, r *http.Request, next http.Handler, p *ClaimParams, log *slog.Logger) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	hctx, hcancel := context.WithTimeoutCause(ctx, rc.opts.MaxHandlerTime, ErrHandlerTimeout)
	defer hcancel()
	k := rc.keepLease(p, cancel, log)
	c := &capture{w: w, keep: rc.opts.StoreHeaders, limit: rc.opts.MaxResponseBody}
	detached := context.WithoutCancel(r.Context())
	finished := false
	defer func() {
		if finished {
			return
		}
		v := recover()
		k.stop()
		if v == nil { // runtime.Goexit: let it go on
			rc.release(detached, p, log)
			return
		}
		if v != http.ErrAbortHandler {
			log.ErrorContext(detached, "receiver: the handler panicked; key released, nothing stored", slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
		}
		rc.release(detached, p, log)
		panic(v)
	}()
	next.ServeHTTP(c, r.WithContext(hctx))
	finished = true
	if lost := k.stop(); lost != nil {
		// The store's answers below are fenced by the token: a key another request took
		// over refuses them, one nobody took (renewals that failed) still takes them.
		log.WarnContext(detached, "receiver: the key's lease may be lost: the handler's context was cancelled", slog.Any("cause", lost))
	}
	resp := c.response()
	if !rc.opts.StoreStatus(resp.Status) {
		rc.release(detached, p, log.With(slog.Int("status", resp.Status)))
		return
	}
	rc.complete(detached, p, resp, log)
}

// complete stores resp, retrying a failed write for as long as the lease lasts: a
// response that is not stored leaves the key claimable once the lease passes, and a
// retry then executes again.
func (rc *Receiver) complete(ctx context.Context, p *ClaimParams, resp *Response, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, rc.opts.Lease)
	defer cancel()
	err := rc.retry(ctx, func(ctx context.Context) error {
		return rc.store.Complete(ctx, &CompleteParams{Key: p.Key, Token: p.Token, Response: resp, Retention: rc.opts.Retention})
	})
	switch {
	case errors.Is(err, ErrLeaseLost):
		log.WarnContext(ctx, "receiver: the key was taken over before its response was stored; not stored", slog.Int("status", resp.Status))
	case err != nil:
		log.ErrorContext(ctx, "receiver: could not store the response; the key is claimable again once its lease passes, and a retry executes again",
			slog.Int("status", resp.Status), slog.Any("error", err))
	}
}

// release deletes the claim, so that the next request with the key executes at once; a
// release that fails leaves the key to its lease.
func (rc *Receiver) release(ctx context.Context, p *ClaimParams, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, rc.opts.StoreTimeout)
	defer cancel()
	err := rc.retry(ctx, func(ctx context.Context) error {
		return rc.store.Release(ctx, &ReleaseParams{Key: p.Key, Token: p.Token})
	})
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		log.WarnContext(ctx, "receiver: could not release the key; it is claimable again once its lease passes", slog.Any("error", err))
	}
}

// retry calls op until it succeeds, answers ErrLeaseLost, or ctx ends, each call bounded
// by StoreTimeout.
func (rc *Receiver) retry(ctx context.Context, op func(ctx context.Context) error) error {
	b := retry.WithJitterPercent(20, retry.WithCappedDuration(time.Second, retry.NewExponential(50*time.Millisecond)))
	return retry.Do(ctx, b, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, rc.opts.StoreTimeout)
		defer cancel()
		err := op(cctx)
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrInvalid) {
			return err
		}
		return retry.RetryableError(err)
	})
}
