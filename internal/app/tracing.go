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

// tracedLedger wraps every ledger call but Ping and Close in a client span,
// "ledger.METHOD", with the run it is about.
type tracedLedger struct {
	ledger.Ledger
	tracer trace.Tracer
}

// traceLedger returns l with a span per call (l itself when tracing records nothing).
func traceLedger(l ledger.Ledger, t *obs.Tracing) ledger.Ledger {
	return &tracedLedger{Ledger: l, tracer: t.Tracer(tracerName)}
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
	r, err := l.Ledger.Claim(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Expedite", p.RunID)
	r, err := l.Ledger.Expedite(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	ctx, span := l.start(ctx, "Acquire", p.Identity.RunID)
	r, err := l.Ledger.Acquire(ctx, p)
	if err == nil {
		span.SetAttributes(attribute.String("runonce.acquire", fmt.Sprint(r.Outcome)))
	}
	end(span, err)
	return r, err
}

func (l *tracedLedger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Renew", p.Fence.RunID)
	r, err := l.Ledger.Renew(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Complete", p.Fence.RunID)
	r, err := l.Ledger.Complete(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Release", p.Fence.RunID)
	r, err := l.Ledger.Release(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Fail", p.Fence.RunID)
	r, err := l.Ledger.Fail(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Get", p.RunID)
	r, err := l.Ledger.Get(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	ctx, span := l.start(ctx, "BeginEffect", p.Fence.RunID)
	r, err := l.Ledger.BeginEffect(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	ctx, span := l.start(ctx, "CompleteEffect", p.Fence.RunID)
	r, err := l.Ledger.CompleteEffect(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	ctx, span := l.start(ctx, "GetEffect", p.RunID)
	r, err := l.Ledger.GetEffect(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	ctx, span := l.start(ctx, "ListRescue", "")
	r, err := l.Ledger.ListRescue(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "Rescue", p.RunID)
	r, err := l.Ledger.Rescue(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	ctx, span := l.start(ctx, "ResolveEffect", p.RunID)
	r, err := l.Ledger.ResolveEffect(ctx, p)
	end(span, err)
	return r, err
}

func (l *tracedLedger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	ctx, span := l.start(ctx, "Sweep", "")
	n, err := l.Ledger.Sweep(ctx, p)
	end(span, err)
	return n, err
}
