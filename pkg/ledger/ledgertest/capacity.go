package ledgertest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// Ops is what one ledger operation costs its backend, as docs/capacity.md counts it:
// Writes are the writes the backend's limits count (a write transaction or command on
// SQLite, PostgreSQL and Redis; a document written on Firestore; a row mutated on
// Spanner), Reads the reads made apart from them (a statement, command, query or
// document read that changes nothing).
type Ops struct{ Writes, Reads int }

// String writes o as the page's cells do: "1 W", "1 R", "1 W + 1 R", "0".
func (o Ops) String() string {
	var parts []string
	if o.Writes > 0 {
		parts = append(parts, fmt.Sprintf("%d W", o.Writes))
	}
	if o.Reads > 0 {
		parts = append(parts, fmt.Sprintf("%d R", o.Reads))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " + ")
}

// Add returns the sum of o and p.
func (o Ops) Add(p Ops) Ops { return Ops{o.Writes + p.Writes, o.Reads + p.Reads} }

// RunOps names the operations of a run's life that docs/capacity.md counts, in the
// order MeasureRunOps makes them and of the page's columns.
var RunOps = []string{"new", "duplicate", "worker start", "renewal", "effect", "finish"}

// runTotal is the page's last column: a run with one effect and no renewal, as the
// ingress and one worker make it (a new claim, the worker's claim, one effect, the
// completion); duplicates and renewals come on top, each at its own column's cost.
const runTotal = "a run (one effect)"

// MeasureRunOps makes, on l, every operation of a run's life once, in a run's order: the
// ingress's claim of a new run ("new"), a duplicate of it ("duplicate"), the worker's
// claim of the queued run ("worker start"), one renewal, one effect (BeginEffect and
// CompleteEffect), and the completion ("finish"). It calls take after each, which
// returns what the backend counted since the last call. It makes them twice, on two
// runs, and returns the second's: the first prepares what a warm process has prepared
// (statements, scripts, a ledger's knowledge of the runs it wrote).
func MeasureRunOps(t *testing.T, d ledger.Driver, take func() Ops) map[string]Ops {
	t.Helper()
	l := ledger.New(d, nil)
	var got map[string]Ops
	for range 2 {
		got = measureRun(t, l, take)
	}
	return got
}

func measureRun(t *testing.T, l *ledger.Ledger, take func() Ops) map[string]Ops {
	t.Helper()
	ctx := t.Context()
	got := map[string]Ops{}
	step := func(name string, op func() error) {
		t.Helper()
		take()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got[name] = take()
	}
	key := uuid.NewString()
	ident := ledger.Identity{RunID: ledger.KeyedRunID("capacity", "job", key), Namespace: "capacity", Job: "job", Key: key,
		PayloadHash: ledger.PayloadHash([]byte("{}")), Payload: []byte("{}")}
	step("new", func() error {
		res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
		if err == nil && !res.Created {
			err = errors.New("the claim of a new run did not create it")
		}
		return err
	})
	step("duplicate", func() error {
		res, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ident, AttemptID: uuid.NewString()})
		if err == nil && res.Created {
			err = errors.New("a duplicate claim created the run again")
		}
		return err
	})
	var f ledger.Fence
	step("worker start", func() error {
		res, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ident, AttemptID: uuid.NewString(), Lease: time.Minute})
		if err == nil && res.Outcome != ledger.OutcomeAcquired {
			err = fmt.Errorf("outcome %v, want acquired", res.Outcome)
		}
		if err == nil {
			f = ledger.Fence{RunID: ident.RunID, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
		}
		return err
	})
	step("renewal", func() error {
		_, err := l.Renew(ctx, &ledger.RenewParams{Fence: f, Lease: time.Minute})
		return err
	})
	step("effect", func() error {
		if _, err := l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: f, Name: "charge"}); err != nil {
			return err
		}
		_, err := l.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: f, Name: "charge"})
		return err
	})
	step("finish", func() error {
		_, err := l.Complete(ctx, &ledger.CompleteParams{Fence: f})
		return err
	})
	return got
}

// capacityPage is the page whose table CheckCapacityTable reads, from the module's root.
const capacityPage = "docs/capacity.md"

// CheckCapacityTable compares got, a backend's counts from MeasureRunOps, with the row of
// backend in the operations table of docs/capacity.md (the table whose header starts
// "| backend | new |"), the run's total included, and fails the test on any difference,
// printing the row as measured so that the page can be put right. The page's figures
// are thereby the tests' and cannot drift from the code.
func CheckCapacityTable(t *testing.T, backend string, got map[string]Ops) {
	t.Helper()
	measured := capacityRow(backend, got)
	page, err := findUp(capacityPage)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readCapacityTable(page)
	if err != nil {
		t.Fatalf("%s: %v", page, err)
	}
	row, ok := rows[backend]
	if !ok {
		t.Fatalf("%s has no row for %s in its operations table; as measured it is:\n%s", page, backend, measured)
	}
	if row != measured {
		t.Fatalf("%s's row for %s is not what the backend does; the page says\n%s\nmeasured\n%s", page, backend, row, measured)
	}
}

// capacityRow writes backend's row of the table from its counts.
func capacityRow(backend string, got map[string]Ops) string {
	cells := []string{backend}
	for _, op := range RunOps {
		cells = append(cells, got[op].String())
	}
	total := got["new"].Add(got["worker start"]).Add(got["effect"]).Add(got["finish"])
	cells = append(cells, total.String())
	return "| " + strings.Join(cells, " | ") + " |"
}

// readCapacityTable returns the rows of the page's operations table by backend, each
// normalised to single spaces between cells.
func readCapacityTable(path string) (map[string]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	header := "| backend | " + strings.Join(RunOps, " | ") + " | " + runTotal + " |"
	rows := map[string]string{}
	in := false
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == header:
			in = true
		case in && strings.HasPrefix(line, "| ---"):
		case in && strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			rows[cells[0]] = "| " + strings.Join(cells, " | ") + " |"
		case in:
			return rows, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !in {
		return nil, fmt.Errorf("no table whose header is %s", strconv.Quote(header))
	}
	return rows, nil
}

// findUp returns the path of rel in the working directory or the nearest directory
// above it that has it.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s is in no directory above the working directory", rel)
		}
		dir = parent
	}
}
