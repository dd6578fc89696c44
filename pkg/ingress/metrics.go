package ingress

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

type instruments struct {
	requests metric.Int64Counter
	claim    metric.Float64Histogram
	publish  metric.Float64Histogram
	ok, err  attribute.Set
}

func newInstruments(m metric.Meter) (instruments, error) {
	var in instruments
	var err error
	if in.requests, err = m.Int64Counter("runonce.ingress.requests",
		metric.WithDescription("POST /v1/jobs requests by outcome (new, duplicate by run status, each rejection)"),
		metric.WithUnit("{request}")); err != nil {
		return in, fmt.Errorf("ingress: metric: %w", err)
	}
	if in.claim, err = m.Float64Histogram("runonce.ingress.claim.duration",
		metric.WithDescription("ledger claim latency"), metric.WithUnit("s")); err != nil {
		return in, fmt.Errorf("ingress: metric: %w", err)
	}
	if in.publish, err = m.Float64Histogram("runonce.ingress.publish.duration",
		metric.WithDescription("Pub/Sub publish latency, until the server stored the message"), metric.WithUnit("s")); err != nil {
		return in, fmt.Errorf("ingress: metric: %w", err)
	}
	in.ok = attribute.NewSet(attribute.String("result", "ok"))
	in.err = attribute.NewSet(attribute.String("result", "error"))
	return in, nil
}

func (in *instruments) okOrErr(err error) attribute.Set {
	if err != nil {
		return in.err
	}
	return in.ok
}

func (in *instruments) request(ctx context.Context, outcome, runStatus string) {
	attrs := []attribute.KeyValue{attribute.String("outcome", outcome)}
	if runStatus != "" {
		attrs = append(attrs, attribute.String("run_status", runStatus))
	}
	in.requests.Add(ctx, 1, metric.WithAttributes(attrs...))
}
