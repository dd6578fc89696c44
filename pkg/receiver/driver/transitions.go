package driver

import (
	"context"
	"time"

	"github.com/runonce/runonce/pkg/receiver"
)

// Apply is one of the rules of Renew, Complete and Release over a key's record cur (nil
// when absent) at the store's now: the record to write (nil: nothing), or the key to
// delete (del).
type Apply func(now time.Time, cur *receiver.Record) (next *receiver.Record, del bool, err error)

// Transitions implements a Store's Renew, Complete and Release over Update, for a store
// that can read a key's record and write it back atomically: embed it, set Update.
type Transitions struct {
	// Update reads the key's record and the store's now, calls apply, and writes what it
	// returns, atomically: in one transaction, or with a precondition that the record
	// is unchanged since the read (then it reads and applies again). It returns apply's
	// error.
	Update func(ctx context.Context, key string, apply Apply) error
}

// Renew implements receiver.Store.
func (t Transitions) Renew(ctx context.Context, p *receiver.RenewParams) error {
	if err := ValidateRenew(p); err != nil {
		return err
	}
	return t.Update(ctx, p.Key, func(now time.Time, cur *receiver.Record) (*receiver.Record, bool, error) {
		next, err := ApplyRenew(now, cur, p)
		return next, false, err
	})
}

// Complete implements receiver.Store.
func (t Transitions) Complete(ctx context.Context, p *receiver.CompleteParams) error {
	if err := ValidateComplete(p); err != nil {
		return err
	}
	return t.Update(ctx, p.Key, func(now time.Time, cur *receiver.Record) (*receiver.Record, bool, error) {
		next, err := ApplyComplete(now, cur, p)
		return next, false, err
	})
}

// Release implements receiver.Store.
func (t Transitions) Release(ctx context.Context, p *receiver.ReleaseParams) error {
	if err := ValidateRelease(p); err != nil {
		return err
	}
	return t.Update(ctx, p.Key, func(_ time.Time, cur *receiver.Record) (*receiver.Record, bool, error) {
		del, err := ApplyRelease(cur, p)
		return nil, del, err
	})
}
