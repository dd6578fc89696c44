package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/runonce/runonce/pkg/worker"
)

// TestMetricsCountDeliveriesByOutcomeAndJobs processes deliveries of two jobs with
// different outcomes, several of each, and reads the deliveries counter by outcome and
// the job duration histogram by job: the attributes each delivery records, whether it is
// the first with its value or a later one.
func TestMetricsCountDeliveriesByOutcomeAndJobs(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	b := setup(t, nil, &worker.Config{Lease: time.Minute, MaxAttempts: 1, Meter: meter})
	b.mux.HandleFunc("ok", func(context.Context, *worker.Job) error { return nil })
	b.mux.HandleFunc("bad", func(context.Context, *worker.Job) error { return worker.Permanent(errors.New("no")) })
	for _, k := range []string{"a", "b", "c"} {
		if v := b.process(message("ok", k, "")); v.Outcome != worker.OutcomeCompleted {
			t.Fatalf("ok/%s: outcome %s", k, v.Outcome)
		}
	}
	for _, k := range []string{"a", "b"} {
		if v := b.process(message("bad", k, "")); v.Outcome != worker.OutcomeFailed {
			t.Fatalf("bad/%s: outcome %s", k, v.Outcome)
		}
	}
	// A duplicate of a completed run: no attempt, so no duration.
	if v := b.process(message("ok", "a", "")); v.Outcome != worker.OutcomeTerminal {
		t.Fatalf("duplicate of ok/a: outcome %s", v.Outcome)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	deliveries, durations := map[string]int64{}, map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name == "runonce.worker.deliveries" {
					for _, dp := range data.DataPoints {
						o, _ := dp.Attributes.Value("outcome")
						deliveries[o.AsString()] += dp.Value
					}
				}
			case metricdata.Histogram[float64]:
				if m.Name == "runonce.worker.job.duration" {
					for _, dp := range data.DataPoints {
						j, _ := dp.Attributes.Value("job")
						durations[j.AsString()] += dp.Count
					}
				}
			}
		}
	}
	if deliveries[worker.OutcomeCompleted] != 3 || deliveries[worker.OutcomeFailed] != 2 || deliveries[worker.OutcomeTerminal] != 1 || len(deliveries) != 3 {
		t.Errorf("runonce.worker.deliveries by outcome = %v; want 3 %s, 2 %s, 1 %s", deliveries,
			worker.OutcomeCompleted, worker.OutcomeFailed, worker.OutcomeTerminal)
	}
	if durations["ok"] != 3 || durations["bad"] != 2 || len(durations) != 2 {
		t.Errorf("runonce.worker.job.duration counts by job = %v; want ok 3, bad 2", durations)
	}
}
