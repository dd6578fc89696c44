package ingress_test

import (
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
)

// strictRFC3339 is RFC 3339 §5.6's date-time with its ranges: what the ingress accepts.
var strictRFC3339 = regexp.MustCompile(`^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$`)

// FuzzDeriveKey feeds arbitrary scheduler headers, Idempotency-Keys and bodies to the key
// derivation. It must never panic; an accepted schedule time must be strict RFC 3339;
// an accepted request must yield a valid run ID that is
// deterministic, names a UTC schedule time no further than the skew ahead, and is the
// same for the same instant written at another UTC offset and in another header case;
// a body's job_key keys a run only when the body is declared JSON.
func FuzzDeriveKey(f *testing.F) {
	now := time.Date(2026, 11, 1, 12, 0, 30, 0, time.UTC)
	for _, s := range []struct{ name, ts, idem, body, ct string }{
		{"daily-report", "2026-11-01T12:00:00Z", "", "", ""},
		{"daily-report", "2026-11-01T05:00:00-07:00", "", `{"a":1}`, ""},
		{"daily-report", "2026-11-01T12:00:00.123456789+00:00", "", "", ""},
		{"daily-report", "2026-11-01 12:00:00Z", "", "", ""},
		{"daily-report", "2026-11-01T12:00:00+0000", "", "", ""},
		{"daily-report", "2026-11-01T12:05:00Z", "", "", ""},
		{"j", "", "", "", ""},
		{"", "2026-11-01T12:00:00Z", "", "", ""},
		{"", "", "daily-report:2026-11-01", "", ""},
		{"", "", `"quoted \"key\""`, "", ""},
		{"", "", `"unterminated`, "", ""},
		{"", "", "", `{"job_key":"k-1"}`, "application/json"},
		{"", "", "", `{"job_key":"k-1"}`, "text/plain"},
		{"", "", "", `{"job_key":"k-1"}`, "application/json; charset=utf-8"},
		{"", "", "", `{"job_key":"k-1"}`, "application/json; charset"},
		{"", "", "", `{"job_key":7}`, "application/json"},
		{"", "", "", `{"job_key":"a\u202eb"}`, "application/json"},
		{"", "", "", "\x00\xff", ""},
		{"a b", "2026-11-01T12:00:00Z", "", "", ""},
		{"", "", "", `{"job_key":""}`, "application/json"},
		{"j", "", "forced-1", "", ""},
		{"daily-report", "2026-11-01T12:00:00,5Z", "", "", ""},
		{"daily-report", "2026-11-01T1:00:00Z", "", "", ""},
		{"daily-report", "2026-11-01T12:00:00+24:01", "", "", ""},
	} {
		f.Add(s.name, s.ts, s.idem, s.body, s.ct)
	}
	f.Fuzz(func(t *testing.T, name, ts, idem, body, ct string) {
		h := http.Header{}
		if ct != "" {
			h["content-type"] = []string{ct}
		}
		if name != "" {
			h["x-cloudscheduler-jobname"] = []string{name}
		}
		if ts != "" {
			h[ingress.HeaderSchedulerScheduleTime] = []string{ts}
		}
		if idem != "" {
			h["IDEMPOTENCY-KEY"] = []string{idem}
		}
		k, err := ingress.DeriveKey("ns", "job", h, []byte(body), now, time.Minute)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		id := k.Identity
		if !ledger.ValidRunID(id.RunID) || id.Key == "" || len(id.Key) > 500 {
			t.Fatalf("bad identity %+v", id)
		}
		if id.PayloadHash != ledger.PayloadHash([]byte(body)) {
			t.Fatal("payload hash")
		}
		again, err := ingress.DeriveKey("ns", "job", h, []byte(body), now, time.Minute)
		if err != nil || !reflect.DeepEqual(again.Identity, id) {
			t.Fatalf("not deterministic: %+v %v", again, err)
		}
		switch k.Source {
		case ingress.SourceScheduler:
			if !strictRFC3339.MatchString(ts) {
				t.Fatalf("schedule time %q accepted, but it is not RFC 3339 §5.6", ts)
			}
			if id.ScheduleTime.Location() != time.UTC || id.ScheduleTime.After(now.Add(time.Minute)) {
				t.Fatalf("schedule time %v", id.ScheduleTime)
			}
			if id.RunID != ledger.ScheduledRunID("ns", "job", id.Key, id.ScheduleTime) {
				t.Fatal("run ID is not ScheduledRunID")
			}
			for _, off := range []int{-7 * 3600, 5*3600 + 1800, 14 * 3600} {
				h2 := http.Header{}
				h2.Set(ingress.HeaderSchedulerJobName, name)
				h2.Set(strings.ToLower(ingress.HeaderSchedulerScheduleTime), id.ScheduleTime.In(time.FixedZone("", off)).Format(time.RFC3339Nano))
				k2, err := ingress.DeriveKey("ns", "job", h2, []byte(body), now, time.Minute)
				if err != nil || k2.Identity.RunID != id.RunID {
					t.Fatalf("offset %d: %+v %v, want run %s", off, k2, err, id.RunID)
				}
			}
		case ingress.SourceJobKey:
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				t.Fatalf("job_key read from a body declared %q", ct)
			}
			fallthrough
		case ingress.SourceIdempotencyKey:
			if !id.ScheduleTime.IsZero() || id.RunID != ledger.KeyedRunID("ns", "job", id.Key) {
				t.Fatalf("keyed identity %+v", id)
			}
		default:
			t.Fatalf("source %q", k.Source)
		}
	})
}
