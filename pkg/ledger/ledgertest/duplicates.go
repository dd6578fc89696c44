package ledgertest

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
)

// Duplicates is what a ledger backend gives DuplicateVsNew: a fresh ledger and its own
// ways to do what a claim does.
type Duplicates struct {
	// Ledger is the backend's driver under test, fresh for the benchmark; its calls go
	// through a *ledger.Ledger, as a program's do.
	Ledger ledger.Driver
	// Identity returns the identity of a new run, a new run ID at each call.
	Identity func() ledger.Identity
	// Raw, when not nil, writes a new run's record without the ledger (the least a
	// claim can cost on this backend), reported as "raw" and with the ratio new/raw.
	Raw func(ctx context.Context) error
	// Others, when not nil, returns the backend's other ways to answer a duplicate claim
	// of hot (a former path, kept to compare), each reported with its ratio NAME/new.
	Others func(hot ledger.Identity) []benchloop.Kind
}

// DuplicateVsNew is the benchmark of a duplicate claim against a new one that every
// ledger backend runs (its BenchmarkDuplicateVsNew). For 8 and 32 goroutines, on the
// ledger open returns, it claims one hot run (queued), then alternates, in rounds of
// round operations (benchloop.Interleaved), the raw write, the claim of a new run ("new"), a
// duplicate claim of the hot run ("dup") and the backend's other kinds, and reports each
// rate and the ratios new/raw, dup/new and NAME/new for the others.
func DuplicateVsNew(b *testing.B, round int, open func(b *testing.B) Duplicates) {
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			d := open(b)
			led := ledger.New(d.Ledger, nil)
			claim := func(ctx context.Context, id ledger.Identity) error {
				_, err := led.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: uuid.NewString()})
				return err
			}
			hot := d.Identity()
			if err := claim(b.Context(), hot); err != nil {
				b.Fatal(err)
			}
			var kinds []benchloop.Kind
			if d.Raw != nil {
				kinds = append(kinds, benchloop.Kind{Name: "raw", Op: d.Raw})
			}
			kinds = append(kinds,
				benchloop.Kind{Name: "new", Op: func(ctx context.Context) error { return claim(ctx, d.Identity()) }},
				benchloop.Kind{Name: "dup", Op: func(ctx context.Context) error { return claim(ctx, hot) }})
			var others []benchloop.Kind
			if d.Others != nil {
				others = d.Others(hot)
			}
			rates := benchloop.Interleaved(b, n, round, append(kinds, others...))
			if d.Raw != nil {
				b.ReportMetric(rates["new"]/rates["raw"], "new/raw")
			}
			b.ReportMetric(rates["dup"]/rates["new"], "dup/new")
			for _, k := range others {
				b.ReportMetric(rates[k.Name]/rates["new"], k.Name+"/new")
			}
		})
	}
}
