package sim_test

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/sim"
)

var (
	seed      = flag.Uint64("seed", 0, "run only the schedule of this seed (with -backend)")
	schedules = flag.Int("schedules", 0, "schedules per backend (make simulate SCHEDULES=N); 0: what CI runs (ciSchedules)")
	backend   = flag.String("backend", "", "run only this backend (memory, sqlite, postgres, redis, spanner or firestore)")
	first     = flag.Uint64("first", 1, "the seed of the first schedule")
)

// ciSchedules are the schedules CI runs per backend (without -schedules), chosen so
// that the simulation takes about a minute under -race on 2 cores (README, "Fault
// exploration"); SQLite's schedules cost several times memory's, and Spanner's (a
// fresh emulator database each, every call a transaction) about twenty times.
var ciSchedules = map[string]int{"memory": 400, "sqlite": 100, "postgres": 100, "redis": 150, "spanner": 10, "firestore": 20}

func backends() []string {
	if *backend != "" {
		return []string{*backend}
	}
	return sim.Backends
}

// TestSimulation runs -schedules random schedules of faults on every backend and fails
// on the first schedule whose history breaks a guarantee, printing its seed.
func TestSimulation(t *testing.T) {
	for _, b := range backends() {
		t.Run(b, func(t *testing.T) {
			needServer(t, b)
			if *seed != 0 {
				runOne(t, b, "", *seed)
				return
			}
			start := time.Now()
			count := *schedules
			if count == 0 {
				count = ciSchedules[b]
			}
			n, failed := explore(t, b, "", *first, count)
			if failed != 0 {
				t.Fatalf("schedule %d failed (see above): reproduce with go test ./internal/sim -run 'TestSimulation/%s' -seed %d", failed, b, failed)
			}
			t.Logf("%s: %d schedules passed in %s", b, n, time.Since(start).Round(time.Millisecond))
		})
	}
}

func runOne(t *testing.T, b, mutant string, s uint64) {
	res, err := sim.Run(t.Context(), sim.Options{Seed: s, Backend: b, Dir: t.TempDir(), Mutant: mutant})
	if err != nil {
		t.Fatalf("seed %d: %v", s, err)
	}
	if len(res.Violations) > 0 {
		t.Fatalf("seed %d on %s broke the guarantees:\n  %s\ntrace:\n  %s", s, b,
			strings.Join(res.Violations, "\n  "), strings.Join(res.Trace, "\n  "))
	}
	t.Logf("seed %d on %s: %d actors, %d decisions, no violation", s, b, res.Actors, len(res.Trace))
}

// explore runs n schedules from seed first on GOMAXPROCS goroutines and returns how
// many ran and the lowest failing seed (0 when none failed); it reports the failure.
func explore(t *testing.T, b, mutant string, first uint64, n int) (int, uint64) {
	var (
		next   atomic.Uint64
		ran    atomic.Int64
		mu     sync.Mutex
		failed uint64
		report string
		wg     sync.WaitGroup
	)
	next.Store(first)
	dir := t.TempDir()
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				s := next.Add(1) - 1
				if s >= first+uint64(n) {
					return
				}
				mu.Lock()
				stop := failed != 0 && s > failed
				mu.Unlock()
				if stop {
					return
				}
				res, err := sim.Run(t.Context(), sim.Options{Seed: s, Backend: b, Dir: dir, Mutant: mutant})
				ran.Add(1)
				var msg string
				switch {
				case err != nil:
					msg = fmt.Sprintf("seed %d: %v", s, err)
				case len(res.Violations) > 0:
					msg = fmt.Sprintf("seed %d on %s broke the guarantees:\n  %s\nlast decisions:\n  %s", s, b,
						strings.Join(res.Violations, "\n  "), strings.Join(res.Trace[max(0, len(res.Trace)-80):], "\n  "))
				default:
					continue
				}
				mu.Lock()
				if failed == 0 || s < failed {
					failed, report = s, msg
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != 0 && mutant == "" {
		t.Error(report)
	}
	return int(ran.Load()), failed
}

// needServer skips a server backend whose server is not configured, except under CI,
// where it fails.
func needServer(t *testing.T, b string) {
	env, ok := sim.ServerEnv[b]
	if !ok || os.Getenv(env) != "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not set under CI: scripts/test.sh starts the %s server the simulation needs", env, b)
	}
	t.Skipf("%s is not set: start the servers with scripts/services.sh", env)
}

// TestMutantsAreCaught proves the checks can fail: each mutant, a deliberately broken
// ledger, must break a guarantee within the budget of schedules, and the violation
// must name the guarantee it breaks (one of them, for a hole that shows as either).
func TestMutantsAreCaught(t *testing.T) {
	want := map[string]string{
		// A deleted run is lost, or a cancelled one comes back.
		"unclaim":                  "invariant 1|invariant 6",
		"any-payload":              "invariant 4",
		"steal-leases":             "invariant 3",
		"forget-effects":           "invariant 2",
		"two-claim-winners":        "invariant 4",
		"expiry-ignores-deadlines": "invariant 1",
		"sweeps-live-effects":      "invariant 2",
		"old-messages-dropped":     "invariant 1",
		"unfenced-finish":          "invariant 5",
		"lying-cancel":             "invariant 6",
		"forget-batch-groups":      "invariant 2: batch item",
		"resolve-only-retries":     "invariant 2",
		sim.UnboundedCalls:         "bounded waits",
		sim.IgnoresMaxRunTime:      "invariant 1",
		// Two executions of one run's start.
		sim.LostAnswerRefused: "invariant 7",
	}
	for _, name := range sim.MutantNames() {
		t.Run(name, func(t *testing.T) {
			_, s := explore(t, "memory", name, 1, mutantBudget)
			if s == 0 {
				t.Fatalf("the simulation did not catch mutant %s in %d schedules", name, mutantBudget)
			}
			res, err := sim.Run(t.Context(), sim.Options{Seed: s, Backend: "memory", Mutant: name})
			if err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(res.Violations, "\n")
			if !slices.ContainsFunc(strings.Split(want[name], "|"), func(w string) bool { return strings.Contains(joined, w) }) {
				t.Fatalf("mutant %s at seed %d broke other guarantees than %s:\n%s", name, s, want[name], joined)
			}
			t.Logf("mutant %s caught at seed %d: %s", name, s, res.Violations[0])
		})
	}
}

// mutantBudget bounds the schedules a mutant may take to be caught.
const mutantBudget = 2000

// TestScheduleIsReproducible: a seed replays the same schedule, decision for decision.
func TestScheduleIsReproducible(t *testing.T) {
	for _, b := range backends() {
		needServer(t, b)
		seeds := []uint64{7, 8, 9, 11} // 9 and 11 start executions (Cloud Run, Workflows)
		if b == "spanner" || b == "firestore" {
			seeds = seeds[:1] // an emulator's schedule costs many memory ones
		}
		for _, s := range seeds {
			var traces [2][]string
			for i := range traces {
				res, err := sim.Run(t.Context(), sim.Options{Seed: s, Backend: b, Dir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				traces[i] = res.Trace
			}
			if !slices.Equal(traces[0], traces[1]) {
				t.Fatalf("seed %d on %s: two runs made different schedules:\n%s\n---\n%s", s, b,
					strings.Join(traces[0], "\n"), strings.Join(traces[1], "\n"))
			}
			if len(traces[0]) < 50 {
				t.Fatalf("seed %d made only %d decisions:\n%s", s, len(traces[0]), strings.Join(traces[0], "\n"))
			}
		}
	}
}

// regressions are schedules that found real bugs; each must pass for good.
var regressions = []struct {
	backend string
	seed    uint64
	bug     string
}{
	// The worker claim answered 13 minutes late, past the lease it granted; another
	// attempt had taken the run over meanwhile, and the late worker started the job
	// anyway, so two jobs of one run ran at once (the late one's writes were fenced,
	// but whatever the job did outside Effect was done twice). The worker now refuses
	// to start a job whose claim answered later than its self-fence point. (Found at
	// seed 4313; the schedules that reach the retention draw differently, and 811 is
	// the first seed that finds it again with the check taken out.)
	{"memory", 811, "a job started on a claim answered past its lease"},
}

func TestRegressionSeeds(t *testing.T) {
	for _, r := range regressions {
		t.Run(fmt.Sprintf("%s/%d", r.backend, r.seed), func(t *testing.T) {
			needServer(t, r.backend)
			res, err := sim.Run(t.Context(), sim.Options{Seed: r.seed, Backend: r.backend, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Violations) > 0 {
				t.Fatalf("seed %d (%s) is back:\n  %s", r.seed, r.bug, strings.Join(res.Violations, "\n  "))
			}
		})
	}
}

// TestTiedRescuesReplay: seeds whose rescue rounds list runs with equal deadlines
// replayed differently, run to run, while the rescuer took them in the memory
// backend's map order; the fault wrapper now sorts them.
func TestTiedRescuesReplay(t *testing.T) {
	for _, s := range []uint64{54, 58} {
		var first []string
		for i := range 8 {
			res, err := sim.Run(t.Context(), sim.Options{Seed: s, Backend: "memory"})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = res.Trace
			} else if !slices.Equal(first, res.Trace) {
				t.Fatalf("seed %d made another schedule on replay %d", s, i)
			}
		}
	}
}
