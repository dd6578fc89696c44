package app

import (
	"context"
	"fmt"

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

// tracedLedger wraps every call of a ledger's driver but Ping and Close in a client
// span, "ledger.METHOD", with the run it is about.
type tracedLedger struct {
	ledger.Driver
	tracer trace.Tracer
}

// traceLedger returns l with a span per call.
func traceLedger(l *ledger.Ledger, t *obs.Tracing) *ledger.Ledger {
	return ledger.New(&tracedLedger{Driver: l.Driver(), tracer: t.Tracer(tracerName)}, nil)
}

func (l *tracedLedger) start(ctx context.Context, method, runID string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attribute.String("db.operation.name", method)}
	if runID != "" {
		attrs = append(attrs, attribute.String("runonce.run_id", runID))
	}
	return l.tracer.Start(ctx, "ledger."+method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

func (l *tracedLedger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	ctx, span := l.start(ctx, "Claim", p.Identity.RunID)
	r, err := l.Driver.Claim(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Expedite", p.RunID)
	r, err := l.Driver.Expedite(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	ctx, span := l.start(ctx, "Acquire", p.Identity.RunID)
	r, err := l.Driver.Acquire(ctx, p)
	if err == nil {
		span.SetAttributes(attribute.String("runonce.acquire", fmt.Sprint(r.Outcome)))
	}
	end(span, err)
	return r, err
}

func (l *tracedLedger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Renew", p.Fence.RunID)
	r, err := l.Driver.Renew(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Complete", p.Fence.RunID)
	r, err := l.Driver.Complete(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Release", p.Fence.RunID)
	r, err := l.Driver.Release(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Fail", p.Fence.RunID)
	r, err := l.Driver.Fail(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Get", p.RunID)
	r, err := l.Driver.Get(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	ctx, span := l.start(ctx, "BeginEffect", p.Fence.RunID)
	r, err := l.Driver.BeginEffect(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	ctx, span := l.start(ctx, "CompleteEffect", p.Fence.RunID)
	r, err := l.Driver.CompleteEffect(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	ctx, span := l.start(ctx, "GetEffect", p.RunID)
	r, err := l.Driver.GetEffect(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	ctx, span := l.start(ctx, "ListRescue", "")
	r, err := l.Driver.ListRescue(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Rescue", p.RunID)
	r, err := l.Driver.Rescue(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "ResolveEffect", p.RunID)
	r, err := l.Driver.ResolveEffect(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	ctx, span := l.start(ctx, "Sweep", "")
	n, err := l.Driver.Sweep(ctx, p)
	end(span, err)
	return n, err
}
