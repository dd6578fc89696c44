package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/runonce/runonce/pkg/internal/cleantext"
	"github.com/runonce/runonce/pkg/ledger"
)

// Request headers that identify a run.
const (
	HeaderSchedulerJobName      = "X-CloudScheduler-JobName"
	HeaderSchedulerScheduleTime = "X-CloudScheduler-ScheduleTime"
	HeaderIdempotencyKey        = "Idempotency-Key"
	// BodyFieldJobKey is the JSON body field that keys a run when no header does.
	BodyFieldJobKey = "job_key"
)

// Limits on the caller's identity of a run.
const (
	MaxKeyLen              = 255
	MaxSchedulerJobNameLen = 500
	MaxNamespaceLen        = 256
)

// Key sources, as logged and counted.
const (
	SourceScheduler      = "scheduler"
	SourceIdempotencyKey = "idempotency-key"
	SourceJobKey         = "job_key"
	// SourceManual: a run an operator started by hand (POST /v1/jobs/{job}:run).
	SourceManual = "manual"
)

// Key is a run's identity as derived from a request.
type Key struct {
	// Identity is what the ledger claims: RunID, Namespace, Job, Key, ScheduleTime
	// (UTC; zero for a keyed run), PayloadHash.
	Identity ledger.Identity
	// Source says where the key came from: SourceScheduler, SourceIdempotencyKey or
	// SourceJobKey.
	Source string
	// IgnoredIdempotencyKey is set when the request carried an Idempotency-Key besides
	// the scheduler's headers, which key the run instead (docs/design.md).
	IgnoredIdempotencyKey bool
}

// keyError is a request whose identity cannot be derived: a 400 naming the problem.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }

func badKey(format string, args ...any) error { return &keyError{fmt.Sprintf(format, args...)} }

// DeriveKey derives the identity of the run a request asks for, as docs/design.md's "The dedup
// key" says: the scheduler's X-CloudScheduler-JobName and X-CloudScheduler-ScheduleTime
// (strict RFC 3339, normalised to UTC; further than maxSkew after now is a forced run
// and refused), even when an Idempotency-Key comes too, else Idempotency-Key (a bare
// token or an RFC 8941 string), else the job_key of a body declared JSON (Content-Type:
// application/json; a job_key in a body declared otherwise is refused, since a web page
// can post text/plain anywhere). Header names are matched case-insensitively. namespace
// and job must already be valid. The error, when there is one, names the problem for a 400.
func DeriveKey(namespace, job string, h http.Header, body []byte, now time.Time, maxSkew time.Duration) (*Key, error) {
	id := ledger.Identity{Namespace: namespace, Job: job, PayloadHash: ledger.PayloadHash(body)}
	names, err := headerValue(h, HeaderSchedulerJobName)
	if err != nil {
		return nil, err
	}
	times, err := headerValue(h, HeaderSchedulerScheduleTime)
	if err != nil {
		return nil, err
	}
	idem, err := headerValue(h, HeaderIdempotencyKey)
	if err != nil {
		return nil, err
	}
	switch {
	case names != nil && times != nil:
		name, st, err := parseScheduler(job, *names, *times, now, maxSkew)
		if err != nil {
			return nil, err
		}
		// The scheduler's headers win over an Idempotency-Key: they name the tick, while a
		// header set on a scheduler job is the same on every tick, and keying on it would
		// make every later tick a duplicate of the first.
		id.Key, id.ScheduleTime = name, st
		id.RunID = ledger.ScheduledRunID(namespace, job, name, st)
		return &Key{Identity: id, Source: SourceScheduler, IgnoredIdempotencyKey: idem != nil}, nil
	case times != nil && idem == nil:
		return nil, badKey("%s is set but %s is missing: a scheduled run needs both", HeaderSchedulerScheduleTime, HeaderSchedulerJobName)
	case names != nil && idem == nil:
		return nil, badKey("%s is set but %s is missing: a scheduled run needs both, and a forced run without a schedule time needs an %s", HeaderSchedulerJobName, HeaderSchedulerScheduleTime, HeaderIdempotencyKey)
	case idem != nil:
		k, err := parseIdempotencyKey(*idem)
		if err != nil {
			return nil, err
		}
		id.Key = k
		id.RunID = ledger.KeyedRunID(namespace, job, k)
		return &Key{Identity: id, Source: SourceIdempotencyKey}, nil
	}
	k, found, err := bodyJobKey(body)
	if ctErr := jsonContent(h); ctErr != nil && (found || err != nil) {
		// The body is read for a key only when it is declared JSON: a web page's
		// text/plain form post must not key (and so create) a run.
		return nil, badKey("the body has a %q field, but %v: %q is read only from a body declared JSON; send Content-Type: application/json, or an %s header",
			BodyFieldJobKey, ctErr, BodyFieldJobKey, HeaderIdempotencyKey)
	}
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, badKey("no run key: send %s and %s (Cloud Scheduler), an %s header, or a JSON body (Content-Type: application/json) with a %q field",
			HeaderSchedulerJobName, HeaderSchedulerScheduleTime, HeaderIdempotencyKey, BodyFieldJobKey)
	}
	id.Key = k
	id.RunID = ledger.KeyedRunID(namespace, job, k)
	return &Key{Identity: id, Source: SourceJobKey}, nil
}

// headerValue returns the one value of the header named name in any case, nil when it
// is absent, and an error when it is repeated.
func headerValue(h http.Header, name string) (*string, error) {
	var found []string
	if v, ok := h[name]; ok { // the canonical spelling, as net/http stores it
		found = append(found, v...)
	}
	canon := http.CanonicalHeaderKey(name)
	for k, v := range h {
		if k != name && (k == canon || strings.EqualFold(k, name)) {
			found = append(found, v...)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return &found[0], nil
	}
	return nil, badKey("%s is sent %d times: send it once", name, len(found))
}

func parseScheduler(job, name, ts string, now time.Time, maxSkew time.Duration) (string, time.Time, error) {
	if name == "" {
		return "", time.Time{}, badKey("%s is empty", HeaderSchedulerJobName)
	}
	if len(name) > MaxSchedulerJobNameLen {
		return "", time.Time{}, badKey("%s is %d characters, the limit is %d", HeaderSchedulerJobName, len(name), MaxSchedulerJobNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "", time.Time{}, badKey("%s %s has %q at byte %d: a Cloud Scheduler job ID has letters, digits, '_' and '-'",
				HeaderSchedulerJobName, quoted(name), c, i)
		}
	}
	t, err := ParseRFC3339(ts)
	if err != nil {
		return "", time.Time{}, badKey("%s %s is not an RFC 3339 time (e.g. 2026-10-16T12:00:00Z): %v", HeaderSchedulerScheduleTime, quoted(ts), err)
	}
	t = t.UTC()
	if limit := now.Add(maxSkew); t.After(limit) {
		return "", time.Time{}, badKey("%s %s is %s in the future, more than the allowed skew of %s: this looks like a forced run, "+
			"which reuses the next run's schedule time and would swallow it; start a run now with `runonce jobs run %s` (POST /v1/jobs/%s:run), "+
			"or post it with an %s and without the scheduler headers",
			HeaderSchedulerScheduleTime, t.Format(time.RFC3339Nano), t.Sub(now).Round(time.Millisecond), maxSkew, job, job, HeaderIdempotencyKey)
	}
	return name, t, nil
}

// parseIdempotencyKey accepts a bare token or an RFC 8941 sf-string ("…" with \" and
// \\ escapes), as the IETF httpapi draft specifies.
func parseIdempotencyKey(v string) (string, error) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' {
		s, ok := parseSFString(v)
		if !ok {
			return "", badKey("%s %s is not a valid quoted string", HeaderIdempotencyKey, cleantext.Clean(v))
		}
		v = s
	}
	if v == "" {
		return "", badKey("%s is empty", HeaderIdempotencyKey)
	}
	if len(v) > MaxKeyLen {
		return "", badKey("%s is %d characters, the limit is %d", HeaderIdempotencyKey, len(v), MaxKeyLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return "", badKey("%s %s has byte %#x at %d: use printable ASCII", HeaderIdempotencyKey, quoted(v), c, i)
		}
	}
	return v, nil
}

func parseSFString(v string) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	in := v[1 : len(v)-1]
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == '\\':
			if i+1 >= len(in) || (in[i+1] != '"' && in[i+1] != '\\') {
				return "", false
			}
			i++
			b.WriteByte(in[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// jsonContent reports, as an error naming the problem, a request whose body is not
// declared JSON: Content-Type application/json, parameters allowed. A web page can post
// text/plain, form and multipart bodies to any site without a CORS preflight, never
// application/json, so a body is read as JSON only when it says it is.
func jsonContent(h http.Header) error {
	v, err := headerValue(h, "Content-Type")
	if err != nil {
		return err
	}
	if v == nil || *v == "" {
		return errors.New("the request has no Content-Type")
	}
	mt, _, err := mime.ParseMediaType(*v)
	if err != nil {
		return fmt.Errorf("Content-Type %s cannot be read: %v", quoted(*v), err)
	}
	if mt != "application/json" {
		return fmt.Errorf("Content-Type %s is not application/json", quoted(*v))
	}
	return nil
}

// bodyJobKey returns the body's job_key when the body is a JSON object that has one.
func bodyJobKey(body []byte) (string, bool, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return "", false, nil
	}
	var obj struct {
		JobKey json.RawMessage `json:"job_key"`
	}
	if err := json.Unmarshal(body, &obj); err != nil || obj.JobKey == nil {
		return "", false, nil // not JSON (the payload is opaque): there is just no job_key
	}
	var k string
	if err := json.Unmarshal(obj.JobKey, &k); err != nil {
		return "", false, badKey("body field %q must be a string", BodyFieldJobKey)
	}
	if k == "" {
		return "", false, badKey("body field %q is empty", BodyFieldJobKey)
	}
	if len(k) > MaxKeyLen {
		return "", false, badKey("body field %q is %d bytes, the limit is %d", BodyFieldJobKey, len(k), MaxKeyLen)
	}
	if !utf8.ValidString(k) {
		return "", false, badKey("body field %q is not valid UTF-8", BodyFieldJobKey)
	}
	for _, r := range k {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return "", false, badKey("body field %q %s has the control or format character %U", BodyFieldJobKey, quoted(k), r)
		}
	}
	return k, true, nil
}

// validNamespace checks a namespace from the configuration or a namespace header.
func validNamespace(ns string) error {
	if len(ns) > MaxNamespaceLen {
		return fmt.Errorf("namespace is %d characters, the limit is %d", len(ns), MaxNamespaceLen)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-/:", c) >= 0) {
			return fmt.Errorf("namespace %s has %q at byte %d: use letters, digits, '.', '_', '-', '/' and ':'", quoted(ns), c, i)
		}
	}
	return nil
}

// quoted returns v escaped by cleantext.Clean between double quotes, for error messages.
func quoted(v string) string { return `"` + cleantext.Clean(v) + `"` }
