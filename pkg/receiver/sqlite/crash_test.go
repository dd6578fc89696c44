package sqlite_test

// A real process killed mid-request: this test binary, started again with childEnv set,
// serves a handler behind a receiver over a SQLite file; the parent kills it while a
// request is in the handler, starts another process on the same file, and retries.

import (
	"bufio"
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

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/sqlite"
)

const (
	childEnv     = "RECEIVER_SQLITE_TEST_CHILD" // the SQLite file the child serves
	childHangEnv = "RECEIVER_SQLITE_TEST_HANG"  // "1": the child's handler hangs after it starts
	childLease   = 2 * time.Second
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		if err := runChild(path, os.Getenv(childHangEnv) == "1"); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild serves POST /charges behind a receiver over the file at path: the handler
// records that it started, then (unless hang) records its effect and answers 201 with
// its process ID. It prints "listening ADDR", and "started" when a handler starts.
func runChild(path string, hang bool) error {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS log (pid INTEGER, what TEXT)`); err != nil {
		return err
	}
	rc, err := receiver.New(store, &receiver.Options{Lease: childLease})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())
	pid := os.Getpid()
	h := rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := db.Exec(`INSERT INTO log VALUES (?, 'started')`, pid); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Println("started")
		if hang {
			select {} // until the parent kills the process
		}
		if _, err := db.Exec(`INSERT INTO log VALUES (?, 'effect')`, pid); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charged_by":%d}`, pid)
	}))
	return http.Serve(ln, h)
}

type child struct {
	cmd   *exec.Cmd
	url   string
	lines chan string
}

func startChild(t *testing.T, path string, hang bool) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path, childHangEnv+"="+map[bool]string{true: "1", false: "0"}[hang])
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			c.lines <- s.Text()
		}
		close(c.lines)
	}()
	line := c.wait(t, "listening ")
	c.url = "http://" + strings.TrimPrefix(line, "listening ") + "/charges"
	return c
}

// wait returns the child's next line that starts with prefix.
func (c *child) wait(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child exited before printing %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("the child did not print %q within 30s", prefix)
		}
	}
}

func charge(url string) (int, http.Header, string, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"customer":"c-1","amount":100}`))
	req.Header.Set("Idempotency-Key", "charge-c-1-2026-11")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), nil
}

// A process killed while its handler runs leaves the key in flight until its lease
// passes: a retry before is told so (409, Retry-After), and the first retry after is
// executed, once, by another process on the same file; later ones get its answer.
func TestKilledProcessLeavesTheKeyClaimableAfterTheLease(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "receiver.db")
	a := startChild(t, path, true)
	sent := make(chan error, 1)
	go func() {
		_, _, _, err := charge(a.url)
		sent <- err
	}()
	a.wait(t, "started")
	killedAt := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err == nil {
		t.Fatal("the request to the killed process got an answer")
	}

	b := startChild(t, path, false)
	status, header, body, err := charge(b.url)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(killedAt) < childLease-500*time.Millisecond && status != http.StatusConflict {
		t.Fatalf("a retry within the dead claim's lease = %d %s, want 409 in flight", status, body)
	}
	if status == http.StatusConflict {
		retryAfter, err := strconv.Atoi(header.Get("Retry-After"))
		if err != nil || retryAfter < 1 || time.Duration(retryAfter)*time.Second > childLease {
			t.Fatalf("409 with Retry-After %q, want 1s to the lease (%v)", header.Get("Retry-After"), childLease)
		}
		time.Sleep(time.Duration(retryAfter) * time.Second)
		for deadline := time.Now().Add(10 * time.Second); status == http.StatusConflict && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if status, header, body, err = charge(b.url); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := fmt.Sprintf(`{"charged_by":%d}`, b.cmd.Process.Pid)
	if status != http.StatusCreated || body != want || header.Get(receiver.HeaderReplayed) != "" {
		t.Fatalf("the retry after the lease = %d %s (replayed %q), want executed by the second process: %s", status, body, header.Get(receiver.HeaderReplayed), want)
	}
	if status, header, body, _ = charge(b.url); status != http.StatusCreated || body != want || header.Get(receiver.HeaderReplayed) != "true" {
		t.Fatalf("a later retry = %d %s, want the second process's answer replayed", status, body)
	}

	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var started, effects int
	if err := db.QueryRow(`SELECT count(*) FILTER (WHERE what = 'started'), count(*) FILTER (WHERE what = 'effect') FROM log`).Scan(&started, &effects); err != nil {
		t.Fatal(err)
	}
	if started != 2 || effects != 1 {
		t.Fatalf("%d handler starts and %d effects, want 2 (the killed one, the retry) and 1", started, effects)
	}
}
