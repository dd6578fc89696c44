package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stack is the ingress and the worker processes -spawn started, all on loopback.
type stack struct {
	c          *config
	dir        string
	keep       bool
	target     string
	workerBin  string
	workerArgs []string
	workerEnv  []string
	stderr     io.Writer

	ingress *proc
	mu      sync.Mutex
	workers []*proc
	nkills  int
	// killed lists the chaos kills while progress bars are drawn, for one line after
	// them (a line printed mid-bar lands under a finished one).
	killed []string
	began  time.Time
}

// proc is one started process; its output goes to a log file in the work directory.
type proc struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	bannerc chan string
}

// writeJobs writes the jobs file that makes job an HTTP target calling the sink.
func writeJobs(w io.Writer, job, sinkURL string) error {
	f := map[string]any{"jobs": map[string]any{job: map[string]any{
		"url": sinkURL, "method": "POST", "timeout": "30s", "auth": "none", "max_attempts": 10,
	}}}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(f)
}

var (
	bannerIngress = regexp.MustCompile(`ingress\s+(http://\S+)`)
	bannerPubSub  = regexp.MustCompile(`PUBSUB_EMULATOR_HOST=([^\s,;)]+)`)
)

// startStack builds (unless -bin-dir) and starts the ingress and workers processes.
func startStack(ctx context.Context, c *config, workers int, sinkURL string, stderr io.Writer) (st *stack, err error) {
	dir, err := os.MkdirTemp("", "runonce-loadtest-")
	if err != nil {
		return nil, err
	}
	st = &stack{c: c, dir: dir, keep: c.KeepDir, stderr: stderr, began: time.Now()}
	defer func() {
		if err != nil {
			st.keep = true
			st.stop()
			err = fmt.Errorf("%w (logs in %s)", err, dir)
		}
	}()
	bin, err := binaries(ctx, c, stderr)
	if err != nil {
		return st, err
	}
	jobsFile := filepath.Join(dir, "jobs.json")
	f, err := os.Create(jobsFile)
	if err != nil {
		return st, err
	}
	err = writeJobs(f, c.Job, sinkURL)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return st, err
	}
	env := cleanEnv()
	ledgerURL, topic, sub := c.Ledger, c.Topic, c.Subscription
	var pubsubHost string
	if c.Ledger == "" {
		// The embedded all-in-one, with its in-process Pub/Sub but no in-process worker.
		ledgerURL = "sqlite://" + filepath.ToSlash(filepath.Join(dir, "runonce.db"))
		st.ingress, err = st.start(ctx, "ingress", filepath.Join(bin, "ingress"), env, true,
			"-dev", "-dev-concurrency", "0", "-dev-pubsub-port", "0", "-addr", "127.0.0.1:0", "-jobs", jobsFile, "-ledger", ledgerURL, "-log-level", "warn")
		if err != nil {
			return st, err
		}
		banner, err := st.ingress.banner(ctx)
		if err != nil {
			return st, err
		}
		m1, m2 := bannerIngress.FindStringSubmatch(banner), bannerPubSub.FindStringSubmatch(banner)
		if m1 == nil || m2 == nil {
			return st, fmt.Errorf("ingress -dev: no address or PUBSUB_EMULATOR_HOST in its banner:\n%s", banner)
		}
		st.target, pubsubHost = m1[1], m2[1]
		topic, sub = "pubsub://runonce-dev/runs", "pubsub://runonce-dev/runs-worker"
	} else {
		// Real backends (the emulators): the ingress without -dev.
		pubsubHost = os.Getenv("PUBSUB_EMULATOR_HOST")
		if pubsubHost == "" {
			return st, errors.New("-ledger: set PUBSUB_EMULATOR_HOST (deploy/local/stack.sh prints it)")
		}
		if err := ensurePubSub(ctx, pubsubHost, topic, sub); err != nil {
			return st, err
		}
		addr, err := freeAddr()
		if err != nil {
			return st, err
		}
		st.target = "http://" + addr
		if st.ingress, err = st.start(ctx, "ingress", filepath.Join(bin, "ingress"), append(env, "PUBSUB_EMULATOR_HOST="+pubsubHost), false,
			"-ledger", ledgerURL, "-topic", topic, "-auth", "none", "-jobs", jobsFile, "-addr", addr, "-log-level", "warn"); err != nil {
			return st, err
		}
	}
	if err := waitReady(ctx, st.target+"/readyz", st.ingress); err != nil {
		return st, fmt.Errorf("ingress: %w", err)
	}
	st.workerBin = filepath.Join(bin, "worker")
	st.workerEnv = append(env, "PUBSUB_EMULATOR_HOST="+pubsubHost)
	st.workerArgs = []string{"-ledger", ledgerURL, "-subscription", sub, "-topic", topic, "-auth", "none", "-jobs", jobsFile,
		"-concurrency", fmt.Sprint(c.WorkerConcurrency), "-lease", c.Lease.String(), "-max-ack-extension", "10s",
		"-rescue-interval", "5s", "-grace", "3s", "-log-level", "warn"}
	for i := range workers {
		p, err := st.startWorker(ctx, i)
		if err != nil {
			return st, err
		}
		st.workers = append(st.workers, p)
	}
	return st, nil
}

func (st *stack) startWorker(ctx context.Context, i int) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := st.start(ctx, fmt.Sprintf("worker-%d", i), st.workerBin, st.workerEnv, false, append(st.workerArgs, "-addr", addr)...)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, "http://"+addr+"/readyz", p); err != nil {
		p.cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	return p, nil
}

// killAndRestart SIGKILLs worker i and starts a new one in its place.
func (st *stack) killAndRestart(ctx context.Context, i int) error {
	st.mu.Lock()
	old := st.workers[i]
	st.mu.Unlock()
	if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-old.done
	st.mu.Lock()
	st.nkills++
	quiet := progressOn(st.c, st.stderr)
	if quiet {
		st.killed = append(st.killed, fmt.Sprintf("%s at +%s", old.name, time.Since(st.began).Round(100*time.Millisecond)))
	}
	st.mu.Unlock()
	if !quiet {
		st.logf("chaos: SIGKILLed %s (pid %d); restarting it", old.name, old.cmd.Process.Pid)
	}
	p, err := st.startWorker(ctx, i)
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.workers[i] = p
	st.mu.Unlock()
	return nil
}

// reportKills prints the kills held back while progress bars were drawn.
func (st *stack) reportKills() {
	st.mu.Lock()
	killed := st.killed
	st.killed = nil
	st.mu.Unlock()
	if len(killed) > 0 {
		st.logf("chaos: SIGKILLed and restarted %s", strings.Join(killed, ", "))
	}
}

func (st *stack) kills() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.nkills
}

func (st *stack) logf(format string, args ...any) {
	fmt.Fprintf(st.stderr, "loadtest: "+format+"\n", args...)
}

// start starts a process whose output goes to NAME.log in the work directory; with
// pipeStdout its stdout is kept for banner.
func (st *stack) start(ctx context.Context, name, bin string, env []string, pipeStdout bool, args ...string) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(st.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = st.dir
	cmd.Env = env
	cmd.Stderr = logf
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	var stdout io.ReadCloser
	if pipeStdout {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return nil, err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if stdout != nil {
		p.bannerc = make(chan string, 1)
		go func() {
			var b strings.Builder
			sc := bufio.NewScanner(stdout)
			sent := false
			for sc.Scan() {
				fmt.Fprintln(logf, sc.Text())
				if !sent {
					b.WriteString(sc.Text() + "\n")
					if strings.Contains(sc.Text(), "/v1/runs/RUN_ID") {
						p.bannerc <- b.String()
						sent = true
					}
				}
			}
			if !sent {
				p.bannerc <- b.String()
			}
		}()
	}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) banner(ctx context.Context) (string, error) {
	select {
	case b := <-p.bannerc:
		return b, nil
	case <-p.done:
		return "", fmt.Errorf("%s exited before its banner: %v", p.name, p.cmd.ProcessState)
	case <-time.After(60 * time.Second):
		return "", fmt.Errorf("%s printed no banner within 60s", p.name)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop ends every process (SIGTERM, then SIGKILL after 15s) and removes the work
// directory unless it is to be kept.
func (st *stack) stop() {
	st.mu.Lock()
	procs := append([]*proc{}, st.workers...)
	st.mu.Unlock()
	if st.ingress != nil {
		procs = append(procs, st.ingress)
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(15 * time.Second):
				p.cmd.Process.Kill()
				<-p.done
			}
		})
	}
	wg.Wait()
	if st.keep {
		st.logf("work directory kept: %s (ledger, jobs file, process logs)", st.dir)
	} else {
		os.RemoveAll(st.dir)
	}
}

// binaries returns the directory holding the ingress and worker binaries: -bin-dir, or
// one built now with go build (once per process).
func binaries(ctx context.Context, c *config, stderr io.Writer) (string, error) {
	if c.BinDir != "" {
		return c.BinDir, nil
	}
	buildOnce.Do(func() {
		out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
		root := filepath.Dir(strings.TrimSpace(string(out)))
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "go.mod") {
			buildErr = errors.New("-spawn builds cmd/ingress and cmd/worker: run it inside the runonce repository, or give -bin-dir")
			return
		}
		if builtDir, buildErr = os.MkdirTemp("", "runonce-loadtest-bin-"); buildErr != nil {
			return
		}
		fmt.Fprintln(stderr, "loadtest: building cmd/ingress and cmd/worker …")
		// By import path: the load test is a module of its own, which requires runonce.
		cmd := exec.CommandContext(ctx, "go", "build", "-o", builtDir+string(filepath.Separator),
			"github.com/runonce/runonce/cmd/ingress", "github.com/runonce/runonce/cmd/worker")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	return builtDir, buildErr
}

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// removeBuilt removes the binaries built by binaries.
func removeBuilt() {
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
}

// cleanEnv is the environment without RUNONCE_* settings and PORT, which would change
// the spawned processes' flags.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RUNONCE_") || strings.HasPrefix(kv, "PORT=") || strings.HasPrefix(kv, "PUBSUB_EMULATOR_HOST=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls url until it answers 200, the process exits, or 60s pass.
func waitReady(ctx context.Context, url string, p *proc) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready: %v", p.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within 60s (last: %v)", url, err)
		}
	}
}

// ensurePubSub creates the topic and the subscription on the Pub/Sub emulator (its REST
// API answers on the same port) when they are missing.
func ensurePubSub(ctx context.Context, host, topic, sub string) error {
	tp, tn, ok1 := parsePubSub(topic)
	sp, sn, ok2 := parsePubSub(sub)
	if !ok1 || !ok2 {
		return fmt.Errorf("-topic %q / -subscription %q: want pubsub://PROJECT/NAME", topic, sub)
	}
	put := func(path, body string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+host+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("Pub/Sub emulator at %s: %w", host, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("PUT %s: %d %s", path, resp.StatusCode, b)
		}
		return nil
	}
	if err := put("/v1/projects/"+tp+"/topics/"+tn, "{}"); err != nil {
		return err
	}
	return put("/v1/projects/"+sp+"/subscriptions/"+sn,
		fmt.Sprintf(`{"topic":"projects/%s/topics/%s","ackDeadlineSeconds":30}`, tp, tn))
}

func parsePubSub(u string) (project, name string, ok bool) {
	rest, found := strings.CutPrefix(u, "pubsub://")
	if !found {
		return "", "", false
	}
	project, name, ok = strings.Cut(rest, "/")
	return project, name, ok && project != "" && name != ""
}
