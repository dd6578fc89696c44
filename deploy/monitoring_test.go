package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/ticks"
	"github.com/runonce/runonce/pkg/worker"
)

// runbookAlerts are the alert policies deploy/README.md's runbook relies on: the key of
// local.alerts in monitoring.tf, the metric its filter must name, and the label values
// it must select (label → value the code records).
// The resource it must watch says NAME for var.name and SUB for the workers'
// subscription.
var runbookAlerts = map[string]struct {
	metric, resource string
	labels           map[string]string
}{
	"dead_letter":    {"pubsub.googleapis.com/subscription/num_undelivered_messages", "subscription_id=NAME-dead-letter", nil},
	"runs_failed":    {"workload.googleapis.com/runonce.worker.deliveries", "job=NAME-worker", map[string]string{"outcome": worker.OutcomeFailed}},
	"leases_lost":    {"workload.googleapis.com/runonce.worker.leases.lost", "job=NAME-worker", nil},
	"rescues":        {"workload.googleapis.com/runonce.worker.rescues", "job=NAME-worker", nil},
	"ticks_missed":   {"workload.googleapis.com/" + ticks.MetricMissed, "job=NAME-worker", nil},
	"ingress_5xx":    {"run.googleapis.com/request_count", "service_name=NAME-ingress", map[string]string{"response_code_class": "5xx"}},
	"oldest_unacked": {"pubsub.googleapis.com/subscription/oldest_unacked_message_age", "subscription_id=SUB", nil},
}

// dashboardMetrics are the charts the dashboard must have (by metric type).
var dashboardMetrics = []string{
	"workload.googleapis.com/runonce.ingress.requests",
	"workload.googleapis.com/runonce.worker.deliveries",
	"workload.googleapis.com/runonce.worker.lease.renewals",
	"workload.googleapis.com/runonce.worker.leases.lost",
	"workload.googleapis.com/runonce.worker.rescues",
	"pubsub.googleapis.com/subscription/oldest_unacked_message_age",
	"pubsub.googleapis.com/subscription/num_undelivered_messages",
	"run.googleapis.com/request_latencies",
}

// The workload metrics' label values the code records (ingress and worker outcomes).
var knownLabelValues = map[string][]string{
	"outcome": {
		worker.OutcomeCompleted, worker.OutcomeFailed, worker.OutcomeReleased, worker.OutcomeHeld, worker.OutcomeTerminal,
		worker.OutcomeLeaseLost, worker.OutcomeDropped, worker.OutcomeError,
		ingress.OutcomeNew, ingress.OutcomeDuplicate, ingress.OutcomeBadRequest, ingress.OutcomeUnauthenticated,
		ingress.OutcomeForbidden, ingress.OutcomeUnknownJob, ingress.OutcomeTooLarge, ingress.OutcomePayloadMismatch,
		ingress.OutcomeUnavailable, ingress.OutcomeInternal,
	},
	"response_code_class": {"2xx", "3xx", "4xx", "5xx"},
}

var (
	metricTypeRe  = regexp.MustCompile(`metric\.type\s*=\s*"([^"]+)"`)
	metricLabelRe = regexp.MustCompile(`metric\.label\.([a-z_]+)\s*=\s*"([^"]*)"`)
	resourceJobRe = regexp.MustCompile(`resource\.label\.(job|service_name|subscription_id)\s*=\s*"([^"]*)"`)
)

// recordingMeter notes the name of every instrument created through it.
type recordingMeter struct {
	noop.Meter
	mu    sync.Mutex
	names map[string]bool
}

func (m *recordingMeter) note(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names[name] = true
}

func (m *recordingMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.note(name)
	return noop.Int64Counter{}, nil
}

func (m *recordingMeter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	m.note(name)
	return noop.Float64Histogram{}, nil
}

func (m *recordingMeter) Int64UpDownCounter(name string, _ ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	m.note(name)
	return noop.Int64UpDownCounter{}, nil
}

func (m *recordingMeter) Int64Histogram(name string, _ ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	m.note(name)
	return noop.Int64Histogram{}, nil
}

func (m *recordingMeter) Float64Counter(name string, _ ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	m.note(name)
	return noop.Float64Counter{}, nil
}

func (m *recordingMeter) Int64Gauge(name string, _ ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	m.note(name)
	return noop.Int64Gauge{}, nil
}

// unusedPublisher lets ingress.New build a handler whose instruments are read; nothing
// is published.
type unusedPublisher struct{}

func (unusedPublisher) Publish(context.Context, *queue.Message) (string, error) {
	return "", fmt.Errorf("not for publishing")
}
func (unusedPublisher) Ping(context.Context) error { return nil }

var (
	instrumentsOnce sync.Once
	instruments     map[string]bool
	instrumentsErr  error
)

// emittedMetrics returns the Cloud Monitoring types of the instruments the ingress and
// the worker create (workload.googleapis.com/NAME, as the Google exporter names them).
func emittedMetrics() (map[string]bool, error) {
	instrumentsOnce.Do(func() {
		m := &recordingMeter{names: map[string]bool{}}
		led := ledger.New(memory.New(nil), nil)
		if _, err := ingress.New(&ingress.Config{Ledger: led, Publisher: unusedPublisher{}, Auth: auth.None{}, AcceptAnyJob: true, Meter: m}); err != nil {
			instrumentsErr = err
			return
		}
		h := worker.HandlerFunc(func(context.Context, *worker.Job) error { return nil })
		if _, err := worker.New(&worker.Config{Ledger: led, Handler: h, Meter: m}); err != nil {
			instrumentsErr = err
			return
		}
		// The missed-tick checker runs in the worker, for a jobs file with a schedule.
		js, err := jobs.Parse(strings.NewReader(`{"jobs": {"nightly": {"schedule": "0 3 * * *"}}}`))
		if err != nil {
			instrumentsErr = err
			return
		}
		book, err := ticks.NewBook(context.Background(), js, nil)
		if err != nil {
			instrumentsErr = err
			return
		}
		if _, err := ticks.NewChecker(&ticks.CheckerConfig{Book: book, Reader: &ticks.Reader{Ledger: led}, Meter: m}); err != nil {
			instrumentsErr = err
			return
		}
		instruments = map[string]bool{}
		for n := range m.names {
			instruments["workload.googleapis.com/"+n] = true
		}
	})
	return instruments, instrumentsErr
}

// checkFilter checks that a Cloud Monitoring filter names one metric and, for the
// binaries' own metrics, one the code emits with label values it records.
func checkFilter(where, filter string, emitted map[string]bool, names map[string]string) []error {
	var errs []error
	types := metricTypeRe.FindAllStringSubmatch(filter, -1)
	if len(types) != 1 {
		return []error{fmt.Errorf("%s: filter %q names %d metric types, want 1", where, filter, len(types))}
	}
	mt := types[0][1]
	if strings.HasPrefix(mt, "workload.googleapis.com/") && !emitted[mt] {
		var have []string
		for k := range emitted {
			have = append(have, k)
		}
		sort.Strings(have)
		errs = append(errs, fmt.Errorf("%s: %s is no instrument the binaries create (they create: %s)", where, mt, strings.Join(have, " ")))
	}
	for _, l := range metricLabelRe.FindAllStringSubmatch(filter, -1) {
		if vals, ok := knownLabelValues[l[1]]; !ok || !slices.Contains(vals, l[2]) {
			errs = append(errs, fmt.Errorf("%s: metric.label.%s = %q is no value the code records (%v)", where, l[1], l[2], vals))
		}
	}
	for _, r := range resourceJobRe.FindAllStringSubmatch(filter, -1) {
		if want, ok := names[r[1]+"="+r[2]]; !ok {
			errs = append(errs, fmt.Errorf("%s: resource.label.%s = %q names nothing the module creates", where, r[1], r[2]))
		} else if want != "" && !slices.ContainsFunc(strings.Split(want, "|"), func(p string) bool { return strings.HasPrefix(mt, p) }) {
			errs = append(errs, fmt.Errorf("%s: %s is not reported on %s=%q", where, mt, r[1], r[2]))
		}
	}
	return errs
}

// checkMonitoring: every runbook alert is a google_monitoring_alert_policy on the right
// metric with the threshold the runbook documents; the dashboard has every chart; every
// binary metric named anywhere is one the code emits.
func checkMonitoring(d *deployment) []error {
	var errs []error
	emitted, err := emittedMetrics()
	if err != nil {
		return []error{err}
	}
	vars := d.mod.ctx.Variables["var"].AsValueMap()
	name := vars["name"].AsString()
	sub := name + "-worker"
	if v := vars["delivery"]; v.IsKnown() && v.AsString() == "push" {
		sub = name + "-worker-push"
	}
	// resource label=value → the metric prefixes reported there ("|" between them): the
	// worker also runs the missed-tick checker (runonce.job.ticks.missed).
	names := map[string]string{
		"job=" + name + "-ingress":                 "workload.googleapis.com/runonce.ingress.",
		"job=" + name + "-worker":                  "workload.googleapis.com/runonce.worker.|workload.googleapis.com/runonce.job.",
		"service_name=" + name + "-ingress":        "run.googleapis.com/",
		"subscription_id=" + sub:                   "pubsub.googleapis.com/",
		"subscription_id=" + name + "-dead-letter": "pubsub.googleapis.com/",
	}

	policies := d.mod.resourcesOf("google_monitoring_alert_policy")
	if len(policies) != 1 {
		return []error{fmt.Errorf("want one google_monitoring_alert_policy over local.alerts, got %d", len(policies))}
	}
	p := policies[0]
	if fe := attr(p.body, "for_each"); fe == nil || !references(fe, "local.alerts") {
		errs = append(errs, fmt.Errorf("%s: for_each is not local.alerts", p))
	}
	if nc := attr(p.body, "notification_channels"); nc == nil || !references(nc, "var.notification_channels") {
		errs = append(errs, fmt.Errorf("%s: notification_channels is not var.notification_channels", p))
	}
	for _, ct := range blocks(p.body, "conditions", "condition_threshold") {
		if f := attr(ct, "filter"); f == nil || traversalName(f) != "each.value.filter" {
			errs = append(errs, fmt.Errorf("%s: condition_threshold.filter is not each.value.filter", p))
		}
		if f := attr(ct, "threshold_value"); f == nil || traversalName(f) != "each.value.threshold" {
			errs = append(errs, fmt.Errorf("%s: threshold_value is not each.value.threshold", p))
		}
	}
	alerts := d.mod.ctx.Variables["local"].GetAttr("alerts")
	if !alerts.IsWhollyKnown() || !alerts.Type().IsObjectType() {
		return append(errs, fmt.Errorf("local.alerts is not known from the variables' defaults"))
	}
	for key, want := range runbookAlerts {
		if !alerts.Type().HasAttribute(key) {
			errs = append(errs, fmt.Errorf("no alert %q (%s) in local.alerts", key, want.metric))
			continue
		}
		a := alerts.GetAttr(key)
		filter := a.GetAttr("filter").AsString()
		where := "alert " + key
		errs = append(errs, checkFilter(where, filter, emitted, names)...)
		if mt := metricTypeRe.FindStringSubmatch(filter); mt != nil && mt[1] != want.metric {
			errs = append(errs, fmt.Errorf("%s: watches %s, want %s", where, mt[1], want.metric))
		}
		res := strings.NewReplacer("NAME", name, "SUB", sub).Replace(want.resource)
		k, v, _ := strings.Cut(res, "=")
		if !strings.Contains(filter, fmt.Sprintf("resource.label.%s = %q", k, v)) {
			errs = append(errs, fmt.Errorf("%s: filter does not watch resource.label.%s = %q", where, k, v))
		}
		for l, v := range want.labels {
			if !strings.Contains(filter, fmt.Sprintf("metric.label.%s = %q", l, v)) {
				errs = append(errs, fmt.Errorf("%s: filter does not select metric.label.%s = %q", where, l, v))
			}
		}
		if doc := a.GetAttr("doc").AsString(); len(doc) < 40 {
			errs = append(errs, fmt.Errorf("%s: its documentation does not say what it means and what to do", where))
		}
	}
	if th := alerts.GetAttr("oldest_unacked"); th.IsKnown() {
		v, _ := th.GetAttr("threshold").AsBigFloat().Float64()
		if want := ledger.DefaultPickupTimeout.Seconds(); v != want {
			errs = append(errs, fmt.Errorf("alert oldest_unacked: threshold %vs, want the ledger's pickup timeout %vs", v, want))
		}
	}

	dash := d.mod.resourcesOf("google_monitoring_dashboard")
	if len(dash) != 1 {
		return append(errs, fmt.Errorf("want one google_monitoring_dashboard, got %d", len(dash)))
	}
	js, err := d.mod.evalString(attr(dash[0].body, "dashboard_json"), nil)
	if err != nil {
		return append(errs, fmt.Errorf("%s: dashboard_json: %w", dash[0], err))
	}
	var board struct {
		MosaicLayout struct {
			Tiles []struct {
				Widget struct {
					Title   string `json:"title"`
					XYChart struct {
						DataSets []struct {
							TimeSeriesQuery struct {
								TimeSeriesFilter struct {
									Filter string `json:"filter"`
								} `json:"timeSeriesFilter"`
							} `json:"timeSeriesQuery"`
						} `json:"dataSets"`
					} `json:"xyChart"`
				} `json:"widget"`
			} `json:"tiles"`
		} `json:"mosaicLayout"`
	}
	if err := json.Unmarshal([]byte(js), &board); err != nil {
		return append(errs, fmt.Errorf("%s: dashboard_json: %w", dash[0], err))
	}
	charted := map[string]bool{}
	for _, t := range board.MosaicLayout.Tiles {
		for _, ds := range t.Widget.XYChart.DataSets {
			f := ds.TimeSeriesQuery.TimeSeriesFilter.Filter
			errs = append(errs, checkFilter("dashboard chart "+t.Widget.Title, f, emitted, names)...)
			if mt := metricTypeRe.FindStringSubmatch(f); mt != nil {
				charted[mt[1]] = true
			}
		}
	}
	for _, m := range dashboardMetrics {
		if !charted[m] {
			errs = append(errs, fmt.Errorf("the dashboard has no chart of %s", m))
		}
	}
	return errs
}

func TestMonitoring(t *testing.T) { runCheck(t, "Monitoring") }

// The runbook says what each alert means: deploy/README.md names every alert's title.
func TestRunbookNamesEveryAlert(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := loadDeployments(tfDir())
	if err != nil {
		t.Fatal(err)
	}
	alerts := ds[0].mod.ctx.Variables["local"].GetAttr("alerts")
	for key := range runbookAlerts {
		title := alerts.GetAttr(key).GetAttr("title")
		if title.Type() != cty.String || !strings.Contains(string(readme), "**"+title.AsString()+"**") {
			t.Errorf("deploy/README.md's runbook has no entry **%s** for the alert %s", title.AsString(), key)
		}
	}
}
