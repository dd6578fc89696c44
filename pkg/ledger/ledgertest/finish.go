package ledgertest

import (
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

var finishTests = map[string]func(*testing.T, Harness){
	"CompleteStoresTheResult": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		result := []byte(`{"sent": 3, "ids": ["b", "a"]}`)
		done, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r), Result: result})
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []*ledger.Run{done, f.get(r.ID)} {
			if got.Status != ledger.StatusCompleted || string(got.Result) != string(result) {
				t.Fatalf("completed run = %s with result %q; want completed with %q, byte for byte", got.Status, got.Result, result)
			}
		}
		again, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r), Result: []byte(`"other"`)})
		if err != nil || string(again.Result) != string(result) {
			t.Fatalf("a repeated Complete by the same attempt = %v, %v; want the first result kept", again, err)
		}
		if got := f.get(f.hold(newRunID(), longLease).ID); got.Result != nil {
			t.Fatalf("a running run's result = %q; want none", got.Result)
		}
	},
	"ProgressIsWrittenByRenewAndEveryFinish": func(t *testing.T, h Harness) {
		f := setup(t, h)
		want := func(what, id, progress string) {
			t.Helper()
			if got := f.get(id); string(got.Progress) != progress {
				t.Fatalf("after %s the run's progress = %q; want %q", what, got.Progress, progress)
			}
		}
		r := f.hold(newRunID(), longLease)
		want("the claim", r.ID, "")
		if _, err := f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r), Lease: longLease, Progress: []byte(`{"done":1,"total":9}`)}); err != nil {
			t.Fatal(err)
		}
		want("a renewal with progress", r.ID, `{"done":1,"total":9}`)
		if _, err := f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r), Lease: longLease}); err != nil {
			t.Fatal(err)
		}
		want("a renewal without", r.ID, `{"done":1,"total":9}`)
		_, err := f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r), Lease: longLease, Progress: []byte(`{"done":`)})
		wantErr(t, "Renew with progress that is not JSON", err, ledger.ErrInvalid)
		_, err = f.l.Renew(f.ctx, &ledger.RenewParams{Fence: fence(r), Lease: longLease, Progress: []byte(`"` + strings.Repeat("x", ledger.MaxProgress) + `"`)})
		wantErr(t, "Renew with progress over the limit", err, ledger.ErrInvalid)
		want("refused renewals", r.ID, `{"done":1,"total":9}`)
		if _, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: "item 3: 503", Progress: []byte(`{"done":2,"total":9}`)}); err != nil {
			t.Fatal(err)
		}
		want("a release with progress", r.ID, `{"done":2,"total":9}`)
		r2 := f.hold(r.ID, longLease)
		want("the next claim", r.ID, `{"done":2,"total":9}`)
		if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r2), Progress: []byte(`{"done":9,"total":9}`)}); err != nil {
			t.Fatal(err)
		}
		want("a completion with progress", r.ID, `{"done":9,"total":9}`)
		r3 := f.hold(newRunID(), longLease)
		if _, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r3), Error: "item 1: 400", Progress: []byte(`{"failed":1}`)}); err != nil {
			t.Fatal(err)
		}
		want("a failure with progress", r3.ID, `{"failed":1}`)
	},
	"ResultAtTheLimitIsStored": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		result := []byte(`"` + strings.Repeat("x", ledger.MaxResult-2) + `"`)
		if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r), Result: result}); err != nil {
			t.Fatalf("Complete with a %d-byte result: %v", len(result), err)
		}
		if got := f.get(r.ID); string(got.Result) != string(result) {
			t.Fatalf("stored result is %d bytes; want the %d written", len(got.Result), len(result))
		}
	},
	"ResultOverTheLimitOrNotJSONIsRefused": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		for name, bad := range map[string][]byte{
			"over the limit": []byte(`"` + strings.Repeat("x", ledger.MaxResult-1) + `"`),
			"not JSON":       []byte(`{"sent":`),
		} {
			_, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r), Result: bad})
			wantErr(t, "Complete with a result "+name, err, ledger.ErrInvalid)
			if got := f.get(r.ID); got.Status != ledger.StatusRunning || got.Result != nil {
				t.Fatalf("after a refused result (%s) the run is %s with result %q; want it running, untouched", name, got.Status, got.Result)
			}
		}
		if done, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)}); err != nil || done.Result != nil {
			t.Fatalf("Complete without a result after the refusals = %v, %v; want completed, no result", done, err)
		}
	},
	"Complete": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		done, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r), Retention: 72 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []*ledger.Run{done, f.get(r.ID)} {
			if got.Status != ledger.StatusCompleted || got.Attempt != 1 || got.AttemptsMade != 1 || !got.Deadline.IsZero() {
				t.Fatalf("completed run = %s attempt %d, made %d, deadline %v; want completed, 1, 1, none", got.Status, got.Attempt, got.AttemptsMade, got.Deadline)
			}
			exact(t, "CompletedAt", got.CompletedAt, got.UpdatedAt)
			approx(t, "ExpireAt", got.ExpireAt, got.CompletedAt.Add(72*time.Hour))
		}
		again, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)})
		if err != nil || again.Status != ledger.StatusCompleted || !again.CompletedAt.Equal(done.CompletedAt) {
			t.Fatalf("a repeated Complete by the same attempt = %v, %v; want the completed run, unchanged", again, err)
		}
	},
	"Release": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		rel, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: "downstream 503", PickupTimeout: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []*ledger.Run{rel, f.get(r.ID)} {
			if got.Status != ledger.StatusQueued || got.Attempt != 1 || got.AttemptsMade != 1 || got.LastError != "downstream 503" || !got.NotBefore.IsZero() {
				t.Fatalf("released run = %+v; want queued, attempt 1, made 1, error kept, no NotBefore", got)
			}
			approx(t, "pickup deadline", got.Deadline, got.UpdatedAt.Add(2*time.Minute))
		}
		again, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r), Error: "again"})
		if err != nil || again.AttemptsMade != 1 || again.LastError != "downstream 503" {
			t.Fatalf("a repeated Release by the same attempt = %+v, %v; want the released run, unchanged", again, err)
		}
		r2 := f.hold(r.ID, longLease)
		if r2.Attempt != 2 || r2.AttemptsMade != 1 || r2.LastError != "downstream 503" {
			t.Fatalf("claim after release = attempt %d, made %d, error %q; want 2, 1, the error kept", r2.Attempt, r2.AttemptsMade, r2.LastError)
		}
		if _, err := f.l.Release(f.ctx, &ledger.ReleaseParams{Fence: fence(r2), Error: "again"}); err != nil {
			t.Fatal(err)
		}
		if got := f.get(r.ID); got.AttemptsMade != 2 || got.LastError != "again" {
			t.Fatalf("second release = made %d, error %q; want 2, %q", got.AttemptsMade, got.LastError, "again")
		}
	},
	"Fail": func(t *testing.T, h Harness) {
		f := setup(t, h)
		r := f.hold(newRunID(), longLease)
		failed, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r), Error: "400 bad request"})
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []*ledger.Run{failed, f.get(r.ID)} {
			if got.Status != ledger.StatusFailed || got.LastError != "400 bad request" || got.AttemptsMade != 1 || !got.Deadline.IsZero() {
				t.Fatalf("failed run = %+v; want failed, the error kept, made 1, no deadline", got)
			}
			exact(t, "CompletedAt", got.CompletedAt, got.UpdatedAt)
		}
		if again, err := f.l.Fail(f.ctx, &ledger.FailParams{Fence: fence(r), Error: "other"}); err != nil || again.LastError != "400 bad request" {
			t.Fatalf("a repeated Fail by the same attempt = %v, %v; want the failed run, unchanged", again, err)
		}
		_, err = f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(r)})
		wantErr(t, "Complete of a failed run by its own attempt", err, ledger.ErrLeaseLost)
	},
	"FinishAfterTakeoverKeepsTheNewHolder": func(t *testing.T, h Harness) {
		f := setup(t, h)
		id := newRunID()
		old := f.hold(id, shortLease)
		f.waitPast(old.Deadline)
		cur := f.hold(id, longLease)
		_, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(old)})
		wantErr(t, "Complete by the fenced-out attempt", err, ledger.ErrLeaseLost)
		if _, err := f.l.Complete(f.ctx, &ledger.CompleteParams{Fence: fence(cur)}); err != nil {
			t.Fatalf("Complete by the current attempt: %v", err)
		}
		if got := f.get(id); got.Status != ledger.StatusCompleted || got.Attempt != 2 {
			t.Fatalf("run = %s at attempt %d, want completed at 2", got.Status, got.Attempt)
		}
	},
}
