package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

// traceAttempt starts the span of one delivery's attempt, "run JOB", a consumer span
// whose parent is the message's traceparent (the ingress's publish), so that the run is
// one trace across the processes; the job's context carries it to the ledger calls and
// the downstream call. end records the verdict.
func (w *Worker) traceAttempt(ctx context.Context, d *queue.Delivery) (context.Context, func(Verdict)) {
	tp := w.cfg.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	m := d.Message
	if m.Traceparent != "" {
		if pctx := (propagation.TraceContext{}).Extract(ctx, propagation.MapCarrier{"traceparent": m.Traceparent}); trace.SpanContextFromContext(pctx).IsValid() {
			ctx = pctx
		}
	}
	ctx, span := tp.Tracer("github.com/runonce/runonce/pkg/worker").Start(ctx, "run "+m.Identity.Job,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("runonce.run_id", m.Identity.RunID), attribute.String("runonce.job", m.Identity.Job),
			attribute.Int("messaging.gcp_pubsub.message.delivery_attempt", d.DeliveryAttempt),
		))
	return ctx, func(v Verdict) {
		span.SetAttributes(attribute.String("runonce.outcome", v.Outcome), attribute.Bool("runonce.ack", v.Ack))
		switch v.Outcome {
		case OutcomeFailed, OutcomeError, OutcomeLeaseLost:
			span.SetStatus(codes.Error, v.Outcome)
		}
		span.End()
	}
}

// traceRun notes the attempt the worker claimed on the attempt's span.
func traceRun(ctx context.Context, run *ledger.Run) {
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int64("runonce.attempt", run.Attempt), attribute.String("runonce.attempt_id", run.AttemptID))
}
