package jobs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/pkg/jobs"
)

const example = `{
  "jobs": {
    "send-invoices": {
      "url": "https://billing.internal/run-invoices",
      "method": "POST",
      "timeout": "25m",
      "headers": {"X-Team": "billing"},
      "auth": "none",
      "max_attempts": 5
    },
    "ping": {"url": "http://localhost:8081/ping", "result": true}
  }
}`

func TestLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jobs.json")
	if err := os.WriteFile(path, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := jobs.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ping", "send-invoices"}, jobs.Names(m)); diff != "" {
		t.Error(diff)
	}
	j := m["send-invoices"]
	got := []any{j.Name, j.URL.String(), j.Method, j.Timeout, j.Headers, j.Auth, j.MaxAttempts}
	want := []any{"send-invoices", "https://billing.internal/run-invoices", "POST", 25 * time.Minute, map[string]string{"X-Team": "billing"}, "none", 5}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	p := m["ping"]
	if p.Method != "POST" || p.Auth != jobs.AuthNone || p.Timeout != 0 || p.MaxAttempts != 0 || !p.Result || j.Result {
		t.Errorf("defaults: %+v (result %v, send-invoices' %v; want only ping's on)", p, p.Result, j.Result)
	}
	if _, err := jobs.Load(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{`{}`, `no "jobs" object`},
		{`[]`, "not a jobs file"},
		{`{"jobs":{}, "extra":1}`, `unknown field "extra"`},
		{`{"jobs":{"a b":{"url":"https://x"}}}`, `job "a b": job name "a b" has ' '`},
		{`{"jobs":{"j":{"timeout":"5m"}}}`, `job "j": has no url: method, timeout, headers, auth and result are an HTTP target's`},
		{`{"jobs":{"j":{"result":true}}}`, `job "j": has no url: method, timeout, headers, auth and result are an HTTP target's`},
		{`{"jobs":{"j":{"kind":"workflows","resource":"projects/p/locations/l/workflows/w","result":true}}}`, `result is a field of HTTP targets`},
		{`{"jobs":{"j":{"max_attempts":-2}}}`, "max_attempts -2 is negative"},
		{`{"jobs":{"j":{"url":"/relative"}}}`, "not an absolute http or https URL"},
		{`{"jobs":{"j":{"url":"ftp://x/y"}}}`, "not an absolute http or https URL"},
		{`{"jobs":{"j":{"url":"https://x","timeout":"1d"}}}`, `timeout "1d" is not a positive Go duration`},
		{`{"jobs":{"j":{"url":"https://x","timeout":"-1s"}}}`, "not a positive Go duration"},
		{`{"jobs":{"j":{"url":"https://x","auth":"basic"}}}`, `auth "basic"`},
		{`{"jobs":{"j":{"url":"https://x","method":"TRACE"}}}`, `method "TRACE"`},
		{`{"jobs":{"j":{"url":"https://x","max_attempts":-1}}}`, "max_attempts -1 is negative"},
		{`{"jobs":{"j":{"url":"https://x","headers":{"Idempotency-Key":"x"}}}}`, "set by the worker"},
		{`{"jobs":{"j":{"url":"https://x","headers":{"Bad Name":"x"}}}}`, "not a valid HTTP header name"},
		{`{"jobs":{"j":{"url":"https://x","colour":"red"}}}`, `unknown field "colour"`},
		{`{"jobs":{"j":null}}`, "is null"},
	} {
		_, err := jobs.Parse(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s): %v, want %q", c.in, err, c.want)
		}
	}
}

// TestMalformedFileNamesLineAndColumn: a jobs file that is not JSON, or whose values
// have the wrong type or unknown fields, is refused with the line and column of the
// problem; a top-level map of jobs without "jobs" around it is named as such. Before,
// the decoder's error came without a place ("invalid character '}' looking for
// beginning of object key string"), and {"mine": {}} was an "unknown field".
func TestMalformedFileNamesLineAndColumn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"{\n  \"jobs\": {\n    \"a\": {\"url\": \"https://x\",}\n  }\n}", "line 3, column 31: invalid character '}'"},
		{"{\"jobs\":{\n \"j\":{\"max_attempts\":\"3\"}}}", `line 2, column 25: field "max_attempts" is a JSON string, want a number`},
		{"{\"jobs\":{\n  \"j\":{\"url\":\"https://x\",\n   \"colour\":\"red\"}}}", `line 3, column 4: unknown field "colour"`},
		{"{\"jobs\":{\"j\":{}}}\n{}", "line 2, column 1: more than one JSON value"},
		{`{"jobs":{`, "line 1, column 10: the file ends inside a value"},
		{"", "the file is empty"},
		{`{"mine": {}, "other": {"url": "https://x"}}`, `its top level is a map of jobs (mine, other) with no "jobs" object around it: write {"jobs": {"mine": …}}`},
	} {
		_, err := jobs.Parse(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q): %v, want %q", c.in, err, c.want)
		}
	}
}

// TestJobWithoutTarget: a job a Go handler runs is named with no url.
func TestJobWithoutTarget(t *testing.T) {
	t.Parallel()
	m, err := jobs.Parse(strings.NewReader(`{"jobs":{"mine":{},"tries":{"max_attempts":3},"ping":{"url":"http://localhost/ping"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if j := m["mine"]; j.HasTarget() || j.URL != nil || j.Name != "mine" {
		t.Errorf("mine = %+v, want a job without a target", j)
	}
	if j := m["tries"]; j.HasTarget() || j.MaxAttempts != 3 {
		t.Errorf("tries = %+v, want no target and 3 attempts", j)
	}
	if !m["ping"].HasTarget() {
		t.Error("ping has no target")
	}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "send-invoices", "etl.v2_nightly", strings.Repeat("x", 128)} {
		if err := jobs.ValidName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "é", "a\n", strings.Repeat("x", 129)} {
		if err := jobs.ValidName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
