package memory

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// List implements ledger.Ledger. The store is in process and small: it filters every
// record.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos, err := ledger.ValidateList(p)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	var out []*ledger.Run
	for _, r := range l.runs {
		if p.Matches(r, pos) {
			c := copyRun(r)
			c.Payload, c.History = nil, nil
			out = append(out, c)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b *ledger.Run) int {
		return ledger.ComparePosition(ledger.Position{At: p.SortTime(b), RunID: b.ID}, ledger.Position{At: p.SortTime(a), RunID: a.ID})
	})
	if len(out) > size+1 {
		out = out[:size+1]
	}
	return ledger.Page(p, out, size), nil
}

// ListEffects implements ledger.Ledger.
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	if !ledger.ValidRunID(p.RunID) {
		return nil, ledger.Invalidf("run ID %q is not 64 lower-case hex digits", p.RunID)
	}
	l.mu.Lock()
	var out []*ledger.Effect
	for _, e := range l.effects {
		if e.RunID == p.RunID {
			out = append(out, copyEffect(e))
		}
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b *ledger.Effect) int { return strings.Compare(a.Name, b.Name) })
	if len(out) > ledger.MaxListedEffects {
		out = out[:ledger.MaxListedEffects]
	}
	return out, nil
}

func (l *Ledger) operate(op ledger.Op, p *ledger.OperatorParams, apply func(*ledger.Run, *ledger.OperatorParams, time.Time) (*ledger.Run, error)) (*ledger.Run, error) {
	now := l.now(p.Now)
	return update(l, p.RunID, op, ledger.Note{Actor: p.Actor, Reason: p.Reason}, now, func(cur *ledger.Run) (*ledger.Run, *ledger.Run, error) {
		next, err := apply(cur, p, now)
		return next, next, err
	})
}

// Retry implements ledger.Ledger.
func (l *Ledger) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operate(ledger.OpRetry, p, ledger.ApplyRetry)
}

// Cancel implements ledger.Ledger.
func (l *Ledger) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operate(ledger.OpCancel, p, ledger.ApplyCancel)
}

// OperatorRelease implements ledger.Ledger.
func (l *Ledger) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operate(ledger.OpOperatorRelease, p, ledger.ApplyOperatorRelease)
}
