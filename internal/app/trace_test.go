package app

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/worker"
)

// One run is one trace across the ingress and the worker: the caller's trace context
// (Cloud Run's X-Cloud-Trace-Context) is the parent of the ingress's server span, whose
// children are the ledger claim and the publish; the message's traceparent attribute
// (through Pub/Sub's wire, the in-process server) makes the publish the parent of the
// worker's attempt span, whose children are the ledger calls and the HTTP call at the
// target, which receives a traceparent of the same trace. Each process has its own
// tracer provider and in-memory exporter, as two processes would.
func TestOneRunOneTrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const project = "trace-project"

	ps, err := pubsubtest.NewInProcess(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(ctx, ps.Client, "runs", "worker", &pubsubpb.Subscription{AckDeadlineSeconds: 30}); err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(ps.Client, "runs", nil)
	defer pub.Close()
	led := ledger.New(memory.New(nil), nil)

	var mu sync.Mutex
	var targetCalls []http.Header
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		targetCalls = append(targetCalls, r.Header.Clone())
		mu.Unlock()
	}))
	defer target.Close()

	ingressSpans, workerSpans := tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()
	ingressTr, err := obs.NewTracing(ctx, obs.Export{Service: "runonce-ingress"}, ingressSpans)
	if err != nil {
		t.Fatal(err)
	}
	workerTr, err := obs.NewTracing(ctx, obs.Export{Service: "runonce-worker"}, workerSpans)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	log := obs.WithTraceFields(obs.NewLogger(&logs, 0), project)

	u, _ := url.Parse(target.URL + "/report")
	mux := worker.NewMux()
	worker.MuxFromJobs(mux, map[string]*jobs.Job{"report": {Name: "report", URL: u, Method: http.MethodPost, Timeout: 10 * time.Second, Auth: jobs.AuthNone}},
		&worker.HTTPTargetOptions{Client: &http.Client{Transport: workerTr.Transport(nil)}})

	metrics, err := obs.NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	in := &IngressFlags{ServerFlags: ServerFlags{Retention: ledger.DefaultRetention}, Topic: ps.URL("runs"), Namespace: "trace-test",
		MaxBody: 1 << 20, MaxSkew: time.Minute}
	h, err := newIngress(in, led, pub, auth.None{}, auth.None{}, []string{"report"}, nil, project, metrics, ingressTr, log)
	if err != nil {
		t.Fatal(err)
	}
	ingressSrv := httptest.NewServer(h)
	defer ingressSrv.Close()

	wln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- ServeWorker(ctx, &WorkerSetup{
			Flags: WorkerFlags{
				ServerFlags: ServerFlags{Addr: wln.Addr().String(), Retention: ledger.DefaultRetention},
				Concurrency: 2, Lease: 30 * time.Second, Grace: time.Second, MaxAttempts: 3,
				RescueInterval: time.Minute, MaxAckExtension: time.Minute, Subscription: ps.URL("worker"),
			},
			Ledger: led, Handler: mux, Auth: auth.None{}, Log: log, Listener: wln,
			Subscriber: queue.NewSubscriber(ps.Client, "worker", &queue.SubscriberOptions{Concurrency: 2, ShutdownTimeout: 2 * time.Second}),
			Tracing:    workerTr,
		})
	}()

	// The caller's trace, as Cloud Run hands it to the ingress.
	const callerTrace = "105445aa7843bc8bf206b12000100000"
	req, _ := http.NewRequest(http.MethodPost, ingressSrv.URL+"/v1/jobs/report", strings.NewReader(`{"n":1}`))
	req.Header.Set("Idempotency-Key", "report:trace-1")
	req.Header.Set("X-Cloud-Trace-Context", callerTrace+"/1;o=0") // Cloud Run did not sample it: runs are traced anyway
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		RunID string `json:"run_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %v", resp.StatusCode, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := led.Get(ctx, &ledger.GetParams{RunID: answer.RunID})
		if err == nil && r.Status == ledger.StatusCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not completed: %v %v", answer.RunID, r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-workerDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("worker: %v", err)
	}
	for _, tr := range []*obs.Tracing{ingressTr, workerTr} { // Shutdown would empty the exporters
		if err := tr.TracerProvider().(*sdktrace.TracerProvider).ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	spans := map[string]tracetest.SpanStub{}
	var all []tracetest.SpanStub
	for _, s := range append(ingressSpans.GetSpans(), workerSpans.GetSpans()...) {
		all = append(all, s)
		if _, dup := spans[s.Name]; !dup {
			spans[s.Name] = s
		}
		if got := s.SpanContext.TraceID().String(); got != callerTrace {
			t.Errorf("span %q is in trace %s, want the caller's %s", s.Name, got, callerTrace)
		}
	}
	names := func() []string {
		var n []string
		for _, s := range all {
			n = append(n, s.Name+" ("+s.SpanKind.String()+")")
		}
		return n
	}
	get := func(name string) tracetest.SpanStub {
		t.Helper()
		s, ok := spans[name]
		if !ok {
			t.Fatalf("no span %q among %v", name, names())
		}
		return s
	}
	t.Logf("spans: %v", names())
	server := get("POST /v1/jobs/{job}")
	publish := get("publish runs")
	attempt := get("run report")
	parentOf := func(child, parent tracetest.SpanStub) {
		t.Helper()
		if child.Parent.SpanID() != parent.SpanContext.SpanID() {
			t.Errorf("span %q's parent is %s, want %q (%s)", child.Name, child.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
		}
	}
	if server.Parent.SpanID().String() != "0000000000000001" || !server.Parent.IsRemote() || server.SpanKind != trace.SpanKindServer {
		t.Errorf("server span's parent %v (remote %v, kind %v): want the caller's span 1 from X-Cloud-Trace-Context", server.Parent.SpanID(), server.Parent.IsRemote(), server.SpanKind)
	}
	parentOf(get("ledger.Claim"), server)
	parentOf(publish, server)
	parentOf(attempt, publish) // across the processes, through the message attribute
	if !attempt.Parent.IsRemote() || attempt.SpanKind != trace.SpanKindConsumer {
		t.Errorf("attempt span: remote parent %v, kind %v; want a consumer span of the message's traceparent", attempt.Parent.IsRemote(), attempt.SpanKind)
	}
	parentOf(get("ledger.Acquire"), attempt)
	parentOf(get("ledger.Complete"), attempt)
	var client tracetest.SpanStub
	for _, s := range all {
		if s.SpanKind == trace.SpanKindClient && strings.HasPrefix(s.Name, "HTTP ") || s.Name == "POST" {
			client = s
		}
	}
	if !client.SpanContext.IsValid() {
		t.Fatalf("no HTTP client span among %v", names())
	}
	parentOf(client, attempt)

	mu.Lock()
	defer mu.Unlock()
	if len(targetCalls) != 1 {
		t.Fatalf("the target was called %d times, want once", len(targetCalls))
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(targetCalls[0])))
	if sc.TraceID().String() != callerTrace || sc.SpanID() != client.SpanContext.SpanID() {
		t.Errorf("the target got traceparent %q, want trace %s, parent the client span %s", targetCalls[0].Get("traceparent"), callerTrace, client.SpanContext.SpanID())
	}

	// Every log line about the run links to its trace and span.
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["run_id"] != answer.RunID {
			continue
		}
		n++
		if rec["logging.googleapis.com/trace"] != "projects/"+project+"/traces/"+callerTrace || rec["logging.googleapis.com/spanId"] == nil {
			t.Errorf("log line without its trace and span: %s", line)
		}
	}
	if n < 2 {
		t.Errorf("%d log lines name the run, want the ingress's and the worker's:\n%s", n, logs.String())
	}
}
