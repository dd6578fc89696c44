package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/targets/targetstest"
)

// The three Google Cloud API targets end to end: a jobs file names them, -dev's ingress
// claims a run of each, the in-process worker starts one execution through the official
// client at the fake, GET /v1/runs shows it, and its end completes the run.
func TestDevRunsGoogleCloudAPITargets(t *testing.T) {
	fake, err := targetstest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	kinds := map[string]string{
		"wf":    `"kind": "workflows", "resource": "projects/p/locations/l/workflows/nightly"`,
		"job":   `"kind": "cloudrun", "resource": "projects/p/locations/l/jobs/etl"`,
		"build": `"kind": "cloudbuild", "resource": "projects/p/locations/global/triggers/release", "wait": true`,
	}
	var entries []string
	for name, fields := range kinds {
		entries = append(entries, fmt.Sprintf(`%q: {%s, "endpoint": %q, "poll_interval": "20ms"}`, name, fields, fake.Endpoint()))
	}
	jobsFile := filepath.Join(t.TempDir(), "jobs.json")
	if err := os.WriteFile(jobsFile, []byte(`{"jobs": {`+strings.Join(entries, ",")+`}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- app.RunIngress(ctx, []string{"-dev", "-dev-pubsub-port", "0", "-addr", addr, "-ledger", fmt.Sprintf("memory://dev-targets-%d", time.Now().UnixNano()), "-jobs", jobsFile}, env(nil), io.Discard, io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("-dev after shutdown: %v", err)
		}
	}()
	getRun := func(id string) *api.RunJSON {
		resp, err := http.Get("http://" + addr + "/v1/runs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r api.RunJSON
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	waitRun := func(id string, ok func(*api.RunJSON) bool, what string) *api.RunJSON {
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := getRun(id)
			if ok(r) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s of job %s: %s never happened: %+v; fake calls %v", id, r.Job, what, r, fake.Calls())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for name := range kinds {
		var runID string
		for range 100 {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/jobs/"+name, strings.NewReader(`{"day":"2026-12-01"}`))
			req.Header.Set("Idempotency-Key", name+":2026-12-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			var body struct {
				RunID string `json:"run_id"`
			}
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST /v1/jobs/%s = %d, want 202", name, resp.StatusCode)
			}
			runID = body.RunID
			break
		}
		if runID == "" {
			t.Fatal("the -dev ingress never answered")
		}
		r := waitRun(runID, func(r *api.RunJSON) bool { return r.Execution != "" }, "a recorded execution")
		if r.Status != "running" {
			t.Fatalf("job %s: run is %s while its execution %s runs, want running", name, r.Status, r.Execution)
		}
		if err := fake.Finish(r.Execution, targetstest.Succeeded); err != nil {
			t.Fatal(err)
		}
		waitRun(runID, func(r *api.RunJSON) bool { return r.Status == "completed" }, "completion")
	}
	if s := fake.Started(); len(s) != 3 {
		t.Fatalf("started %v, want one execution per job", s)
	}
}
