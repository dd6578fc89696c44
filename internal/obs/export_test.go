package obs_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/monitoring/apiv3/v2/monitoringpb"
	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/api/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/runonce/runonce/internal/obs"
)

// fakeMonitoring is Cloud Monitoring's MetricService wire surface on a local port: it
// keeps what the official client sends.
type fakeMonitoring struct {
	monitoringpb.UnimplementedMetricServiceServer
	mu          sync.Mutex
	series      []*monitoringpb.TimeSeries
	descriptors []*metric.MetricDescriptor
	projects    []string
}

func (f *fakeMonitoring) CreateTimeSeries(_ context.Context, r *monitoringpb.CreateTimeSeriesRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.series = append(f.series, r.TimeSeries...)
	f.projects = append(f.projects, r.Name)
	return &emptypb.Empty{}, nil
}

func (f *fakeMonitoring) CreateMetricDescriptor(_ context.Context, r *monitoringpb.CreateMetricDescriptorRequest) (*metric.MetricDescriptor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.descriptors = append(f.descriptors, r.MetricDescriptor)
	return r.MetricDescriptor, nil
}

func startFakeMonitoring(t *testing.T) (*fakeMonitoring, []option.ClientOption) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMonitoring{}
	srv := grpc.NewServer()
	monitoringpb.RegisterMetricServiceServer(srv, f)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return f, []option.ClientOption{
		option.WithEndpoint(ln.Addr().String()), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// The names deploy/terraform's dashboard and alerts rely on: a counter reaches Cloud
// Monitoring as workload.googleapis.com/NAME on generic_task with job = the service.
func TestMetricsExportToCloudMonitoring(t *testing.T) {
	t.Parallel()
	fake, opts := startFakeMonitoring(t)
	ctx := context.Background()
	m, err := obs.NewMetricsExport(ctx, obs.Export{
		Metrics: obs.ExportGCP, Service: "runonce-worker", Project: "test-project",
		MetricsInterval: time.Hour, ClientOptions: opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Meter("github.com/runonce/runonce/pkg/worker").Int64Counter("runonce.worker.leases.lost")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 2)
	if err := m.Shutdown(ctx); err != nil { // flushes the periodic reader
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	var got *monitoringpb.TimeSeries
	for _, ts := range fake.series {
		if ts.Metric.Type == "workload.googleapis.com/runonce.worker.leases.lost" {
			got = ts
		}
	}
	if got == nil {
		var types []string
		for _, ts := range fake.series {
			types = append(types, ts.Metric.Type)
		}
		t.Fatalf("no workload.googleapis.com/runonce.worker.leases.lost among %v", types)
	}
	if got.Resource.Type != "generic_task" || got.Resource.Labels["job"] != "runonce-worker" || got.Resource.Labels["namespace"] != "runonce" {
		t.Errorf("resource %v, want generic_task with job runonce-worker, namespace runonce", got.Resource)
	}
	if n := len(got.Points); n != 1 || got.Points[0].Value.GetInt64Value() != 2 {
		t.Errorf("points %v, want one of 2", got.Points)
	}
	if !slices.Contains(fake.projects, "projects/test-project") {
		t.Errorf("written to %v, want projects/test-project", fake.projects)
	}
}

func TestExportValidate(t *testing.T) {
	t.Parallel()
	for _, e := range []obs.Export{{Metrics: "stackdriver"}, {Traces: "zipkin"}} {
		if err := e.Validate(); err == nil {
			t.Errorf("%+v: no error", e)
		}
	}
	if err := (obs.Export{Metrics: "gcp", Traces: "otlp"}).Validate(); err != nil {
		t.Error(err)
	}
}
