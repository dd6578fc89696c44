package worker

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

type metrics struct {
	deliveries     metric.Int64Counter
	jobDuration    metric.Float64Histogram
	renewals       metric.Int64Counter
	leasesLost     metric.Int64Counter
	fencedRefused  metric.Int64Counter
	effectsSkipped metric.Int64Counter
	rescues        metric.Int64Counter
	nackedHeld     metric.Int64Counter
	batchItems     metric.Int64Counter

	// The options of the bounded attributes (a registered job's name, an outcome, a
	// reason), each made once: building an attribute set sorts and hashes it, and
	// allocates, on every delivery otherwise.
	jobs, outcomes, reasons attrs
}

// attrs holds one measurement option per value of an attribute.
type attrs struct {
	key  string
	opts sync.Map // value → metric.MeasurementOption
}

func (a *attrs) option(v string) metric.MeasurementOption {
	if o, ok := a.opts.Load(v); ok {
		return o.(metric.MeasurementOption)
	}
	o, _ := a.opts.LoadOrStore(v, metric.WithAttributeSet(attribute.NewSet(attribute.String(a.key, v))))
	return o.(metric.MeasurementOption)
}

func newMetrics(m metric.Meter) (*metrics, error) {
	var (
		out = metrics{jobs: attrs{key: "job"}, outcomes: attrs{key: "outcome"}, reasons: attrs{key: "reason"}}
		err error
		e   error
	)
	counter := func(name, desc string) metric.Int64Counter {
		c, cerr := m.Int64Counter(name, metric.WithDescription(desc))
		if cerr != nil {
			e = cerr
		}
		return c
	}
	out.deliveries = counter("runonce.worker.deliveries", "Deliveries processed, by outcome.")
	out.renewals = counter("runonce.worker.lease.renewals", "Lease renewals that succeeded.")
	out.leasesLost = counter("runonce.worker.leases.lost", "Attempts that lost their lease to another attempt.")
	out.fencedRefused = counter("runonce.worker.fenced_writes.refused", "Ledger writes refused because the attempt was fenced out.")
	out.effectsSkipped = counter("runonce.worker.effects.skipped", "Effects skipped: done by an earlier attempt, or uncertain (at most once).")
	out.rescues = counter("runonce.worker.rescues", "Runs the rescuer republished.")
	out.batchItems = counter("runonce.worker.batch.items", "Items of batches (worker.Batch) by job, batch and outcome: done, failed (SkipItem), skipped (done by an earlier attempt).")
	out.nackedHeld = counter("runonce.worker.deliveries.nacked_held", "Deliveries nacked because another live attempt holds the run.")
	out.jobDuration, err = m.Float64Histogram("runonce.worker.job.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of job attempts."))
	if err == nil {
		err = e
	}
	return &out, err
}

func (m *metrics) outcome(o string) metric.MeasurementOption { return m.outcomes.option(o) }

func (m *metrics) job(name string) metric.MeasurementOption { return m.jobs.option(name) }

func (m *metrics) reason(r string) metric.MeasurementOption { return m.reasons.option(r) }

func (m *metrics) batch(job, batch, outcome string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("job", job), attribute.String("batch", batch), attribute.String("outcome", outcome))
}
