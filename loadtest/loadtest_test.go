package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain removes the binaries the tests built, once they all ran: binaries builds them
// once per process, so a test that removed them would leave its repetitions (-count)
// without.
func TestMain(m *testing.M) {
	code := m.Run()
	removeBuilt()
	os.Exit(code)
}

// TestSpawnedDevVerifiesClean is the CI load test: real ingress and worker processes
// (cmd/ingress -dev -dev-concurrency 0 and two cmd/worker), a burst of 300 runs × 3
// deliveries with lost answers, short client timeouts, a slow and a flaky downstream,
// runs meant to fail and one worker SIGKILLed mid-load; it must verify clean well under
// 60 s on 2 cores (the build of the binaries is not counted).
func TestSpawnedDevVerifiesClean(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real processes")
	}
	ctx := t.Context()
	t0 := time.Now()
	c := &config{}
	bin, err := binaries(ctx, c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built cmd/ingress and cmd/worker in %s", time.Since(t0).Round(time.Millisecond))

	start := time.Now()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{
		"-spawn", "-bin-dir", bin, "-workers", "2", "-worker-concurrency", "16",
		"-shape", "burst", "-runs", "300", "-dups", "3", "-dup-spread", "2s",
		"-lost", "0.15", "-short-timeout-share", "0.05", "-flaky-share", "0.1", "-fail-share", "0.05",
		"-slow-share", "0.5", "-sink-delay", "20ms",
		"-chaos", "1s", "-chaos-max", "1", "-lease", "4s",
		"-timeout", "55s", "-verify-timeout", "45s", "-settle", "1s",
		"-json", "-progress", "off",
	}, &stdout, &stderr)
	took := time.Since(start)
	t.Logf("load and verification took %s; stderr:\n%s", took.Round(time.Millisecond), stderr.String())
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("exit %d, report is not JSON: %v\n%s", code, err, stdout.String())
	}
	if code != 0 || !r.OK {
		t.Fatalf("exit %d, ok %v; problems %v\nreport:\n%s", code, r.OK, r.ProblemKinds, stdout.String())
	}
	if took > 60*time.Second {
		t.Errorf("took %s, the bound is 60s", took)
	}
	// The faults happened, so the clean verdict means something.
	switch {
	case r.Kills != 1:
		t.Errorf("%d worker kills, want 1", r.Kills)
	case r.Outcomes["lost answer (injected)"] == 0:
		t.Error("no answer was lost")
	case r.Suppressed < r.DupsSent:
		t.Errorf("%d duplicate answers for %d duplicates sent", r.Suppressed, r.DupsSent)
	case r.MeantToFail == 0 || r.Failed != r.MeantToFail:
		t.Errorf("%d runs failed, %d meant to", r.Failed, r.MeantToFail)
	case r.Flaky == 0 || r.Applied != r.Completed:
		t.Errorf("%d flaky runs, %d effects applied for %d completed runs", r.Flaky, r.Applied, r.Completed)
	case r.Ingress.Count == 0 || r.AcceptToDone.Count == 0:
		t.Errorf("no latency recorded: %+v %+v", r.Ingress, r.AcceptToDone)
	}
}

// TestCheckFindsDoubleEffects feeds the verdicts what a broken system would leave: the
// verification must name every kind of problem it was built to catch.
func TestCheckFindsDoubleEffects(t *testing.T) {
	c := &config{Runs: 6, Dups: 1, VerifyTimeout: time.Second}
	runs := make([]*runSpec, 6)
	for i := range runs {
		runs[i] = &runSpec{Index: i}
	}
	runs[3].Fail = true
	keys := func(ks ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, k := range ks {
			m[k] = struct{}{}
		}
		return m
	}
	states := []runState{{RunID: "a"}, {RunID: "b"}, {RunID: "c"}, {RunID: "d"}, {}, {RunID: "f", Mismatch: true}}
	v := &verification{
		records: map[int]*runRecord{
			0: {Status: "completed"}, 1: {Status: "completed"}, 2: {Status: "running"}, 3: {Status: "completed"}, 5: {Status: "completed"},
		},
		sinkRuns: map[int]sinkRun{
			0: {Calls: 2, Applied: 2, Keys: keys("k1", "k2"), RunIDs: keys("a")},
			1: {Calls: 1, Applied: 1, Keys: keys("k"), RunIDs: keys("other")},
			3: {Calls: 1, Applied: 1, Keys: keys("k"), RunIDs: keys("d")},
			5: {Calls: 1, Applied: 1, Keys: keys("k"), RunIDs: keys("f")},
		},
	}
	v.check(c, runs, states)
	got := map[string]bool{}
	for _, p := range v.problems {
		got[p.Kind] = true
	}
	for _, want := range []string{"double effect", "keys per run", "run_id mismatch", "lost", "wrong status", "not accepted"} {
		if !got[want] {
			t.Errorf("no %q problem in %+v", want, v.problems)
		}
	}
}

// TestDeliveriesVaryOnlyTheSpelling checks that the deliveries of a scheduled run spell
// the headers differently and write the schedule time in different offsets, all of the
// same instant, and that a steady shape is paced.
func TestDeliveriesVaryOnlyTheSpelling(t *testing.T) {
	c := &config{Shape: "steady", Runs: 50, Dups: 6, DupSpread: time.Second, Seed: 1, MaxRequests: 1, MaxInflight: 1}
	r, err := parseRate("100/s")
	if err != nil {
		t.Fatal(err)
	}
	c.Rate = r
	tick := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	runs, ds := plan(c, "n", tick)
	if len(ds) != 300 || runs[49].Index != 49 {
		t.Fatalf("%d deliveries", len(ds))
	}
	if last := ds[len(ds)-1].due; last < 450*time.Millisecond {
		t.Errorf("50 runs at 100/s end at %s, want about 500ms", last)
	}
	cl := &client{c: c}
	cl.base, _ = parseTarget("http://127.0.0.1:1")
	spellings, writings := map[string]bool{}, map[string]bool{}
	run := &runSpec{Index: 0, SchedJob: "j", Tick: tick, Payload: []byte(`{}`)}
	for n := range 6 {
		req, err := cl.request(context.Background(), delivery{run: run, n: n})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range req.Header {
			if strings.EqualFold(k, "X-CloudScheduler-ScheduleTime") {
				spellings[k] = true
				writings[v[0]] = true
				var got time.Time
				if err := got.UnmarshalText([]byte(v[0])); err != nil || !got.Equal(tick) {
					t.Errorf("schedule time %q = %v, %v; want %v", v[0], got, err, tick)
				}
			}
		}
	}
	if len(spellings) < 4 || len(writings) < 6 {
		t.Errorf("%d spellings, %d writings: %v %v", len(spellings), len(writings), spellings, writings)
	}
}

// TestSinkTellsCutShortFromForeign checks that a call whose caller went away before
// sending all of its body (a worker killed mid-request) is counted apart, not as a call
// of another load test's run, which would fail the verdict of a clean run.
func TestSinkTellsCutShortFromForeign(t *testing.T) {
	snk := newSink("nonce", 0)
	addr, err := snk.start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer snk.close()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "POST /effect HTTP/1.1\r\nHost: sink\r\nContent-Length: 100\r\n\r\n{\"lt\":\"nonce\","); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	resp, err := http.Post("http://"+addr+"/effect", "application/json", strings.NewReader(`{"lt":"another","run":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, calls, foreign, cutShort := snk.snapshot()
		if cutShort == 1 && foreign == 1 && calls == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls, %d foreign, %d cut short; want 0, 1 (another load test's) and 1 (the body cut short)", calls, foreign, cutShort)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
