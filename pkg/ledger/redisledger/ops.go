package redisledger

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// Default bounds, as in the ledger's documentation.
const (
	defaultRescueLimit = 100
	defaultSweepLimit  = 500
)

func retention(d time.Duration) time.Duration { return cmp.Or(d, ledger.DefaultRetention) }

func (l *Ledger) runKey(id string) string     { return l.o.Prefix + "run:" + id }
func (l *Ledger) effectKey(key string) string { return l.o.Prefix + "eff:" + key }
func (l *Ledger) effectPrefix() string        { return l.o.Prefix + "eff:" }
func (l *Ledger) grace() string               { return strconv.FormatInt(l.o.Grace.Milliseconds(), 10) }

// answer is a script's reply: whether it wrote, the server's time it used, the run and
// (for the effect scripts) the effect as they stand, and the extra items.
type answer struct {
	written bool
	now     time.Time
	run     *ledger.Run
	effect  *ledger.Effect
	extra   []any
}

// run runs a script (EVALSHA, EVAL when the server lost its cache) and, when WaitReplicas
// is set, WAIT in the same pipeline: one round trip.
func (l *Ledger) run(ctx context.Context, op string, s *redis.Script, keys []string, args ...any) (any, error) {
	if l.o.WaitReplicas == 0 {
		v, err := s.Run(ctx, l.rdb, keys, args...).Result()
		return v, interpretError(op, err)
	}
	pipe := l.rdb.Pipeline()
	cmd := s.EvalSha(ctx, pipe, keys, args...)
	wait := pipe.Do(ctx, "WAIT", l.o.WaitReplicas, l.o.WaitTimeout.Milliseconds())
	_, _ = pipe.Exec(ctx)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		pipe = l.rdb.Pipeline()
		cmd = s.Eval(ctx, pipe, keys, args...)
		wait = pipe.Do(ctx, "WAIT", l.o.WaitReplicas, l.o.WaitTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
	}
	v, err := cmd.Result()
	if err != nil {
		return nil, interpretError(op, err)
	}
	n, err := wait.Int64()
	if err != nil {
		return nil, interpretError(op+": WAIT", err)
	}
	if n < int64(l.o.WaitReplicas) {
		return nil, fmt.Errorf("redisledger: %s: %w: written on the primary but acknowledged by %d of %d replicas within %v; a failover now could lose it, and a retry is safe",
			op, ledger.ErrUnavailable, n, l.o.WaitReplicas, l.o.WaitTimeout)
	}
	return v, nil
}

// call runs a transition script and decodes its answer.
func (l *Ledger) call(ctx context.Context, op string, s *redis.Script, keys []string, args ...any) (*answer, error) {
	v, err := l.run(ctx, op, s, keys, args...)
	if err != nil {
		return nil, err
	}
	items, ok := v.([]any)
	if !ok || len(items) < 3 {
		return nil, fmt.Errorf("redisledger: %s: unexpected answer %v", op, v)
	}
	a := &answer{}
	written, _ := items[0].(int64)
	a.written = written == 1
	if ts, _ := items[1].(string); ts != "" {
		if a.now, err = parseTime(ts); err != nil {
			return nil, fmt.Errorf("redisledger: %s: server time %q: %w", op, ts, err)
		}
	}
	m, err := fields(items[2])
	if err != nil {
		return nil, fmt.Errorf("redisledger: %s: %w", op, err)
	}
	if a.run, err = decodeRun(m); err != nil {
		return nil, err
	}
	if len(items) > 3 {
		m, err := fields(items[3])
		if err != nil {
			return nil, fmt.Errorf("redisledger: %s: %w", op, err)
		}
		if a.effect, err = decodeEffect(m); err != nil {
			return nil, err
		}
		a.extra = items[4:]
	}
	return a, nil
}

// inconsistent reports a script and the state machine disagreeing: a bug, never a verdict.
func inconsistent(op, runID string, cur *ledger.Run) error {
	return fmt.Errorf("redisledger: %s of run %s wrote nothing, but the state machine would write over %+v", op, runID, cur)
}

func (l *Ledger) runKeys(id string) []string { return []string{l.runKey(id), l.rescueKey, l.expireKey} }

// Claim implements ledger.Driver with one script: the record is created when absent, and
// a duplicate's answer is the record as it stands.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	a, err := l.call(ctx, "claim run "+p.RunID, claimScript, l.runKeys(p.RunID),
		timeArg(p.Now), p.RunID, p.Namespace, p.Job, p.Key, timeArg(driver.Micros(p.ScheduleTime)), p.PayloadHash,
		p.Payload, p.AttemptID, micros(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)),
		micros(retention(p.Retention)), l.grace(), l.o.Prefix)
	if err != nil {
		return nil, err
	}
	r := a.run
	if r == nil {
		return nil, fmt.Errorf("redisledger: claim run %s: the script answered no record", p.RunID)
	}
	// A claim the client retried after its first try was written finds its own record.
	created := a.written || (r.Status == ledger.StatusQueued && r.Attempt == 0 && r.AttemptID == p.AttemptID)
	return &ledger.ClaimResult{Run: r, Created: created, PayloadMismatch: !created && r.PayloadHash != p.PayloadHash}, nil
}

// Expedite implements ledger.Driver with one fenced script: an untouched ingress claim's
// deadline becomes the server's now.
func (l *Ledger) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	return l.fenced(ctx, "expedite", p.RunID, expediteScript,
		[]any{timeArg(p.Now), p.RunID, p.AttemptID, micros(retention(p.Retention)), l.grace(), l.o.Prefix},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			next, err := driver.ApplyExpedite(cur, p, now)
			return next, next, err
		})
}

// Acquire implements ledger.Driver with one script.
func (l *Ledger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	a, err := l.call(ctx, "acquire run "+p.RunID, acquireScript, l.runKeys(p.RunID),
		timeArg(p.Now), p.RunID, p.Namespace, p.Job, p.Key, timeArg(driver.Micros(p.ScheduleTime)), p.PayloadHash,
		p.Payload, p.AttemptID, micros(cmp.Or(p.Lease, ledger.DefaultLease)), micros(retention(p.Retention)), l.grace(),
		mustExist(p.MustExist), p.Worker, l.o.Prefix)
	if err != nil {
		return nil, err
	}
	r := a.run
	// Written, or written by this very attempt on a try the client retried.
	if r != nil && r.Status == ledger.StatusRunning && r.AttemptID == p.AttemptID && r.PayloadHash == p.PayloadHash {
		return &ledger.AcquireResult{Outcome: ledger.OutcomeAcquired, Run: r}, nil
	}
	next, res, err := driver.ApplyAcquire(r, p, a.now)
	if err != nil {
		return nil, err
	}
	if next != nil {
		return nil, inconsistent("acquire", p.RunID, r)
	}
	return res, nil
}

// fenced runs a fenced script over one run. When it wrote nothing, verdict (the state
// machine's rule for the transition) decides between an idempotent repeat (it answers the
// run and writes nothing) and a refusal (its error).
func (l *Ledger) fenced(ctx context.Context, op, runID string, s *redis.Script, args []any,
	verdict func(cur *ledger.Run, now time.Time) (next, answer *ledger.Run, err error),
) (*ledger.Run, error) {
	a, err := l.call(ctx, op+" run "+runID, s, l.runKeys(runID), args...)
	if err != nil {
		return nil, err
	}
	if a.written {
		return a.run, nil
	}
	next, ans, err := verdict(a.run, a.now)
	if err != nil {
		return nil, err
	}
	if next != nil {
		return nil, inconsistent(op, runID, a.run)
	}
	return ans, nil
}

func mustExist(b bool) string {
	if b {
		return "1"
	}
	return ""
}

func attempt(f *ledger.Fence) string { return strconv.FormatInt(f.Attempt, 10) }

// Renew implements ledger.Driver with one fenced script.
func (l *Ledger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	return l.fenced(ctx, "renew", p.RunID, renewScript,
		[]any{timeArg(p.Now), p.RunID, attempt(&p.Fence), p.AttemptID, micros(cmp.Or(p.Lease, ledger.DefaultLease)),
			micros(retention(p.Retention)), l.grace(), string(p.Progress), l.o.Prefix},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			next, err := driver.ApplyRenew(cur, p, now)
			return next, next, err
		})
}

// Complete implements ledger.Driver with one fenced script.
func (l *Ledger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	return l.fenced(ctx, "complete", p.RunID, finishScript,
		[]any{timeArg(p.Now), p.RunID, attempt(&p.Fence), p.AttemptID, string(ledger.StatusCompleted), "",
			micros(retention(p.Retention)), l.grace(), string(p.Result), string(p.Progress), l.o.Prefix},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			return driver.ApplyComplete(cur, p, now)
		})
}

// Fail implements ledger.Driver with one fenced script.
func (l *Ledger) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	return l.fenced(ctx, "fail", p.RunID, finishScript,
		[]any{timeArg(p.Now), p.RunID, attempt(&p.Fence), p.AttemptID, string(ledger.StatusFailed), p.Error,
			micros(retention(p.Retention)), l.grace(), "", string(p.Progress), l.o.Prefix},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			return driver.ApplyFail(cur, p, now)
		})
}

// Release implements ledger.Driver with one fenced script.
func (l *Ledger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	return l.fenced(ctx, "release", p.RunID, releaseScript,
		[]any{timeArg(p.Now), p.RunID, attempt(&p.Fence), p.AttemptID, p.Error, micros(p.RetryAfter),
			micros(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)), micros(retention(p.Retention)), l.grace(), string(p.Progress), l.o.Prefix},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			return driver.ApplyRelease(cur, p, now)
		})
}

// Rescue implements ledger.Driver with one conditional script.
func (l *Ledger) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	deadline := driver.Micros(p.Deadline)
	lost := fmt.Sprintf("attempt %d lost its lease at %s", p.Attempt, deadline.Format(time.RFC3339Nano))
	return l.fenced(ctx, "rescue", p.RunID, rescueScript,
		[]any{timeArg(p.Now), p.RunID, string(p.Status), strconv.FormatInt(p.Attempt, 10), timeArg(deadline),
			micros(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)), micros(retention(p.Retention)), lost, l.grace(),
			l.o.Prefix},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			next, err := driver.ApplyRescue(cur, p, now)
			return next, next, err
		})
}

// Get implements ledger.Driver with one HGETALL: the run's hash holds its history.
func (l *Ledger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	what := "get run " + p.RunID
	m, err := l.rdb.HGetAll(ctx, l.runKey(p.RunID)).Result()
	if err != nil {
		return nil, interpretError(what, err)
	}
	r, err := decodeRunWithHistory(what, m)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	return r, nil
}

// decodeRunWithHistory is decodeRun with the run's history.
func decodeRunWithHistory(op string, m map[string]string) (*ledger.Run, error) {
	r, err := decodeRun(m)
	if err != nil || r == nil {
		return r, err
	}
	if r.History, err = decodeHistory(m["history"]); err != nil {
		return nil, fmt.Errorf("redisledger: %s: %w", op, err)
	}
	return r, nil
}

// read returns run id with its history (nil when absent), its fields as stored, and the
// server's time (override when set), as of one moment.
func (l *Ledger) read(ctx context.Context, op, id string, override time.Time) (*ledger.Run, map[string]string, time.Time, error) {
	v, err := getScript.Run(ctx, l.rdb, []string{l.runKey(id)}, timeArg(override)).Result()
	if err != nil {
		return nil, nil, time.Time{}, interpretError(op, err)
	}
	items, ok := v.([]any)
	if !ok || len(items) != 2 {
		return nil, nil, time.Time{}, fmt.Errorf("redisledger: %s: unexpected answer %v", op, v)
	}
	now, err := parseTime(fmt.Sprint(items[0]))
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("redisledger: %s: server time %v: %w", op, items[0], err)
	}
	m, err := fields(items[1])
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("redisledger: %s: %w", op, err)
	}
	r, err := decodeRunWithHistory(op, m)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return r, m, now, nil
}

func (l *Ledger) effectKeys(runID, key string) []string {
	return []string{l.runKey(runID), l.rescueKey, l.expireKey, l.effectKey(key)}
}

// BeginEffect implements ledger.Driver with one fenced script.
func (l *Ledger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	key := ledger.EffectKey(p.RunID, p.Name)
	a, err := l.call(ctx, "begin effect "+p.Name+" of run "+p.RunID, beginEffectScript, l.effectKeys(p.RunID, key),
		timeArg(p.Now), p.RunID, attempt(&p.Fence), p.AttemptID, p.Name, key, micros(retention(p.Retention)), l.grace())
	if err != nil {
		return nil, err
	}
	if a.written {
		var prev int64
		if len(a.extra) > 0 {
			s, _ := a.extra[0].(string)
			prev, _ = strconv.ParseInt(s, 10, 64)
		}
		return &ledger.BeginEffectResult{Effect: a.effect, PreviousAttempt: prev}, nil
	}
	next, res, err := driver.ApplyBeginEffect(a.run, a.effect, p, a.now)
	if err != nil {
		return nil, err
	}
	if next != nil {
		return nil, inconsistent("begin effect", p.RunID, a.run)
	}
	return res, nil
}

// CompleteEffect implements ledger.Driver with one fenced script.
func (l *Ledger) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	key := ledger.EffectKey(p.RunID, p.Name)
	a, err := l.call(ctx, "complete effect "+p.Name+" of run "+p.RunID, completeEffectScript, l.effectKeys(p.RunID, key),
		timeArg(p.Now), p.RunID, attempt(&p.Fence), p.AttemptID, key, micros(retention(p.Retention)), l.grace(), p.Ref)
	if err != nil {
		return nil, err
	}
	if a.written {
		return a.effect, nil
	}
	next, ans, err := driver.ApplyCompleteEffect(a.run, a.effect, p, a.now)
	if err != nil {
		return nil, err
	}
	if next != nil {
		return nil, inconsistent("complete effect", p.RunID, a.run)
	}
	return ans, nil
}

// GetEffect implements ledger.Driver with one HGETALL.
func (l *Ledger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	m, err := l.rdb.HGetAll(ctx, l.effectKey(ledger.EffectKey(p.RunID, p.Name))).Result()
	if err != nil {
		return nil, interpretError("get effect "+p.Name+" of run "+p.RunID, err)
	}
	e, err := decodeEffect(m)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("%w: effect %q of run %s", ledger.ErrNotFound, p.Name, p.RunID)
	}
	return e, nil
}

// ListRescue implements ledger.Driver with one script over the rescue index.
func (l *Ledger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	v, err := l.run(ctx, "list runs to rescue", listRescueScript, []string{l.rescueKey},
		timeArg(p.Now), cmp.Or(p.Limit, defaultRescueLimit), l.o.Prefix+"run:")
	if err != nil {
		return nil, err
	}
	items, ok := v.([]any)
	if !ok || len(items) != 2 {
		return nil, fmt.Errorf("redisledger: list runs to rescue: unexpected answer %v", v)
	}
	now, err := parseTime(fmt.Sprint(items[0]))
	if err != nil {
		return nil, fmt.Errorf("redisledger: list runs to rescue: server time: %w", err)
	}
	records, _ := items[1].([]any)
	out := make([]*ledger.Run, 0, len(records))
	for _, rec := range records {
		m, err := fields(rec)
		if err != nil {
			return nil, fmt.Errorf("redisledger: list runs to rescue: %w", err)
		}
		r, err := decodeRun(m)
		if err != nil {
			return nil, err
		}
		if r != nil && driver.NeedsRescue(r, now) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Sweep implements ledger.Driver with one script over the expiry index. Redis deletes a
// record by itself Options.Grace after its ExpireAt; Sweep deletes it sooner.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	v, err := l.run(ctx, "sweep", sweepScript, []string{l.expireKey, l.rescueKey},
		timeArg(p.Now), cmp.Or(p.Limit, defaultSweepLimit), l.o.Prefix)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redisledger: sweep: unexpected answer %v", v)
	}
	return int(n), nil
}
