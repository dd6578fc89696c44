package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLocalStack starts deploy/local/stack.sh --detach, posts one scheduled run to the
// ingress, waits until a worker has completed it (and the sink has been called once
// with its Idempotency-Key), posts the same tick again (deduplicated: 200, duplicate),
// and stops the stack.
func TestLocalStack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the local stack takes about a minute")
	}
	for _, name := range []string{"gcloud", "java", "curl", "python3", "setsid"} {
		if _, err := exec.LookPath(name); err != nil {
			if inCI() {
				t.Fatalf("%s is missing (CI=true): the local stack needs it", name)
			}
			t.Skipf("%s is missing: the local stack needs it", name)
		}
	}
	dir := t.TempDir()
	stack := func(args ...string) ([]byte, error) {
		cmd := exec.Command("local/stack.sh", append(args, "--dir", dir)...)
		// The stack's own emulators, not any the test run was pointed at.
		cmd.Env = append(os.Environ(), "FIRESTORE_EMULATOR_HOST=", "PUBSUB_EMULATOR_HOST=")
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() {
		if out, err := stack("stop"); err != nil {
			t.Errorf("stack.sh stop: %v\n%s", err, out)
		}
		for _, name := range []string{"ingress", "worker1", "sink"} {
			if b, err := os.ReadFile(filepath.Join(dir, name+".log")); err == nil && t.Failed() {
				t.Logf("%s.log:\n%s", name, tail(b, 30))
			}
		}
	})
	if out, err := stack("--detach"); err != nil {
		t.Fatalf("stack.sh --detach: %v\n%s", err, out)
	}
	env := readEnv(t, filepath.Join(dir, "stack.env"))
	ingress := env["INGRESS_URL"]
	if ingress == "" || env["STACK_LEDGER"] == "" || env["STACK_PUBSUB_EMULATOR_HOST"] == "" {
		t.Fatalf("stack.env has no INGRESS_URL, STACK_LEDGER or STACK_PUBSUB_EMULATOR_HOST: %v", env)
	}
	// Sourcing it sets shell variables and changes the environment of no command.
	sourced, err := exec.Command("env", "-i", "PATH="+os.Getenv("PATH"), "bash", "-c",
		`. "$1" && echo "url=$INGRESS_URL" && env`, "bash", filepath.Join(dir, "stack.env")).CombinedOutput()
	if err != nil {
		t.Fatalf("source stack.env: %v\n%s", err, sourced)
	}
	if !strings.Contains(string(sourced), "url="+ingress+"\n") {
		t.Errorf("sourcing stack.env does not set INGRESS_URL:\n%s", sourced)
	}
	for _, line := range strings.Split(string(sourced), "\n") {
		if strings.HasPrefix(line, "RUNONCE_") || strings.Contains(line, "_EMULATOR_HOST=") || strings.HasPrefix(line, "INGRESS_URL=") {
			t.Errorf("sourcing stack.env exports %s to every later command", line)
		}
	}
	for _, k := range []string{"WORKER1_URL", "WORKER2_URL"} {
		if resp, err := http.Get(env[k] + "/readyz"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s/readyz: %v %v", env[k], resp, err)
		}
	}

	tick := time.Now().UTC().Truncate(time.Minute).Format(time.RFC3339)
	post := func() (int, map[string]any) {
		req, _ := http.NewRequest("POST", ingress+"/v1/jobs/hello", strings.NewReader(`{"greeting":"hi"}`))
		req.Header.Set("X-CloudScheduler-JobName", "hello-every-minute")
		req.Header.Set("X-CloudScheduler-ScheduleTime", tick)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	code, body := post()
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/jobs/hello: %d %v, want 202", code, body)
	}
	runID, _ := body["run_id"].(string)
	t.Logf("accepted run %s", runID)

	deadline := time.Now().Add(60 * time.Second)
	var run map[string]any
	for {
		resp, err := http.Get(ingress + "/v1/runs/" + runID)
		if err != nil {
			t.Fatal(err)
		}
		run = map[string]any{}
		json.NewDecoder(resp.Body).Decode(&run)
		resp.Body.Close()
		if run["status"] == "completed" {
			break
		}
		if run["status"] == "failed" || time.Now().After(deadline) {
			t.Fatalf("run %s: %v, want completed within 60s", runID, run)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("run completed: %v", run)

	calls := 0
	sinkLog, _ := os.ReadFile(filepath.Join(dir, "sink.log"))
	for _, line := range strings.Split(string(sinkLog), "\n") {
		var c map[string]any
		if json.Unmarshal([]byte(line), &c) == nil && c["run_id"] == runID {
			calls++
			if k, _ := c["idempotency_key"].(string); k == "" {
				t.Errorf("the sink was called without an Idempotency-Key: %s", line)
			}
		}
	}
	if calls != 1 {
		t.Errorf("the sink saw %d calls for run %s, want 1", calls, runID)
	}

	// The scheduler's retry of the same tick is deduplicated.
	code, body = post()
	if code != http.StatusOK || body["duplicate"] != true || body["run_id"] != runID {
		t.Errorf("repeat of the tick: %d %v, want 200, duplicate of %s", code, body, runID)
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasPrefix(line, "export ") {
			t.Errorf("stack.env exports %q: sourcing it would change what other commands in the shell do", line)
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if strings.HasPrefix(k, "RUNONCE_") || strings.HasSuffix(k, "_EMULATOR_HOST") && !strings.HasPrefix(k, "STACK_") {
			t.Errorf("stack.env sets %s, which changes what the binaries and the Google clients of the shell do", k)
		}
		env[k] = strings.Trim(v, `'"`)
	}
	return env
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprint(strings.Join(lines, "\n"))
}
