package obs_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"cloud.google.com/go/trace/apiv2/tracepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"github.com/runonce/runonce/internal/obs"
)

// fakeCloudTrace is Cloud Trace's TraceService wire surface on a local port.
type fakeCloudTrace struct {
	tracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	name  string
	spans []*tracepb.Span
}

func (f *fakeCloudTrace) BatchWriteSpans(_ context.Context, r *tracepb.BatchWriteSpansRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.name = r.Name
	f.spans = append(f.spans, r.Spans...)
	return &emptypb.Empty{}, nil
}

// -trace-export gcp: spans reach Cloud Trace through Google's exporter, in the project.
func TestTraceExportToCloudTrace(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeCloudTrace{}
	srv := grpc.NewServer()
	tracepb.RegisterTraceServiceServer(srv, fake)
	go srv.Serve(ln)
	defer srv.Stop()
	ctx := context.Background()
	tr, err := obs.NewTracing(ctx, obs.Export{Traces: obs.ExportGCP, Service: "runonce-ingress", Project: "trace-project",
		ClientOptions: []option.ClientOption{option.WithEndpoint(ln.Addr().String()), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer("test").Start(ctx, "publish runonce-runs")
	span.End()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.name != "projects/trace-project" || len(fake.spans) != 1 || fake.spans[0].DisplayName.GetValue() != "publish runonce-runs" {
		t.Fatalf("Cloud Trace got %q %v", fake.name, fake.spans)
	}
}

// -trace-export otlp: spans reach the OTLP/HTTP endpoint the standard variable names.
func TestTraceExportOTLP(t *testing.T) {
	var mu sync.Mutex
	var got []*coltracepb.ExportTraceServiceRequest
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "want an OTLP protobuf export on /v1/traces", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	ctx := context.Background()
	tr, err := obs.NewTracing(ctx, obs.Export{Traces: obs.ExportOTLP, Service: "runonce-worker"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer("test").Start(ctx, "run report")
	span.End()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || len(got[0].ResourceSpans) != 1 {
		t.Fatalf("collector got %v", got)
	}
	rs := got[0].ResourceSpans[0]
	var service string
	for _, kv := range rs.Resource.Attributes {
		if kv.Key == "service.name" {
			service = kv.Value.GetStringValue()
		}
	}
	if service != "runonce-worker" || rs.ScopeSpans[0].Spans[0].Name != "run report" {
		t.Fatalf("collector got service %q, spans %v", service, rs.ScopeSpans)
	}
}
