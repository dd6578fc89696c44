// Package redisreceiver is a receiver.Store in Redis, Valkey or Memorystore (go-redis):
// the lowest latency, one Lua script per call (a claim, a renewal, a completion),
// judged by the server's clock (TIME), each record expiring by itself at its retention
// (PEXPIREAT), so Sweep has nothing to do.
//
// It is only as durable as the server: without an append-only file synced on every
// write (appendfsync always), a restart forgets the records written since the last
// sync, and a retry of such a request executes again; a failover to a replica that
// missed a write does the same. Every record carries an expiry, so a server whose
// maxmemory-policy can evict (anything but noeviction; Memorystore's default is
// volatile-lru) deletes records under memory pressure: Open refuses such a server
// unless Options.AllowEviction (?eviction=allow). One primary: a claim touches the key's
// record and its run's fence, which Redis Cluster would place on different nodes.
//
// Open it by URL with receiver.Open("redis://HOST:PORT/DB?prefix=svc:") (rediss:// for
// TLS); every parameter but prefix and eviction is go-redis's.
package redisreceiver

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/driver"
)

// The URL schemes of this store.
const (
	Scheme    = "redis"
	SchemeTLS = "rediss"
)

func init() {
	receiver.Register(Scheme, receiver.OpenerFunc(openURL))
	receiver.Register(SchemeTLS, receiver.OpenerFunc(openURL))
}

func openURL(ctx context.Context, u *url.URL) (receiver.Store, error) {
	q := u.Query()
	var o Options
	o.Prefix = q.Get("prefix")
	switch v := q.Get("eviction"); v {
	case "", "refuse":
	case "allow":
		o.AllowEviction = true
	default:
		return nil, fmt.Errorf("eviction=%q: want refuse (the default) or allow", v)
	}
	q.Del("prefix")
	q.Del("eviction")
	c := *u
	c.RawQuery = q.Encode()
	ro, err := redis.ParseURL(c.String())
	if err != nil {
		return nil, fmt.Errorf("redisreceiver: %w", err)
	}
	client := redis.NewClient(ro)
	s, err := New(ctx, client, &o)
	if err != nil {
		client.Close()
		return nil, err
	}
	s.ownsClient = true
	return s, nil
}

// Options configure New. A nil *Options is the zero value, which is ready to use.
type Options struct {
	// Prefix is prepended to every key the store writes. Default "runonce:receiver:".
	Prefix string
	// AllowEviction opens on a server whose maxmemory-policy can evict keys; see the
	// package documentation.
	AllowEviction bool
}

// Store is a receiver.Store in Redis. It is safe for concurrent use.
type Store struct {
	rdb        redis.UniversalClient
	ownsClient bool
	prefix     string
}

var _ receiver.Store = (*Store)(nil)

// New returns a store over rdb, after checking the server's maxmemory-policy. The client
// stays the caller's: Close does not close it.
func New(ctx context.Context, rdb redis.UniversalClient, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "runonce:receiver:"
	}
	if !o.AllowEviction {
		policy, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return nil, fmt.Errorf("redisreceiver: read the server's maxmemory-policy (open with eviction=allow if the server hides it): %w", err)
		}
		if p := policy["maxmemory-policy"]; p != "noeviction" {
			return nil, fmt.Errorf("redisreceiver: the server's maxmemory-policy is %q: under memory pressure it deletes records, whose requests then execute again; set it to noeviction, or open with eviction=allow", p)
		}
	}
	return &Store{rdb: rdb, prefix: o.Prefix}, nil
}

func (s *Store) keyOf(key string) string { return s.prefix + "k:" + key }
func (s *Store) runOf(run string) string { return s.prefix + "f:" + run }

// interpret turns a script's error into the store's.
func interpret(op, key string, err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "LEASE_LOST") {
		return fmt.Errorf("%w: key %s: %s", receiver.ErrLeaseLost, key, strings.TrimPrefix(err.Error(), "LEASE_LOST "))
	}
	return fmt.Errorf("redisreceiver: %s key %s: %w", op, key, err)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Claim implements receiver.Store.
func (s *Store) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if err := driver.ValidateClaim(p); err != nil {
		return nil, err
	}
	keys := []string{s.keyOf(p.Key), s.runOf("")}
	var attempt int64
	if p.Fence != nil {
		keys[1], attempt = s.runOf(p.Fence.Run), p.Fence.Attempt
	}
	v, err := claimScript.Run(ctx, s.rdb, keys, flag(p.Key != ""), p.Fingerprint, p.Token,
		p.Lease.Microseconds(), p.Retention.Microseconds(), flag(p.Fence != nil), attempt).Slice()
	if err != nil {
		return nil, interpret("claim", p.Key, err)
	}
	if len(v) < 3 {
		return nil, fmt.Errorf("redisreceiver: claim key %s: a reply of %d values", p.Key, len(v))
	}
	c := &receiver.Claim{Outcome: receiver.Outcome(str(v[0]))}
	if c.Outcome == receiver.OutcomeFenced {
		c.Attempt = num(v[1])
	}
	c.LeaseLeft = time.Duration(num(v[2])) * time.Microsecond
	if len(v) > 3 {
		if c.Record, err = decode(p.Key, v[3:]); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Renew implements receiver.Store.
func (s *Store) Renew(ctx context.Context, p *receiver.RenewParams) error {
	if err := driver.ValidateRenew(p); err != nil {
		return err
	}
	if err := renewScript.Run(ctx, s.rdb, []string{s.keyOf(p.Key)}, p.Token, p.Lease.Microseconds(), p.Retention.Microseconds()).Err(); err != nil {
		return interpret("renew", p.Key, err)
	}
	return nil
}

// Complete implements receiver.Store.
func (s *Store) Complete(ctx context.Context, p *receiver.CompleteParams) error {
	if err := driver.ValidateComplete(p); err != nil {
		return err
	}
	err := completeScript.Run(ctx, s.rdb, []string{s.keyOf(p.Key)}, p.Token, p.Response.Status, driver.EncodeHeader(p.Response.Header),
		p.Response.Body, flag(p.Response.BodyOmitted), p.Retention.Microseconds()).Err()
	if err != nil {
		return interpret("complete", p.Key, err)
	}
	return nil
}

// Release implements receiver.Store.
func (s *Store) Release(ctx context.Context, p *receiver.ReleaseParams) error {
	if err := driver.ValidateRelease(p); err != nil {
		return err
	}
	if err := releaseScript.Run(ctx, s.rdb, []string{s.keyOf(p.Key)}, p.Token).Err(); err != nil {
		return interpret("release", p.Key, err)
	}
	return nil
}

// Get implements receiver.Store.
func (s *Store) Get(ctx context.Context, key string) (*receiver.Record, error) {
	v, err := getScript.Run(ctx, s.rdb, []string{s.keyOf(key)}).Slice()
	if err != nil {
		return nil, interpret("get", key, err)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: %s", receiver.ErrNotFound, key)
	}
	return decode(key, v)
}

// Sweep implements receiver.Store: Redis deletes every record at its expiry by itself.
func (s *Store) Sweep(context.Context, int) (int, error) { return 0, nil }

// Close closes the client when the store opened it by URL.
func (s *Store) Close() error {
	if s.ownsClient {
		return s.rdb.Close()
	}
	return nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

func usTime(v any) time.Time {
	n := num(v)
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

// decode reads a record from the scripts' fields: fp, state, token, attempt, lease,
// status, header, body, omitted, created, updated, expire.
func decode(key string, v []any) (*receiver.Record, error) {
	if len(v) != 12 {
		return nil, fmt.Errorf("redisreceiver: key %s: a record of %d fields", key, len(v))
	}
	r := &receiver.Record{
		Key: key, Fingerprint: str(v[0]), State: receiver.State(str(v[1])), Token: str(v[2]), Attempt: num(v[3]),
		LeaseUntil: usTime(v[4]), CreatedAt: usTime(v[9]), UpdatedAt: usTime(v[10]), ExpireAt: usTime(v[11]),
	}
	if r.State == receiver.StateCompleted {
		r.LeaseUntil = time.Time{}
		h, err := driver.DecodeHeader([]byte(str(v[6])))
		if err != nil {
			return nil, fmt.Errorf("redisreceiver: key %s: %w", key, err)
		}
		r.Response = &receiver.Response{Status: int(num(v[5])), Header: h, Body: []byte(str(v[7])), BodyOmitted: str(v[8]) == "1"}
	}
	return r, nil
}
