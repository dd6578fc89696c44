package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/pkg/ledger"
)

// The URL schemes this backend registers.
const (
	Scheme      = "postgres"
	SchemeAlias = "postgresql"
)

// The query parameters of a ledger URL that belong to runonce; they are removed before the
// URL is handed to pgx. Every other parameter is pgx's (sslmode, pool_max_conns, …) or a
// server setting (application_name, statement_timeout, …), except that a parameter whose
// name starts with "runonce" is refused unless it is one of these.
const (
	// ParamSchema is Options.Schema.
	ParamSchema = "schema"
	// ParamMigrate is the negation of Options.NoMigrate: migrate=false opens without
	// applying migrations.
	ParamMigrate = "migrate"
	// ParamBatches is Options.Batches: batches=N lets N batched statements of each kind
	// run at once (N ≥ 1), batches=off turns batching off.
	ParamBatches = "batches"
)

func init() {
	ledger.Register(Scheme, ledger.OpenerFunc(openURL))
	ledger.Register(SchemeAlias, ledger.OpenerFunc(openURL))
}

// Options configure a PostgreSQL ledger. A nil *Options is the zero value, which is ready
// to use.
type Options struct {
	// Schema is the PostgreSQL schema that holds the ledger's tables and goose's version
	// table, created if missing; it isolates one ledger from another in one database.
	// Empty means the connection's current schema (the first of its search_path, usually
	// public).
	Schema string
	// NoMigrate opens the ledger without applying its migrations: for teams that apply
	// them in a pipeline (cmd/runonce-migrate, Migrate). Default false: migrations are
	// applied, under a session lock, when the ledger opens.
	NoMigrate bool
	// Clock is the process's clock. It times local work only (how long migrations took,
	// for the log); leases, deadlines and expiry are always judged by the database's
	// clock. Defaults to time.Now.
	Clock func() time.Time
	// Logger receives the backend's few logs (migrations applied). Defaults to discarding
	// them.
	Logger *slog.Logger
	// MaxConns is the most connections Open's pool holds when its DSN does not set
	// pool_max_conns (which wins). Zero means DefaultMaxConns. New takes the caller's
	// pool as it is.
	MaxConns int32
	// Batches is how many batched statements of each kind (ingress claims, worker claims,
	// completions) may run at once. A call that finds one of its kind
	// free runs at once; calls that arrive while all are busy wait for the next to
	// finish and share its statement (at most MaxBatch calls in one). Zero means
	// DefaultBatches; a negative value turns batching off, each call its own statement.
	// A URL's batches parameter sets it (batches=2, batches=off).
	Batches int
}

// DefaultBatches is how many batched statements of each kind run at once by default:
// one, so that calls arriving while it runs all share the next. On a 2-core machine at
// 32 clients, one gave the ingress 1.01-1.02x the bare handler's rate where four gave
// 0.83-0.86x, and a worker 1.0x its raw chain where four gave 0.70-0.82x (BENCHMARKS.md).
const DefaultBatches = 1

// MaxBatch is the most calls one batched statement carries.
const MaxBatch = 64

// DefaultMaxConns is the pool size Open uses when neither the DSN's pool_max_conns nor
// Options.MaxConns says otherwise. pgxpool's own default (4, or the number of CPUs) is
// sized for CPU-bound work, but a ledger call is one short statement whose time is mostly
// the database's commit: the ingress serves as many requests at once as callers send, and
// with 4 connections they queue for the pool instead of sharing the database's group
// commit (a quarter of the ingress's rate at 32 clients on a 2-core machine). Connections
// are opened on demand, so an idle process holds few; size the server's max_connections
// (100 by default) for the processes times this.
const DefaultMaxConns = 32

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Clock == nil {
		out.Clock = time.Now
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// Ledger is a ledger.Driver stored in PostgreSQL. It is safe for concurrent use.
type Ledger struct {
	pool     *pgxpool.Pool
	ownsPool bool
	schema   string
	opts     Options
	q        queries
	// The batchers of Claim, Acquire and Complete (Options.Batches); nil: no batching.
	claims    *batcher[*ledger.ClaimParams, *ledger.ClaimResult]
	acquires  *batcher[*ledger.AcquireParams, *ledger.AcquireResult]
	completes *batcher[*ledger.CompleteParams, *ledger.Run]
}

var _ ledger.Driver = (*Ledger)(nil)

// New returns a ledger over pool, applying the migrations first unless opts.NoMigrate. The
// pool stays the caller's: Close does not close it. Open's pool plans the ledger's
// statements as they are written (ConfigureConn); a caller's pool should too: call
// ConfigureConn on its ConnConfig before creating it.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Ledger, error) {
	if pool == nil {
		return nil, errors.New("postgres: New needs a pool")
	}
	o := opts.withDefaults()
	if !o.NoMigrate {
		start := o.Clock()
		n, err := migrate(ctx, pool.Config().ConnConfig, o.Schema)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			o.Logger.InfoContext(ctx, "ledger migrations applied", slog.Int("migrations", n),
				slog.String("schema", o.Schema), slog.Duration("took", o.Clock().Sub(start)))
		}
	}
	l := &Ledger{pool: pool, schema: o.Schema, opts: o, q: buildQueries(o.Schema)}
	if o.Batches >= 0 {
		lanes := cmp.Or(o.Batches, DefaultBatches)
		l.claims = &batcher[*ledger.ClaimParams, *ledger.ClaimResult]{lanes: lanes, max: MaxBatch, run: l.claimBatch}
		l.acquires = &batcher[*ledger.AcquireParams, *ledger.AcquireResult]{lanes: lanes, max: MaxBatch, run: l.acquireBatch}
		l.completes = &batcher[*ledger.CompleteParams, *ledger.Run]{lanes: lanes, max: MaxBatch, run: l.completeBatch}
	}
	return l, nil
}

// Open connects to the database dsn names (a postgres:// URL or a key=value connection
// string, as pgx takes it) and returns a ledger that owns its pool. In a URL, the query
// parameters schema, migrate and batches override opts.Schema, opts.NoMigrate and
// opts.Batches.
func Open(ctx context.Context, dsn string, opts *Options) (*Ledger, error) {
	o := opts.withDefaults()
	dsn, err := stripParams(dsn, &o)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if !setsPoolMaxConns(dsn) {
		cfg.MaxConns = cmp.Or(o.MaxConns, DefaultMaxConns)
	}
	ConfigureConn(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, interpretError("connect", err)
	}
	l, err := New(ctx, pool, &o)
	if err != nil {
		pool.Close()
		return nil, err
	}
	l.ownsPool = true
	return l, nil
}

func openURL(ctx context.Context, u *url.URL) (ledger.Driver, error) {
	return Open(ctx, u.String(), nil)
}

// setsPoolMaxConns reports whether a DSN (URL or key=value) sets pool_max_conns.
func setsPoolMaxConns(dsn string) bool {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == Scheme || u.Scheme == SchemeAlias) {
		return u.Query().Has("pool_max_conns")
	}
	return keyValueMaxConns.MatchString(dsn)
}

// ConfigureConn sets the server settings under which the ledger's statements are planned
// as they are written, each unless cfg already sets it (as a parameter of its own or in
// options); Open's connections take them. They are:
//
//   - plan_cache_mode=force_generic_plan: each statement is planned once per connection,
//     and that plan kept. Every statement about given runs finds each by its primary key,
//     whatever its arguments, so one plan serves all of them. Under auto, the server can
//     plan a batched statement anew at every execution, because a plan made for the
//     batch's actual length looks cheaper than the generic one, and that planning costs
//     more than running the statement.
//   - enable_seqscan, enable_hashjoin and enable_mergejoin off: every statement reads by
//     an index, probing the primary key once per run it is about. The planner would
//     choose otherwise where it believes a table small, a belief that a kept plan keeps
//     while the table grows: on a new ledger, whose tables were never analysed (the
//     planner takes each for ten pages), a batched statement joined its runs by a hash
//     over a sequential scan of every run, and read the whole table at every execution
//     until autovacuum's first ANALYZE. A statement with no index to use still runs, by
//     a sequential scan.
func ConfigureConn(cfg *pgx.ConnConfig) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for _, s := range [...]struct{ name, value string }{
		{"plan_cache_mode", "force_generic_plan"},
		{"enable_seqscan", "off"},
		{"enable_hashjoin", "off"},
		{"enable_mergejoin", "off"},
	} {
		if !setsParam(cfg.RuntimeParams, s.name) {
			cfg.RuntimeParams[s.name] = s.value
		}
	}
}

// setsParam reports whether a connection's settings choose the server setting name, as
// a parameter of its own or in options.
func setsParam(params map[string]string, name string) bool {
	_, set := params[name]
	return set || strings.Contains(params["options"], name)
}

// keyValueMaxConns matches pool_max_conns in a key=value DSN.
var keyValueMaxConns = regexp.MustCompile(`(^|\s)pool_max_conns\s*=`)

// stripParams removes runonce's query parameters from a URL DSN, applying them to o, and
// refuses unknown parameters named like runonce's. A key=value DSN is returned as is.
func stripParams(dsn string, o *Options) (string, error) {
	if !strings.HasPrefix(dsn, Scheme+"://") && !strings.HasPrefix(dsn, SchemeAlias+"://") {
		return dsn, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		// Parse's error repeats the URL, password included: say no more than that.
		return "", errors.New("postgres: malformed URL")
	}
	q := u.Query()
	var unknown []string
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case ParamSchema:
			o.Schema = v
		case ParamMigrate:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", fmt.Errorf("postgres: query parameter %s=%q is not a boolean", k, v)
			}
			o.NoMigrate = !b
		case ParamBatches:
			n, err := parseBatches(v)
			if err != nil {
				return "", err
			}
			o.Batches = n
		default:
			if strings.HasPrefix(strings.ToLower(k), "runonce") {
				unknown = append(unknown, strconv.Quote(k))
			}
			continue
		}
		q.Del(k)
	}
	if len(unknown) > 0 {
		return "", fmt.Errorf("postgres: unknown runonce query parameter(s) %s (known: %s, %s, %s)",
			strings.Join(unknown, ", "), ParamSchema, ParamMigrate, ParamBatches)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// parseBatches reads the batches parameter: a count of at least 1, or off (batching
// off, Options.Batches −1).
func parseBatches(v string) (int, error) {
	if v == "off" {
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("postgres: query parameter %s=%q is neither a count of batched statements (1 or more) nor off",
			ParamBatches, v)
	}
	return n, nil
}

// Schema returns the schema the ledger's tables live in ("" for the connection's current
// schema).
func (l *Ledger) Schema() string { return l.schema }

// Pool returns the ledger's connection pool.
func (l *Ledger) Pool() *pgxpool.Pool { return l.pool }

// Ping implements ledger.Driver.
func (l *Ledger) Ping(ctx context.Context) error {
	if err := l.pool.Ping(ctx); err != nil {
		return interpretError("ping", err)
	}
	return nil
}

// Close implements ledger.Driver. It closes the pool when Open created it.
func (l *Ledger) Close() error {
	if l.ownsPool {
		l.pool.Close()
	}
	return nil
}

// interpretError maps a native error to the ledger's sentinels, wrapping both so that the
// cause stays inspectable: no rows is ErrNotFound, serialization failures, deadlocks and
// lock timeouts are ErrContended, connection failures, shutdowns and timeouts are
// ErrUnavailable. op names the operation for the message.
func interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	var pgErr *pgconn.PgError
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		sentinel = ledger.ErrNotFound
	case errors.As(err, &pgErr):
		switch {
		case pgErr.Code == "40001", pgErr.Code == "40P01", pgErr.Code == "55P03":
			// serialization_failure, deadlock_detected, lock_not_available
			sentinel = ledger.ErrContended
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "53300",                                               // too_many_connections
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // shutdown, cannot connect now
			pgErr.Code == "57014": // query_canceled (statement_timeout)
			sentinel = ledger.ErrUnavailable
		}
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err), pgconn.SafeToRetry(err):
		sentinel = ledger.ErrUnavailable
	}
	if sentinel == nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	return fmt.Errorf("postgres: %s: %w: %w", op, sentinel, err)
}
