package main_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", to count completed runs

	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/pkg/benchloop"
)

// BenchmarkDevEndToEnd is the embedded default end to end, as a user runs it: the
// cmd/ingress binary with -dev (the SQLite ledger file with synchronous=FULL, the
// in-process transport, the in-process worker at its default concurrency, the demo job
// with -demo-delay 0 and its one effect, logs at info to a file), driven over HTTP by 32
// closed-loop clients in this process posting b.N runs with a fresh Idempotency-Key
// each. It reports the ingress's accepted runs/s with p50/p99, the completed runs/s
// from the first post until the ledger shows all b.N completed (counted in the file by
// a reader of its own), and the process's peak RSS.
//
// BENCH_DEV_BASELINE, the path of another build of cmd/ingress (an earlier commit's),
// adds its rounds, each right after this tree's, so that both see the same load.
//
//	go test -run '^$' -bench BenchmarkDevEndToEnd -benchtime 6000x -count 3 ./cmd/ingress/
func BenchmarkDevEndToEnd(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "ingress")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	b.Run("binary=this/clients=32", func(b *testing.B) { benchDev(b, bin) })
	if base := os.Getenv("BENCH_DEV_BASELINE"); base != "" {
		b.Run("binary=baseline/clients=32", func(b *testing.B) { benchDev(b, base) })
	}
}

func benchDev(b *testing.B, bin string) {
	dir := b.TempDir()
	p := startDevBench(b, bin, dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, app.DevLedgerFile)+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	base := "http://" + p.addr
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	benchloop.Run(b, 32, func(ctx context.Context, i int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/jobs/"+app.DemoJob, strings.NewReader(`{"n":1}`))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", prefix, i))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST run %d: %d %s", i, resp.StatusCode, body)
		}
		return nil
	})
	// Every run was answered 202, so it is in the file: wait until none is queued or
	// running (a count over the rescue index, which holds only those), then check
	// that all completed.
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM runs WHERE status IN ('queued', 'running')`).Scan(&n); err != nil {
			b.Fatalf("count unfinished runs: %v", err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d runs unfinished after 5 minutes; logs in %s", n, b.N, p.logs)
		}
	}
	elapsed := time.Since(start)
	var completed int
	if err := db.QueryRow(`SELECT count(*) FROM runs WHERE status = 'completed'`).Scan(&completed); err != nil || completed != b.N {
		b.Fatalf("%d of %d runs completed (%v); logs in %s", completed, b.N, err, p.logs)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "completed-runs/s")
	if rss, err := peakRSS(p.cmd.Process.Pid); err == nil {
		b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
	}
	p.stop(b)
}

type devBench struct {
	cmd  *exec.Cmd
	addr string
	logs string
	done chan struct{}
}

// startDevBench runs bin -dev in dir on a free loopback port with the demo job's delay 0
// and args, and waits for its banner.
func startDevBench(b *testing.B, bin, dir string, args ...string) *devBench {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logs, err := os.Create(filepath.Join(dir, "dev.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-dev", "-dev-pubsub-port", "0", "-addr", addr, "-demo-delay", "0"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RUNONCE_LEDGER=") // the default: the file in the working directory
	if q := os.Getenv("BENCH_DEV_LEDGER_QUERY"); q != "" {
		cmd.Env = append(cmd.Env, "RUNONCE_LEDGER=sqlite://"+filepath.Join(dir, app.DevLedgerFile)+"?"+q)
	}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &devBench{cmd: cmd, addr: addr, logs: logs.Name(), done: make(chan struct{})}
	go func() { cmd.Wait(); logs.Close(); close(p.done) }()
	b.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "/v1/runs/RUN_ID") {
				ready <- true
				io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			b.Fatalf("-dev ended before its banner; logs in %s", p.logs)
		}
	case <-time.After(60 * time.Second):
		b.Fatalf("no banner from -dev within 60s; logs in %s", p.logs)
	}
	return p
}

func (p *devBench) stop(b *testing.B) {
	b.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		b.Fatalf("-dev did not stop within 30s of SIGTERM; logs in %s", p.logs)
	}
}

// peakRSS reads the process's peak resident set (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(status) {
		if f := strings.Fields(string(line)); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
