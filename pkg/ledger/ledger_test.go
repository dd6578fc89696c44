package ledger_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

func TestOpenErrorsNameTheURLAndTheSchemes(t *testing.T) {
	var mux ledger.URLMux
	mux.Register("memx", ledger.OpenerFunc(func(context.Context, *url.URL) (ledger.Driver, error) { return nil, nil }))
	mux.Register("sqlx", ledger.OpenerFunc(func(context.Context, *url.URL) (ledger.Driver, error) { return nil, nil }))
	for _, raw := range []string{"nosuch://x", "no-scheme-at-all", "sqlx://%zz"} {
		_, err := mux.Open(t.Context(), raw)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", raw)
		}
		for _, want := range []string{raw, "memx, sqlx"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%q) error %q does not name %q", raw, err, want)
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a scheme twice did not panic")
		}
	}()
	mux.Register("memx", ledger.OpenerFunc(func(context.Context, *url.URL) (ledger.Driver, error) { return nil, nil }))
}

func TestHashIsUnambiguous(t *testing.T) {
	if ledger.Hash("ab", "c") == ledger.Hash("a", "bc") || ledger.Hash("a", "") == ledger.Hash("", "a") {
		t.Fatal("length-prefixed parts collide")
	}
	if !ledger.ValidRunID(ledger.Hash("x")) || ledger.ValidRunID("ABC") || ledger.ValidRunID(strings.Repeat("g", 64)) {
		t.Fatal("ValidRunID disagrees with Hash")
	}
}

func TestScheduledRunIDIsTheInstantInUTC(t *testing.T) {
	pacific := time.FixedZone("PDT", -7*3600)
	a := ledger.ScheduledRunID("ns", "job", "sched", time.Date(2026, 10, 16, 5, 0, 0, 0, pacific))
	b := ledger.ScheduledRunID("ns", "job", "sched", time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC))
	if a != b {
		t.Fatal("one instant in two zones gives two run IDs")
	}
	if a == ledger.ScheduledRunID("other-ns", "job", "sched", time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC)) {
		t.Fatal("the namespace is not part of the run ID")
	}
	if ledger.KeyedRunID("ns", "job", "k") == ledger.KeyedRunID("ns", "job2", "k") {
		t.Fatal("the job is not part of the run ID")
	}
}
