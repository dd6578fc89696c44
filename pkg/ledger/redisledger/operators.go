package redisledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// operatorTries bounds how often an operator's transition reads the run again after a
// write came between its read and its compare-and-set.
const operatorTries = 16

// casFields are the fields the operate script compares with the run as read: together
// they change with every transition of the run.
var casFields = []string{"status", "attempt", "attempt_id", "deadline", "not_before", "attempts_made", "updated_at", "expire_at"}

// effectCASFields are the fields the resolve script compares with the effect as read:
// together they change with every write of the effect.
var effectCASFields = []string{"status", "attempt", "updated_at"}

// transact runs an operator's action: it reads the run and the server's time in one
// script (and, when the action has an effect, that effect of the run), decides with the
// driver's rule, and writes the records the rule returns, the run's indexes and its
// events with a compare-and-set script that writes only when the run (and the effect)
// are still as read; when they are not, it reads and decides again. Operators act
// rarely, and a rule applied in Go cannot disagree with the other backends'.
func (l *Ledger) transact(ctx context.Context, a *driver.Action) (*ledger.Run, error) {
	p := a.Params
	what := string(a.Op) + " run " + p.RunID
	ekey := ledger.EffectKey(p.RunID, a.Effect)
	for range operatorTries {
		cur, stored, now, err := l.read(ctx, what, p.RunID, p.Now)
		if err != nil {
			return nil, err
		}
		var (
			eff     *ledger.Effect
			effRead map[string]string
		)
		if a.Effect != "" {
			if effRead, err = l.rdb.HGetAll(ctx, l.effectKey(ekey)).Result(); err != nil {
				return nil, interpretError(what, err)
			}
			if eff, err = decodeEffect(effRead); err != nil {
				return nil, err
			}
		}
		next, nextEff, err := a.Apply(cur, eff, now)
		if err != nil {
			return nil, err
		}
		events := driver.Record(a.Op, cur, next, now, a.Note)
		args := make([]any, 0, 1+len(casFields)+11+len(events)+10)
		args = append(args, p.RunID)
		for _, f := range casFields {
			args = append(args, stored[f])
		}
		args = append(args, string(next.Status), next.AttemptID, timeArg(next.Deadline), timeArg(next.NotBefore),
			strconv.FormatInt(next.AttemptsMade, 10), next.LastError, timeArg(next.UpdatedAt), timeArg(next.CompletedAt),
			timeArg(next.ExpireAt), l.grace(), len(events))
		for _, e := range events {
			b, err := json.Marshal(e)
			if err != nil {
				return nil, fmt.Errorf("redisledger: %s: encode its event: %w", what, err)
			}
			args = append(args, string(b))
		}
		script, keys := operateScript, l.runKeys(p.RunID)
		if nextEff != nil {
			script, keys = resolveScript, l.effectKeys(p.RunID, ekey)
			args = append(args, ekey)
			for _, f := range effectCASFields {
				args = append(args, effRead[f])
			}
			args = append(args, string(nextEff.Status), strconv.FormatInt(nextEff.Attempt, 10), nextEff.Ref,
				timeArg(nextEff.DoneAt), timeArg(nextEff.UpdatedAt), timeArg(nextEff.ExpireAt))
		}
		args = append(args, l.o.Prefix)
		v, err := l.run(ctx, what, script, keys, args...)
		if err != nil {
			return nil, err
		}
		if items, _ := v.([]any); len(items) == 1 && items[0] == int64(1) {
			next.History = nil // Get reads it
			return next, nil
		}
	}
	return nil, fmt.Errorf("redisledger: %s: %w: the run changed between each of %d reads and its write; the run is as the last write left it, try again",
		what, ledger.ErrContended, operatorTries)
}

// Retry implements ledger.Driver with driver.ApplyRetry (see transact).
func (l *Ledger) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.transact(ctx, driver.RunAction(driver.OpRetry, p, driver.ApplyRetry))
}

// Cancel implements ledger.Driver with driver.ApplyCancel (see transact).
func (l *Ledger) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.transact(ctx, driver.RunAction(driver.OpCancel, p, driver.ApplyCancel))
}

// OperatorRelease implements ledger.Driver with driver.ApplyOperatorRelease (see transact).
func (l *Ledger) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.transact(ctx, driver.RunAction(driver.OpOperatorRelease, p, driver.ApplyOperatorRelease))
}

// ResolveEffect implements ledger.Driver with driver.ApplyResolveEffect (see transact).
func (l *Ledger) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	return l.transact(ctx, driver.ResolveAction(p))
}

// The listing's bounds (Ledger.listBudget, listCalls): a list script reads at most
// listBudget index entries, and List calls it at most listCalls times for one page; a
// page whose filters the index does not serve and that found too few runs in that many
// entries ends short, with a cursor after the last entry read.
const (
	listBudget = 500
	listCalls  = 10
)

// listedFields are the fields List reads: every field of a run but its payload, its
// history (and its effects).
var listedFields = []string{"id", "namespace", "job", "key", "schedule_time", "payload_hash", "status", "attempt",
	"attempt_id", "deadline", "not_before", "attempts_made", "last_error", "result", "progress", "created_at",
	"updated_at", "completed_at", "expire_at"}

// listIndex is the listing index a listing walks (see the scripts' keys): the one of its
// order (created or updated) led by its equality filter when there is one (the same set
// as the other backends'), with the filter's field and value.
func listIndex(p *ledger.ListParams) (name, field, value string) {
	col := "created"
	if p.ByUpdated() {
		col = "updated"
	}
	switch {
	case p.Status != "":
		return col + ":status:" + string(p.Status), "status", string(p.Status)
	case p.Job != "" && col == "created":
		return "created:job:" + p.Job, "job", p.Job
	case p.Namespace != "" && col == "created":
		return "created:ns:" + p.Namespace, "namespace", p.Namespace
	}
	return col, "", ""
}

// listedAt is the list script's position (from 1) of a listed field, "" for none.
func listedAt(field string) string {
	if i := slices.Index(listedFields, field); i >= 0 {
		return strconv.Itoa(i + 1)
	}
	return ""
}

func scoreArg(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// List implements ledger.Driver over the listing indexes (listIndex), newest first,
// keyset-paginated on (time, run ID): a sorted set answers equal scores in descending
// member order, which is the listing's. The payload is not read.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos := driver.ListPage(p)
	index, filter, value := listIndex(p)
	field, after, before := "created_at", driver.Micros(p.CreatedAfter), driver.Micros(p.CreatedBefore)
	if p.ByUpdated() {
		field, after, before = "updated_at", driver.Micros(p.UpdatedAfter), driver.Micros(p.UpdatedBefore)
	}
	lo := "-inf"
	if !after.IsZero() {
		lo = scoreArg(after)
	}
	hi := func(at driver.Position) string {
		switch {
		case at.RunID != "" && (before.IsZero() || at.At.Before(before)):
			return scoreArg(at.At)
		case !before.IsZero():
			return "(" + scoreArg(before)
		}
		return "+inf"
	}
	var runs []*ledger.Run
	at := pos
	for range l.listCalls {
		posScore := ""
		if at.RunID != "" {
			posScore = scoreArg(at.At)
		}
		args := []any{hi(at), lo, posScore, at.RunID, size + 1 - len(runs), l.listBudget, listedAt(filter), value,
			listedAt(field), string(p.Status), p.Job, p.Namespace, l.o.Prefix + "run:", listedAt("status"), listedAt("job"),
			listedAt("namespace")}
		for _, f := range listedFields {
			args = append(args, f)
		}
		v, err := listScript.Run(ctx, l.rdb, []string{l.o.Prefix + "list:" + index}, args...).Result()
		if err != nil {
			return nil, interpretError("list runs", err)
		}
		items, ok := v.([]any)
		if !ok || len(items) != 4 {
			return nil, fmt.Errorf("redisledger: list runs: unexpected answer %v", v)
		}
		recs, _ := items[0].([]any)
		for _, rec := range recs {
			vals, _ := rec.([]any)
			m := make(map[string]string, len(listedFields))
			for i, f := range listedFields {
				if i < len(vals) {
					m[f], _ = vals[i].(string)
				}
			}
			r, err := decodeRun(m)
			if err != nil {
				return nil, err
			}
			if r != nil && driver.Matches(p, r, pos) {
				runs = append(runs, r)
			}
		}
		done, _ := items[1].(int64)
		lastScore, _ := items[2].(string)
		lastID, _ := items[3].(string)
		if len(runs) > size || done == 1 || lastID == "" {
			return driver.Page(p, runs, size), nil
		}
		f, err := strconv.ParseFloat(lastScore, 64)
		if err != nil {
			return nil, fmt.Errorf("redisledger: list runs: index score %q: %w", lastScore, err)
		}
		at = driver.Position{At: time.UnixMicro(int64(f)).UTC(), RunID: lastID}
	}
	return &ledger.ListResult{Runs: runs, Next: ledger.EncodeCursor(at)}, nil
}

// ListRunIDs implements ledger.Driver with one script over the ID index (runIDsScript),
// a range of a sorted set read in lexicographic order, as a range of a primary key.
func (l *Ledger) ListRunIDs(ctx context.Context, p *ledger.ListRunIDsParams) ([]string, error) {
	limit, lo, hi := driver.RunIDScan(p)
	v, err := runIDsScript.Run(ctx, l.rdb, []string{l.o.Prefix + "list:id"}, lo, hi, limit, l.listBudget, l.o.Prefix+"run:").StringSlice()
	if err != nil {
		return nil, interpretError("list run IDs starting with "+p.Prefix, err)
	}
	return v, nil
}

// ListEffects implements ledger.Driver with one script that reads the effects the run's
// effects field lists, ordered by name here.
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	what := "list effects of run " + p.RunID
	v, err := listEffectsScript.Run(ctx, l.rdb, []string{l.runKey(p.RunID)}, l.effectPrefix()).Result()
	if err != nil {
		return nil, interpretError(what, err)
	}
	items, _ := v.([]any)
	out := make([]*ledger.Effect, 0, len(items))
	for _, it := range items {
		m, err := fields(it)
		if err != nil {
			return nil, fmt.Errorf("redisledger: %s: %w", what, err)
		}
		e, err := decodeEffect(m)
		if err != nil {
			return nil, err
		}
		if e != nil {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *ledger.Effect) int { return strings.Compare(a.Name, b.Name) })
	if len(out) > ledger.MaxListedEffects {
		out = out[:ledger.MaxListedEffects]
	}
	return out, nil
}
