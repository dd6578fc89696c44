package ledgertest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// randomHex returns n random lower-case hex digits.
func randomHex(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(strings.ReplaceAll(uuid.NewString(), "-", ""))
	}
	return b.String()[:n]
}

// testListRunIDs: ListRunIDs finds the runs whose ID starts with a prefix, and only
// them, ascending and bounded, whether a claim or a worker created them, and no longer
// once swept; LookupRunID names the one run of a prefix, or says it is ambiguous or
// absent.
func testListRunIDs(t *testing.T, h Harness) {
	f := ops(t, h)
	// p is 12 random digits: no other run of the ledger starts with it.
	p := randomHex(12)
	a, b, c := p+"0"+randomHex(51), p+"8"+randomHex(51), p+"f"+randomHex(51)
	// d shares p's first 11 digits, not its 12th.
	last := "0"
	if p[11] == '0' {
		last = "1"
	}
	d := p[:11] + last + randomHex(52)
	for _, id := range []string{c, a, d} {
		f.claim(id)
	}
	// b is created by a worker's claim, as a run whose message outran its ingress claim.
	if res := f.acquire(b, longLease); res.Outcome != ledger.OutcomeAcquired {
		t.Fatalf("Acquire(%s) created nothing: %v", b, res.Outcome)
	}
	list := func(prefix string, limit int) []string {
		t.Helper()
		ids, err := f.l.ListRunIDs(f.ctx, &ledger.ListRunIDsParams{Prefix: prefix, Limit: limit})
		if err != nil {
			t.Fatalf("ListRunIDs(%s, limit %d): %v", prefix, limit, err)
		}
		return ids
	}
	for _, c := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{p, 0, []string{a, b, c}},
		{p, 2, []string{a, b}},
		{p + "8", 0, []string{b}},
		{p + "9", 0, nil},
		{p[:11], 0, sorted(a, b, c, d)},
		{a, 0, []string{a}},
		{a[:63], 0, []string{a}},
	} {
		if got := list(c.prefix, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("ListRunIDs(%s, limit %d) = %v, want %v", c.prefix, c.limit, got, c.want)
		}
	}
	// The shortest prefix: other runs of the ledger may start with it too.
	if got := list(p[:ledger.MinRunIDPrefix], ledger.MaxPageSize); !slices.Contains(got, a) || !slices.IsSorted(got) {
		t.Errorf("ListRunIDs(%s) = %v; want %s among them, ascending", p[:ledger.MinRunIDPrefix], got, a)
	}

	for _, c := range []struct {
		in   string
		want string
		err  error
	}{
		{p + "8", b, nil},
		{a, a, nil},
		{p + "9", "", ledger.ErrNotFound},
		{p, "", ledger.ErrAmbiguous},
		{p[:5], "", ledger.ErrInvalid},
	} {
		got, err := ledger.LookupRunID(f.ctx, f.l, c.in)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("LookupRunID(%s) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
	_, err := ledger.LookupRunID(f.ctx, f.l, p)
	var amb *ledger.AmbiguousError
	if !errors.As(err, &amb) || !slices.Equal(amb.Candidates, []string{a, b, c}) || amb.More || !strings.Contains(err.Error(), b) {
		t.Errorf("LookupRunID(%s) = %v; want an AmbiguousError listing %s, %s and %s", p, err, a, b, c)
	}

	// A swept run is not found any more.
	gone := p + "4" + randomHex(51)
	g := f.claimFor(gone, time.Millisecond, time.Millisecond)
	if got := list(p, 0); !slices.Equal(got, []string{a, gone, b, c}) {
		t.Fatalf("ListRunIDs(%s) = %v, want %v", p, got, []string{a, gone, b, c})
	}
	f.waitPast(g.ExpireAt)
	if _, err := f.l.Sweep(f.ctx, &ledger.SweepParams{}); err != nil {
		t.Fatal(err)
	}
	if got := list(p, 0); !slices.Equal(got, []string{a, b, c}) {
		t.Errorf("after the sweep ListRunIDs(%s) = %v, want %v", p, got, []string{a, b, c})
	}
}

func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// testListRunIDsInvalid: a prefix that is not lower-case hex, too short or too long, and
// a limit out of bounds are refused with ErrInvalid.
func testListRunIDsInvalid(t *testing.T, h Harness) {
	f := ops(t, h)
	for _, p := range []ledger.ListRunIDsParams{
		{Prefix: ""},
		{Prefix: "abcde"},
		{Prefix: "ABCDEF"},
		{Prefix: "abcdeg"},
		{Prefix: "abc%ef"},
		{Prefix: strings.Repeat("a", 65)},
		{Prefix: "abcdef", Limit: -1},
		{Prefix: "abcdef", Limit: ledger.MaxPageSize + 1},
	} {
		_, err := f.l.ListRunIDs(f.ctx, &p)
		if !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("ListRunIDs(%+v) = %v, want ErrInvalid", p, err)
		}
	}
}
