// Package firestorereceiver is a receiver.Store in Cloud Firestore: no server to run, for
// downstream services on Google Cloud, shared by every instance.
//
// Every decision is made on a read (one BatchGetDocuments of the key's record and its
// run's fence) at the read's time, the server's clock: a replay, a key in flight or a
// refusal costs that read alone. A decision that writes commits its writes in one
// transaction that holds no read, each write with a precondition (the document absent,
// or its update time as read), so it lands only if nothing changed since the read, and
// is made again on a fresh read otherwise; the emulator's and the server's transaction
// locks are never held across a round trip. Renew, Complete and Release are a read and
// one conditional write.
//
// The collections are PREFIX+"receiver_keys" and PREFIX+"receiver_fences"; every
// document carries expire_at. Firestore's TTL policy deletes expired documents (within
// about a day) once one is set on expire_at for both collections (gcloud firestore
// fields ttls update expire_at --collection-group=…); Receiver.Sweep deletes them
// meanwhile, and an expired document still there is treated as absent.
//
// Open it by URL with receiver.Open("firestore://PROJECT[/DATABASE]?prefix=P");
// credentials come from the environment, FIRESTORE_EMULATOR_HOST points at the emulator.
package firestorereceiver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/sethvargo/go-retry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/driver"
)

// Scheme is the URL scheme of this store.
const Scheme = "firestore"

func init() { receiver.Register(Scheme, receiver.OpenerFunc(openURL)) }

func openURL(ctx context.Context, u *url.URL) (receiver.Store, error) {
	const form = "firestore://PROJECT[/DATABASE][?prefix=PREFIX]"
	if u.User != nil {
		return nil, fmt.Errorf("%s: credentials come from the environment, never from the URL", form)
	}
	if err := receiver.CheckQuery(u, "prefix"); err != nil {
		return nil, fmt.Errorf("%s: %w", form, err)
	}
	if u.Opaque != "" || u.Host == "" || u.Port() != "" {
		return nil, fmt.Errorf("%s: want a project ID as the host", form)
	}
	database := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(database, "/") {
		return nil, fmt.Errorf("%s: %q is not a database ID", form, database)
	}
	if database == "" {
		database = firestore.DefaultDatabaseID
	}
	client, err := firestore.NewClientWithDatabase(ctx, u.Host, database)
	if err != nil {
		return nil, fmt.Errorf("firestorereceiver: client for project %q, database %q: %w", u.Host, database, err)
	}
	s := New(client, &Options{Prefix: u.Query().Get("prefix")})
	s.ownsClient = true
	return s, nil
}

// Options configure New. A nil *Options is the zero value, which is ready to use.
type Options struct {
	// Prefix is prepended to the collections' names, so that several stores share a
	// database.
	Prefix string
}

// Store is a receiver.Store in Firestore. It is safe for concurrent use.
type Store struct {
	driver.Transitions // Renew, Complete and Release, over update
	client             *firestore.Client
	ownsClient         bool
	keys               *firestore.CollectionRef
	fences             *firestore.CollectionRef
}

var _ receiver.Store = (*Store)(nil)

// New returns a store over client. The client stays the caller's unless the store was
// opened by URL.
func New(client *firestore.Client, opts *Options) *Store {
	var prefix string
	if opts != nil {
		prefix = opts.Prefix
	}
	s := &Store{client: client, keys: client.Collection(prefix + "receiver_keys"), fences: client.Collection(prefix + "receiver_fences")}
	s.Transitions = driver.Transitions{Update: s.update}
	return s
}

// errStale: a write's precondition failed (the document changed since it was read);
// the operation reads and decides again.
var errStale = errors.New("firestorereceiver: the document changed since it was read")

// mapErr turns the client's errors into the store's.
func mapErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.AlreadyExists, codes.NotFound:
		return fmt.Errorf("%w: %s: %w", errStale, what, err)
	case codes.Aborted:
		return fmt.Errorf("%w: %s: %w", receiver.ErrContended, what, err)
	}
	return fmt.Errorf("firestorereceiver: %s: %w", what, err)
}

// again runs op until it does not answer errStale or ErrContended, at most 10 times;
// then it answers ErrContended.
func again(ctx context.Context, what string, op func(ctx context.Context) error) error {
	b := retry.WithMaxRetries(9, retry.WithJitterPercent(50, retry.WithCappedDuration(200*time.Millisecond, retry.NewExponential(5*time.Millisecond))))
	err := retry.Do(ctx, b, func(ctx context.Context) error {
		err := op(ctx)
		if errors.Is(err, errStale) || errors.Is(err, receiver.ErrContended) {
			return retry.RetryableError(err)
		}
		return err
	})
	if errors.Is(err, errStale) {
		return fmt.Errorf("%w: %s: %w", receiver.ErrContended, what, err)
	}
	return err
}

// Field names of a key's document.
const (
	fFingerprint = "fingerprint"
	fState       = "state"
	fToken       = "token"
	fAttempt     = "attempt"
	fLeaseUntil  = "lease_until"
	fStatus      = "status"
	fHeader      = "header"
	fBody        = "body"
	fOmitted     = "body_omitted"
	fCreatedAt   = "created_at"
	fUpdatedAt   = "updated_at"
	fExpireAt    = "expire_at"
)

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// encode is a key's document: every field, null where the record has none.
func encode(r *receiver.Record) map[string]any {
	m := map[string]any{
		fFingerprint: r.Fingerprint, fState: string(r.State), fToken: r.Token, fAttempt: r.Attempt,
		fLeaseUntil: timeOrNil(r.LeaseUntil), fStatus: nil, fHeader: nil, fBody: nil, fOmitted: false,
		fCreatedAt: r.CreatedAt, fUpdatedAt: r.UpdatedAt, fExpireAt: r.ExpireAt,
	}
	if resp := r.Response; resp != nil {
		body := resp.Body
		if body == nil {
			body = []byte{}
		}
		m[fStatus], m[fHeader], m[fBody], m[fOmitted] = int64(resp.Status), driver.EncodeHeader(resp.Header), body, resp.BodyOmitted
	}
	return m
}

func updates(m map[string]any) []firestore.Update {
	out := make([]firestore.Update, 0, len(m))
	for k, v := range m {
		out = append(out, firestore.Update{Path: k, Value: v})
	}
	return out
}

// decode reads a key's document; nil when it does not exist.
func decode(snap *firestore.DocumentSnapshot) (*receiver.Record, error) {
	if snap == nil || !snap.Exists() {
		return nil, nil
	}
	d := snap.Data()
	t := func(k string) time.Time {
		v, _ := d[k].(time.Time)
		if v.IsZero() {
			return time.Time{}
		}
		return v.UTC()
	}
	s := func(k string) string { v, _ := d[k].(string); return v }
	i := func(k string) int64 { v, _ := d[k].(int64); return v }
	r := &receiver.Record{
		Key: snap.Ref.ID, Fingerprint: s(fFingerprint), State: receiver.State(s(fState)), Token: s(fToken), Attempt: i(fAttempt),
		LeaseUntil: t(fLeaseUntil), CreatedAt: t(fCreatedAt), UpdatedAt: t(fUpdatedAt), ExpireAt: t(fExpireAt),
	}
	if r.State == receiver.StateCompleted {
		hb, _ := d[fHeader].([]byte)
		h, err := driver.DecodeHeader(hb)
		if err != nil {
			return nil, fmt.Errorf("firestorereceiver: key %s: %w", r.Key, err)
		}
		body, _ := d[fBody].([]byte)
		if body == nil {
			body = []byte{}
		}
		omitted, _ := d[fOmitted].(bool)
		r.Response = &receiver.Response{Status: int(i(fStatus)), Header: h, Body: body, BodyOmitted: omitted}
	}
	return r, nil
}

// readTime is a snapshot's read time, the server's now.
func readTime(snap *firestore.DocumentSnapshot) (time.Time, error) {
	if snap.ReadTime.IsZero() {
		return time.Time{}, errors.New("firestorereceiver: a read carried no server time")
	}
	return driver.Micros(snap.ReadTime), nil
}

// Claim implements receiver.Store.
func (s *Store) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if err := driver.ValidateClaim(p); err != nil {
		return nil, err
	}
	var keyRef, fenceRef *firestore.DocumentRef
	var refs []*firestore.DocumentRef
	if p.Key != "" {
		keyRef = s.keys.Doc(p.Key)
		refs = append(refs, keyRef)
	}
	if p.Fence != nil {
		fenceRef = s.fences.Doc(p.Fence.Run)
		refs = append(refs, fenceRef)
	}
	var claim *receiver.Claim
	err := again(ctx, "claim key "+p.Key, func(ctx context.Context) error {
		snaps, err := s.client.GetAll(ctx, refs)
		if err != nil {
			return mapErr(err, "read key %s", p.Key)
		}
		now, err := readTime(snaps[0])
		if err != nil {
			return err
		}
		var keySnap, fenceSnap *firestore.DocumentSnapshot
		if keyRef != nil {
			keySnap = snaps[0]
		}
		if fenceRef != nil {
			fenceSnap = snaps[len(snaps)-1]
		}
		cur, err := decode(keySnap)
		if err != nil {
			return err
		}
		var fence int64
		if fenceSnap != nil && fenceSnap.Exists() {
			a, _ := fenceSnap.Data()[fAttempt].(int64)
			exp, _ := fenceSnap.Data()[fExpireAt].(time.Time)
			fence = driver.LiveFence(a, exp, now)
		}
		d := driver.DecideClaim(now, cur, fence, p)
		claim = d.Claim
		if !d.Writes() {
			return nil
		}
		err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
			if d.Fence > 0 {
				f := map[string]any{fAttempt: d.Fence, fExpireAt: d.FenceExpireAt}
				if fenceSnap.Exists() {
					if err := tx.Update(fenceRef, updates(f), firestore.LastUpdateTime(fenceSnap.UpdateTime)); err != nil {
						return err
					}
				} else if err := tx.Create(fenceRef, f); err != nil {
					return err
				}
			}
			if d.Put == nil {
				return nil
			}
			if keySnap.Exists() {
				return tx.Update(keyRef, updates(encode(d.Put)), firestore.LastUpdateTime(keySnap.UpdateTime))
			}
			return tx.Create(keyRef, encode(d.Put))
		}, firestore.MaxAttempts(1))
		return mapErr(err, "write key %s", p.Key)
	})
	if err != nil {
		return nil, err
	}
	return claim, nil
}

// update reads the key's document, applies apply at the read's time, and writes what it
// returns (a record, or a deletion) only if the document is unchanged since.
func (s *Store) update(ctx context.Context, key string, apply driver.Apply) error {
	ref := s.keys.Doc(key)
	return again(ctx, "update key "+key, func(ctx context.Context) error {
		snaps, err := s.client.GetAll(ctx, []*firestore.DocumentRef{ref})
		if err != nil {
			return mapErr(err, "read key %s", key)
		}
		snap := snaps[0]
		now, err := readTime(snap)
		if err != nil {
			return err
		}
		cur, err := decode(snap)
		if err != nil {
			return err
		}
		next, del, err := apply(now, cur)
		switch {
		case err != nil:
			return err
		case del:
			_, err = ref.Delete(ctx, firestore.LastUpdateTime(snap.UpdateTime))
		case next != nil:
			_, err = ref.Update(ctx, updates(encode(next)), firestore.LastUpdateTime(snap.UpdateTime))
		}
		return mapErr(err, "write key %s", key)
	})
}

// Get implements receiver.Store.
func (s *Store) Get(ctx context.Context, key string) (*receiver.Record, error) {
	snap, err := s.keys.Doc(key).Get(ctx)
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("%w: %s", receiver.ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("firestorereceiver: get key %s: %w", key, err)
	}
	return decode(snap)
}

// Sweep implements receiver.Store: it deletes up to limit documents of each collection
// whose expire_at passed by the query's read time, each only if unchanged since.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	n := 0
	for _, c := range []*firestore.CollectionRef{s.keys, s.fences} {
		snaps, err := c.Where(fExpireAt, "<=", time.Now()).OrderBy(fExpireAt, firestore.Asc).Limit(limit).Documents(ctx).GetAll()
		if err != nil {
			return n, fmt.Errorf("firestorereceiver: sweep %s: %w", c.ID, err)
		}
		for _, snap := range snaps {
			exp, _ := snap.Data()[fExpireAt].(time.Time)
			if exp.After(snap.ReadTime) {
				continue // our clock ran ahead of the server's
			}
			_, err := snap.Ref.Delete(ctx, firestore.LastUpdateTime(snap.UpdateTime))
			switch code := status.Code(err); {
			case err == nil:
				n++
			case code == codes.FailedPrecondition || code == codes.NotFound:
				// rewritten or deleted since the query: not ours to delete
			default:
				return n, fmt.Errorf("firestorereceiver: sweep %s: %w", snap.Ref.Path, err)
			}
		}
	}
	return n, nil
}

// Close closes the client when the store opened it by URL.
func (s *Store) Close() error {
	if s.ownsClient {
		return s.client.Close()
	}
	return nil
}
