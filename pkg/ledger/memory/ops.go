package memory

import (
	"context"
	"slices"
	"strings"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// List implements ledger.Driver. The store is in process and small: it filters every
// record.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos := driver.ListPage(p)
	l.mu.Lock()
	var out []*ledger.Run
	for _, r := range l.runs {
		if driver.Matches(p, r, pos) {
			c := r.Clone()
			c.Payload, c.History = nil, nil
			out = append(out, c)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b *ledger.Run) int {
		return driver.ComparePosition(driver.Position{At: p.SortTime(b), RunID: b.ID}, driver.Position{At: p.SortTime(a), RunID: a.ID})
	})
	if len(out) > size+1 {
		out = out[:size+1]
	}
	return driver.Page(p, out, size), nil
}

// ListRunIDs implements ledger.Driver. The store is in process and small: it reads
// every run's ID, as List reads every record.
func (l *Ledger) ListRunIDs(ctx context.Context, p *ledger.ListRunIDsParams) ([]string, error) {
	limit, lo, hi := driver.RunIDScan(p)
	l.mu.Lock()
	var out []string
	for id := range l.runs {
		if id >= lo && id < hi {
			out = append(out, id)
		}
	}
	l.mu.Unlock()
	slices.Sort(out)
	return out[:min(len(out), limit)], nil
}

// ListEffects implements ledger.Driver.
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
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
