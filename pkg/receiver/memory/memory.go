// Package memory is an in-process receiver.Store: for tests, and for a service of one
// process that accepts losing its records with the process. It passes the conformance
// suite (pkg/receiver/receivertest). Open "memory://NAME" (receiver.Open) returns one
// store per name in the process.
package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/driver"
)

// Scheme is the URL scheme of this store.
const Scheme = "memory"

func init() { receiver.Register(Scheme, receiver.OpenerFunc(openURL)) }

var named struct {
	mu     sync.Mutex
	stores map[string]*Store
}

func openURL(_ context.Context, u *url.URL) (receiver.Store, error) {
	if err := receiver.CheckQuery(u); err != nil {
		return nil, err
	}
	name := u.Host + u.Path
	if u.Opaque != "" {
		name = u.Opaque
	}
	if name == "" {
		return nil, errors.New("memory URL names no store: write memory://NAME")
	}
	named.mu.Lock()
	defer named.mu.Unlock()
	if named.stores == nil {
		named.stores = map[string]*Store{}
	}
	if s, ok := named.stores[name]; ok {
		return s, nil
	}
	s := New(nil)
	named.stores[name] = s
	return s, nil
}

// Options configure New. A nil *Options is the zero value, which is ready to use.
type Options struct {
	// Clock replaces the host clock, for tests. Defaults to time.Now.
	Clock func() time.Time
}

// Store is an in-process receiver.Store. It is safe for concurrent use.
type Store struct {
	driver.Transitions // Renew, Complete and Release, over update
	clock              func() time.Time
	mu                 sync.Mutex
	keys               map[string]*receiver.Record
	fences             map[string]fence
}

type fence struct {
	attempt  int64
	expireAt time.Time
}

var _ receiver.Store = (*Store)(nil)

// New returns an empty store.
func New(opts *Options) *Store {
	s := &Store{clock: time.Now, keys: map[string]*receiver.Record{}, fences: map[string]fence{}}
	if opts != nil && opts.Clock != nil {
		s.clock = opts.Clock
	}
	s.Transitions = driver.Transitions{Update: s.update}
	return s
}

// Claim implements receiver.Store.
func (s *Store) Claim(_ context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if err := driver.ValidateClaim(p); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	var f int64
	if p.Fence != nil {
		cur := s.fences[p.Fence.Run]
		f = driver.LiveFence(cur.attempt, cur.expireAt, now)
	}
	var cur *receiver.Record
	if p.Key != "" {
		cur = s.keys[p.Key]
	}
	d := driver.DecideClaim(now, clone(cur), f, p)
	if d.Fence > 0 {
		s.fences[p.Fence.Run] = fence{attempt: d.Fence, expireAt: d.FenceExpireAt}
	}
	if d.Put != nil {
		s.keys[p.Key] = clone(d.Put)
	}
	return d.Claim, nil
}

// update applies apply to the key's record under the store's lock.
func (s *Store) update(_ context.Context, key string, apply driver.Apply) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, del, err := apply(s.clock(), clone(s.keys[key]))
	switch {
	case err != nil:
		return err
	case del:
		delete(s.keys, key)
	case next != nil:
		s.keys[key] = clone(next)
	}
	return nil
}

// Get implements receiver.Store.
func (s *Store) Get(_ context.Context, key string) (*receiver.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.keys[key]
	if !ok {
		return nil, fmt.Errorf("%w: %s", receiver.ErrNotFound, key)
	}
	return clone(r), nil
}

// Sweep implements receiver.Store.
func (s *Store) Sweep(_ context.Context, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	keys, fences := 0, 0
	for k, r := range s.keys {
		if keys < limit && !now.Before(r.ExpireAt) {
			delete(s.keys, k)
			keys++
		}
	}
	for k, f := range s.fences {
		if fences < limit && !now.Before(f.expireAt) {
			delete(s.fences, k)
			fences++
		}
	}
	return keys + fences, nil
}

// Close implements receiver.Store; the records stay for whoever opens the name again.
func (s *Store) Close() error { return nil }

// clone copies a record deeply, so that no caller shares the store's.
func clone(r *receiver.Record) *receiver.Record {
	if r == nil {
		return nil
	}
	c := *r
	if r.Response != nil {
		resp := *r.Response
		resp.Header = r.Response.Header.Clone()
		resp.Body = bytes.Clone(r.Response.Body)
		c.Response = &resp
	}
	return &c
}
