package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/internal/benchbase"
	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/queue"
)

// The real stack's binaries over PostgreSQL (TEST_DATABASE_URL) and the Pub/Sub emulator
// (PUBSUB_EMULATOR_HOST), as scripts/bench-floors.sh starts them: cmd/ingress with
// -auth none and a jobs file of one no-op HTTP job (a target in this process answering
// 204 at once), and cmd/worker processes pulling from one subscription.

const benchProject = "runonce-bench"

// stack is one benchmark's services: a fresh schema, topic and subscription.
type stack struct {
	ledgerURL, topic, sub, jobs string
	schema                      string
	pool                        *pgxpool.Pool
	bins                        string // the directory of the built binaries
}

func newStack(b *testing.B) *stack {
	b.Helper()
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" || os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
		if os.Getenv("CI") == "true" {
			b.Fatal("TEST_DATABASE_URL and PUBSUB_EMULATOR_HOST must be set under CI=true (scripts/services.sh)")
		}
		b.Skip("set TEST_DATABASE_URL and PUBSUB_EMULATOR_HOST: scripts/services.sh start DIR")
	}
	ctx := context.Background()
	var r [6]byte
	_, _ = rand.Read(r[:])
	id := "stackbench_" + hex.EncodeToString(r[:])
	u, err := url.Parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", id)
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{id}.Sanitize()+" CASCADE")
		pool.Close()
	})
	ps, err := queue.NewClient(ctx, benchProject, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ps.Close()
	if _, err := queue.EnsureTopic(ctx, ps, id); err != nil {
		b.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(ctx, ps, id, id, nil); err != nil {
		b.Fatal(err)
	}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(target.Close)
	dir := b.TempDir()
	jobs := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(jobs, []byte(`{"jobs": {"noop": {"url": "`+target.URL+`", "method": "POST"}}}`), 0o644); err != nil {
		b.Fatal(err)
	}
	s := &stack{ledgerURL: u.String(), topic: "pubsub://" + benchProject + "/" + id, sub: "pubsub://" + benchProject + "/" + id,
		jobs: jobs, schema: id, pool: pool, bins: dir}
	for _, cmd := range []string{"ingress", "worker"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, cmd), "../"+cmd).CombinedOutput(); err != nil {
			b.Fatalf("go build ../%s: %v\n%s", cmd, err, out)
		}
	}
	return s
}

// proc is a started binary.
type proc struct {
	cmd  *exec.Cmd
	addr string
	logs string
	done chan struct{}
}

// start runs the binary name with args on a free loopback address and waits until its
// /readyz answers 200.
func (s *stack) start(b *testing.B, name string, args ...string) *proc {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logs, err := os.CreateTemp(s.bins, name+"-*.log")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(s.bins, name), append([]string{"-addr", addr, "-auth", "none", "-ledger", s.ledgerURL,
		"-jobs", s.jobs, "-log-level", "warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &proc{cmd: cmd, addr: addr, logs: logs.Name(), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logs.Close(); close(p.done) }()
	b.Cleanup(p.stop)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			b.Fatalf("%s ended before it was ready; logs in %s", name, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not ready within 60s (%v); logs in %s", name, err, p.logs)
		}
	}
}

// stop sends SIGTERM and waits for the process (killing it after 30s).
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// postRuns sends n new runs of the no-op job to the ingress at addr from conc closed-loop
// clients, paced to rate per second overall when rate > 0, and returns the latencies.
func postRuns(b *testing.B, addr string, n, conc, rate int) []time.Duration {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc * 2}, Timeout: 30 * time.Second}
	prefix := fmt.Sprint(time.Now().UnixNano())
	start := time.Now()
	var next atomic.Int64
	var failed atomic.Value
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				// Request i is due at start + i/rate: a client late for its slot sends at
				// once, so that the rate catches up after a stall (a ticker would drop
				// the ticks it missed).
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
				}
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/jobs/noop", strings.NewReader(`{"n":1}`))
				req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", prefix, i))
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					failed.CompareAndSwap(nil, fmt.Errorf("POST run %d: %d %s", i, resp.StatusCode, body))
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return all
}

// count returns the runs of the stack's ledger with status.
func (s *stack) count(b *testing.B, status string) int {
	b.Helper()
	var n int
	err := s.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+pgx.Identifier{s.schema}.Sanitize()+".runs WHERE status = $1", status).Scan(&n)
	if err != nil {
		b.Fatalf("count %s runs: %v", status, err)
	}
	return n
}

// BenchmarkIngressPeakRSS runs the cmd/ingress binary over PostgreSQL and the Pub/Sub
// emulator and posts b.N new runs at 1,000 requests/s (64 closed-loop clients sharing
// one rate limit, enough to hold the rate at up to 64 ms a request), then reads the
// process's peak resident set (VmHWM). It reports the rate reached, p50/p99 and the peak
// RSS; the goal is at most 64 MiB.
//
//	go test -run '^$' -bench BenchmarkIngressPeakRSS -benchtime 10000x ./cmd/ingress/
func BenchmarkIngressPeakRSS(b *testing.B) {
	s := newStack(b)
	ing := s.start(b, "ingress", "-topic", s.topic)
	b.ResetTimer()
	start := time.Now()
	lat := postRuns(b, ing.addr, b.N, 64, 1000)
	elapsed := time.Since(start)
	b.StopTimer()
	rss, err := peakRSS(ing.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
}

// BenchmarkWorkerProcesses measures how no-op jobs/s scale with 1, 2 and 4 cmd/worker
// processes (-concurrency 32 each) pulling from one subscription, over PostgreSQL and
// the Pub/Sub emulator: the ingress queues b.N runs first, then the workers start, and
// the rate is b.N over the time from their start until the ledger shows every run
// completed (process start-up, ~0.1 s, included).
//
//	go test -run '^$' -bench BenchmarkWorkerProcesses -benchtime 3000x ./cmd/ingress/
func BenchmarkWorkerProcesses(b *testing.B) {
	for _, procs := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("processes=%d", procs), func(b *testing.B) {
			s := newStack(b)
			ing := s.start(b, "ingress", "-topic", s.topic)
			postRuns(b, ing.addr, b.N, 32, 0)
			b.ResetTimer()
			start := time.Now()
			for range procs {
				s.start(b, "worker", "-subscription", s.sub, "-concurrency", "32")
			}
			for deadline := time.Now().Add(5 * time.Minute); s.count(b, "completed") < b.N; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d runs completed after 5 minutes; logs in %s", s.count(b, "completed"), b.N, s.bins)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
		})
	}
}

// BenchmarkIngressBinaryVsBare is the PostgreSQL ingress floor over the built binary:
// rounds of 32 closed-loop HTTP clients in the benchmark's process, each request a fresh
// key, alternate between the bare handler in this process (benchbase.BarePostgres: the
// raw insert into a one-index table over a pool of 32, and a publish waited for) and
// cmd/ingress in a process of its own over a PostgreSQL ledger (the plain URL, so the
// default pool) and the Pub/Sub emulator; and duplicates of one queued run through it.
// It reports each side's rate, p50/p99 and the ratios.
//
//	go test -run '^$' -bench BenchmarkIngressBinaryVsBare -benchtime 2000x ./cmd/ingress/
func BenchmarkIngressBinaryVsBare(b *testing.B) {
	s := newStack(b)
	ing := s.start(b, "ingress", "-topic", s.topic)
	u, err := url.Parse(os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "32")
	u.RawQuery = q.Encode()
	bare := benchbase.BarePostgres(b, u.String(), benchProject)
	post, fresh := benchbase.Poster(b, "/v1/jobs/noop", `{"n":1}`)
	binary := "http://" + ing.addr
	hot := fresh() + "-hot"
	if err := post(binary, hot); err != nil {
		b.Fatal(err)
	}
	rate := benchloop.Rounds(b, 400, []benchloop.Kind{
		{Name: "bare", Op: func(context.Context) error { return post(bare, fresh()) }},
		{Name: "new", Op: func(context.Context) error { return post(binary, fresh()) }},
		{Name: "dup", Op: func(context.Context) error { return post(binary, hot) }},
	})
	b.ReportMetric(rate["new"]/rate["bare"], "new/bare")
	b.ReportMetric(rate["dup"]/rate["new"], "dup/new")
}
