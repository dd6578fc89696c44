// Package spannerreceiver is a receiver.Store in Cloud Spanner: for downstream services
// whose write rates or regions outgrow one database primary.
//
// Every decision is Spanner's clock's (CURRENT_TIMESTAMP()). A claim is first one strong
// read of the key's record and its run's fence: a replay, a key in flight or a refusal
// costs that read alone. A claim that writes runs as one read-write transaction that
// reads both again and buffers its mutations. Renew, Complete and Release are one
// read-write transaction each. The row deletion policies on expire_at delete expired
// records (within about three days); Receiver.Sweep deletes them sooner, and a record
// still there past expire_at is treated as absent.
//
// Open it by URL with
// receiver.Open("spanner://projects/P/instances/I/databases/D[?migrate=false]"); the
// tables are created when missing unless migrate=false (apply Schema in a pipeline).
package spannerreceiver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"google.golang.org/grpc/codes"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/driver"
)

// Scheme is the URL scheme of this store.
const Scheme = "spanner"

func init() { receiver.Register(Scheme, receiver.OpenerFunc(openURL)) }

var dbName = regexp.MustCompile(`^projects/[^/]+/instances/[^/]+/databases/[^/]+$`)

func openURL(ctx context.Context, u *url.URL) (receiver.Store, error) {
	const form = "spanner://projects/PROJECT/instances/INSTANCE/databases/DATABASE[?migrate=false]"
	if u.User != nil {
		return nil, fmt.Errorf("%s: credentials come from the environment, never from the URL", form)
	}
	if err := receiver.CheckQuery(u, "migrate"); err != nil {
		return nil, fmt.Errorf("%s: %w", form, err)
	}
	var o Options
	switch v := u.Query().Get("migrate"); v {
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

// Options configure Open. A nil *Options is the zero value, which is ready to use.
type Options struct {
	// NoMigrate opens without creating the tables (a pipeline applies Schema).
	NoMigrate bool
}

// Store is a receiver.Store in Spanner. It is safe for concurrent use.
type Store struct {
	driver.Transitions // Renew, Complete and Release, over update
	client             *spanner.Client
	ownsClient         bool
}

var _ receiver.Store = (*Store)(nil)

// New returns a store over client, whose database holds the tables. The client stays
// the caller's.
func New(client *spanner.Client) *Store {
	s := &Store{client: client}
	s.Transitions = driver.Transitions{Update: s.update}
	return s
}

// Open opens the database db (projects/P/instances/I/databases/D), creating the tables
// first unless opts.NoMigrate, with a client of its own that Close closes.
func Open(ctx context.Context, db string, opts *Options) (*Store, error) {
	if !dbName.MatchString(db) {
		return nil, fmt.Errorf("spannerreceiver: %q is not projects/PROJECT/instances/INSTANCE/databases/DATABASE", db)
	}
	if opts == nil || !opts.NoMigrate {
		admin, err := database.NewDatabaseAdminClient(ctx)
		if err != nil {
			return nil, fmt.Errorf("spannerreceiver: database admin client: %w", err)
		}
		_, err = Migrate(ctx, admin, db)
		_ = admin.Close()
		if err != nil {
			return nil, err
		}
	}
	client, err := spanner.NewClient(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("spannerreceiver: client for %s: %w", db, err)
	}
	s := New(client)
	s.ownsClient = true
	return s, nil
}

var keyColumns = []string{"scoped_key", "fingerprint", "state", "token", "attempt", "lease_until", "status", "header", "body",
	"body_omitted", "created_at", "updated_at", "expire_at"}

// readSQL reads Spanner's now, the run's fence and the key's record, either of which may
// be absent, in one query.
var readSQL = `SELECT CURRENT_TIMESTAMP() AS now, f.attempt AS fence_attempt, f.expire_at AS fence_expire_at, k.` +
	strings.Join(keyColumns, ", k.") + `
	FROM (SELECT 1 AS one) AS d
	LEFT JOIN receiver_fences AS f ON f.scoped_run = @run
	LEFT JOIN receiver_keys AS k ON k.scoped_key = @key`

type readRow struct {
	Now           time.Time          `spanner:"now"`
	FenceAttempt  spanner.NullInt64  `spanner:"fence_attempt"`
	FenceExpireAt spanner.NullTime   `spanner:"fence_expire_at"`
	Key           spanner.NullString `spanner:"scoped_key"`
	Fingerprint   spanner.NullString `spanner:"fingerprint"`
	State         spanner.NullString `spanner:"state"`
	Token         spanner.NullString `spanner:"token"`
	Attempt       spanner.NullInt64  `spanner:"attempt"`
	LeaseUntil    spanner.NullTime   `spanner:"lease_until"`
	Status        spanner.NullInt64  `spanner:"status"`
	Header        []byte             `spanner:"header"`
	Body          []byte             `spanner:"body"`
	Omitted       spanner.NullBool   `spanner:"body_omitted"`
	CreatedAt     spanner.NullTime   `spanner:"created_at"`
	UpdatedAt     spanner.NullTime   `spanner:"updated_at"`
	ExpireAt      spanner.NullTime   `spanner:"expire_at"`
}

func utc(t spanner.NullTime) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// decode returns Spanner's now, the live fence and the record of a read.
func (r *readRow) decode() (time.Time, int64, *receiver.Record, error) {
	now := driver.Micros(r.Now)
	var fence int64
	if r.FenceAttempt.Valid {
		fence = driver.LiveFence(r.FenceAttempt.Int64, utc(r.FenceExpireAt), now)
	}
	if !r.Key.Valid {
		return now, fence, nil, nil
	}
	rec := &receiver.Record{
		Key: r.Key.StringVal, Fingerprint: r.Fingerprint.StringVal, State: receiver.State(r.State.StringVal), Token: r.Token.StringVal,
		Attempt: r.Attempt.Int64, LeaseUntil: utc(r.LeaseUntil), CreatedAt: utc(r.CreatedAt), UpdatedAt: utc(r.UpdatedAt), ExpireAt: utc(r.ExpireAt),
	}
	if rec.State == receiver.StateCompleted {
		h, err := driver.DecodeHeader(r.Header)
		if err != nil {
			return now, fence, nil, fmt.Errorf("spannerreceiver: key %s: %w", rec.Key, err)
		}
		body := r.Body
		if body == nil {
			body = []byte{}
		}
		rec.Response = &receiver.Response{Status: int(r.Status.Int64), Header: h, Body: body, BodyOmitted: r.Omitted.Bool}
	}
	return now, fence, rec, nil
}

type queryer interface {
	Query(ctx context.Context, statement spanner.Statement) *spanner.RowIterator
}

func read(ctx context.Context, q queryer, run, key string) (time.Time, int64, *receiver.Record, error) {
	it := q.Query(ctx, spanner.Statement{SQL: readSQL, Params: map[string]any{"run": run, "key": key}})
	defer it.Stop()
	row, err := it.Next()
	if err != nil {
		return time.Time{}, 0, nil, fmt.Errorf("spannerreceiver: read key %s: %w", key, err)
	}
	var r readRow
	if err := row.ToStruct(&r); err != nil {
		return time.Time{}, 0, nil, fmt.Errorf("spannerreceiver: read key %s: %w", key, err)
	}
	return r.decode()
}

func nullTime(t time.Time) spanner.NullTime { return spanner.NullTime{Time: t, Valid: !t.IsZero()} }

// put is the mutation that writes a key's record whole: an insert (failing when the key
// exists) or an insert-or-update.
func put(r *receiver.Record, insert bool) *spanner.Mutation {
	var (
		status       spanner.NullInt64
		header, body []byte
		omitted      bool
	)
	if resp := r.Response; resp != nil {
		status = spanner.NullInt64{Int64: int64(resp.Status), Valid: true}
		header, body, omitted = driver.EncodeHeader(resp.Header), resp.Body, resp.BodyOmitted
		if body == nil {
			body = []byte{}
		}
	}
	values := []any{r.Key, r.Fingerprint, string(r.State), r.Token, r.Attempt,
		nullTime(r.LeaseUntil), status, header, body, omitted, r.CreatedAt, r.UpdatedAt, r.ExpireAt}
	if insert {
		return spanner.Insert("receiver_keys", keyColumns, values)
	}
	return spanner.InsertOrUpdate("receiver_keys", keyColumns, values)
}

// readWrite runs f in a read-write transaction. The client retries a transaction Spanner
// aborted; readWrite also retries one that vanished before it committed (the emulator
// runs one read-write transaction at a time and answers so to the losers of concurrent
// ones; nothing was committed). After contendFor of either it answers
// receiver.ErrContended.
func (s *Store) readWrite(ctx context.Context, f func(context.Context, *spanner.ReadWriteTransaction) error) error {
	tctx, cancel := context.WithTimeout(ctx, contendFor)
	defer cancel()
	for try := 0; ; try++ {
		_, err := s.client.ReadWriteTransaction(tctx, f)
		switch {
		case err == nil:
			return nil
		case ctx.Err() == nil && (tctx.Err() != nil || spanner.ErrCode(err) == codes.DeadlineExceeded):
			return fmt.Errorf("%w: no transaction committed within %s: %w", receiver.ErrContended, contendFor, err)
		case !vanished(err):
			return err
		}
		backoff := min(100*time.Millisecond, time.Millisecond<<min(try, 10))
		select {
		case <-tctx.Done():
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
	}
}

// contendFor bounds how long readWrite retries a contended transaction.
const contendFor = 20 * time.Second

// vanished reports whether err says the transaction was gone before it committed.
func vanished(err error) bool {
	msg := err.Error()
	switch spanner.ErrCode(err) {
	case codes.NotFound:
		return strings.Contains(msg, "Transaction not found")
	case codes.FailedPrecondition:
		return strings.Contains(msg, "Invalid transaction ID") ||
			strings.Contains(msg, "after it has been committed or rolledback") ||
			strings.Contains(msg, "after it has been rolled back")
	case codes.Aborted:
		return true
	}
	return false
}

// Claim implements receiver.Store. A new key under a fence that needs no raising is one
// insert, which fails when another request wrote the key since the read (then the claim
// reads and decides again); a claim that raises the fence or takes a key over reads and
// writes in one read-write transaction.
func (s *Store) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if err := driver.ValidateClaim(p); err != nil {
		return nil, err
	}
	var run string
	if p.Fence != nil {
		run = p.Fence.Run
	}
	for range maxRounds {
		ro := s.client.Single()
		now, fence, cur, err := read(ctx, ro, run, p.Key)
		ro.Close()
		if err != nil {
			return nil, err
		}
		d := driver.DecideClaim(now, cur, fence, p)
		switch {
		case !d.Writes():
			return d.Claim, nil
		case d.Fence == 0 && cur == nil:
			err := s.readWrite(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				return tx.BufferWrite([]*spanner.Mutation{put(d.Put, true)})
			})
			if spanner.ErrCode(err) == codes.AlreadyExists {
				continue // written by another request since the read
			}
			if err != nil {
				return nil, fmt.Errorf("spannerreceiver: claim key %s: %w", p.Key, err)
			}
			return d.Claim, nil
		}
		err = s.readWrite(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			now, fence, cur, err := read(ctx, tx, run, p.Key)
			if err != nil {
				return err
			}
			d = driver.DecideClaim(now, cur, fence, p)
			var ms []*spanner.Mutation
			if d.Fence > 0 {
				ms = append(ms, spanner.InsertOrUpdate("receiver_fences", []string{"scoped_run", "attempt", "expire_at"}, []any{run, d.Fence, d.FenceExpireAt}))
			}
			if d.Put != nil {
				ms = append(ms, put(d.Put, false))
			}
			return tx.BufferWrite(ms)
		})
		if err != nil {
			return nil, fmt.Errorf("spannerreceiver: claim key %s: %w", p.Key, err)
		}
		return d.Claim, nil
	}
	return nil, fmt.Errorf("%w: key %s was written by others %d times between a read and an insert", receiver.ErrContended, p.Key, maxRounds)
}

// maxRounds bounds how often Claim reads and decides again.
const maxRounds = 100

// update applies apply to the key's record in a read-write transaction.
func (s *Store) update(ctx context.Context, key string, apply driver.Apply) error {
	return s.readWrite(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		now, _, cur, err := read(ctx, tx, "", key)
		if err != nil {
			return err
		}
		next, del, err := apply(now, cur)
		switch {
		case err != nil:
			return err
		case del:
			return tx.BufferWrite([]*spanner.Mutation{spanner.Delete("receiver_keys", spanner.Key{key})})
		case next != nil:
			return tx.BufferWrite([]*spanner.Mutation{put(next, false)})
		}
		return nil
	})
}

// Get implements receiver.Store.
func (s *Store) Get(ctx context.Context, key string) (*receiver.Record, error) {
	ro := s.client.Single()
	defer ro.Close()
	_, _, r, err := read(ctx, ro, "", key)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: %s", receiver.ErrNotFound, key)
	}
	return r, nil
}

// Sweep implements receiver.Store.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	n := 0
	for _, t := range []struct{ table, key string }{{"receiver_keys", "scoped_key"}, {"receiver_fences", "scoped_run"}} {
		err := s.readWrite(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			it := tx.Query(ctx, spanner.Statement{
				SQL:    `SELECT ` + t.key + ` FROM ` + t.table + ` WHERE expire_at <= CURRENT_TIMESTAMP() LIMIT @limit`,
				Params: map[string]any{"limit": int64(limit)},
			})
			var ms []*spanner.Mutation
			err := it.Do(func(row *spanner.Row) error {
				var k string
				if err := row.Column(0, &k); err != nil {
					return err
				}
				ms = append(ms, spanner.Delete(t.table, spanner.Key{k}))
				return nil
			})
			if err != nil {
				return err
			}
			n += len(ms)
			return tx.BufferWrite(ms)
		})
		if err != nil {
			return n, fmt.Errorf("spannerreceiver: sweep %s: %w", t.table, err)
		}
	}
	return n, nil
}

// Close closes the client when Open made it.
func (s *Store) Close() error {
	if s.ownsClient {
		s.client.Close()
	}
	return nil
}
