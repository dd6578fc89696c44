package redisledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/ledger"
)

// The URL schemes of this backend: redis://HOST:PORT/DB and rediss:// (TLS).
const (
	Scheme    = "redis"
	SchemeTLS = "rediss"
)

// The query parameters of a ledger URL that belong to runonce; they are removed before the
// URL reaches go-redis, which takes the rest (dial_timeout, pool_size, …) and refuses
// parameters it does not know.
const (
	// ParamPrefix is Options.Prefix.
	ParamPrefix = "prefix"
	// ParamPersistence is Options.Persistence: require, warn or ignore.
	ParamPersistence = "persistence"
	// ParamEviction is Options.Eviction: refuse, warn or ignore.
	ParamEviction = "eviction"
	// ParamWait is Options.WaitReplicas.
	ParamWait = "wait"
	// ParamWaitTimeout is Options.WaitTimeout (a Go duration).
	ParamWaitTimeout = "wait_timeout"
	// ParamGrace is Options.Grace (a Go duration).
	ParamGrace = "grace"
)

func init() {
	ledger.Register(Scheme, ledger.OpenerFunc(openURL))
	ledger.Register(SchemeTLS, ledger.OpenerFunc(openURL))
}

// Persistence says what Open does with a server whose persistence would lose
// acknowledged claims on a restart.
type Persistence string

// The persistence checks.
const (
	// PersistenceRequire refuses to open on a server without an append-only file
	// (appendonly no), and warns when appendfsync is not always. The default.
	PersistenceRequire Persistence = "require"
	// PersistenceWarn logs the same findings as warnings and opens.
	PersistenceWarn Persistence = "warn"
	// PersistenceIgnore checks nothing: for tests of a throwaway server, or a server
	// whose persistence the operator vouches for and that hides it from INFO.
	PersistenceIgnore Persistence = "ignore"
)

// Eviction says what Open does with a server whose maxmemory-policy can evict keys: every
// run and effect record of the ledger carries an expiry (its retention), so any policy but
// noeviction lets the server delete acknowledged records under memory pressure, and the
// scheduler's retry of such a run then creates it anew and runs it again.
type Eviction string

// The eviction checks.
const (
	// EvictionRefuse refuses to open on a server whose maxmemory-policy is not noeviction,
	// or whose policy neither CONFIG GET nor INFO memory tells. The default.
	EvictionRefuse Eviction = "refuse"
	// EvictionWarn logs the same finding as a warning and opens.
	EvictionWarn Eviction = "warn"
	// EvictionIgnore checks nothing: for a server whose policy the operator vouches for
	// and that hides it from both CONFIG GET and INFO.
	EvictionIgnore Eviction = "ignore"
)

// Options configure a Redis ledger. A nil *Options is the zero value, which is ready to
// use.
type Options struct {
	// Prefix is prepended to every key the ledger writes ("runonce:" when empty), so that
	// several ledgers, or other data, share one database.
	Prefix string
	// Persistence is the check Open makes of the server's persistence. Empty means
	// PersistenceRequire.
	Persistence Persistence
	// Eviction is the check Open makes of the server's maxmemory-policy. Empty means
	// EvictionRefuse. It is apart from Persistence: a server with RDB snapshots only
	// (Memorystore for Redis), opened with persistence=warn, still must not evict.
	Eviction Eviction
	// WaitReplicas, when positive, makes every write wait (WAIT, pipelined with the
	// script: no extra round trip) until that many replicas acknowledged it, at most
	// WaitTimeout; a write fewer replicas acknowledged is answered ledger.ErrUnavailable
	// (it happened on the primary, and a retry is safe). Default 0: no wait.
	WaitReplicas int
	// WaitTimeout bounds WAIT. Default 1s.
	WaitTimeout time.Duration
	// Grace is how long Redis keeps a record past its ExpireAt before its key expires:
	// a record past ExpireAt still deduplicates until Sweep deletes it or the grace ends.
	// Default 1h.
	Grace time.Duration
	// Logger receives the persistence and eviction warnings. Defaults to slog.Default().
	Logger *slog.Logger
}

func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Prefix == "" {
		out.Prefix = "runonce:"
	}
	switch out.Persistence {
	case "":
		out.Persistence = PersistenceRequire
	case PersistenceRequire, PersistenceWarn, PersistenceIgnore:
	default:
		return out, fmt.Errorf("redisledger: persistence %q is not require, warn or ignore", out.Persistence)
	}
	switch out.Eviction {
	case "":
		out.Eviction = EvictionRefuse
	case EvictionRefuse, EvictionWarn, EvictionIgnore:
	default:
		return out, fmt.Errorf("redisledger: eviction %q is not refuse, warn or ignore", out.Eviction)
	}
	if out.WaitReplicas < 0 {
		return out, fmt.Errorf("redisledger: WaitReplicas %d is negative", out.WaitReplicas)
	}
	if out.WaitTimeout <= 0 {
		out.WaitTimeout = time.Second
	}
	if out.Grace <= 0 {
		out.Grace = time.Hour
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// Ledger is a ledger.Driver stored in Redis (or Valkey, or Memorystore). It is safe for
// concurrent use.
type Ledger struct {
	rdb        *redis.Client
	ownsClient bool
	o          Options
	rescueKey  string
	expireKey  string
	// listBudget and listCalls bound a page's reads (see List); tests lower them.
	listBudget, listCalls int
}

var _ ledger.Driver = (*Ledger)(nil)

// New returns a ledger over rdb: a client of one primary (redis.NewClient, or
// redis.NewFailoverClient for Sentinel). Redis Cluster is not supported: each script
// touches the rescue and expiry indexes beside the record, keys of other slots.
// It checks the server's persistence as opts.Persistence says and its maxmemory-policy as
// opts.Eviction says, and loads the scripts. The client stays the caller's: Close does not
// close it.
func New(ctx context.Context, rdb *redis.Client, opts *Options) (*Ledger, error) {
	if rdb == nil {
		return nil, errors.New("redisledger: New needs a client")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Ledger{listBudget: listBudget, listCalls: listCalls, rdb: rdb, o: o, rescueKey: o.Prefix + "rescue", expireKey: o.Prefix + "expire"}
	if err := l.checkPersistence(ctx); err != nil {
		return nil, err
	}
	if err := l.checkEviction(ctx); err != nil {
		return nil, err
	}
	for _, s := range scripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return nil, interpretError("load scripts", err)
		}
	}
	return l, nil
}

// Open connects to the server rawURL names (redis://[USER:PASSWORD@]HOST:PORT/DB, or
// rediss:// for TLS, with go-redis's query parameters) and returns a ledger that owns its
// client. The URL's prefix, persistence, eviction, wait, wait_timeout and grace parameters
// override opts.
func Open(ctx context.Context, rawURL string, opts *Options) (*Ledger, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisledger: %w", err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := takeParams(u, &o); err != nil {
		return nil, err
	}
	ro, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("redisledger: %w", err)
	}
	rdb := redis.NewClient(ro)
	l, err := New(ctx, rdb, &o)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	l.ownsClient = true
	return l, nil
}

func openURL(ctx context.Context, u *url.URL) (ledger.Driver, error) {
	return Open(ctx, u.String(), nil)
}

// takeParams moves runonce's query parameters from u into o.
func takeParams(u *url.URL, o *Options) error {
	q := u.Query()
	one := func(k string) (string, bool, error) {
		v, ok := q[k]
		if !ok {
			return "", false, nil
		}
		q.Del(k)
		if len(v) != 1 {
			return "", false, fmt.Errorf("redisledger: %s given %d times", k, len(v))
		}
		return v[0], true, nil
	}
	if v, ok, err := one(ParamPrefix); err != nil {
		return err
	} else if ok {
		o.Prefix = v
	}
	if v, ok, err := one(ParamPersistence); err != nil {
		return err
	} else if ok {
		o.Persistence = Persistence(v)
	}
	if v, ok, err := one(ParamEviction); err != nil {
		return err
	} else if ok {
		o.Eviction = Eviction(v)
	}
	if v, ok, err := one(ParamWait); err != nil {
		return err
	} else if ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("redisledger: wait=%q is not a number of replicas", v)
		}
		o.WaitReplicas = n
	}
	for _, p := range []struct {
		name string
		dst  *time.Duration
	}{{ParamWaitTimeout, &o.WaitTimeout}, {ParamGrace, &o.Grace}} {
		v, ok, err := one(p.name)
		if err != nil {
			return err
		}
		if ok {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("redisledger: %s=%q is not a positive duration (e.g. 500ms, 2h)", p.name, v)
			}
			*p.dst = d
		}
	}
	u.RawQuery = q.Encode()
	return nil
}

// Open's refusals of a server that could lose acknowledged claims.
var (
	// ErrNotDurable is returned by Open (with PersistenceRequire) on a server that would
	// forget acknowledged claims on a restart.
	ErrNotDurable = errors.New("redisledger: the server's persistence would lose claims on a restart")
	// ErrMayEvict is returned by Open (with EvictionRefuse) on a server whose
	// maxmemory-policy is not noeviction, or does not tell its policy: under memory
	// pressure it could delete acknowledged runs and effects, which then run again.
	ErrMayEvict = errors.New("redisledger: the server may evict the ledger's records")
)

// checkPersistence reads INFO persistence (which Memorystore allows) and, where CONFIG
// GET is allowed, appendfsync.
func (l *Ledger) checkPersistence(ctx context.Context) error {
	if l.o.Persistence == PersistenceIgnore {
		return nil
	}
	info, err := l.rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return interpretError("INFO persistence", err)
	}
	fields := infoFields(info)
	var problem, warning string
	if fields["aof_enabled"] != "1" {
		problem = "appendonly is off (INFO persistence: aof_enabled:" + fields["aof_enabled"] +
			"): a restart loses every claim since the last RDB snapshot, and those runs can run again; " +
			"set appendonly yes and appendfsync always (Memorystore: AOF persistence), or open with persistence=warn"
	} else if v, err := l.rdb.ConfigGet(ctx, "appendfsync").Result(); err == nil && v["appendfsync"] != "always" {
		warning = "appendfsync is " + v["appendfsync"] + ", not always: a crash of the machine loses up to a second of acknowledged claims"
	}
	switch {
	case problem != "" && l.o.Persistence == PersistenceRequire:
		return fmt.Errorf("%w: %s", ErrNotDurable, problem)
	case problem != "":
		l.o.Logger.WarnContext(ctx, "redis ledger: "+problem)
	case warning != "":
		l.o.Logger.WarnContext(ctx, "redis ledger: "+warning)
	}
	return nil
}

// checkEviction reads the server's maxmemory-policy (CONFIG GET, or INFO memory where
// CONFIG is refused, as on Memorystore) and refuses, or warns about, any policy but
// noeviction.
func (l *Ledger) checkEviction(ctx context.Context) error {
	if l.o.Eviction == EvictionIgnore {
		return nil
	}
	policy, source, err := l.maxmemoryPolicy(ctx)
	if ledger.Retryable(err) {
		return err
	}
	var problem string
	switch {
	case err != nil:
		problem = "cannot read the server's maxmemory-policy (" + err.Error() + "): under any policy but noeviction " +
			"the server deletes records when memory runs short, and every run and effect record has an expiry; " +
			"make sure the policy is noeviction and open with eviction=ignore, or open with eviction=warn"
	case policy != "noeviction":
		what := "evicts any key when memory runs short, the ledger's records and indexes included"
		if strings.HasPrefix(policy, "volatile-") {
			what = "evicts keys that have an expiry when memory runs short, and every run and effect record of the ledger has one"
		}
		problem = "maxmemory-policy is " + policy + " (" + source + "): it " + what +
			", so an acknowledged claim can vanish and the scheduler's retry then runs it again; " +
			"set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction and in redis.conf; " +
			"Memorystore: the instance's maxmemory-policy configuration), under which a full server refuses writes " +
			"(ErrOutOfMemory, nothing written) instead of deleting records, or open with eviction=warn to run with the risk"
	default:
		return nil
	}
	if l.o.Eviction == EvictionRefuse {
		return fmt.Errorf("%w: %s", ErrMayEvict, problem)
	}
	l.o.Logger.WarnContext(ctx, "redis ledger: "+problem+" (opened with eviction=warn)", slog.String("maxmemory_policy", policy))
	return nil
}

// maxmemoryPolicy answers the server's maxmemory-policy and where it was read: CONFIG
// GET, or INFO memory's maxmemory_policy where CONFIG is refused (Memorystore answers
// NOPERM; a server may rename CONFIG away). The error names both failures when neither
// answers; it is ledger.ErrUnavailable when the server could not be reached.
func (l *Ledger) maxmemoryPolicy(ctx context.Context) (policy, source string, err error) {
	v, cerr := l.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if cerr == nil && v["maxmemory-policy"] != "" {
		return v["maxmemory-policy"], "CONFIG GET maxmemory-policy", nil
	}
	if err := interpretError("CONFIG GET maxmemory-policy", cerr); ledger.Retryable(err) {
		return "", "", err
	}
	if cerr == nil {
		cerr = errors.New("no maxmemory-policy in the answer")
	}
	info, ierr := l.rdb.Info(ctx, "memory").Result()
	if err := interpretError("INFO memory", ierr); ledger.Retryable(err) {
		return "", "", err
	}
	if ierr == nil {
		if p := infoFields(info)["maxmemory_policy"]; p != "" {
			return p, "INFO memory", nil
		}
		ierr = errors.New("no maxmemory_policy in the answer")
	}
	return "", "", fmt.Errorf("CONFIG GET maxmemory-policy: %w; INFO memory: %w", cerr, ierr)
}

func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			out[k] = v
		}
	}
	return out
}

// Prefix is the key prefix the ledger writes under.
func (l *Ledger) Prefix() string { return l.o.Prefix }

// Client is the ledger's client.
func (l *Ledger) Client() *redis.Client { return l.rdb }

// Ping implements ledger.Driver.
func (l *Ledger) Ping(ctx context.Context) error {
	return interpretError("ping", l.rdb.Ping(ctx).Err())
}

// Close implements ledger.Driver: it closes the client Open made, not one given to New.
func (l *Ledger) Close() error {
	if l.ownsClient {
		return l.rdb.Close()
	}
	return nil
}

// ErrOutOfMemory is a write the server refused because its memory is full (used memory
// above maxmemory, and noeviction evicts nothing; Redis's OOM error). Nothing was
// written: Redis refuses a script's write that could grow memory only when it is the
// script's first write, so a refused script changed nothing (and one past its first write
// runs to its end). It comes wrapped with ledger.ErrUnavailable, so that ledger.Retryable
// holds: the ingress answers 503 with Retry-After, and the worker nacks the delivery or
// retries its write. Reads still answer, a duplicate's claim included. Memory comes back
// as records expire or Sweep deletes them, or with a larger maxmemory.
var ErrOutOfMemory = errors.New("redisledger: the Redis server is out of memory (used memory above maxmemory, and noeviction evicts nothing): nothing was written")

// interpretError maps go-redis's errors to the ledger's sentinels: connection failures,
// timeouts, a server loading its data set or a replica that cannot take writes are
// ledger.ErrUnavailable; a server out of memory is ErrOutOfMemory and
// ledger.ErrUnavailable; BUSY (a script running too long) is ledger.ErrContended.
func interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	// Redis answers "OOM command not allowed when used memory > 'maxmemory'.", with the
	// script's name after it when a script's write was refused (matched anywhere in the
	// text, in case a server wraps it in its script error).
	if strings.Contains(err.Error(), "OOM command not allowed") {
		return fmt.Errorf("%w: %s refused; retry once memory is freed (%w: %w)", ErrOutOfMemory, op, ledger.ErrUnavailable, err)
	}
	var (
		netErr   net.Error
		sentinel error
	)
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "READONLY"),
		strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "TRYAGAIN"),
		strings.HasPrefix(msg, "CLUSTERDOWN"):
		sentinel = ledger.ErrUnavailable
	case strings.HasPrefix(msg, "BUSY"):
		sentinel = ledger.ErrContended
	}
	if sentinel == nil {
		return fmt.Errorf("redisledger: %s: %w", op, err)
	}
	return fmt.Errorf("redisledger: %s: %w (%w)", op, sentinel, err)
}
