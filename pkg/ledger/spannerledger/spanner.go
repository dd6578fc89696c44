package spannerledger

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"google.golang.org/grpc/codes"

	"github.com/runonce/runonce/pkg/internal/gcpenv"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
	"github.com/runonce/runonce/pkg/ledger/internal/serverclock"
)

// Scheme is the URL scheme of this backend: spanner://projects/P/instances/I/databases/D.
const Scheme = "spanner"

// EmulatorEnv is the environment variable that points Spanner's clients at the
// emulator: set, the ledger runs its read-write transactions one at a time (readWrite).
const EmulatorEnv = "SPANNER_EMULATOR_HOST"

// ParamMigrate is the URL's query parameter that negates Options.NoMigrate:
// migrate=false opens without creating the tables.
const ParamMigrate = "migrate"

func init() {
	ledger.Register(Scheme, ledger.OpenerFunc(openURL))
}

// Options configure a Spanner ledger. A nil *Options is the zero value, which is ready to
// use.
type Options struct {
	// NoMigrate opens the ledger without creating its tables (Migrate): for teams that
	// apply Schema in a pipeline. Default false: missing tables are created when the
	// ledger opens.
	NoMigrate bool
	// Clock is the process's clock. It measures the time between round trips, to estimate
	// Spanner's clock for the ingress claim's deadline and expiry; every decision is
	// judged by Spanner's clock. Defaults to time.Now.
	Clock func() time.Time
}

// Ledger is a ledger.Driver stored in Cloud Spanner. It is safe for concurrent use.
type Ledger struct {
	client             *spanner.Client
	ownsClient         bool
	db                 string
	clock              *serverclock.Clock
	driver.Transitions // the fenced transitions, over store
	// known are the runs seen to exist: their claims read first.
	known *driver.KnownRuns
	// serial, on the emulator, is the one slot its read-write transactions take turns
	// in (readWrite); nil on Spanner.
	serial *gate
}

var _ ledger.Driver = (*Ledger)(nil)

var dbName = regexp.MustCompile(`^projects/[^/]+/instances/[^/]+/databases/[^/]+$`)

// New returns a ledger over client, a client of the database whose tables exist (see
// Migrate). It reads Spanner's clock three times (calibrate), so that the first claim's
// estimate is close.
// The client stays the caller's: Close does not close it.
func New(ctx context.Context, client *spanner.Client, opts *Options) (*Ledger, error) {
	if client == nil {
		return nil, errors.New("spannerledger: New needs a client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	l := &Ledger{client: client, db: client.DatabaseName(), clock: serverclock.New(o.Clock), known: driver.NewKnownRuns(0)}
	if os.Getenv(EmulatorEnv) != "" { // as the client decides where it connects
		l.serial = &gate{}
	}
	l.Transitions = driver.Transitions{Store: store{l}}
	// The first read also opens a session; the later ones bound the clock's offset by a
	// warm round trip.
	for range 3 {
		if err := l.calibrate(ctx); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Open connects to db (projects/P/instances/I/databases/D), creates the ledger's tables
// unless opts.NoMigrate, and returns a ledger that owns its client. Credentials come from
// the environment (Application Default Credentials); SPANNER_EMULATOR_HOST points the
// clients at the emulator.
func Open(ctx context.Context, db string, opts *Options) (*Ledger, error) {
	if !dbName.MatchString(db) {
		return nil, fmt.Errorf("spannerledger: %q is not projects/PROJECT/instances/INSTANCE/databases/DATABASE", db)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if !o.NoMigrate {
		admin, err := database.NewDatabaseAdminClient(ctx)
		if err != nil {
			return nil, fmt.Errorf("spannerledger: database admin client: %w", gcpenv.EmulatorHint(err, gcpenv.SpannerEmulator))
		}
		_, err = Migrate(ctx, admin, db)
		_ = admin.Close()
		if err != nil {
			return nil, err
		}
	}
	client, err := spanner.NewClient(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("spannerledger: client for %s: %w", db, gcpenv.EmulatorHint(err, gcpenv.SpannerEmulator))
	}
	l, err := New(ctx, client, &o)
	if err != nil {
		client.Close()
		return nil, err
	}
	l.ownsClient = true
	return l, nil
}

// openURL opens spanner://projects/P/instances/I/databases/D[?migrate=false].
func openURL(ctx context.Context, u *url.URL) (ledger.Driver, error) {
	const form = "spanner://projects/PROJECT/instances/INSTANCE/databases/DATABASE[?migrate=false]"
	if u.User != nil {
		return nil, fmt.Errorf("%s: credentials come from the environment, never from the URL", form)
	}
	if err := driver.CheckQuery(u, ParamMigrate); err != nil {
		return nil, fmt.Errorf("%s: %w", form, err)
	}
	var o Options
	switch v := u.Query().Get(ParamMigrate); v {
	case "", "true":
	case "false":
		o.NoMigrate = true
	default:
		return nil, fmt.Errorf("%s: migrate=%q is not true or false", form, v)
	}
	db := u.Host + u.Path
	if !dbName.MatchString(db) {
		return nil, fmt.Errorf("%s: %q names no database", form, db)
	}
	return Open(ctx, db, &o)
}

// Database is the database the ledger writes.
func (l *Ledger) Database() string { return l.db }

// Ping implements ledger.Driver with one strong read.
func (l *Ledger) Ping(ctx context.Context) error {
	err := l.client.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil })
	return interpretError("ping", err)
}

// calibrate reads CURRENT_TIMESTAMP() in a read-write transaction that writes nothing:
// the clock every transition judges by. (A strong read's CURRENT_TIMESTAMP() is its read
// timestamp, which the emulator places after its latest commit timestamp, tens of
// milliseconds ahead of its read-write transactions' clock.)
func (l *Ledger) calibrate(ctx context.Context) error {
	sent := l.clock.Local()
	var now time.Time
	err := l.readWrite(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		return txn.Query(ctx, spanner.Statement{SQL: clockSQL}).Do(func(r *spanner.Row) error {
			return r.Columns(&now)
		})
	})
	if err != nil {
		return interpretError("read Spanner's clock", err)
	}
	l.clock.Observe(sent, l.clock.Local(), now)
	return nil
}

// Close implements ledger.Driver: it closes the client Open made, not one given to New.
func (l *Ledger) Close() error {
	if l.ownsClient {
		l.client.Close()
	}
	return nil
}

// interpretError maps Spanner's errors to the ledger's sentinels.
func interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	switch spanner.ErrCode(err) {
	case codes.NotFound:
		if vanished(err) {
			sentinel = ledger.ErrContended
		}
	case codes.Aborted, codes.ResourceExhausted:
		sentinel = ledger.ErrContended
	case codes.FailedPrecondition:
		if vanished(err) {
			sentinel = ledger.ErrContended
		}
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		sentinel = ledger.ErrUnavailable
	}
	if sentinel == nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			sentinel = ledger.ErrUnavailable
		}
	}
	if sentinel == nil {
		return fmt.Errorf("spannerledger: %s: %w", op, err)
	}
	return fmt.Errorf("spannerledger: %s: %w (%w)", op, sentinel, err)
}
