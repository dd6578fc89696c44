package sim

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/worker"
)

// history records what callers were answered and what jobs observed, and checks the
// guarantees over it. Its methods are safe for concurrent use.
type history struct {
	mu    sync.Mutex
	clock *clock
	// clockless: the ledger's leases never run out during a schedule (see Backends),
	// whatever the deadlines it answers say on its own clock.
	clockless bool
	// sent: the payloads callers sent, by run ID.
	sent map[string][][]byte
	// accepted: the payload of a request answered 2xx, by run ID.
	accepted map[string][]byte
	// news counts answers "new" (202, not a duplicate), by run ID.
	news map[string]int
	// leases: the lease expiry each worker claim granted, by run ID and attempt.
	leases map[string]map[int64]time.Time
	// holding: the attempts whose job is running, by run ID.
	holding map[string][]*holder
	// calls: downstream calls by effect key; done: effects whose success was recorded.
	calls map[string]int
	done  map[string]bool
	keys  map[string]string // effect name and run → the key seen first
	// terminal: runs seen completed or failed as a sweep applied, which it may delete.
	terminal map[string]bool
	// cancelled: runs an operator cancelled; revoked: attempts an operator's release or
	// cancel took the run from, by run ID, whose jobs may go on until they learn it.
	cancelled map[string]bool
	revoked   map[string]map[int64]bool
	// again: how many times an operator resolved an effect as not done, by key: an
	// at-most-once effect may be called that many times more.
	again map[string]int
	// startsAgain: how many times an operator resolved a run's start as not done, by run
	// ID: the run may start one more execution each time.
	startsAgain map[string]int
	// failed: runs a holder's failing write was accepted for (the operator's pick).
	failed map[string]bool
	// violations found while the schedule ran.
	violations []string
}

type holder struct {
	attempt int64
	a       *actor
}

func newHistory(c *clock, clockless bool) *history {
	return &history{
		clock: c, clockless: clockless, sent: map[string][][]byte{}, accepted: map[string][]byte{}, news: map[string]int{},
		leases: map[string]map[int64]time.Time{}, holding: map[string][]*holder{},
		calls: map[string]int{}, done: map[string]bool{}, keys: map[string]string{}, terminal: map[string]bool{},
		cancelled: map[string]bool{}, revoked: map[string]map[int64]bool{}, again: map[string]int{},
		failed: map[string]bool{}, startsAgain: map[string]int{},
	}
}

func (h *history) violate(format string, args ...any) {
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
}

func (h *history) send(runID string, payload []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent[runID] = append(h.sent[runID], payload)
}

// answered records a 2xx answer.
func (h *history) answered(runID string, payload []byte, isNew bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev, ok := h.accepted[runID]; ok && !bytes.Equal(prev, payload) {
		h.violate("invariant 4: run %s was answered 2xx for payload %q and for payload %q", short(runID), prev, payload)
	}
	h.accepted[runID] = payload
	if isNew {
		h.news[runID]++
		if h.news[runID] == 2 {
			h.violate("invariant 4: run %s was answered \"new\" twice", short(runID))
		}
	}
}

// acquired records the lease a worker claim or a renewal granted: a claim of a run an
// operator cancelled is a violation (a renewal of one is invariant 5's).
func (h *history) acquired(r *ledger.Run) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancelled[r.ID] && r.Status == ledger.StatusRunning {
		h.violate("invariant 6: attempt %d of run %s was granted after an operator cancelled the run", r.Attempt, short(r.ID))
	}
	if h.leases[r.ID] == nil {
		h.leases[r.ID] = map[int64]time.Time{}
	}
	h.leases[r.ID][r.Attempt] = r.Deadline
	if h.clockless {
		h.leases[r.ID][r.Attempt] = h.clock.Now().Add(clocklessLease)
	}
}

// jobStarted is what a job observes when it starts: no other attempt of its run may
// still hold the run (be running with a live lease), and its payload must be one a
// caller sent, the one accepted when a caller got a 2xx.
func (h *history) jobStarted(a *actor, runID string, attempt int64, payload []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.crashed {
		return
	}
	now := h.clock.Now()
	for _, o := range h.holding[runID] {
		if h.revoked[runID][o.attempt] {
			continue // an operator took the run from it: it is fenced, and learns so at its next write
		}
		if exp, ok := h.leases[runID][o.attempt]; !ok || !now.After(exp) {
			h.violate("invariant 3: attempt %d of run %s started while attempt %d was running with a live lease (until %s, now %s)",
				attempt, short(runID), o.attempt, exp.Format(time.TimeOnly), now.Format(time.TimeOnly))
		}
	}
	h.holding[runID] = append(h.holding[runID], &holder{attempt: attempt, a: a})
	if acc, ok := h.accepted[runID]; ok && !bytes.Equal(acc, payload) {
		h.violate("invariant 4: run %s ran with payload %q, not the accepted %q", short(runID), payload, acc)
	}
	known := false
	for _, p := range h.sent[runID] {
		known = known || bytes.Equal(p, payload)
	}
	if !known {
		h.violate("invariant 4: run %s ran with payload %q, which no caller sent", short(runID), payload)
	}
}

// jobEnded ends every hold of actor a (its job returned or it crashed).
func (h *history) jobEnded(a *actor) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, hs := range h.holding {
		out := hs[:0]
		for _, o := range hs {
			if o.a != a {
				out = append(out, o)
			}
		}
		h.holding[id] = out
	}
}

// downstream records a call of an effect's function with its key.
func (h *history) downstream(a *actor, runID, name, key string, atMostOnce bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.crashed {
		return
	}
	if want := ledger.EffectKey(runID, name); key != want {
		h.violate("invariant 2: effect %q of run %s was called with key %s, not %s", name, short(runID), short(key), short(want))
	}
	if first, ok := h.keys[runID+"/"+name]; ok && first != key {
		h.violate("invariant 2: effect %q of run %s was called with two keys", name, short(runID))
	}
	h.keys[runID+"/"+name] = key
	h.calls[key]++
	if h.done[key] {
		h.violate("invariant 2: effect %q of run %s was done again after its success was recorded", name, short(runID))
	}
	if atMostOnce && h.calls[key] == 2+h.again[key] {
		h.violate("invariant 2: at-most-once effect %q of run %s started %d times, %d of them after an operator resolved it as not done",
			name, short(runID), h.calls[key], h.again[key])
	}
}

// effectDone records that the ledger accepted an effect's completion, as it applied
// (whether or not its caller learnt it): from then on its downstream is never called
// again. A batch's group done makes each of its items done.
func (h *history) effectDone(runID, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done[ledger.EffectKey(runID, name)] = true
	if strings.HasPrefix(name, "batch/"+batchName+"/chunk/") {
		for _, item := range batchItems { // one group holds them all
			h.done[worker.BatchItemKey(runID, batchName, item)] = true
		}
	}
}

// batchItem records a call of a batch item's function with its key: the item's own,
// and never once its group was recorded done.
func (h *history) batchItem(a *actor, runID, item, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.crashed {
		return
	}
	if want := worker.BatchItemKey(runID, batchName, item); key != want {
		h.violate("invariant 2: batch item %s of run %s was called with key %s, not %s", item, short(runID), short(key), short(want))
	}
	if h.done[key] {
		h.violate("invariant 2: batch item %s of run %s was done again after its group was recorded done", item, short(runID))
	}
}

// repeats are the finishing writes a repeat of which, by the attempt that made it, is
// accepted with no holder: the status each leaves the run in.
var repeats = map[string]ledger.Status{"complete": ledger.StatusCompleted, "fail": ledger.StatusFailed, "release": ledger.StatusQueued}

// fencedWrite checks a fenced write the ledger accepted against the run as it stood
// just before the write applied: only the attempt holding the run then (running, at the
// write's attempt number and attempt ID) may write, except for a finishing write that
// the attempt which made it repeats (its answer was lost).
func (h *history) fencedWrite(op string, f ledger.Fence, before *ledger.Run) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if op == "fail" {
		h.failed[f.RunID] = true
	}
	by := before != nil && before.Attempt == f.Attempt && before.AttemptID == f.AttemptID
	if by && before.Status == ledger.StatusRunning {
		return
	}
	if to, ok := repeats[op]; ok && by && before.Status == to {
		return
	}
	state := "the run was absent"
	if before != nil {
		state = fmt.Sprintf("the run was %s at attempt %d", before.Status, before.Attempt)
		if before.Status == ledger.StatusRunning {
			state = fmt.Sprintf("attempt %d held the run", before.Attempt)
		}
	}
	h.violate("invariant 5: %s by attempt %d of run %s was accepted while %s: only the holder writes", op, f.Attempt, short(f.RunID), state)
}

// operated records an operator's action the ledger accepted, on the run as it stood
// just before: a cancel ends the run for good, and a cancel or a release of a running
// run takes it from its attempt, whose job may go on until its next renewal or write
// tells it (no second holder, as invariant 3 sees it; every write it makes is refused,
// as invariant 5 checks).
func (h *history) operated(op string, before *ledger.Run) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if before == nil {
		h.violate("invariant 6: an operator's %s was accepted on a run that did not exist", op)
		return
	}
	if op == "cancel" {
		h.cancelled[before.ID] = true
	}
	if (op == "retry" || op == "resolve") && before.Status != ledger.StatusFailed {
		h.violate("invariant 6: an operator's %s was accepted on run %s while it was %s: only a failed run is retried", op, short(before.ID), before.Status)
	}
	if (op == "cancel" || op == "operator release") && before.Status == ledger.StatusRunning {
		if h.revoked[before.ID] == nil {
			h.revoked[before.ID] = map[int64]bool{}
		}
		h.revoked[before.ID][before.Attempt] = true
	}
}

// resolved records an operator's resolution of an effect the ledger accepted, as it
// applied: done, the effect is never called again (as if its completion were
// recorded); not done, an effect never recorded done may be called once more under the
// same key (an at-most-once one too), and is then done at most once more.
func (h *history) resolved(runID, name string, done bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := ledger.EffectKey(runID, name)
	if h.done[key] {
		h.violate("invariant 2: effect %q of run %s was resolved as done=%v after its success was recorded", name, short(runID), done)
	}
	if done {
		h.done[key] = true
	} else {
		h.again[key]++
		if isStart(name) {
			h.startsAgain[runID]++
		}
	}
}

// startsNotDone returns how many times an operator resolved run runID's start as not
// done.
func (h *history) startsNotDone(runID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.startsAgain[runID]
}

// heldRuns returns the runs some job is running, sorted.
func (h *history) heldRuns() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id, hs := range h.holding {
		if len(hs) > 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// failedRuns returns the runs a holder failed, sorted (they may have been retried since).
func (h *history) failedRuns() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.failed))
}

// checkedRuns returns the runs whose end the final checks judge, sorted: those some
// caller got a 2xx for, and those an operator cancelled.
func (h *history) checkedRuns() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := slices.AppendSeq(slices.Collect(maps.Keys(h.accepted)), maps.Keys(h.cancelled))
	slices.Sort(ids)
	return slices.Compact(ids)
}

// wasAccepted reports whether a caller got a 2xx for run id, and wasCancelled whether an
// operator cancelled it.
func (h *history) wasAccepted(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.accepted[id]
	return ok
}

func (h *history) wasCancelled(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cancelled[id]
}

// batchReport checks what a batch that returned reports: every item done (by this
// attempt or an earlier one) or failed, and, when it skipped none, every item called by
// this attempt.
func (h *history) batchReport(runID string, rep *worker.BatchReport, called int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(batchItems)
	if rep.Total != n || rep.Done+rep.Failed != n || rep.Skipped != 0 && rep.Skipped != rep.Done || rep.Skipped == 0 && called != n {
		h.violate("invariant 2: the batch of run %s reports %d items, %d done (%d by an earlier attempt), %d failed, and called %d of %d",
			short(runID), rep.Total, rep.Done, rep.Skipped, rep.Failed, called, n)
	}
}

// unbounded records a call made with no deadline that hung: its caller waits forever.
func (h *history) unbounded(a *actor, what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violate("bounded waits: actor %d (%s) made its %s with no deadline: blackholed, it never returns", a.id, a.name, what)
}

// finished records that run id was completed or failed when a sweep applied.
func (h *history) finished(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.terminal[id] = true
}

// wasFinished reports whether run id was seen finished as a sweep applied.
func (h *history) wasFinished(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.terminal[id]
}

// acceptedRuns returns the runs some caller got a 2xx for, sorted.
func (h *history) acceptedRuns() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.accepted))
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
