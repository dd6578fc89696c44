package app

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

const tracerName = "github.com/runonce/runonce/internal/app"

// end ends span, recording err (a lost lease or a conflict is an answer, not a fault,
// but still worth seeing on the span).
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// tracedPublisher publishes each run under a producer span, "publish TOPIC", and puts
// that span's traceparent on the message, so that the worker's attempt is its child.
type tracedPublisher struct {
	queue.RunPublisher
	tracer trace.Tracer
	topic  string
}

func (p *tracedPublisher) Publish(ctx context.Context, m *queue.Message) (string, error) {
	ctx, span := p.tracer.Start(ctx, "publish "+p.topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "gcp_pubsub"), attribute.String("messaging.destination.name", p.topic),
			attribute.String("runonce.run_id", m.Identity.RunID), attribute.String("runonce.job", m.Identity.Job)))
	if tp := obs.Traceparent(ctx); tp != "" {
		mm := *m
		mm.Traceparent = tp
		m = &mm
	}
	id, err := p.RunPublisher.Publish(ctx, m)
	span.SetAttributes(attribute.String("messaging.message.id", id))
	end(span, err)
	return id, err
}

// instrument returns l with its spans and its metric recorded by tracing (nil: none)
// and metrics, not the global providers.
func instrument(l *ledger.Ledger, tracing *obs.Tracing, metrics *obs.Metrics) *ledger.Ledger {
	o := &ledger.Options{TracerProvider: tracing.TracerProvider()}
	if metrics != nil {
		o.MeterProvider = metrics.Provider
	}
	return ledger.New(l.Driver(), o)
}
