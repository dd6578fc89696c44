package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/runonce/runonce/pkg/schedule"
)

// MaxNameLen is the longest job name.
const MaxNameLen = 128

// ValidName reports whether name is a job name: 1 to MaxNameLen characters from
// [A-Za-z0-9._-], not "." or "..". Job names appear in URL paths, run IDs, logs and
// message attributes, so they are kept plain.
func ValidName(name string) error {
	if name == "" {
		return errors.New("job name is empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("job name is %d characters, the limit is %d", len(name), MaxNameLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("job name %q is reserved", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("job name %q has %q at byte %d: use letters, digits, '.', '_' and '-'", name, c, i)
		}
	}
	return nil
}

// Auth values of a job.
const (
	AuthNone = "none"
	// AuthOIDC sends the worker's Google ID token with the job's URL as audience.
	AuthOIDC = "oidc"
)

// Job is a job the file names.
type Job struct {
	Name string
	// URL is called with the run's payload as the body (absolute http or https). It is
	// nil for a job with no target: a Go handler in some worker runs it.
	URL *url.URL
	// Method defaults to POST.
	Method string
	// Timeout bounds one call; zero means the worker's default.
	Timeout time.Duration
	// Headers are sent with every call (besides the run's identity headers).
	Headers map[string]string
	// Auth is AuthNone (the default) or AuthOIDC.
	Auth string
	// MaxAttempts bounds the attempts of a run; zero means the worker's default.
	MaxAttempts int
	// Result keeps the target's answer to a call that completes the run (its status and
	// a bounded body) as the run's result, replayed to duplicates. Off by default:
	// bodies may be sensitive.
	Result bool
	// Kind is KindHTTP (the default: URL is called) or a Google Cloud API target's kind,
	// which Target then configures.
	Kind string
	// Target is the Google Cloud API target of a job whose Kind is not KindHTTP.
	Target *Target
	// Schedule is the schedule the job's ticks follow when the file gives one
	// (schedule and time_zone); nil otherwise.
	Schedule *schedule.Schedule
	// SchedulerJob names the Cloud Scheduler job (projects/P/locations/L/jobs/J) whose
	// schedule, time zone, state and retry settings runonce reads instead; empty
	// otherwise. Schedule and SchedulerJob are never both set.
	SchedulerJob string
	// CatchUp is how far back runonce's own scheduler (-schedule) fires the ticks it
	// missed while down; zero: none, as Cloud Scheduler. Only with Schedule.
	CatchUp time.Duration
	// MissedAfter is how long after a tick its run may still arrive before the tick is
	// missed; zero: the scheduler's retry window (schedule.Grace: Cloud Scheduler's
	// job's for SchedulerJob, its defaults, schedule.DefaultRetry, for Schedule).
	MissedAfter time.Duration
}

// HasSchedule reports whether runonce knows the job's ticks: a schedule or a Cloud
// Scheduler job.
func (j *Job) HasSchedule() bool { return j.Schedule != nil || j.SchedulerJob != "" }

// Grace is how long after a tick its run may arrive before the tick is missed, given the
// retry settings of the scheduler that sends the ticks (the Cloud Scheduler job's for
// SchedulerJob; schedule.DefaultRetry for Schedule).
func (j *Job) Grace(r schedule.Retry) schedule.Grace {
	return schedule.Grace{After: j.MissedAfter, Retry: r}
}

// HasTarget reports whether the job names a target: a URL, or a Google Cloud API
// target; a job without one is run by a Go handler.
func (j *Job) HasTarget() bool { return j.URL != nil || j.Target != nil }

// reservedHeaders are set by the worker on every call; a jobs file may not set them.
var reservedHeaders = []string{
	"Idempotency-Key", "X-Runonce-Run-Id", "X-Runonce-Job", "X-Runonce-Attempt",
	"X-Runonce-Schedule-Time", "Authorization", "Content-Length", "Host",
}

type fileJSON struct {
	Jobs map[string]*jobJSON `json:"jobs"`
}

type jobJSON struct {
	URL         string            `json:"url"`
	Method      string            `json:"method"`
	Timeout     string            `json:"timeout"`
	Headers     map[string]string `json:"headers"`
	Auth        string            `json:"auth"`
	MaxAttempts int               `json:"max_attempts"`
	Result      bool              `json:"result"`
	targetJSON
	scheduleJSON
}

// Load reads and validates the jobs file at path.
func Load(path string) (map[string]*Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jobs file: %w", err)
	}
	m, err := Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("jobs file %s: %w", path, err)
	}
	return m, nil
}

// Parse reads and validates a jobs file. A file that is not JSON, or not a jobs file,
// is refused with the line and column of the problem.
func Parse(r io.Reader) (map[string]*Job, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if err := bareJobMap(b); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f fileJSON
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a jobs file: %w", locate(b, err))
	}
	if dec.More() {
		return nil, fmt.Errorf("not a jobs file: %s: more than one JSON value", position(b, int(dec.InputOffset())))
	}
	if f.Jobs == nil {
		return nil, errors.New(`no "jobs" object: a jobs file is {"jobs": {"NAME": {…}, …}}`)
	}
	out := make(map[string]*Job, len(f.Jobs))
	var errs []error
	for _, name := range sortedKeys(f.Jobs) {
		j, err := validate(name, f.Jobs[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[name] = j
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// bareJobMap refuses a file whose top level is a map of jobs without the "jobs" object
// around it ({"mine": {}}), which the decoder would report as an unknown field.
func bareJobMap(b []byte) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil || len(top) == 0 {
		return nil // not an object: the decoder says what it is
	}
	if _, ok := top["jobs"]; ok {
		return nil
	}
	for _, v := range top {
		if v = bytes.TrimSpace(v); len(v) == 0 || v[0] != '{' {
			return nil
		}
	}
	names := sortedKeys(top)
	return fmt.Errorf(`not a jobs file: its top level is a map of jobs (%s) with no "jobs" object around it: write {"jobs": {%q: …}}`,
		strings.Join(names, ", "), names[0])
}

// unknownField is the decoder's error for a field no job or file has.
var unknownField = regexp.MustCompile(`^json: unknown field "(.*)"$`)

// locate adds to a decoding error of b the line and column where it happened.
func locate(b []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("%s: %w", position(b, int(syntax.Offset)), err)
	case errors.As(err, &typ):
		what := "the file"
		if i := strings.LastIndexByte(typ.Field, '.'); typ.Field != "" {
			what = fmt.Sprintf("field %q", typ.Field[i+1:])
		}
		return fmt.Errorf("%s: %s is a JSON %s, want %s", position(b, int(typ.Offset)), what, typ.Value, jsonKind(typ.Type))
	case errors.Is(err, io.EOF):
		return errors.New("the file is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: the file ends inside a value", position(b, len(b)))
	}
	// An unknown field carries no offset: the first place its name stands as a key.
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		if loc := regexp.MustCompile(regexp.QuoteMeta(strconv.Quote(m[1])) + `\s*:`).FindIndex(b); loc != nil {
			return fmt.Errorf("%s: unknown field %q", position(b, loc[0]), m[1])
		}
	}
	return err
}

// jsonKind names the JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	}
	return t.String()
}

// position is offset's line and column in b, both from 1 (the column counts bytes).
func position(b []byte, offset int) string {
	offset = min(max(offset, 0), len(b))
	line := bytes.Count(b[:offset], []byte("\n")) + 1
	col := offset - bytes.LastIndexByte(b[:offset], '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

func validate(name string, in *jobJSON) (*Job, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	if in == nil {
		return nil, fmt.Errorf("job %q: is null, want an object ({} for a job a Go handler runs)", name)
	}
	j, err := validateTarget(name, in)
	if err != nil {
		return nil, err
	}
	if err := in.scheduleJSON.apply(j); err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	return j, nil
}

// validateTarget validates the job's target: a URL, a Google Cloud API target, or none.
func validateTarget(name string, in *jobJSON) (*Job, error) {
	if in.Kind != "" && in.Kind != KindHTTP {
		return validateAPITarget(name, in)
	}
	if err := in.targetJSON.httpOnly(); err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("job %q: %s", name, fmt.Sprintf(format, args...))
	}
	if in.URL == "" {
		if in.Method != "" || in.Timeout != "" || in.Headers != nil || in.Auth != "" || in.Result {
			return nil, fail("has no url: method, timeout, headers, auth and result are an HTTP target's (a job a Go handler runs names none of them; it leaves a result with worker.SetResult)")
		}
		if in.MaxAttempts < 0 {
			return nil, fail("max_attempts %d is negative (0 means the worker's default)", in.MaxAttempts)
		}
		return &Job{Name: name, MaxAttempts: in.MaxAttempts}, nil
	}
	u, err := url.Parse(in.URL)
	switch {
	case err != nil:
		return nil, fail("url %q: %v", in.URL, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return nil, fail("url %q is not an absolute http or https URL", in.URL)
	}
	j := &Job{Name: name, Kind: KindHTTP, URL: u, Method: http.MethodPost, Auth: AuthNone, MaxAttempts: in.MaxAttempts, Result: in.Result}
	if in.Method != "" {
		j.Method = strings.ToUpper(in.Method)
		if !slices.Contains([]string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodGet, http.MethodDelete}, j.Method) {
			return nil, fail("method %q: want POST, PUT, PATCH, GET or DELETE", in.Method)
		}
	}
	if in.Timeout != "" {
		d, err := time.ParseDuration(in.Timeout)
		if err != nil || d <= 0 {
			return nil, fail("timeout %q is not a positive Go duration (e.g. \"90s\", \"25m\"; write days as hours: \"24h\")", in.Timeout)
		}
		j.Timeout = d
	}
	if in.Auth != "" {
		if in.Auth != AuthNone && in.Auth != AuthOIDC {
			return nil, fail("auth %q: want %q or %q", in.Auth, AuthNone, AuthOIDC)
		}
		j.Auth = in.Auth
	}
	if in.MaxAttempts < 0 {
		return nil, fail("max_attempts %d is negative (0 means the worker's default)", in.MaxAttempts)
	}
	if len(in.Headers) > 0 {
		j.Headers = make(map[string]string, len(in.Headers))
		for k, v := range in.Headers {
			if !validHeaderName(k) {
				return nil, fail("header name %q is not a valid HTTP header name", k)
			}
			for _, r := range reservedHeaders {
				if strings.EqualFold(k, r) {
					return nil, fail("header %q is set by the worker and cannot be configured", k)
				}
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, fail("header %q has a control character in its value", k)
			}
			j.Headers[http.CanonicalHeaderKey(k)] = v
		}
	}
	return j, nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Names returns the job names of m, sorted.
func Names(m map[string]*Job) []string { return sortedKeys(m) }
