package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// runSpec is one run: what identifies it and how its downstream behaves.
type runSpec struct {
	Index    int
	SchedJob string    // X-CloudScheduler-JobName; empty for a keyed run
	Key      string    // Idempotency-Key of a keyed run
	Tick     time.Time // X-CloudScheduler-ScheduleTime, UTC
	Payload  []byte
	Fail     bool // meant to fail: the sink answers 400
	Flaky    bool // the sink answers 503 to the first call of its key
	Slow     bool // the sink waits -sink-delay
}

// delivery is one delivery of a run: the first (n = 0) or a duplicate. A delivery is a
// scheduler's attempt sequence: it is retried until it gets a 2xx or runs out of retries.
type delivery struct {
	run *runSpec
	n   int
	due time.Duration // after the start of the load
	id  uint64        // seeds its fault draws
}

// plan draws the runs and their deliveries. Every run's first delivery is due at its
// tick in the shape (all at 0 for a burst; paced by vegeta's ConstantPacer for a steady
// rate); odd duplicates go with it concurrently, even ones later within -dup-spread.
func plan(c *config, nonce string, tick time.Time) ([]*runSpec, []delivery) {
	rng := mrand.New(mrand.NewPCG(c.Seed, 0x5eed))
	runs := make([]*runSpec, c.Runs)
	var elapsed time.Duration
	ds := make([]delivery, 0, c.Runs*c.Dups)
	for i := range runs {
		r := &runSpec{Index: i, Tick: tick}
		if rng.Float64() < c.IdemShare {
			r.Key = fmt.Sprintf("lt-%s-%d", nonce, i)
		} else {
			r.SchedJob = fmt.Sprintf("lt-%s-%d", nonce, i)
		}
		r.Fail = rng.Float64() < c.Fail
		r.Flaky = !r.Fail && rng.Float64() < c.FlakyShare
		r.Slow = rng.Float64() < c.SlowShare
		r.Payload, _ = json.Marshal(payload{LoadTest: nonce, Run: i, Fail: r.Fail, Flaky: r.Flaky, Slow: r.Slow})
		runs[i] = r
		if c.Shape == "steady" {
			wait, _ := c.Rate.Pace(elapsed, uint64(i))
			elapsed += max(wait, 0)
		}
		for n := range c.Dups {
			due := elapsed
			if n > 0 && n%2 == 0 && c.DupSpread > 0 {
				due += time.Duration(rng.Int64N(int64(c.DupSpread)))
			}
			ds = append(ds, delivery{run: r, n: n, due: due, id: uint64(i)*uint64(c.Dups) + uint64(n)})
		}
	}
	slices.SortStableFunc(ds, func(a, b delivery) int { return int(a.due - b.due) })
	return runs, ds
}

// drive sends every delivery at its due time (open loop: a delivery never waits for
// another's answer, only for a free slot among -max-inflight) and returns when all are
// done or ctx ends.
func drive(ctx context.Context, cl *client, ds []delivery, bar progress) time.Time {
	start := time.Now()
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	<-timer.C
	for _, d := range ds {
		intended := start.Add(d.due)
		if wait := time.Until(intended); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if !cl.acquire(ctx) {
			break
		}
		wg.Go(func() {
			cl.deliver(ctx, d, intended)
			bar.Add(1)
		})
	}
	wg.Wait()
	return start
}

// runOnce runs one load test: the sink, the stack when spawning, the load, the
// verification. workers overrides -workers (the scaling mode).
func runOnce(ctx context.Context, c *config, workers int, stderr io.Writer) (*report, error) {
	nonce := newNonce()
	snk := newSink(nonce, c.SinkDelay)
	sinkAddr, err := snk.start(c.SinkAddr)
	if err != nil {
		return nil, fmt.Errorf("effect sink: %w", err)
	}
	defer snk.close()
	sinkURL := c.SinkURL
	if sinkURL == "" {
		sinkURL = "http://" + sinkAddr + "/effect"
	}
	target := c.Target
	var st *stack
	if c.Spawn {
		st, err = startStack(ctx, c, workers, sinkURL, stderr)
		if err != nil {
			return nil, err
		}
		defer st.stop()
		target = st.target
	}
	token, err := bearerToken(ctx, c)
	if err != nil {
		return nil, err
	}
	cl, err := newClient(c, target, token)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	tick := time.Now().UTC().Truncate(time.Minute)
	runs, ds := plan(c, nonce, tick)
	cl.states = make([]runState, len(runs))

	chaosDone := make(chan struct{})
	chaosCtx, stopChaos := context.WithCancel(ctx)
	// Before the stack stops: a restart must not race with stopping the workers.
	defer func() { stopChaos(); <-chaosDone }()
	if st != nil && c.Chaos > 0 {
		go func() { defer close(chaosDone); st.chaos(chaosCtx, c.Chaos, c.ChaosMax) }()
	} else {
		close(chaosDone)
	}

	bar := newProgress(c, stderr, len(ds), "deliveries", true)
	start := drive(ctx, cl, ds, bar)
	sent := time.Now()
	bar.Finish()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("the load did not finish within -timeout: %w", err)
	}

	v := verify(ctx, c, cl, runs, snk, stderr)
	stopChaos()
	<-chaosDone
	if st != nil {
		st.reportKills()
	}
	rep := buildReport(c, workers, runs, cl, v, start, sent)
	if st != nil {
		rep.Kills = st.kills()
		rep.WorkDir = st.dir
	}
	rep.evaluate(c)
	if st != nil && !rep.OK {
		st.keep = true // the ledger file and the logs are the evidence
	}
	return rep, nil
}

// runScale runs the same load against a fresh spawned stack for each worker count.
func runScale(ctx context.Context, c *config, stdout, stderr io.Writer) int {
	var reps []*report
	code := 0
	for _, n := range c.Scale {
		fmt.Fprintf(stderr, "loadtest: scaling: %d worker process(es)\n", n)
		rep, err := runOnce(ctx, c, n, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return 2
		}
		if !rep.OK {
			code = 1
		}
		reps = append(reps, rep)
	}
	if err := printScale(stdout, c, reps); err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	return code
}

func newNonce() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Header name spellings and schedule time writings vary by delivery, as real callers'
// do: every writing is the same instant and every spelling the same header.
var headerCases = []func(string) string{
	func(s string) string { return s },
	strings.ToLower,
	strings.ToUpper,
	func(s string) string {
		b := []byte(strings.ToLower(s))
		for i := 0; i < len(b); i += 2 {
			if b[i] >= 'a' && b[i] <= 'z' {
				b[i] -= 'a' - 'A'
			}
		}
		return string(b)
	},
}

var scheduleWritings = []func(time.Time) string{
	func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	func(t time.Time) string { return t.In(time.FixedZone("PDT", -7*3600)).Format(time.RFC3339) },
	func(t time.Time) string { return t.In(time.FixedZone("IST", 5*3600+1800)).Format(time.RFC3339) },
	func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") + "+00:00" },
	func(t time.Time) string {
		return t.In(time.FixedZone("", -12*3600)).Format("2006-01-02T15:04:05.000Z07:00")
	},
	func(t time.Time) string { return t.In(time.FixedZone("", 14*3600)).Format(time.RFC3339Nano) },
}
