package jobs

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Target kinds. KindHTTP calls a URL; the others start an execution through a Google
// Cloud API with the worker's Application Default Credentials (an OAuth access token).
const (
	KindHTTP = "http"
	// KindWorkflows starts a Workflows execution (workflowexecutions.googleapis.com).
	KindWorkflows = "workflows"
	// KindCloudRun runs a Cloud Run job (run.googleapis.com v2 jobs.run).
	KindCloudRun = "cloudrun"
	// KindCloudBuild runs a Cloud Build trigger (cloudbuild.googleapis.com triggers.run).
	KindCloudBuild = "cloudbuild"
)

// resourcePatterns are the resource names each kind takes.
var resourcePatterns = map[string]*regexp.Regexp{
	KindWorkflows:  regexp.MustCompile(`^projects/[^/]+/locations/[^/]+/workflows/[^/]+$`),
	KindCloudRun:   regexp.MustCompile(`^projects/[^/]+/locations/[^/]+/jobs/[^/]+$`),
	KindCloudBuild: regexp.MustCompile(`^projects/[^/]+/locations/[^/]+/triggers/[^/]+$`),
}

var resourceForms = map[string]string{
	KindWorkflows:  "projects/PROJECT/locations/LOCATION/workflows/WORKFLOW",
	KindCloudRun:   "projects/PROJECT/locations/LOCATION/jobs/JOB",
	KindCloudBuild: "projects/PROJECT/locations/LOCATION/triggers/TRIGGER",
}

// DefaultPollInterval is how often a waiting target polls its execution.
const DefaultPollInterval = 10 * time.Second

// Target is a Google Cloud API target.
type Target struct {
	// Resource names the workflow, Cloud Run job or build trigger.
	Resource string
	// Endpoint overrides the API's endpoint: "HOST:PORT" (TLS, Application Default
	// Credentials: private or regional endpoints), or "http://HOST:PORT" on a loopback
	// address (plaintext, no credentials: local fakes and tests). Empty: the API's
	// global endpoint.
	Endpoint string
	// Wait makes the run follow the execution until it finishes (the default for
	// Workflows and Cloud Run jobs); without it the run completes once the start is
	// recorded.
	Wait bool
	// PollInterval is how often a waiting run polls the execution.
	PollInterval time.Duration
	// Container names the Cloud Run job's container the environment overrides go to;
	// empty: the job's only container.
	Container string
	// Branch is the Cloud Build trigger's branch to build; empty: the trigger's own.
	Branch string
}

// Plaintext reports whether the endpoint is a plaintext loopback one ("http://…"), and
// returns its HOST:PORT.
func (t *Target) Plaintext() (string, bool) {
	if rest, ok := strings.CutPrefix(t.Endpoint, "http://"); ok {
		return rest, true
	}
	return t.Endpoint, false
}

// targetJSON holds the jobs file's fields of a Google Cloud API target.
type targetJSON struct {
	Kind         string `json:"kind"`
	Resource     string `json:"resource"`
	Endpoint     string `json:"endpoint"`
	Wait         *bool  `json:"wait"`
	PollInterval string `json:"poll_interval"`
	Container    string `json:"container"`
	Branch       string `json:"branch"`
}

// httpOnly refuses target fields on an HTTP job.
func (t *targetJSON) httpOnly() error {
	for field, set := range map[string]bool{
		"resource": t.Resource != "", "endpoint": t.Endpoint != "", "wait": t.Wait != nil,
		"poll_interval": t.PollInterval != "", "container": t.Container != "", "branch": t.Branch != "",
	} {
		if set {
			return fmt.Errorf("%s is a field of Google Cloud API targets (kind %q, %q or %q), not of an HTTP target", field, KindWorkflows, KindCloudRun, KindCloudBuild)
		}
	}
	return nil
}

func validateAPITarget(name string, in *jobJSON) (*Job, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("job %q: %s", name, fmt.Sprintf(format, args...))
	}
	pattern, ok := resourcePatterns[in.Kind]
	if !ok {
		return nil, fail("kind %q: want %q (the default), %q, %q or %q", in.Kind, KindHTTP, KindWorkflows, KindCloudRun, KindCloudBuild)
	}
	for field, set := range map[string]bool{"url": in.URL != "", "method": in.Method != "", "headers": len(in.Headers) > 0, "auth": in.Auth != "", "result": in.Result} {
		if set {
			return nil, fail("%s is a field of HTTP targets; a %s target calls its API with the worker's Application Default Credentials", field, in.Kind)
		}
	}
	switch {
	case in.Resource == "":
		return nil, fail("resource is missing: want %s", resourceForms[in.Kind])
	case !pattern.MatchString(in.Resource):
		return nil, fail("resource %q is not of the form %s", in.Resource, resourceForms[in.Kind])
	case in.Container != "" && in.Kind != KindCloudRun:
		return nil, fail("container is a field of %s targets", KindCloudRun)
	case in.Branch != "" && in.Kind != KindCloudBuild:
		return nil, fail("branch is a field of %s targets", KindCloudBuild)
	case in.MaxAttempts < 0:
		return nil, fail("max_attempts %d is negative (0 means the worker's default)", in.MaxAttempts)
	}
	t := &Target{Resource: in.Resource, Endpoint: in.Endpoint, Wait: in.Kind != KindCloudBuild, PollInterval: DefaultPollInterval,
		Container: in.Container, Branch: in.Branch}
	if in.Wait != nil {
		t.Wait = *in.Wait
	}
	if err := validEndpoint(in.Endpoint); err != nil {
		return nil, fail("endpoint %q: %v", in.Endpoint, err)
	}
	j := &Job{Name: name, Kind: in.Kind, Target: t, MaxAttempts: in.MaxAttempts}
	for field, p := range map[string]struct {
		v   string
		dst *time.Duration
	}{"timeout": {in.Timeout, &j.Timeout}, "poll_interval": {in.PollInterval, &t.PollInterval}} {
		if p.v == "" {
			continue
		}
		d, err := time.ParseDuration(p.v)
		if err != nil || d <= 0 {
			return nil, fail("%s %q is not a positive Go duration (e.g. \"90s\", \"25m\")", field, p.v)
		}
		*p.dst = d
	}
	return j, nil
}

// validEndpoint accepts "", "HOST:PORT", and "http://HOST:PORT" with a loopback host.
func validEndpoint(e string) error {
	if e == "" {
		return nil
	}
	hostport, plain := strings.CutPrefix(e, "http://")
	if strings.Contains(hostport, "/") {
		return errors.New("want HOST:PORT (TLS) or http://HOST:PORT (plaintext, loopback only), without a path")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" || port == "" {
		return errors.New("want HOST:PORT (TLS) or http://HOST:PORT (plaintext, loopback only)")
	}
	if plain {
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return errors.New("a plaintext endpoint carries no credentials and must be on a loopback address (for local fakes and tests)")
		}
	}
	if _, err := url.Parse("https://" + hostport); err != nil {
		return err
	}
	return nil
}
