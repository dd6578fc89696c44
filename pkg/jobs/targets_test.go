package jobs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/pkg/jobs"
)

func TestParseTargets(t *testing.T) {
	t.Parallel()
	m, err := jobs.Parse(strings.NewReader(`{"jobs": {
		"nightly-etl": {"kind": "workflows", "resource": "projects/p/locations/us-central1/workflows/etl", "max_attempts": 3},
		"reindex": {"kind": "cloudrun", "resource": "projects/p/locations/europe-west1/jobs/reindex", "wait": false, "container": "main",
			"endpoint": "europe-west1-run.googleapis.com:443", "poll_interval": "30s", "timeout": "20s"},
		"release": {"kind": "cloudbuild", "resource": "projects/p/locations/global/triggers/release", "branch": "main", "endpoint": "http://127.0.0.1:9999"},
		"ping": {"kind": "http", "url": "https://x/ping"}
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*jobs.Target{
		"nightly-etl": {Resource: "projects/p/locations/us-central1/workflows/etl", Wait: true, PollInterval: jobs.DefaultPollInterval},
		"reindex": {Resource: "projects/p/locations/europe-west1/jobs/reindex", Endpoint: "europe-west1-run.googleapis.com:443",
			Wait: false, PollInterval: 30 * time.Second, Container: "main"},
		"release": {Resource: "projects/p/locations/global/triggers/release", Endpoint: "http://127.0.0.1:9999",
			Wait: false, PollInterval: jobs.DefaultPollInterval, Branch: "main"},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, m[name].Target); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if m["nightly-etl"].Kind != jobs.KindWorkflows || m["nightly-etl"].MaxAttempts != 3 || m["reindex"].Timeout != 20*time.Second {
		t.Errorf("kind, max_attempts or timeout not kept: %+v %+v", m["nightly-etl"], m["reindex"])
	}
	if m["ping"].Kind != jobs.KindHTTP || m["ping"].Target != nil {
		t.Errorf("an HTTP job: %+v", m["ping"])
	}
	if hp, plain := m["release"].Target.Plaintext(); !plain || hp != "127.0.0.1:9999" {
		t.Errorf("Plaintext() = %q, %v", hp, plain)
	}
}

func TestParseTargetErrors(t *testing.T) {
	t.Parallel()
	const wf = `"resource":"projects/p/locations/l/workflows/w"`
	for _, c := range []struct{ in, want string }{
		{`{"kind":"lambda"}`, `kind "lambda": want "http" (the default), "workflows", "cloudrun" or "cloudbuild"`},
		{`{"kind":"workflows"}`, "resource is missing: want projects/PROJECT/locations/LOCATION/workflows/WORKFLOW"},
		{`{"kind":"workflows","resource":"projects/p/workflows/w"}`, "is not of the form projects/PROJECT/locations/LOCATION/workflows/WORKFLOW"},
		{`{"kind":"cloudrun","resource":"projects/p/locations/l/workflows/w"}`, "is not of the form projects/PROJECT/locations/LOCATION/jobs/JOB"},
		{`{"kind":"workflows",` + wf + `,"url":"https://x"}`, "url is a field of HTTP targets"},
		{`{"kind":"workflows",` + wf + `,"auth":"oidc"}`, "auth is a field of HTTP targets"},
		{`{"kind":"workflows",` + wf + `,"container":"c"}`, "container is a field of cloudrun targets"},
		{`{"kind":"workflows",` + wf + `,"branch":"main"}`, "branch is a field of cloudbuild targets"},
		{`{"kind":"workflows",` + wf + `,"poll_interval":"0s"}`, `poll_interval "0s" is not a positive Go duration`},
		{`{"kind":"workflows",` + wf + `,"endpoint":"http://10.0.0.1:80"}`, "must be on a loopback address"},
		{`{"kind":"workflows",` + wf + `,"endpoint":"https://x/y"}`, "want HOST:PORT"},
		{`{"kind":"workflows",` + wf + `,"endpoint":"nohost"}`, "want HOST:PORT"},
		{`{"url":"https://x","resource":"projects/p"}`, "resource is a field of Google Cloud API targets"},
	} {
		in := `{"jobs":{"j":` + c.in + `}}`
		_, err := jobs.Parse(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s): %v, want %q", in, err, c.want)
		}
	}
}
