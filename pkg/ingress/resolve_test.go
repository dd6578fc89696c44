package ingress_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/runonce/runonce/pkg/ledger"
)

// nextAttempt claims run id as a worker would and begins effect name, and returns what
// BeginEffect answered.
func (b *bundle) nextAttempt(t *testing.T, id, name string) *ledger.BeginEffectResult {
	t.Helper()
	fx, err := b.led.BeginEffect(t.Context(), &ledger.BeginEffectParams{Fence: b.hold(t, id, "host-b/2"), Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

func TestOperatorsResolveAnUncertainEffect(t *testing.T) {
	t.Parallel()
	for _, be := range operatorBackends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := operatorSetup(t, be.open)

			// It happened: the effect is done with the ref, the run queued and
			// republished, and the next attempt skips the effect.
			id := b.failRun(t, "send-invoices", "the mail relay's answer was lost")
			before := b.published()
			r := b.do(t, http.MethodPost, "/v1/runs/"+id+":resolve", jsonBody,
				`{"effect":"send-email","outcome":"done","ref":"msg-7","reason":"the relay's log shows it sent","attempt":1}`)
			if r.status != http.StatusOK || r.body["status"] != "queued" || r.body["republished"] != true || r.body["attempts_made"] != 0.0 {
				t.Fatalf("POST :resolve (done) = %d %v; want 200 queued, republished, a fresh budget", r.status, r.body)
			}
			if got := b.published(); got != before+1 {
				t.Fatalf("%d messages published by the resolution, want 1", got-before)
			}
			r = b.do(t, http.MethodGet, "/v1/runs/"+id, nil, "")
			effs, _ := r.body["effects"].([]any)
			if e, _ := effs[0].(map[string]any); len(effs) != 1 || e["status"] != "done" || e["ref"] != "msg-7" {
				t.Fatalf("effects after :resolve (done) = %v; want send-email done with ref msg-7", effs)
			}
			hist, _ := r.body["history"].([]any)
			last, _ := hist[len(hist)-1].(map[string]any)
			if text, _ := last["text"].(string); last["kind"] != "effect_resolved" || last["actor"] != "anonymous (authentication off)" ||
				!strings.Contains(text, `"send-email" happened`) || !strings.Contains(text, "the relay's log shows it sent") {
				t.Fatalf("the last history event = %v; want effect_resolved with the actor, the effect, the verdict and the reason", last)
			}
			if fx := b.nextAttempt(t, id, "send-email"); !fx.Done || fx.Effect.Ref != "msg-7" {
				t.Fatalf("the next attempt's BeginEffect = done %v, ref %q; want done, msg-7", fx.Done, fx.Effect.Ref)
			}

			// It did not happen: the next attempt does it afresh, under the same key.
			id = b.failRun(t, "send-invoices", "the mail relay's answer was lost")
			r = b.do(t, http.MethodPost, "/v1/runs/"+id+":resolve", jsonBody, `{"effect":"send-email","outcome":"not_done","reason":"nothing in the relay's log"}`)
			if r.status != http.StatusOK || r.body["status"] != "queued" || r.body["republished"] != true {
				t.Fatalf("POST :resolve (not done) = %d %v; want 200 queued and republished", r.status, r.body)
			}
			fx := b.nextAttempt(t, id, "send-email")
			if fx.Done || fx.PreviousAttempt != 0 || fx.Effect.Key != ledger.EffectKey(id, "send-email") {
				t.Fatalf("the next attempt's BeginEffect = done %v, previous attempt %d, key %s; want new (previous 0) under the same key",
					fx.Done, fx.PreviousAttempt, fx.Effect.Key)
			}
			r = b.do(t, http.MethodPost, "/v1/runs/"+id+":resolve", jsonBody, `{"effect":"send-email","outcome":"not_done","reason":"again"}`)
			if r.status != http.StatusConflict || !strings.Contains(r.body["error"].(string), "only a failed run can be resolved") {
				t.Fatalf("a :resolve of a running run = %d %v; want 409 naming the rule", r.status, r.body)
			}
		})
	}
}

func TestResolveRequestsNameTheProblem(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	id := b.failRun(t, "job", "boom")
	absent := strings.Repeat("0", 64)
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"outcome":"done","reason":"x"}`, 400, "needs the effect"},
		{`{"effect":"send-email","reason":"x"}`, 400, `outcome "" is not "done"`},
		{`{"effect":"send-email","outcome":"maybe","reason":"x"}`, 400, `outcome "maybe"`},
		{`{"effect":"send-email","outcome":"not_done","ref":"e-1","reason":"x"}`, 400, `ref names what the effect made`},
		{`{"effect":"send-email","outcome":"done","ref":"` + strings.Repeat("x", ledger.MaxEffectRef+1) + `","reason":"x"}`, 400, "ref is 1025 bytes; the limit is 1024"},
		{`{"effect":"send-email","outcome":"done"}`, 400, "needs a reason"},
		{`{"effect":"send-email","outcom":"done","reason":"x"}`, 400, `unknown field "outcom"`},
		{`{"effect":"send-email","outcome":"done","reason":"x"} {}`, 400, "more than one JSON value"},
		{`effect=send-email`, 400, "not JSON"},
		{`{"effect":"send-email","outcome":"done","reason":"x"}`, 400, `as done needs its ref`},
		{`{"effect":"send-emial","outcome":"done","ref":"e-1","reason":"x"}`, 404, `has no effect "send-emial"; its effects: "send-email" (pending)`},
		{`{"effect":"send-email","outcome":"done","ref":"e-1","reason":"x","attempt":7}`, 409, "not 7"},
		{`{"effect":"send-email","outcome":"done","ref":"e-1","reason":"` + strings.Repeat("x", ledger.MaxReason+1) + `"}`, 400, "reason"},
	} {
		r := b.do(t, http.MethodPost, "/v1/runs/"+id+":resolve", jsonBody, c.body)
		msg, _ := r.body["error"].(string)
		if r.status != c.status || !strings.Contains(msg, c.want) {
			t.Errorf(":resolve %.90s = %d %q; want %d naming %q", c.body, r.status, msg, c.status, c.want)
		}
	}
	if r := b.do(t, http.MethodPost, "/v1/runs/"+absent+":resolve", jsonBody, `{"effect":"run","outcome":"done","ref":"e-1","reason":"x"}`); r.status != http.StatusNotFound ||
		!strings.Contains(r.body["error"].(string), "no run") {
		t.Errorf(":resolve of an absent run = %d %v; want 404 no run", r.status, r.body)
	}
	// Declared JSON, as the other actions' bodies: a form a page posts is refused.
	if r := b.do(t, http.MethodPost, "/v1/runs/"+id+":resolve", map[string]string{"Content-Type": "text/plain"},
		`{"effect":"send-email","outcome":"done","reason":"x"}`); r.status != http.StatusUnsupportedMediaType {
		t.Errorf(":resolve of a text/plain body = %d %v; want 415", r.status, r.body)
	}
	if got, err := b.led.Get(t.Context(), &ledger.GetParams{RunID: id}); err != nil || got.Status != ledger.StatusFailed {
		t.Fatalf("after the refused requests the run is %v (%v), want failed", got, err)
	}
	// A done effect is not uncertain.
	done := b.failRun(t, "job", "boom")
	if r := b.do(t, http.MethodPost, "/v1/runs/"+done+":resolve", jsonBody, `{"effect":"send-email","outcome":"done","ref":"msg-1","reason":"x"}`); r.status != http.StatusOK {
		t.Fatalf(":resolve = %d %v", r.status, r.body)
	}
	if _, err := b.led.Fail(t.Context(), &ledger.FailParams{Fence: b.hold(t, done, "host-b/2"), Error: "again"}); err != nil {
		t.Fatal(err)
	}
	r := b.do(t, http.MethodPost, "/v1/runs/"+done+":resolve", jsonBody, `{"effect":"send-email","outcome":"not_done","reason":"x"}`)
	if msg, _ := r.body["error"].(string); r.status != http.StatusConflict || !strings.Contains(msg, `effect "send-email"`) || !strings.Contains(msg, "already done") {
		t.Fatalf(":resolve of a done effect = %d %q; want 409 naming the effect, already done", r.status, msg)
	}
}

func TestResolveWhosePublishFailsSaysTheRescuerRepublishes(t *testing.T) {
	t.Parallel()
	b := operatorSetup(t, func(tb testing.TB) ledger.Driver { return backends[0].open(tb, nil) })
	id := b.failRun(t, "job", "boom")
	b.pub.fail.Store(true)
	r := b.do(t, http.MethodPost, "/v1/runs/"+id+":resolve", jsonBody, `{"effect":"send-email","outcome":"not_done","reason":"not sent"}`)
	if r.status != http.StatusOK || r.body["republished"] != false || !strings.Contains(r.body["warning"].(string), "rescuer") {
		t.Fatalf(":resolve with Pub/Sub down = %d %v; want 200, not republished, a warning naming the rescuer", r.status, r.body)
	}
	if got, _ := b.led.Get(t.Context(), &ledger.GetParams{RunID: id}); got.Status != ledger.StatusQueued || got.Deadline.IsZero() {
		t.Fatalf("run = %v; want queued with a pickup deadline", got)
	}
}
