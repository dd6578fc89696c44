package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// operationsTests check the operators' side: listing, history and the retry, cancel and
// release transitions.
var operationsTests = map[string]func(*testing.T, Harness){
	"UnsupportedRefuses":          testOpsUnsupported,
	"RetryFailedRun":              testRetryFailed,
	"RetryRefusesOtherStatuses":   testRetryWrongStatus,
	"CancelQueuedRun":             testCancelQueued,
	"CancelRunningFencesHolder":   testCancelRunning,
	"CancelRefusesFinishedRun":    testCancelWrongStatus,
	"ConcurrentCancelsOneWins":    testCancelConcurrent,
	"CancelRacesCompleteOneWins":  testCancelRacesComplete,
	"OperatorReleaseFreesRun":     testOperatorRelease,
	"OperatorActionFencedAttempt": testOperatorFenced,
	"OperatorActionNeedsReason":   testOperatorInvalid,
	"HistoryRecordsEveryAttempt":  testHistory,
	"HistoryIsBounded":            testHistoryBounded,
	"ListFiltersAndPaginates":     testList,
	"ListByUpdateTime":            testListUpdated,
	"ListRefusesBadParameters":    testListInvalid,
	"ListEffectsOfRun":            testListEffects,
	"ListRunIDsByPrefix":          testListRunIDs,
	"ListRunIDsRefusesBadPrefix":  testListRunIDsInvalid,
	"OperatorActionOnAbsentRun":   testOperatorAbsent,
}

// ops skips t unless the backend implements the operators' methods.
func ops(t *testing.T, h Harness) *fixture {
	t.Helper()
	if !h.Operations {
		t.Skip("the backend does not implement the operators' methods (Harness.Operations false; UnsupportedRefuses checks that it refuses them)")
	}
	return setup(t, h)
}

func operator(id, reason string) *ledger.OperatorParams {
	return &ledger.OperatorParams{RunID: id, Actor: "oncall@example.com", Reason: reason}
}

// failed returns a run failed by its first attempt, with one effect done.
func (f *fixture) failed(id string) *ledger.Run {
	f.t.Helper()
	f.claim(id)
	r := f.hold(id, longLease)
	if _, err := f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(r), Name: "charge"}); err != nil {
		f.t.Fatalf("BeginEffect: %v", err)
	}
	if _, err := f.l.CompleteEffect(f.ctx, &ledger.CompleteEffectParams{Fence: fence(r), Name: "charge"}); err != nil {
		f.t.Fatalf("CompleteEffect: %v", err)
	}
	out, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r), Error: "smtp: 554 rejected"})
	if err != nil {
		f.t.Fatalf("Fail: %v", err)
	}
	return out
}

func testOpsUnsupported(t *testing.T, h Harness) {
	if h.Operations {
		t.Skip("the backend implements the operators' methods")
	}
	f := setup(t, h)
	id := newRunID()
	f.claim(id)
	_, err := f.l.List(f.ctx, &ledger.ListParams{})
	wantErr(t, "List", err, ledger.ErrUnsupported)
	_, err = f.l.ListEffects(f.ctx, &ledger.ListEffectsParams{RunID: id})
	wantErr(t, "ListEffects", err, ledger.ErrUnsupported)
	_, err = f.l.ListRunIDs(f.ctx, &ledger.ListRunIDsParams{Prefix: id[:ledger.MinRunIDPrefix]})
	wantErr(t, "ListRunIDs", err, ledger.ErrUnsupported)
	_, err = f.l.Retry(f.ctx, operator(id, "r"))
	wantErr(t, "Retry", err, ledger.ErrUnsupported)
	_, err = f.l.Cancel(f.ctx, operator(id, "r"))
	wantErr(t, "Cancel", err, ledger.ErrUnsupported)
	_, err = f.l.OperatorRelease(f.ctx, operator(id, "r"))
	wantErr(t, "OperatorRelease", err, ledger.ErrUnsupported)
	_, err = f.l.ResolveEffect(f.ctx, &ledger.ResolveEffectParams{OperatorParams: *operator(id, "r"), Effect: "run"})
	wantErr(t, "ResolveEffect", err, ledger.ErrUnsupported)
	if got := f.get(id).Status; got != ledger.StatusQueued {
		t.Fatalf("after refused actions the run is %s, want queued", got)
	}
}

func testRetryFailed(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	failed := f.failed(id)
	r, err := f.l.Retry(f.ctx, operator(id, "the SMTP relay is back"))
	if err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if r.Status != ledger.StatusQueued || r.AttemptsMade != 0 || r.Attempt != failed.Attempt || !r.CompletedAt.IsZero() {
		t.Fatalf("after Retry: status %s, attempts made %d, attempt %d, completed at %v; want queued, 0, %d, zero",
			r.Status, r.AttemptsMade, r.Attempt, r.CompletedAt, failed.Attempt)
	}
	if r.LastError != failed.LastError {
		t.Fatalf("after Retry: last error %q, want the failure's %q kept", r.LastError, failed.LastError)
	}
	if !r.Deadline.After(r.UpdatedAt) {
		t.Fatalf("after Retry: pickup deadline %v not after the write %v", r.Deadline, r.UpdatedAt)
	}
	if got := f.get(id); got.Status != ledger.StatusQueued || got.AttemptsMade != 0 {
		t.Fatalf("Get after Retry: %s with %d attempts made, want queued with 0", got.Status, got.AttemptsMade)
	}
	next := f.hold(id, longLease)
	if next.Attempt != failed.Attempt+1 {
		t.Fatalf("the claim after Retry took attempt %d, want %d", next.Attempt, failed.Attempt+1)
	}
	res, err := f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(next), Name: "charge"})
	if err != nil {
		t.Fatalf("BeginEffect after Retry: %v", err)
	}
	if !res.Done {
		t.Fatal("after Retry, the effect the failed attempt did is not done: a retried run would redo it")
	}
}

func testRetryWrongStatus(t *testing.T, h Harness) {
	f := ops(t, h)
	queued := newRunID()
	f.claim(queued)
	_, err := f.l.Retry(f.ctx, operator(queued, "why not"))
	wantErr(t, "Retry(queued)", err, ledger.ErrWrongStatus)
	done := newRunID()
	f.claim(done)
	r := f.hold(done, longLease)
	if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)}); err != nil {
		t.Fatal(err)
	}
	_, err = f.l.Retry(f.ctx, operator(done, "again"))
	wantErr(t, "Retry(completed)", err, ledger.ErrWrongStatus)
	if got := f.get(done); got.Status != ledger.StatusCompleted {
		t.Fatalf("a refused Retry changed the run to %s", got.Status)
	}
}

func testCancelQueued(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	r, err := f.l.Cancel(f.ctx, operator(id, "must not go out"))
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if r.Status != ledger.StatusCancelled || !r.Deadline.IsZero() || r.CompletedAt.IsZero() {
		t.Fatalf("after Cancel: status %s, deadline %v, finished %v; want cancelled, zero, set", r.Status, r.Deadline, r.CompletedAt)
	}
	if res := f.acquire(id, longLease); res.Outcome != ledger.OutcomeFinished {
		t.Fatalf("Acquire of a cancelled run = %v, want terminal", res.Outcome)
	}
	if dup := f.claim(id); dup.Created || dup.Run.Status != ledger.StatusCancelled {
		t.Fatalf("a duplicate claim of a cancelled run: created %v, status %s; want the cancelled run", dup.Created, dup.Run.Status)
	}
	runs, err := f.l.ListRescue(f.ctx, &ledger.ListRescueParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range runs {
		if x.ID == id {
			t.Fatal("a cancelled run is listed for rescue")
		}
	}
}

func testCancelRunning(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	r := f.hold(id, longLease)
	if _, err := f.l.Cancel(f.ctx, operator(id, "stop it")); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	_, err := f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r), Lease: longLease})
	wantErr(t, "Renew after Cancel", err, ledger.ErrLeaseLost)
	wantErr(t, "Renew after Cancel", err, ledger.ErrCancelled)
	_, err = f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(r), Name: "late"})
	wantErr(t, "BeginEffect after Cancel", err, ledger.ErrLeaseLost)
	_, err = f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)})
	wantErr(t, "Complete after Cancel", err, ledger.ErrLeaseLost)
	_, err = f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: "x"})
	wantErr(t, "Release after Cancel", err, ledger.ErrLeaseLost)
	_, err = f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r), Error: "x"})
	wantErr(t, "Fail after Cancel", err, ledger.ErrLeaseLost)
	if got := f.get(id); got.Status != ledger.StatusCancelled {
		t.Fatalf("after the holder's writes the run is %s, want cancelled", got.Status)
	}
	if _, err := f.l.GetEffect(f.ctx, &ledger.GetEffectParams{RunID: id, Name: "late"}); !errIsNotFound(err) {
		t.Fatalf("an effect begun after Cancel landed: %v", err)
	}
}

func testCancelWrongStatus(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.failed(id)
	_, err := f.l.Cancel(f.ctx, operator(id, "too late"))
	wantErr(t, "Cancel(failed)", err, ledger.ErrWrongStatus)
	q := newRunID()
	f.claim(q)
	if _, err := f.l.Cancel(f.ctx, operator(q, "once")); err != nil {
		t.Fatal(err)
	}
	_, err = f.l.Cancel(f.ctx, operator(q, "twice"))
	wantErr(t, "Cancel(cancelled)", err, ledger.ErrWrongStatus)
	_, err = f.l.OperatorRelease(f.ctx, operator(q, "free it"))
	wantErr(t, "OperatorRelease(cancelled)", err, ledger.ErrWrongStatus)
}

func testCancelConcurrent(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	f.hold(id, longLease)
	_, errs := race(16, func(i int) (*ledger.Run, error) {
		return f.l.Cancel(f.ctx, operator(id, fmt.Sprintf("operator %d", i)))
	})
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, ledger.ErrWrongStatus), loserErr(err):
		default:
			t.Fatalf("a concurrent Cancel: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d of 16 concurrent cancels succeeded, want exactly 1", wins)
	}
	n := 0
	for _, e := range f.get(id).History {
		if e.Kind == ledger.EventCancelled {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the history records %d cancellations, want 1", n)
	}
}

func testCancelRacesComplete(t *testing.T, h Harness) {
	f := ops(t, h)
	for range 8 {
		id := newRunID()
		f.claim(id)
		r := f.hold(id, longLease)
		_, errs := race(2, func(i int) (*ledger.Run, error) {
			if i == 0 {
				return f.l.Cancel(f.ctx, operator(id, "race"))
			}
			return f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)})
		})
		got := f.get(id).Status
		switch {
		case errs[0] == nil && errs[1] == nil:
			t.Fatalf("both the cancel and the completion succeeded; the run is %s", got)
		case errs[0] == nil && got != ledger.StatusCancelled, errs[1] == nil && got != ledger.StatusCompleted:
			t.Fatalf("cancel: %v, complete: %v, but the run is %s", errs[0], errs[1], got)
		case errs[0] != nil && errs[1] != nil && !loserErr(errs[0]) && !loserErr(errs[1]):
			t.Fatalf("both failed: cancel %v, complete %v", errs[0], errs[1])
		}
	}
}

func testOperatorRelease(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	r := f.hold(id, longLease)
	got, err := f.l.OperatorRelease(f.ctx, operator(id, "worker vm deleted"))
	if err != nil {
		t.Fatalf("OperatorRelease: %v", err)
	}
	if got.Status != ledger.StatusQueued || got.AttemptsMade != 1 || !contains(got.LastError, "worker vm deleted") {
		t.Fatalf("after OperatorRelease: %s, %d attempts made, last error %q; want queued, 1, the reason", got.Status, got.AttemptsMade, got.LastError)
	}
	_, err = f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r), Lease: longLease})
	wantErr(t, "the old holder's Renew", err, ledger.ErrLeaseLost)
	next := f.hold(id, longLease)
	if next.Attempt != r.Attempt+1 {
		t.Fatalf("the next claim took attempt %d, want %d", next.Attempt, r.Attempt+1)
	}
	_, err = f.l.OperatorRelease(f.ctx, &ledger.OperatorParams{RunID: newRunID(), Actor: "a", Reason: "b"})
	wantErr(t, "OperatorRelease(absent)", err, ledger.ErrNotFound)
	q := newRunID()
	f.claim(q)
	_, err = f.l.OperatorRelease(f.ctx, operator(q, "not running"))
	wantErr(t, "OperatorRelease(queued)", err, ledger.ErrWrongStatus)
}

func testOperatorFenced(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	r := f.hold(id, longLease)
	p := operator(id, "stale page")
	p.Attempt = r.Attempt + 1
	_, err := f.l.Cancel(f.ctx, p)
	wantErr(t, "Cancel at another attempt", err, ledger.ErrConflict)
	p.Attempt = r.Attempt
	if _, err := f.l.Cancel(f.ctx, p); err != nil {
		t.Fatalf("Cancel at the run's attempt: %v", err)
	}
}

func testOperatorInvalid(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	for name, p := range map[string]*ledger.OperatorParams{
		"no reason":   {RunID: id, Actor: "a"},
		"no actor":    {RunID: id, Reason: "r"},
		"long reason": {RunID: id, Actor: "a", Reason: strings.Repeat("x", ledger.MaxReason+1)},
		"bad run ID":  {RunID: "nope", Actor: "a", Reason: "r"},
	} {
		_, err := f.l.Cancel(f.ctx, p)
		wantErr(t, "Cancel with "+name, err, ledger.ErrInvalid)
	}
	if got := f.get(id).Status; got != ledger.StatusQueued {
		t.Fatalf("refused actions changed the run to %s", got)
	}
}

func testOperatorAbsent(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	_, err := f.l.Retry(f.ctx, operator(id, "r"))
	wantErr(t, "Retry(absent)", err, ledger.ErrNotFound)
	_, err = f.l.Cancel(f.ctx, operator(id, "r"))
	wantErr(t, "Cancel(absent)", err, ledger.ErrNotFound)
	if _, err := f.l.Get(f.ctx, &ledger.GetParams{RunID: id}); !errIsNotFound(err) {
		t.Fatalf("an action on an absent run created it: %v", err)
	}
}

func kinds(h []ledger.Event) []ledger.EventKind {
	out := make([]ledger.EventKind, len(h))
	for i, e := range h {
		out[i] = e.Kind
	}
	return out
}

func testHistory(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	acquire := func(worker string) *ledger.Run {
		res, err := f.l.Acquire(f.ctx, &ledger.AcquireParams{Identity: identity(id), AttemptID: uuid.NewString(), Lease: longLease, Worker: worker})
		if err != nil || res.Outcome != ledger.OutcomeAcquired {
			t.Fatalf("Acquire: %v, %v", res, err)
		}
		return res.Run
	}
	r := acquire("host-a/1")
	if _, err := f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r), Lease: longLease}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: "503 from billing"}); err != nil {
		t.Fatal(err)
	}
	r = acquire("host-b/7")
	if _, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r), Error: "invoice template missing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Retry(f.ctx, operator(id, "template restored")); err != nil {
		t.Fatal(err)
	}
	r = acquire("host-a/2")
	if _, err := f.l.Cancel(f.ctx, operator(id, "duplicate invoices")); err != nil {
		t.Fatal(err)
	}
	hist := f.get(id).History
	want := []ledger.EventKind{ledger.EventClaimed, ledger.EventStarted, ledger.EventReleased, ledger.EventStarted, ledger.EventFailed,
		ledger.EventRetried, ledger.EventStarted, ledger.EventCancelled}
	if fmt.Sprint(kinds(hist)) != fmt.Sprint(want) {
		t.Fatalf("history = %v, want %v", kinds(hist), want)
	}
	if hist[1].Worker != "host-a/1" || hist[3].Worker != "host-b/7" || hist[1].Attempt != 1 || hist[3].Attempt != 2 {
		t.Fatalf("started events = %+v, %+v; want host-a/1 at attempt 1, host-b/7 at attempt 2", hist[1], hist[3])
	}
	if hist[2].Text != "503 from billing" || hist[4].Text != "invoice template missing" {
		t.Fatalf("outcomes' errors = %q, %q", hist[2].Text, hist[4].Text)
	}
	if e := hist[5]; e.Actor != "oncall@example.com" || e.Text != "template restored" {
		t.Fatalf("retry event = %+v, want the actor and the reason", e)
	}
	for i := 1; i < len(hist); i++ {
		if hist[i].At.Before(hist[i-1].At) {
			t.Fatalf("history out of order at %d: %v before %v", i, hist[i].At, hist[i-1].At)
		}
	}
	atts := ledger.Attempts(hist)
	if len(atts) != 3 || atts[0].Outcome != ledger.EventReleased || atts[1].Outcome != ledger.EventFailed ||
		atts[2].Outcome != ledger.EventCancelled || atts[2].Worker != "host-a/2" || atts[2].Attempt != r.Attempt {
		t.Fatalf("attempts = %+v", atts)
	}
}

func testHistoryBounded(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	long := strings.Repeat("é", ledger.MaxEventText) // 2 bytes a rune: cut on a rune boundary
	const cycles = ledger.MaxHistory/2 + 3
	for i := 0; i < cycles; i++ {
		r := f.hold(id, longLease)
		if _, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: long}); err != nil {
			t.Fatal(err)
		}
	}
	hist := f.get(id).History
	if len(hist) != ledger.MaxHistory {
		t.Fatalf("history holds %d events, want the latest %d", len(hist), ledger.MaxHistory)
	}
	// The claim's event and 2 a cycle (started, released): the oldest of those kept is the
	// started of the attempt that follows the dropped ones.
	first := int64(cycles - ledger.MaxHistory/2 + 1)
	for i, e := range hist {
		kind, attempt := ledger.EventStarted, first+int64(i/2)
		if i%2 == 1 {
			kind = ledger.EventReleased
		}
		if e.Kind != kind || e.Attempt != attempt {
			t.Fatalf("event %d of the history is %s of attempt %d, want %s of attempt %d: the latest %d in order",
				i, e.Kind, e.Attempt, kind, attempt, ledger.MaxHistory)
		}
	}
	last := hist[len(hist)-1]
	if last.Kind != ledger.EventReleased || len(last.Text) > ledger.MaxEventText || !strings.HasPrefix(long, last.Text) || !utf8Valid(last.Text) {
		t.Fatalf("the latest event is %s with %d bytes of text; want released, at most %d bytes, cut on a rune", last.Kind, len(last.Text), ledger.MaxEventText)
	}
	// A completion is the last event, and the history stays the latest MaxHistory: the
	// oldest cycle kept moves on by one.
	r := f.hold(id, longLease)
	done, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)})
	if err != nil {
		t.Fatal(err)
	}
	hist = f.get(id).History
	if len(hist) != ledger.MaxHistory {
		t.Fatalf("history of the completed run holds %d events, want the latest %d", len(hist), ledger.MaxHistory)
	}
	if e := hist[0]; e.Kind != ledger.EventStarted || e.Attempt != first+1 {
		t.Fatalf("the oldest event kept after the completion is %s of attempt %d, want started of attempt %d", e.Kind, e.Attempt, first+1)
	}
	end := hist[len(hist)-2:]
	if end[0].Kind != ledger.EventStarted || end[1].Kind != ledger.EventCompleted || end[0].Attempt != r.Attempt || end[1].Attempt != r.Attempt ||
		!end[1].At.Equal(done.CompletedAt) || end[1].Text != "" {
		t.Fatalf("the history ends with %+v, want started and completed of attempt %d, completed at %v", end, r.Attempt, done.CompletedAt)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// listAll pages through a listing and returns every run ID, checking the order.
func (f *fixture) listAll(p ledger.ListParams) []string {
	f.t.Helper()
	var ids []string
	var prev *ledger.Run
	for page := 0; ; page++ {
		if page > 100 {
			f.t.Fatal("the listing does not end")
		}
		res, err := f.l.List(f.ctx, &p)
		if err != nil {
			f.t.Fatalf("List(%+v): %v", p, err)
		}
		if p.PageSize > 0 && len(res.Runs) > p.PageSize {
			f.t.Fatalf("a page of %d runs, over the page size %d", len(res.Runs), p.PageSize)
		}
		for _, r := range res.Runs {
			if len(r.Payload) > 0 || len(r.History) > 0 {
				f.t.Fatalf("List returned run %s with its payload or history", r.ID)
			}
			if prev != nil && driver.ComparePosition(driver.Position{At: p.SortTime(r), RunID: r.ID}, driver.Position{At: p.SortTime(prev), RunID: prev.ID}) >= 0 {
				f.t.Fatalf("List is not newest first: %s (%v) after %s (%v)", r.ID, p.SortTime(r), prev.ID, p.SortTime(prev))
			}
			prev = r
			ids = append(ids, r.ID)
		}
		if res.Next == "" {
			return ids
		}
		p.Cursor = res.Next
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		if m[x] != 1 {
			return false
		}
		m[x]--
	}
	return true
}

func testList(t *testing.T, h Harness) {
	f := ops(t, h)
	job := "list-" + uuid.NewString()[:8]
	claim := func(job string) string {
		id := ledger.KeyedRunID("ledgertest", job, uuid.NewString())
		idn := identity(id)
		idn.Job = job
		if _, err := f.l.Claim(f.ctx, &ledger.ClaimParams{Identity: idn, AttemptID: uuid.NewString()}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	before := f.claim(newRunID()).Run.CreatedAt
	var queued, failed []string
	for range 7 {
		queued = append(queued, claim(job))
	}
	for range 4 {
		id := claim(job)
		r := f.hold(id, longLease)
		if _, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r), Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		failed = append(failed, id)
	}
	other := claim(job + "-other")
	all := append(append([]string{}, queued...), failed...)
	if got := f.listAll(ledger.ListParams{Job: job, PageSize: 3}); !sameSet(got, all) {
		t.Fatalf("List(job, 3 a page) = %d runs %v, want the %d runs of the job", len(got), got, len(all))
	}
	if got := f.listAll(ledger.ListParams{Job: job, Status: ledger.StatusFailed, PageSize: 2}); !sameSet(got, failed) {
		t.Fatalf("List(job, failed) = %v, want %v", got, failed)
	}
	if got := f.listAll(ledger.ListParams{Status: ledger.StatusFailed, Namespace: "ledgertest/ns", PageSize: 200}); !sameSet(got, failed) {
		t.Fatalf("List(failed, namespace) = %v, want %v", got, failed)
	}
	if got := f.listAll(ledger.ListParams{Namespace: "no-such-ns"}); len(got) != 0 {
		t.Fatalf("List(unknown namespace) = %v, want none", got)
	}
	// A one-RPC claim may estimate the server's time (Firestore): allow for it.
	got := f.listAll(ledger.ListParams{CreatedAfter: before.Add(-hintSlack), PageSize: 5})
	want := append(append([]string{}, all...), other)
	for _, id := range want {
		if !containsID(got, id) {
			t.Fatalf("List(created after the first probe) misses run %s", id)
		}
	}
	if got := f.listAll(ledger.ListParams{CreatedBefore: before.Add(-time.Hour)}); len(got) != 0 {
		t.Fatalf("List(created an hour before) = %v, want none", got)
	}
}

func containsID(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func testListUpdated(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.claim(id)
	mark := f.claim(newRunID()).Run.UpdatedAt
	f.waitPast(mark)
	r := f.hold(id, longLease)
	got := f.listAll(ledger.ListParams{UpdatedAfter: r.UpdatedAt, Status: ledger.StatusRunning})
	if !containsID(got, id) {
		t.Fatalf("List(updated since its claim, running) = %v, misses %s", got, id)
	}
	got = f.listAll(ledger.ListParams{UpdatedBefore: r.UpdatedAt, Status: ledger.StatusRunning})
	if containsID(got, id) {
		t.Fatalf("List(updated before its claim) = %v, holds %s", got, id)
	}
}

func testListInvalid(t *testing.T, h Harness) {
	f := ops(t, h)
	for name, p := range map[string]*ledger.ListParams{
		"bad status":      {Status: "lost"},
		"huge page":       {PageSize: ledger.MaxPageSize + 1},
		"bad cursor":      {Cursor: "not-a-cursor"},
		"both time kinds": {CreatedAfter: time.Now(), UpdatedAfter: time.Now()},
	} {
		_, err := f.l.List(f.ctx, p)
		wantErr(t, "List with "+name, err, ledger.ErrInvalid)
	}
}

func testListEffects(t *testing.T, h Harness) {
	f := ops(t, h)
	id := newRunID()
	f.failed(id)
	other := newRunID()
	f.claim(other)
	r := f.hold(other, longLease)
	if _, err := f.l.BeginEffect(f.ctx, &ledger.BeginEffectParams{Fence: fence(r), Name: "other"}); err != nil {
		t.Fatal(err)
	}
	effs, err := f.l.ListEffects(f.ctx, &ledger.ListEffectsParams{RunID: id})
	if err != nil {
		t.Fatalf("ListEffects: %v", err)
	}
	if len(effs) != 1 || effs[0].Name != "charge" || effs[0].Status != ledger.EffectDone || effs[0].Key != ledger.EffectKey(id, "charge") {
		t.Fatalf("ListEffects = %+v, want the one done effect charge", effs)
	}
	none, err := f.l.ListEffects(f.ctx, &ledger.ListEffectsParams{RunID: newRunID()})
	if err != nil || len(none) != 0 {
		t.Fatalf("ListEffects(absent run) = %v, %v; want none", none, err)
	}
}
