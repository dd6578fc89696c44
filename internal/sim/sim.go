package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"    // registers postgres://
	_ "github.com/runonce/runonce/pkg/ledger/redisledger" // registers redis://
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// Backends the simulation runs on: memory and SQLite in-process; PostgreSQL and Redis
// on the servers TEST_DATABASE_URL and TEST_REDIS_URL name (scripts/services.sh), in a
// fresh schema or key prefix per schedule; Spanner on the emulator
// SPANNER_EMULATOR_HOST names, in a fresh database per schedule; Firestore on the
// emulator FIRESTORE_EMULATOR_HOST names, under a fresh collection prefix per schedule.
//
// Firestore judges time by its own clock and refuses a caller's Now, so the simulation
// cannot move its time: its schedules are clockless. Its leases are clocklessLease,
// which no schedule outlives on either clock, and its pickup deadlines
// clocklessPickup, so that every queued run is past its pickup deadline for the next
// rescue round (which waits that long); and the schedules leave out what only the
// ledger's clock can end: no delivery crashes (a crashed holder's run would stay held),
// no worker claim applies without its worker learning it (ditto), no job asks for
// Retry-After (a run would wait for its retry on the ledger's clock), fault rates stay
// at or under 0.1 (so that no holder's finishing write fails for its whole
// FinishTimeout, which would leave its run held), records never reach their retention,
// and no job starts an execution through a target (a start's backoff is a
// Retry-After). Lost leases, takeovers by time, the self-fence and the sweeper are the
// other backends' (and Firestore's conformance suite's); interleavings, faults on every
// other call, lost, duplicated, delayed and forged messages, effects, batches, the
// operator (whose release is a takeover without time) and every check run on it.
var Backends = []string{"memory", "sqlite", "postgres", "redis", "spanner", "firestore"}

// ServerEnv names the variable that locates a server backend's test server.
var ServerEnv = map[string]string{
	"postgres": "TEST_DATABASE_URL", "redis": "TEST_REDIS_URL", "spanner": "SPANNER_EMULATOR_HOST",
	"firestore": "FIRESTORE_EMULATOR_HOST",
}

// unique tells apart the schemas and prefixes of one process's schedules.
var unique atomic.Int64

// Timing of the simulated deployment, on the simulation's clock.
const (
	lease         = 10 * time.Minute
	pickupTimeout = 5 * time.Minute
	ackDeadline   = time.Minute
	nackBackoff   = 10 * time.Second
	// maxRunTime is the workers' worker.Config.MaxRunTime: a hung job is stopped then
	// and its run released.
	maxRunTime  = time.Hour
	maxAttempts = 4
	// retention is short, so that schedules reach it: records expire and the sweeper
	// deletes them, messages grow older than it, and a job may ask for a retry as late
	// as it (MaxRetryAfter), which puts a run's not-before a retention ahead.
	retention = 3 * time.Hour
	// callerWindow is how long a caller keeps retrying after its first request (Cloud
	// Scheduler's maxRetryDuration): the deployment keeps it, with everything else,
	// inside the retention.
	callerWindow = 30 * time.Minute
	// rescueGap is the longest the clock moves without a rescue round that finished:
	// the rescuer runs every RescueInterval in a deployment, and a run nobody rescues
	// for a whole retention is legitimately swept, which is no bug.
	rescueGap = retention / 2
	// steps is how many driver decisions a schedule makes with faults on, before it
	// quiesces (faults off) and lets everything finish.
	steps = 250
	// quiesceSteps bounds the quiet phase: a run still live after it is stuck.
	quiesceSteps = 3000
	jobName      = "sim"
	namespace    = "sim"
	// clocklessLease and clocklessPickup are the lease and the pickup timeout of a
	// clockless ledger's schedules (see Backends).
	clocklessLease  = 1000 * time.Hour
	clocklessPickup = time.Millisecond
)

// Options select one schedule.
type Options struct {
	Seed uint64
	// Backend is one of Backends.
	Backend string
	// Dir holds the SQLite file.
	Dir string
	// Mutant, when set, names a deliberately broken ledger (Mutants) to run on instead.
	Mutant string
}

// Result is what a schedule came to.
type Result struct {
	// Violations of the guarantees; empty when the schedule passed.
	Violations []string
	// Trace is the driver's decisions, for a failing schedule's report.
	Trace []string
	// Calls counts the actors the schedule ran.
	Actors int
}

// caller is one Cloud Scheduler-like sender of one run: it retries every non-2xx
// (and every lost answer) with backoff, up to its retry count.
type caller struct {
	key       string
	payload   []byte
	retries   int
	attempt   int
	nextAt    time.Time
	until     time.Time // the end of its retry window
	inflight  bool
	done      bool
	sentFirst bool
}

type simulation struct {
	opts Options
	rng  *rand.Rand
	// krng draws what the lease keepers and hung jobs brought in: which schedules have
	// jobs that hang, and which workers pause at their calls.
	krng  *rand.Rand
	hangs bool
	// operators: the schedule has an operator, who acts on runs (operate).
	operators bool
	// batches: the schedule's jobs run a batch of items after their effects.
	batches bool
	// targets, when set, is the Google Cloud API target the schedule's jobs start an
	// execution through after their effects (worker.StartEffect).
	targets *simTargets
	// clockless: the ledger judges time by its own clock (see Backends); lease and
	// pickup are the workers' lease and everyone's pickup timeout.
	clockless     bool
	lease, pickup time.Duration
	clock         *clock
	s             *sched
	f             *faults
	q             *simQueue
	h             *history
	raw           ledger.Driver
	// fl is the ingress's faulty ledger, which the operator reads runs through.
	fl      *faultLedger
	ingress *ingress.Handler
	workers []*worker.Worker
	callers []*caller
	crashed []*actor
	trace   []string
	actors  int
	// quiet is set for the quiet phase: no faults, and no job asks for a late retry.
	quiet bool
	// lastRescue is the clock when the latest rescue round that finished started.
	lastRescue time.Time
}

// Run runs the schedule of opts.Seed and checks it.
func Run(ctx context.Context, opts Options) (*Result, error) {
	sm := &simulation{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x5eed)), krng: rand.New(rand.NewPCG(opts.Seed, 0x6b656570))}
	// In a quarter of the schedules, jobs may hang until their context ends.
	sm.hangs = sm.krng.IntN(4) == 0
	// In a third, an operator acts on runs now and then.
	sm.operators = sm.krng.IntN(3) == 0
	// In half, jobs run a batch.
	sm.batches = sm.krng.IntN(2) == 0
	sm.clockless = opts.Backend == "firestore"
	sm.lease, sm.pickup = lease, pickupTimeout
	// Each schedule has its own fault intensity, from none to heavy.
	rates := []float64{0, 0.02, 0.05, 0.1, 0.2}
	if sm.clockless {
		sm.lease, sm.pickup, rates = clocklessLease, clocklessPickup, rates[:4]
	}
	sm.clock = &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	sm.s = newSched()
	sm.f = &faults{rng: sm.rng, rate: rates[sm.rng.IntN(len(rates))], log: sm.log, noGhostClaims: sm.clockless}
	sm.q = &simQueue{clock: sm.clock}
	sm.h = newHistory(sm.clock, sm.clockless)
	raw, err := sm.open(ctx)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	sm.raw = raw
	var l ledger.Driver = raw
	if opts.Mutant != "" && opts.Mutant != UnboundedCalls && opts.Mutant != IgnoresMaxRunTime && opts.Mutant != LostAnswerRefused {
		m, ok := Mutants[opts.Mutant]
		if !ok {
			return nil, fmt.Errorf("sim: no mutant %q", opts.Mutant)
		}
		l = m(raw)
		sm.raw = l
	}
	sm.lastRescue = sm.clock.Now()
	fl := &faultLedger{
		Driver: l, s: sm.s, f: sm.f, clock: sm.clock, acquired: sm.h.acquired, accepted: sm.h.fencedWrite,
		effectDone: sm.h.effectDone, operated: sm.h.operated, resolved: sm.h.resolved, sweeping: sm.sweeping, hung: sm.hung,
		clockless: sm.clockless,
	}
	sm.fl = fl
	pub := &faultPublisher{s: sm.s, f: sm.f, q: sm.q, hung: sm.hung}
	// The workers' own wrappers: the mutant unbounded-calls drops their deadlines.
	wfl, wpub := *fl, *pub
	wfl.unbounded, wpub.unbounded = opts.Mutant == UnboundedCalls, opts.Mutant == UnboundedCalls
	discard := slog.New(slog.DiscardHandler)
	in, err := ingress.New(&ingress.Config{
		Ledger: ledger.New(fl, nil), Publisher: pub, Namespace: namespace, Auth: auth.None{}, Jobs: []string{jobName}, Logger: discard,
		Now: sm.clock.Now, LedgerTimeout: time.Hour, PublishTimeout: time.Hour, PickupTimeout: sm.pickup,
		Retention: retention,
	})
	if err != nil {
		return nil, err
	}
	sm.ingress = in
	// In a quarter, jobs start an execution through a target (not on a clockless ledger:
	// a start's backoff is a Retry-After, see Backends).
	if kind, rate, ok := drawTargets(opts.Seed); ok && !sm.clockless {
		quiet := func() bool { return sm.quiet }
		sm.targets, err = newTargets(ctx, kind, rate, sm.s, sm.f, quiet, sm.log, opts.Mutant == LostAnswerRefused)
		if err != nil {
			return nil, err
		}
		defer sm.targets.close()
		sm.log("target: jobs start a %s execution through the fake, faults at %.2f a call", kind, rate)
	}
	mux := worker.NewMux()
	mux.HandleFunc(jobName, sm.job)
	runTime := maxRunTime
	if opts.Mutant == IgnoresMaxRunTime {
		runTime = forever
	}
	for range 3 {
		w, err := worker.New(&worker.Config{
			Ledger: ledger.New(&wfl, nil), Handler: mux, Lease: sm.lease, MaxAttempts: maxAttempts, PickupTimeout: sm.pickup,
			FinishTimeout: 5 * time.Second, LedgerTimeout: time.Hour, MaxRunTime: runTime,
			Retention: retention, UnsafeRetention: true, MaxRetryAfter: retention,
			Republish: &wpub, Logger: discard, Now: sm.clock.Now, AfterFunc: sm.clock.AfterFunc,
		})
		if err != nil {
			return nil, err
		}
		sm.workers = append(sm.workers, w)
	}
	sm.plan()
	runErr := sm.drive(ctx)
	sm.s.end(sm.crashed)
	if runErr != nil {
		return nil, runErr
	}
	res := &Result{Trace: sm.trace, Actors: sm.actors}
	res.Violations = append(res.Violations, sm.h.violations...)
	res.Violations = append(res.Violations, sm.finalChecks(ctx)...)
	if sm.targets != nil {
		res.Violations = append(res.Violations, sm.targets.check(sm.h.startsNotDone)...)
	}
	return res, nil
}

func (sm *simulation) open(ctx context.Context) (ledger.Driver, error) {
	switch sm.opts.Backend {
	case "memory", "":
		return memory.New(&memory.Options{Clock: sm.clock.Now}), nil
	case "sqlite":
		return sqlite.Open(ctx, filepath.Join(sm.opts.Dir, "sim-"+strconv.FormatUint(sm.opts.Seed, 10)+".db"), &sqlite.Options{Clock: sm.clock.Now, RelaxedSync: true})
	case "spanner":
		return openSpanner(ctx, fmt.Sprintf("sim%d_%d_%d", os.Getpid(), sm.opts.Seed, unique.Add(1)))
	case "firestore":
		return openFirestore(ctx, fmt.Sprintf("sim_%d_%d_%d_", os.Getpid(), sm.opts.Seed, unique.Add(1)))
	case "postgres", "redis":
		base := os.Getenv(ServerEnv[sm.opts.Backend])
		if base == "" {
			return nil, fmt.Errorf("sim: backend %s needs %s (scripts/services.sh starts one)", sm.opts.Backend, ServerEnv[sm.opts.Backend])
		}
		name := fmt.Sprintf("sim_%d_%d_%d", os.Getpid(), sm.opts.Seed, unique.Add(1))
		sep := "?"
		if strings.Contains(base, "?") {
			sep = "&"
		}
		param := "schema"
		if sm.opts.Backend == "redis" {
			param = "prefix"
		}
		return ledger.Open(ctx, base+sep+param+"="+name)
	}
	return nil, fmt.Errorf("sim: no backend %q (have %v)", sm.opts.Backend, Backends)
}

// plan draws the workload: a few runs, each sent by one to three callers, some of them
// with another payload under the same key.
func (sm *simulation) plan() {
	runs := 1 + sm.rng.IntN(4)
	for r := range runs {
		key := fmt.Sprintf("run-%d", r)
		payload := fmt.Appendf(nil, `{"run":%d}`, r)
		for c := range 1 + sm.rng.IntN(3) {
			p := payload
			if c > 0 && sm.rng.IntN(8) == 0 {
				p = fmt.Appendf(nil, `{"run":%d,"other":true}`, r)
			}
			at := sm.clock.Now().Add(time.Duration(sm.rng.IntN(120)) * time.Second)
			sm.callers = append(sm.callers, &caller{
				key: key, payload: p, retries: sm.rng.IntN(4), nextAt: at, until: at.Add(callerWindow),
			})
		}
	}
}

func (sm *simulation) log(format string, args ...any) {
	sm.trace = append(sm.trace, fmt.Sprintf("%s %s", sm.clock.Now().Format("15:04:05"), fmt.Sprintf(format, args...)))
}

// drive makes the schedule's decisions: first with faults, then quietly until every
// run is done.
func (sm *simulation) drive(ctx context.Context) error {
	for range steps {
		if err := sm.step(ctx, false); err != nil {
			return err
		}
	}
	sm.f.rate = 0
	sm.quiet = true
	sm.log("quiesce: faults off")
	for range quiesceSteps {
		if sm.settled(ctx) {
			return nil
		}
		if err := sm.step(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

// settled: nothing parked, no caller left, no message, every accepted run terminal.
func (sm *simulation) settled(ctx context.Context) bool {
	if sm.s.nparked() > 0 || sm.q.len() > 0 {
		return false
	}
	for _, c := range sm.callers {
		if !c.done {
			return false
		}
	}
	for _, id := range sm.h.acceptedRuns() {
		r, err := sm.raw.Get(ctx, &ledger.GetParams{RunID: id})
		if err == nil && !r.Status.Terminal() {
			return false
		}
	}
	return true
}

type choice struct {
	w  int
	do func() error
}

// step makes one decision.
func (sm *simulation) step(ctx context.Context, quiet bool) error {
	sm.clock.fire(sm.clock.Now()) // timers armed with no time left
	for _, b := range sm.s.unblock() {
		sm.log("unblock: actor %d (%s): its hung job's context ended: %v", b.a.id, b.a.name, context.Cause(b.ctx))
	}
	var cs []choice
	if n := sm.s.nparked(); n > 0 {
		cs = append(cs, choice{60, func() error {
			i := sm.rng.IntN(n)
			sm.log("go on: %s", sm.s.name(i))
			return sm.s.grant(i)
		}})
		if crashable := sm.crashable(); !quiet && len(crashable) > 0 {
			cs = append(cs, choice{2, func() error { sm.crash(crashable[sm.rng.IntN(len(crashable))]); return nil }})
		}
	}
	var ready []*caller
	for _, c := range sm.callers {
		if !c.done && !c.inflight && !c.nextAt.After(sm.clock.Now()) {
			if sm.clock.Now().After(c.until) {
				c.done = true
				sm.log("caller %s gives up: its retry window is over", c.key)
				continue
			}
			ready = append(ready, c)
		}
	}
	if len(ready) > 0 {
		cs = append(cs, choice{15, func() error { return sm.request(ctx, ready[sm.rng.IntN(len(ready))]) }})
	}
	if r := sm.q.ready(); len(r) > 0 {
		cs = append(cs, choice{20, func() error { return sm.deliver(ctx, r[sm.rng.IntN(len(r))]) }})
		if !quiet {
			cs = append(cs, choice{1, func() error { // lost
				e := sm.q.take(r[sm.rng.IntN(len(r))])
				sm.log("queue: message %s of run %s lost", e.id, short(e.m.Identity.RunID))
				return nil
			}})
			cs = append(cs, choice{1, func() error { // duplicated
				e := sm.q.take(r[sm.rng.IntN(len(r))])
				sm.q.back(e, e.availableAt)
				id := sm.q.publish(e.m)
				sm.log("queue: message %s of run %s duplicated as %s", e.id, short(e.m.Identity.RunID), id)
				return nil
			}})
			cs = append(cs, choice{1, func() error { // delayed
				e := sm.q.take(r[sm.rng.IntN(len(r))])
				d := time.Duration(1+sm.rng.IntN(600)) * time.Second
				sm.q.back(e, sm.clock.Now().Add(d))
				sm.log("queue: message %s of run %s delayed %s", e.id, short(e.m.Identity.RunID), d)
				return nil
			}})
			cs = append(cs, choice{1, func() error { // a stale or forged message
				e := sm.q.take(r[sm.rng.IntN(len(r))])
				sm.q.back(e, e.availableAt)
				forged := *e.m
				forged.Identity.Payload = []byte(`{"forged":true}`)
				id := sm.q.publish(&forged)
				sm.log("queue: forged message %s for run %s with another payload", id, short(e.m.Identity.RunID))
				return nil
			}})
		}
	}
	if sm.operators && !quiet {
		cs = append(cs, choice{1, func() error { return sm.operate(ctx) }})
	}
	if sm.targets != nil {
		if n := sm.targets.norphans(); n > 0 { // a call a crashed worker sent lands late
			cs = append(cs, choice{2, func() error { sm.targets.land(sm.rng.IntN(n)); return nil }})
		}
	}
	cs = append(cs, choice{3, func() error { return sm.rescue(ctx) }})
	cs = append(cs, choice{2, func() error { return sm.sweep(ctx) }})
	cs = append(cs, choice{4, func() error {
		d := sm.advance(quiet)
		if sm.clock.Now().Add(d).After(sm.lastRescue.Add(rescueGap)) {
			// The rescuer's timer fires before the clock may move on.
			return sm.rescue(ctx)
		}
		sm.abandonRequests(d)
		sm.clock.advance(d)
		sm.log("clock +%s", d)
		return nil
	}})
	total := 0
	for _, c := range cs {
		total += c.w
	}
	x := sm.rng.IntN(total)
	for _, c := range cs {
		if x < c.w {
			return c.do()
		}
		x -= c.w
	}
	return nil
}

// advance draws how far the clock moves: mostly seconds, sometimes past a pickup
// deadline or a lease.
func (sm *simulation) advance(quiet bool) time.Duration {
	if quiet {
		if sm.rng.IntN(4) == 0 { // to a late retry
			return time.Duration(1+sm.rng.IntN(int(rescueGap/time.Minute))) * time.Minute
		}
		return time.Duration(1+sm.rng.IntN(6)) * time.Minute
	}
	switch sm.rng.IntN(12) {
	case 0:
		return lease + time.Duration(sm.rng.IntN(300))*time.Second
	case 1, 2:
		return pickupTimeout + time.Duration(sm.rng.IntN(60))*time.Second
	case 3: // towards the retention: records expire, messages grow old
		return time.Duration(1+sm.rng.IntN(int(rescueGap/time.Minute))) * time.Minute
	}
	return time.Duration(1+sm.rng.IntN(60)) * time.Second
}

// abandonRequests crashes the requests parked for longer than a caller's window once
// the clock moves by d: Cloud Scheduler abandons an attempt past its deadline, and a
// request whose claim landed a retention after its caller started could legitimately
// find its run swept.
func (sm *simulation) abandonRequests(d time.Duration) {
	for i := sm.s.nparked() - 1; i >= 0; i-- {
		a := sm.s.parkedActor(i)
		if a.request && sm.clock.Now().Add(d).After(a.started.Add(callerWindow)) {
			sm.log("abandon: actor %d (%s) is past its caller's window", a.id, a.name)
			sm.crash(i)
		}
	}
}

// crashable returns the parked actors a crash may take: any, but deliveries on a
// clockless ledger (a crashed holder's run would stay held, see Backends).
func (sm *simulation) crashable() []int {
	n := sm.s.nparked()
	out := make([]int, 0, n)
	for i := range n {
		if !sm.clockless || !sm.s.parkedActor(i).delivery {
			out = append(out, i)
		}
	}
	return out
}

func (sm *simulation) crash(i int) {
	a := sm.s.crash(i)
	sm.crashed = append(sm.crashed, a)
	sm.h.jobEnded(a)
	if sm.targets != nil {
		sm.targets.crashed(a)
	}
	sm.log("crash: actor %d (%s) crashed", a.id, a.name)
	if a.onCrash != nil {
		a.onCrash()
	}
}

// request sends one caller's next request as an actor.
func (sm *simulation) request(ctx context.Context, c *caller) error {
	c.inflight = true
	c.attempt++
	start := sm.clock.Now()
	runID := ledger.KeyedRunID(namespace, jobName, c.key)
	if !c.sentFirst {
		c.sentFirst = true
		sm.h.send(runID, c.payload)
	}
	retry := func(why string) {
		c.inflight = false
		if c.attempt > c.retries {
			c.done = true
			sm.log("caller %s gives up after %d attempts (%s)", c.key, c.attempt, why)
			return
		}
		backoff := time.Duration(5<<min(c.attempt, 6)) * time.Second
		c.nextAt = sm.clock.Now().Add(backoff)
	}
	sm.actors++
	sm.log("start: actor %d request %s attempt %d", sm.s.nextID+1, c.key, c.attempt)
	a, err := sm.s.spawn(ctx, "request "+c.key, func(ctx context.Context, a *actor) {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/jobs/"+jobName, bytes.NewReader(c.payload))
		req.Header.Set(ingress.HeaderIdempotencyKey, c.key)
		rec := httptest.NewRecorder()
		sm.ingress.ServeHTTP(rec, req)
		if a.crashed {
			return // the answer never reached the caller; onCrash retried
		}
		var resp api.Response
		_ = json.Unmarshal(rec.Body.Bytes(), &resp)
		sm.log("request %s attempt %d: %d %s %s", c.key, c.attempt, rec.Code, resp.Status, resp.Error)
		if rec.Code/100 == 2 {
			sm.h.answered(resp.RunID, c.payload, rec.Code == http.StatusAccepted && !resp.Duplicate)
			c.inflight, c.done = false, true
			return
		}
		if rec.Code == http.StatusUnprocessableEntity {
			c.inflight, c.done = false, true // the caller's own mistake: retrying cannot help
			return
		}
		retry(strconv.Itoa(rec.Code))
	})
	if a != nil {
		a.request, a.started = true, start
		a.onCrash = func() { retry("no answer") }
	}
	return err
}

// deliver hands the i-th ready message to a worker as an actor.
func (sm *simulation) deliver(ctx context.Context, i int) error {
	e := sm.q.take(i)
	e.deliveries++
	w := sm.workers[sm.rng.IntN(len(sm.workers))]
	sm.actors++
	sm.log("start: actor %d delivers message %s of run %s", sm.s.nextID+1, e.id, short(e.m.Identity.RunID))
	a, err := sm.s.spawn(ctx, "deliver "+e.id, func(ctx context.Context, a *actor) {
		v := w.Process(ctx, &queue.Delivery{Message: e.m, DeliveryAttempt: e.deliveries, PublishTime: e.publishedAt})
		if a.crashed {
			return
		}
		sm.log("deliver %s (run %s): %s ack=%v", e.id, short(e.m.Identity.RunID), v.Outcome, v.Ack)
		if v.Ack {
			return
		}
		at := sm.clock.Now().Add(nackBackoff)
		if v.RetryAt.After(at) {
			at = v.RetryAt
		}
		sm.q.back(e, at)
	})
	if a != nil {
		a.onCrash = func() { sm.q.back(e, sm.clock.Now().Add(ackDeadline)) }
		a.paused = sm.krng.IntN(2) == 0
		a.delivery = true
	}
	return err
}

// operatorActions are the operators' actions an operator draws (ingress.Handler.Act,
// what POST /v1/runs/{id}:action does), each with the statuses that allow it. A new
// action is one more entry.
var operatorActions = []struct {
	name api.Action
	from []ledger.Status
}{
	{api.ActionRetry, []ledger.Status{ledger.StatusFailed}},
	{api.ActionCancel, []ledger.Status{ledger.StatusQueued, ledger.StatusRunning}},
	{api.ActionRelease, []ledger.Status{ledger.StatusRunning}},
	{api.ActionResolve, []ledger.Status{ledger.StatusFailed}},
}

// operate is an operator acting on a run as an actor (half the time one whose job
// runs, as the dashboard lists running runs, else one that failed, as it lists those,
// or one a caller was answered 2xx for, or any): it reads the run (as GET /v1/runs/{id} does), then takes an action its status
// allows, now and then one it does not (which the ledger refuses), half the time fenced
// by the attempt it read (refused when the run moved on meanwhile). A retry or a
// release republishes the run.
func (sm *simulation) operate(ctx context.Context) error {
	runs := sm.h.heldRuns()
	if len(runs) == 0 || sm.rng.IntN(2) == 0 {
		runs = sm.h.acceptedRuns()
		if failed := sm.h.failedRuns(); len(failed) > 0 && sm.rng.IntN(2) == 0 {
			runs = failed // as the dashboard lists failed runs
		}
	}
	if len(runs) == 0 {
		runs = []string{ledger.KeyedRunID(namespace, jobName, sm.callers[sm.rng.IntN(len(sm.callers))].key)}
	}
	runID := runs[sm.rng.IntN(len(runs))]
	sm.actors++
	sm.log("start: actor %d operator on run %s", sm.s.nextID+1, short(runID))
	_, err := sm.s.spawn(ctx, "operator "+short(runID), func(ctx context.Context, a *actor) {
		rctx, cancel := context.WithTimeout(ctx, time.Hour) // the ingress's LedgerTimeout, as its GET bounds it
		r, err := sm.fl.Get(rctx, &ledger.GetParams{RunID: runID})
		cancel()
		if a.crashed {
			return
		}
		if err != nil {
			sm.log("operator: run %s not read: %v", short(runID), err)
			return
		}
		var fit []api.Action
		for _, act := range operatorActions {
			if slices.Contains(act.from, r.Status) {
				fit = append(fit, act.name)
			}
		}
		if len(fit) == 0 || sm.rng.IntN(8) == 0 {
			fit = []api.Action{operatorActions[sm.rng.IntN(len(operatorActions))].name}
		}
		action := fit[sm.rng.IntN(len(fit))]
		p := &ledger.OperatorParams{
			RunID: runID, Actor: "sim operator", Reason: "the simulation's operator", PickupTimeout: sm.pickup, Retention: retention,
		}
		if sm.rng.IntN(2) == 0 {
			p.Attempt = r.Attempt
		}
		if action == api.ActionResolve {
			sm.resolve(ctx, a, p, r)
			return
		}
		_, code, err := sm.ingress.Act(ctx, action, p)
		if !a.crashed {
			sm.log("operator %s of run %s (read %s at attempt %d, fence %d): %d %v", action, short(runID), r.Status, r.Attempt, p.Attempt, code, err)
		}
	})
	return err
}

// resolve is an operator's verdict on one of the job's effects of run r (ingress.Handler.Resolve,
// what POST /v1/runs/{id}:resolve does): it happened, naming what it made, or it did
// not. The operator cannot know which is true, nor does the simulation: either verdict
// is what the run goes on by, and what the checks then hold it to (history.resolved).
func (sm *simulation) resolve(ctx context.Context, a *actor, p *ledger.OperatorParams, r *ledger.Run) {
	// As the run's page lists them, the operator reads the job's effects and resolves a
	// pending one (now and then any, which the ledger refuses unless it is pending).
	var names, pending []string
	for _, e := range jobEffects {
		names = append(names, e.name)
	}
	if sm.targets != nil {
		names = append(names, startNames...)
	}
	for _, name := range names {
		rctx, cancel := context.WithTimeout(ctx, time.Hour) // the ingress's LedgerTimeout
		fx, err := sm.fl.GetEffect(rctx, &ledger.GetEffectParams{RunID: p.RunID, Name: name})
		cancel()
		if a.crashed {
			return
		}
		if err == nil && fx.Status == ledger.EffectPending {
			pending = append(pending, name)
		}
	}
	if len(pending) == 0 || sm.rng.IntN(8) == 0 {
		pending = []string{names[sm.rng.IntN(len(names))]}
	}
	rp := &ledger.ResolveEffectParams{OperatorParams: *p, Effect: pending[sm.rng.IntN(len(pending))], Done: sm.rng.IntN(2) == 0}
	if rp.Done {
		rp.Ref = "sim-execution"
	}
	_, err := sm.ingress.Resolve(ctx, rp)
	if !a.crashed {
		sm.log("operator resolve of effect %q of run %s as done=%v (read %s at attempt %d, fence %d): %v", rp.Effect, short(p.RunID), rp.Done, r.Status, r.Attempt, p.Attempt, err)
	}
}

func (sm *simulation) rescue(ctx context.Context) error {
	w := sm.workers[sm.rng.IntN(len(sm.workers))]
	sm.actors++
	sm.log("start: actor %d rescue round", sm.s.nextID+1)
	started := sm.clock.Now()
	_, err := sm.s.spawn(ctx, "rescue", func(ctx context.Context, a *actor) {
		n, err := w.RescueOnce(ctx)
		if a.crashed {
			return
		}
		if n > 0 || err != nil {
			sm.log("rescue: %d republished, %v", n, err)
		}
		if err == nil && started.After(sm.lastRescue) {
			sm.lastRescue = started
		}
	})
	return err
}

func (sm *simulation) sweep(ctx context.Context) error {
	w := sm.workers[sm.rng.IntN(len(sm.workers))]
	sm.actors++
	_, err := sm.s.spawn(ctx, "sweep", func(ctx context.Context, a *actor) {
		n, err := w.SweepOnce(ctx, 500)
		if !a.crashed && (n > 0 || err != nil) {
			sm.log("sweep: %d records deleted, %v", n, err)
		}
	})
	return err
}

// hung reports a call that hangs with no deadline, and hangs its actor.
func (sm *simulation) hung(ctx context.Context, what string) error {
	a := actorFrom(ctx)
	if a == nil {
		return nil
	}
	sm.h.unbounded(a, what)
	sm.log("hang: actor %d (%s): %s has no deadline and never answers", a.id, a.name, what)
	return sm.s.hang(ctx)
}

// sweeping runs as a sweep applies, at the clock it applies at: an accepted run that is
// finished then may be deleted by it, legitimately, once its retention is over.
func (sm *simulation) sweeping(ctx context.Context) {
	for _, id := range sm.h.checkedRuns() {
		if r, err := sm.raw.Get(ctx, &ledger.GetParams{RunID: id}); err == nil && r.Status.Terminal() {
			sm.h.finished(id)
		}
	}
}

// jobEffects are the job's effects: one keyed (worker.Effect), one at most once
// (worker.AtMostOnce).
var jobEffects = []struct {
	name       string
	atMostOnce bool
}{{"charge", false}, {"email", true}}

// job is the simulated job: it checks what it observes, does one keyed effect and one
// at-most-once effect (and, in some schedules, a batch), and then succeeds, fails
// retryably or for good, panics, or asks for a retry later, as the schedule draws.
func (sm *simulation) job(ctx context.Context, j *worker.Job) error {
	a := actorFrom(ctx)
	sm.h.jobStarted(a, j.RunID, j.Attempt, j.Payload)
	defer sm.h.jobEnded(a)
	for _, e := range jobEffects {
		fn := func(ctx context.Context, key string) error {
			sm.h.downstream(a, j.RunID, e.name, key, e.atMostOnce)
			if err := sm.s.point(ctx); err != nil { // the downstream call takes a while
				return err
			}
			if sm.f.rate > 0 && sm.rng.Float64() < sm.f.rate {
				return errors.New("sim: downstream failed")
			}
			return nil
		}
		var err error
		if e.atMostOnce {
			err = worker.AtMostOnce(ctx, e.name, fn)
			switch {
			case errors.Is(err, worker.ErrEffectUncertain) && sm.operators:
				// Where an operator watches, the job fails the run for good instead, for
				// the operator to say whether the effect happened (resolve).
				err = worker.Permanent(err)
			case errors.Is(err, worker.ErrEffectUncertain):
				err = nil // the job goes on without it
			}
		} else {
			err = worker.Effect(ctx, e.name, fn)
		}
		if err != nil {
			return err
		}
	}
	if sm.targets != nil {
		if err := sm.targets.start(ctx, a, j); err != nil {
			return err
		}
	}
	if sm.batches {
		if err := sm.batch(ctx, a, j); err != nil {
			return err
		}
	}
	if a.crashed {
		return errCrashed
	}
	if sm.hangs && !sm.quiet && sm.krng.IntN(3) == 0 {
		sm.log("job: attempt %d of run %s hangs until its context ends", j.Attempt, short(j.RunID))
		return sm.s.block(ctx)
	}
	switch x := sm.rng.IntN(20); {
	case x < 1:
		return worker.Permanent(errors.New("sim: permanent failure"))
	case x < 3:
		return errors.New("sim: retryable failure")
	case x < 4:
		panic("sim: the job panics")
	case x < 5 && sm.clockless: // no Retry-After on a clockless ledger (see Backends)
		return errors.New("sim: retryable failure")
	case x < 5:
		d := time.Duration(1+sm.rng.IntN(1800)) * time.Second
		if !sm.quiet && sm.rng.IntN(2) == 0 { // as late as the worker allows (MaxRetryAfter), or later: cut to it
			d = retention - time.Duration(sm.rng.IntN(600))*time.Second + time.Duration(sm.rng.IntN(2))*retention
		}
		return worker.RetryAfter(d, errors.New("sim: come back later"))
	}
	return nil
}

// The batch the jobs of some schedules run (worker.Batch), after their effects.
const batchName = "items"

var batchItems = []string{"a", "b", "c"}

// batch runs the job's batch: each item's call is a scheduling point (a downstream
// call) and may fail, which the batch records as failed (worker.SkipItem) and goes on.
// One item at a time and one group (its default checkpoint is far more than three
// items), so that one goroutine of the actor runs at a time, as the schedule requires:
// the batch's own goroutines hand the actor on, never run beside each other. What it
// reports must cover every item, and when no earlier attempt did the group, this
// attempt called each.
func (sm *simulation) batch(ctx context.Context, a *actor, j *worker.Job) error {
	called := map[string]bool{}
	rep, err := worker.Batch(ctx, batchName, batchItems, func(ctx context.Context, item, key string) error {
		sm.h.batchItem(a, j.RunID, item, key)
		called[item] = true
		if err := sm.s.point(ctx); err != nil {
			return err
		}
		if sm.f.rate > 0 && sm.rng.Float64() < sm.f.rate {
			return errors.New("sim: batch item failed")
		}
		return nil
	}, &worker.BatchOptions{Parallelism: 1, OnItemError: worker.SkipItem})
	if err != nil || a.crashed {
		return err
	}
	sm.log("batch of attempt %d of run %s: %d done (%d by an earlier attempt), %d failed", j.Attempt, short(j.RunID), rep.Done, rep.Skipped, rep.Failed)
	sm.h.batchReport(j.RunID, rep, len(called))
	return nil
}

// finalChecks: every run a caller got a 2xx for ended completed or failed, or cancelled
// when an operator cancelled it; a run an operator cancelled is still cancelled.
func (sm *simulation) finalChecks(ctx context.Context) []string {
	var out []string
	for _, id := range sm.h.checkedRuns() {
		r, err := sm.raw.Get(ctx, &ledger.GetParams{RunID: id})
		byOperator := sm.h.wasCancelled(id)
		switch {
		case errors.Is(err, ledger.ErrNotFound) && sm.h.wasFinished(id):
			// finished, then swept after its retention
		case err == nil && byOperator && r.Status != ledger.StatusCancelled:
			out = append(out, fmt.Sprintf("invariant 6: run %s was cancelled by an operator and is %s at attempt %d now", short(id), r.Status, r.Attempt))
		case err == nil && !byOperator && r.Status == ledger.StatusCancelled:
			out = append(out, fmt.Sprintf("invariant 6: run %s is cancelled, and no operator cancelled it", short(id)))
		case !sm.h.wasAccepted(id):
			// no caller was answered 2xx for it: only how it ended is checked
		case errors.Is(err, ledger.ErrNotFound):
			out = append(out, fmt.Sprintf("invariant 1: run %s was answered 2xx and is gone: lost", short(id)))
		case err != nil:
			out = append(out, fmt.Sprintf("invariant 1: run %s: %v", short(id), err))
		case !r.Status.Terminal():
			out = append(out, fmt.Sprintf("invariant 1: run %s was answered 2xx and is still %s after the quiet phase: stuck", short(id), r.Status))
		}
	}
	return out
}
