package deploy

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/config"
	firestoreledger "github.com/runonce/runonce/pkg/ledger/firestoreledger"
	spannerledger "github.com/runonce/runonce/pkg/ledger/spannerledger"
)

// The Terraform tree the checks read: the module and every example root that calls it.
const (
	moduleRel   = "modules/runonce"
	examplesRel = "examples"
)

func tfDir() string {
	if d := os.Getenv("RUNONCE_DEPLOY_TF_DIR"); d != "" {
		return d
	}
	return "terraform"
}

// deployment is the module evaluated with one set of inputs: its defaults, or an example
// root's module arguments.
type deployment struct {
	name string
	mod  *tfModule
}

// loadDeployments returns the module with its defaults plus the module as each example
// calls it.
func loadDeployments(root string) ([]*deployment, error) {
	moduleDir := filepath.Join(root, moduleRel)
	mod, err := loadModule(moduleDir, nil)
	if err != nil {
		return nil, err
	}
	out := []*deployment{{name: "module defaults", mod: mod}}
	examples, _ := filepath.Glob(filepath.Join(root, examplesRel, "*"))
	for _, dir := range examples {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		ex, err := loadModule(dir, nil)
		if err != nil {
			return nil, err
		}
		n := 0
		for _, call := range ex.calls {
			src, _ := call.body.Attributes["source"].Expr.Value(nil)
			if src.Type() != cty.String || filepath.Clean(filepath.Join(dir, src.AsString())) != filepath.Clean(moduleDir) {
				continue
			}
			m, err := loadModule(moduleDir, ex.moduleArgs(call))
			if err != nil {
				return nil, err
			}
			out = append(out, &deployment{name: fmt.Sprintf("%s (module %q)", filepath.Base(dir), call.name()), mod: m})
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("example %s does not call %s", dir, moduleDir)
		}
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("no example root under %s", filepath.Join(root, examplesRel))
	}
	return out, nil
}

// A check returns every violation it finds in one deployment.
type check func(d *deployment) []error

// checks are the invariants of deploy/README.md's table, by test name.
var checks = map[string]check{
	"SchedulerOIDC":         checkSchedulerOIDC,
	"SubscriptionPolicy":    checkSubscriptionPolicy,
	"Retention":             checkRetention,
	"FirestoreTTLIndex":     checkFirestore,
	"WorkerAlwaysOn":        checkWorkerAlwaysOn,
	"Timeouts":              checkTimeouts,
	"IAMRoles":              checkIAM,
	"EnvNamesRealFlags":     checkEnvNames,
	"ServiceAccountsOwn":    checkServiceAccounts,
	"DeadLetterAgentIAM":    checkDeadLetterIAM,
	"SchedulerUsesUnixCron": checkSchedulerCron,
	"SpannerSchemaIAM":      checkSpanner,
	"FirestoreSharded":      checkFirestoreSharded,
	"TargetIAM":             checkTargetIAM,
	"Monitoring":            checkMonitoring,
	"IngressJobsFile":       checkIngressJobs,
	"SchedulerViewerIAM":    checkSchedulerViewer,
}

func runCheck(t *testing.T, name string) {
	t.Helper()
	ds, err := loadDeployments(tfDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		for _, err := range checks[name](d) {
			t.Errorf("%s: %v", d.name, err)
		}
	}
}

func TestSchedulerOIDC(t *testing.T)         { runCheck(t, "SchedulerOIDC") }
func TestSchedulerUsesUnixCron(t *testing.T) { runCheck(t, "SchedulerUsesUnixCron") }
func TestSubscriptionPolicy(t *testing.T)    { runCheck(t, "SubscriptionPolicy") }
func TestDeadLetterAgentIAM(t *testing.T)    { runCheck(t, "DeadLetterAgentIAM") }
func TestRetention(t *testing.T)             { runCheck(t, "Retention") }
func TestFirestoreTTLIndex(t *testing.T)     { runCheck(t, "FirestoreTTLIndex") }
func TestFirestoreSharded(t *testing.T)      { runCheck(t, "FirestoreSharded") }
func TestWorkerAlwaysOn(t *testing.T)        { runCheck(t, "WorkerAlwaysOn") }
func TestTimeouts(t *testing.T)              { runCheck(t, "Timeouts") }
func TestIAMRoles(t *testing.T)              { runCheck(t, "IAMRoles") }
func TestServiceAccountsOwn(t *testing.T)    { runCheck(t, "ServiceAccountsOwn") }
func TestEnvNamesRealFlags(t *testing.T)     { runCheck(t, "EnvNamesRealFlags") }
func TestSpannerSchemaIAM(t *testing.T)      { runCheck(t, "SpannerSchemaIAM") }
func TestTargetIAM(t *testing.T)             { runCheck(t, "TargetIAM") }

// --- Cloud Scheduler -------------------------------------------------------------------

// Every scheduler job calls over HTTP with an OIDC token that names a service account
// and an explicit audience (the ingress checks both), has a retry_config and an
// attempt_deadline.
func checkSchedulerOIDC(d *deployment) []error {
	var errs []error
	jobs := d.mod.resourcesOf("google_cloud_scheduler_job")
	if len(jobs) == 0 {
		errs = append(errs, errors.New("no google_cloud_scheduler_job: the module must show how to call the ingress"))
	}
	for _, j := range jobs {
		targets := blocks(j.body, "http_target")
		if len(targets) != 1 {
			errs = append(errs, fmt.Errorf("%s: want one http_target (the ingress), got %d", j, len(targets)))
			continue
		}
		toks := blocks(targets[0], "oidc_token")
		if len(toks) != 1 {
			errs = append(errs, fmt.Errorf("%s: http_target has no oidc_token: the ingress refuses unauthenticated calls", j))
			continue
		}
		for _, name := range []string{"service_account_email", "audience"} {
			e := attr(toks[0], name)
			if e == nil {
				errs = append(errs, fmt.Errorf("%s: oidc_token has no %s", j, name))
				continue
			}
			if v, err := d.mod.eval(e, nil); err == nil && (v.IsNull() || v.Type() == cty.String && v.AsString() == "") {
				errs = append(errs, fmt.Errorf("%s: oidc_token.%s is empty", j, name))
			}
		}
		if len(blocks(targets[0], "oauth_token")) > 0 {
			errs = append(errs, fmt.Errorf("%s: oauth_token is for Google APIs, the ingress takes an oidc_token", j))
		}
		if len(blocks(j.body, "retry_config")) != 1 {
			errs = append(errs, fmt.Errorf("%s: no retry_config", j))
		}
		if attr(j.body, "attempt_deadline") == nil {
			errs = append(errs, fmt.Errorf("%s: no attempt_deadline", j))
		}
	}
	return errs
}

// A unix-cron schedule (five fields) makes Cloud Scheduler send the schedule-time
// header; a time zone is explicit.
func checkSchedulerCron(d *deployment) []error {
	var errs []error
	for _, j := range d.mod.resourcesOf("google_cloud_scheduler_job") {
		for _, name := range []string{"schedule", "time_zone"} {
			if attr(j.body, name) == nil {
				errs = append(errs, fmt.Errorf("%s: no %s", j, name))
			}
		}
	}
	// The example's schedules, evaluated.
	if v, ok := d.mod.ctx.Variables["var"].AsValueMap()["scheduler_jobs"]; ok && v.IsWhollyKnown() && !v.IsNull() && v.CanIterateElements() {
		for it := v.ElementIterator(); it.Next(); {
			k, job := it.Element()
			s := job.GetAttr("schedule")
			if s.IsNull() || len(strings.Fields(s.AsString())) != 5 {
				errs = append(errs, fmt.Errorf("scheduler job %s: schedule %s is not five-field unix-cron", k.AsString(), s.GoString()))
			}
		}
	}
	return errs
}

// --- Pub/Sub ---------------------------------------------------------------------------

// deadLetterTopics returns the references used as dead_letter_topic, e.g.
// "google_pubsub_topic.dead_letter.id".
func deadLetterTopics(m *tfModule) map[string]bool {
	out := map[string]bool{}
	for _, s := range m.resourcesOf("google_pubsub_subscription") {
		for _, dl := range blocks(s.body, "dead_letter_policy") {
			if e := attr(dl, "dead_letter_topic"); e != nil {
				out[traversalName(e)] = true
			}
		}
	}
	return out
}

// Every subscription has a retry policy with both backoffs, and every subscription that
// a worker consumes has a dead-letter policy with max_delivery_attempts and an ack
// deadline. The only exemption from the dead-letter policy: a subscription to a topic
// that is itself some subscription's dead-letter topic (it keeps the dead letters).
func checkSubscriptionPolicy(d *deployment) []error {
	var errs []error
	subs := d.mod.resourcesOf("google_pubsub_subscription")
	if len(subs) == 0 {
		return []error{errors.New("no google_pubsub_subscription")}
	}
	dlq := deadLetterTopics(d.mod)
	consumed := 0
	for _, s := range subs {
		rp := blocks(s.body, "retry_policy")
		if len(rp) != 1 {
			errs = append(errs, fmt.Errorf("%s: no retry_policy: a nacked message would come back at once, forever", s))
		} else {
			for _, name := range []string{"minimum_backoff", "maximum_backoff"} {
				if attr(rp[0], name) == nil {
					errs = append(errs, fmt.Errorf("%s: retry_policy has no %s", s, name))
				}
			}
		}
		topic := attr(s.body, "topic")
		if topic != nil && dlq[traversalName(topic)] {
			continue
		}
		consumed++
		dl := blocks(s.body, "dead_letter_policy")
		if len(dl) != 1 {
			errs = append(errs, fmt.Errorf("%s: no dead_letter_policy: a poison message is redelivered until the retention drops it", s))
		} else if attr(dl[0], "dead_letter_topic") == nil || attr(dl[0], "max_delivery_attempts") == nil {
			errs = append(errs, fmt.Errorf("%s: dead_letter_policy needs dead_letter_topic and max_delivery_attempts", s))
		}
		if attr(s.body, "ack_deadline_seconds") == nil {
			errs = append(errs, fmt.Errorf("%s: no ack_deadline_seconds", s))
		}
		if attr(s.body, "message_retention_duration") == nil {
			errs = append(errs, fmt.Errorf("%s: no message_retention_duration: the retention rule needs it explicit", s))
		}
	}
	if consumed == 0 {
		errs = append(errs, errors.New("every subscription is on a dead-letter topic: no subscription for the workers"))
	}
	return errs
}

// The Pub/Sub service agent may publish to every dead-letter topic and subscribe to
// every subscription that dead-letters: without both, dead-lettering silently fails.
func checkDeadLetterIAM(d *deployment) []error {
	var errs []error
	agent := regexp.MustCompile(`gcp-sa-pubsub\.iam\.gserviceaccount\.com`)
	isAgent := func(b *tfBlock) bool {
		e := attr(b.body, "member")
		if e == nil {
			return false
		}
		if v, err := d.mod.evalString(e, nil); err == nil {
			return agent.MatchString(v)
		}
		// Unknown project number: look at the expression's source.
		return references(e, "local.pubsub_service_agent") || agent.MatchString(string(srcOf(e)))
	}
	grants := func(typ, role, attrName string) map[string]bool {
		out := map[string]bool{}
		for _, b := range d.mod.resourcesOf(typ) {
			r, err := d.mod.evalString(attr(b.body, "role"), nil)
			if err != nil || r != role || !isAgent(b) {
				continue
			}
			for _, tr := range attr(b.body, attrName).Variables() {
				out[refName(tr)] = true
			}
		}
		return out
	}
	topicGrants := grants("google_pubsub_topic_iam_member", "roles/pubsub.publisher", "topic")
	subGrants := grants("google_pubsub_subscription_iam_member", "roles/pubsub.subscriber", "subscription")
	for ref := range deadLetterTopics(d.mod) {
		res := strings.TrimSuffix(ref, ".id")
		if !topicGrants[res] {
			errs = append(errs, fmt.Errorf("dead-letter topic %s: the Pub/Sub service agent has no roles/pubsub.publisher on it", res))
		}
	}
	for _, s := range d.mod.resourcesOf("google_pubsub_subscription") {
		if len(blocks(s.body, "dead_letter_policy")) == 0 {
			continue
		}
		if !subGrants[s.typ()+"."+s.name()] {
			errs = append(errs, fmt.Errorf("%s: the Pub/Sub service agent has no roles/pubsub.subscriber on it", s))
		}
	}
	return errs
}

func refName(tr hcl.Traversal) string {
	var parts []string
	for _, t := range tr {
		switch t := t.(type) {
		case hcl.TraverseRoot:
			parts = append(parts, t.Name)
		case hcl.TraverseAttr:
			parts = append(parts, t.Name)
		}
		if len(parts) == 2 {
			break
		}
	}
	return strings.Join(parts, ".")
}

func srcOf(e hcl.Expression) []byte {
	r := e.Range()
	src, err := os.ReadFile(r.Filename)
	if err != nil || r.End.Byte > len(src) {
		return nil
	}
	return src[r.Start.Byte:r.End.Byte]
}

// --- retention -------------------------------------------------------------------------

// parseSeconds parses Pub/Sub and Scheduler durations ("604800s").
func parseSeconds(s string) (time.Duration, error) {
	if !strings.HasSuffix(s, "s") {
		return 0, fmt.Errorf("duration %q: want seconds with an s suffix", s)
	}
	return time.ParseDuration(s)
}

// envValue evaluates the RUNONCE_* variable name of the service that runs binary.
func envValue(d *deployment, binary, name string) (string, error) {
	svc, err := serviceOf(d.mod, binary)
	if err != nil {
		return "", err
	}
	for _, c := range blocks(svc.body, "template", "containers") {
		for _, e := range blocks(c, "env") {
			if n, err := d.mod.evalString(attr(e, "name"), nil); err == nil && n == name {
				return d.mod.evalString(attr(e, "value"), nil)
			}
		}
		for _, dyn := range dynamicBlocks(c, "env") {
			// The map may hold unknown values (resource names); the one asked for must be known.
			m, diags := dyn.Body.Attributes["for_each"].Expr.Value(d.mod.ctx)
			if diags.HasErrors() || !m.IsKnown() || m.IsNull() {
				continue
			}
			m, _ = m.UnmarkDeep()
			var v cty.Value
			switch {
			case m.Type().IsObjectType() && m.Type().HasAttribute(name):
				v = m.GetAttr(name)
			case m.Type().IsMapType() && m.HasIndex(cty.StringVal(name)).True():
				v = m.Index(cty.StringVal(name))
			default:
				continue
			}
			if !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
				return "", fmt.Errorf("%s: %s is not a known string", svc, name)
			}
			return v.AsString(), nil
		}
	}
	return "", fmt.Errorf("%s: %s is not set (or not known from the defaults)", svc, name)
}

// The ledger's retention (RUNONCE_RETENTION of the worker and the ingress) outlasts every
// worker subscription's message retention + the scheduler's retry window + the worker's
// longest lease or job, with the constants the binaries use (internal/config).
func checkRetention(d *deployment) []error {
	var errs []error
	retention := map[string]time.Duration{}
	for _, bin := range []string{"ingress", "worker"} {
		s, err := envValue(d, bin, "RUNONCE_RETENTION")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r, err := time.ParseDuration(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s RUNONCE_RETENTION=%q: %v", bin, s, err))
			continue
		}
		retention[bin] = r
	}
	if len(errs) > 0 {
		return errs
	}
	if retention["ingress"] != retention["worker"] {
		errs = append(errs, fmt.Errorf("RUNONCE_RETENTION differs: ingress %s, worker %s", retention["ingress"], retention["worker"]))
	}
	ret := min(retention["ingress"], retention["worker"])
	longest := time.Duration(0)
	if s, err := envValue(d, "worker", "RUNONCE_LEASE"); err == nil {
		if l, err := time.ParseDuration(s); err == nil {
			longest = l
		}
	} else {
		longest = 30 * time.Second // the flag's default
	}
	if v, ok := d.mod.vars["longest_job_seconds"]; ok && v != nil {
		if e := d.mod.ctx.Variables["var"].GetAttr("longest_job_seconds"); e.IsKnown() && !e.IsNull() {
			f, _ := e.AsBigFloat().Float64()
			longest = max(longest, time.Duration(f)*time.Second)
		}
	}
	dlq := deadLetterTopics(d.mod)
	for _, s := range d.mod.resourcesOf("google_pubsub_subscription") {
		if t := attr(s.body, "topic"); t != nil && dlq[traversalName(t)] {
			continue
		}
		e := attr(s.body, "message_retention_duration")
		if e == nil {
			errs = append(errs, fmt.Errorf("%s: no message_retention_duration", s))
			continue
		}
		str, err := d.mod.evalString(e, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: message_retention_duration: %v", s, err))
			continue
		}
		msg, err := parseSeconds(str)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", s, err))
			continue
		}
		if msg >= ret {
			errs = append(errs, fmt.Errorf("%s: message retention %s is not shorter than the ledger's retention %s", s, msg, ret))
		}
		if need := msg + config.SchedulerRetryWindow + longest; ret < need {
			errs = append(errs, fmt.Errorf("%s: ledger retention %s < message retention %s + scheduler retry window %s + longest lease or job %s = %s: the worker refuses to start, and a late redelivery would run twice",
				s, ret, msg, config.SchedulerRetryWindow, longest, need))
		}
	}
	return errs
}

// --- Firestore -------------------------------------------------------------------------

// The TTL policy is on expire_at of the runs (not the effects), and the composite
// indexes of the rescuer's and the operators' queries exist.
func checkFirestore(d *deployment) []error {
	if ledgerOf(d) != "firestore" {
		return nil
	}
	var errs []error
	prefix := ""
	if v := d.mod.ctx.Variables["var"].GetAttr("collection_prefix"); v.IsKnown() && !v.IsNull() {
		prefix = v.AsString()
	}
	ttl := map[string]bool{}
	for _, f := range d.mod.resourcesOf("google_firestore_field") {
		field, err := d.mod.evalString(attr(f.body, "field"), nil)
		if err != nil || field != "expire_at" || len(blocks(f.body, "ttl_config")) != 1 {
			continue
		}
		eachs, err := forEach(d, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, each := range eachs {
			c, err := d.mod.evalString(attr(f.body, "collection"), each)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: collection: %v", f, err))
				continue
			}
			ttl[c] = true
		}
	}
	if !ttl[prefix+"runs"] {
		errs = append(errs, fmt.Errorf("no google_firestore_field with ttl_config on expire_at for collection %q: runs would never be deleted", prefix+"runs"))
	}
	if ttl[prefix+"effects"] {
		errs = append(errs, fmt.Errorf("a TTL policy on %q: Firestore would delete the effects of a live run, and a later attempt would redo them (the worker's sweep deletes an effect only after its run)", prefix+"effects"))
	}
	indexes, ierrs := firestoreIndexes(d)
	errs = append(errs, ierrs...)
	have := map[string]bool{}
	for _, ix := range indexes {
		have[ix.String()] = true
	}
	for _, w := range firestoreledger.Indexes() {
		want := tfIndex{collection: prefix + w.Collection, fields: w.Fields}
		if !have[want.String()] {
			errs = append(errs, fmt.Errorf("no google_firestore_index on %s: %s fails with FAILED_PRECONDITION", want, w.Query))
		}
	}
	return errs
}

// tfIndex is a google_firestore_index as one deployment declares it.
type tfIndex struct {
	resource   string
	collection string
	fields     []firestoreledger.IndexField
}

// String is "collection: field ORDER, field ORDER".
func (ix tfIndex) String() string {
	var fs []string
	for _, f := range ix.fields {
		o := "ASCENDING"
		if f.Descending {
			o = "DESCENDING"
		}
		fs = append(fs, f.Path+" "+o)
	}
	return ix.collection + ": " + strings.Join(fs, ", ")
}

// firestoreIndexes returns the composite indexes of a deployment, one per each value.
func firestoreIndexes(d *deployment) ([]tfIndex, []error) {
	var out []tfIndex
	errs := eachInstance(d, "google_firestore_index", func(ix *tfBlock, each *cty.Value) {
		c, err := d.mod.evalString(attr(ix.body, "collection"), each)
		if err != nil {
			return
		}
		got := tfIndex{resource: ix.String(), collection: c}
		for _, f := range blocks(ix.body, "fields") {
			p, _ := d.mod.evalString(attr(f, "field_path"), each)
			o, _ := d.mod.evalString(attr(f, "order"), each)
			got.fields = append(got.fields, firestoreledger.IndexField{Path: p, Descending: o == "DESCENDING"})
		}
		out = append(out, got)
	})
	return out, errs
}

// eachInstance calls f for each instance of the resources of type typ (one per each
// value, or one with a nil each), and returns the errors of evaluating their for_each.
func eachInstance(d *deployment, typ string, f func(r *tfBlock, each *cty.Value)) []error {
	var errs []error
	for _, r := range d.mod.resourcesOf(typ) {
		eachs, err := forEach(d, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, each := range eachs {
			f(r, each)
		}
	}
	return errs
}

// checkFirestoreSharded: no index brings back Firestore's limit of 500 writes a second on
// a collection with a sequential indexed value
// (https://firebase.google.com/docs/firestore/solutions/shard-timestamp). Every composite
// index that holds a field of firestoreledger.Sequential leads with the shard field, and
// every field of firestoreledger.Unindexed (the sequential ones, the TTL field included,
// and the shard) has its single-field index exempted: a google_firestore_field with an
// empty index_config.
func checkFirestoreSharded(d *deployment) []error {
	if ledgerOf(d) != "firestore" {
		return nil
	}
	prefix := ""
	if v := d.mod.ctx.Variables["var"].GetAttr("collection_prefix"); v.IsKnown() && !v.IsNull() {
		prefix = v.AsString()
	}
	indexes, errs := firestoreIndexes(d)
	for _, ix := range indexes {
		coll := strings.TrimPrefix(ix.collection, prefix)
		for i, f := range ix.fields {
			if slices.Contains(firestoreledger.Sequential[coll], f.Path) && (i == 0 || ix.fields[0].Path != firestoreledger.ShardField) {
				errs = append(errs, fmt.Errorf("%s indexes %s, which follows the clock or a caller's sequence, without leading with %q: the collection's writes are limited to 500 a second", ix.resource, ix, firestoreledger.ShardField))
			}
		}
	}
	exempt := map[string]bool{} // "collection/field"
	ferrs := eachInstance(d, "google_firestore_field", func(f *tfBlock, each *cty.Value) {
		c, err1 := d.mod.evalString(attr(f.body, "collection"), each)
		field, err2 := d.mod.evalString(attr(f.body, "field"), each)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", f, err))
			return
		}
		ic := blocks(f.body, "index_config")
		if len(ic) == 1 && len(blocks(ic[0], "indexes")) == 0 {
			exempt[c+"/"+field] = true
		}
	})
	errs = append(errs, ferrs...)
	for coll, fields := range firestoreledger.Unindexed() {
		for _, field := range fields {
			if exempt[prefix+coll+"/"+field] {
				continue
			}
			why := "it is never queried alone"
			if slices.Contains(firestoreledger.Sequential[coll], field) {
				why = "it follows the clock or a caller's sequence: its single-field index limits the collection's writes to 500 a second"
			}
			errs = append(errs, fmt.Errorf("no google_firestore_field with an empty index_config on %s%s.%s: %s", prefix, coll, field, why))
		}
	}
	return errs
}

// forEach returns the each values of a resource: its for_each's elements, or one nil
// when it has none.
func forEach(d *deployment, r *tfBlock) ([]*cty.Value, error) {
	fe := attr(r.body, "for_each")
	if fe == nil {
		return []*cty.Value{nil}, nil
	}
	v, err := d.mod.eval(fe, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: for_each: %v", r, err)
	}
	var eachs []*cty.Value
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		eachs = append(eachs, &e)
	}
	return eachs, nil
}

// ledgerOf is the deployment's var.ledger ("firestore" when not known).
func ledgerOf(d *deployment) string {
	v := d.mod.ctx.Variables["var"].GetAttr("ledger")
	if !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		return "firestore"
	}
	return v.AsString()
}

// checkSpanner: with ledger = "spanner", the database's DDL is the ledger's own
// (spannerledger.Schema, its row deletion policy included: the services open it with
// migrate=false and have no DDL rights), and the ingress and the worker hold
// roles/spanner.databaseUser on that database.
func checkSpanner(d *deployment) []error {
	if ledgerOf(d) != "spanner" {
		return nil
	}
	var errs []error
	dbs := d.mod.resourcesOf("google_spanner_database")
	if len(dbs) != 1 {
		return []error{fmt.Errorf("ledger = \"spanner\" but %d google_spanner_database resources, want 1", len(dbs))}
	}
	v, err := d.mod.eval(attr(dbs[0].body, "ddl"), nil)
	if err != nil {
		return []error{fmt.Errorf("%s: ddl: %v", dbs[0], err)}
	}
	var ddl []string
	for it := v.ElementIterator(); it.Next(); {
		_, s := it.Element()
		ddl = append(ddl, normalizeDDL(s.AsString()))
	}
	var want []string
	for _, s := range spannerledger.Schema {
		want = append(want, normalizeDDL(s))
	}
	if !slices.Equal(ddl, want) {
		errs = append(errs, fmt.Errorf("%s: ddl differs from spannerledger.Schema (the tables the ledger reads, and the runs' row deletion policy):\n got %q\nwant %q", dbs[0], ddl, want))
	}
	holders := map[string]bool{}
	for _, r := range d.mod.resourcesOf("google_spanner_database_iam_member") {
		if role, err := d.mod.evalString(attr(r.body, "role"), nil); err != nil || role != "roles/spanner.databaseUser" {
			continue
		}
		for _, who := range []string{"ingress", "worker"} {
			if fe := attr(r.body, "for_each"); fe != nil && references(fe, "google_service_account."+who+".member") {
				holders[who] = true
			}
			if m := attr(r.body, "member"); m != nil && references(m, "google_service_account."+who+".member") {
				holders[who] = true
			}
		}
	}
	for _, who := range []string{"ingress", "worker"} {
		if !holders[who] {
			errs = append(errs, fmt.Errorf("the %s holds no roles/spanner.databaseUser on the ledger's database: its claims fail with PERMISSION_DENIED", who))
		}
	}
	return errs
}

// normalizeDDL collapses a DDL statement's white space.
func normalizeDDL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.NewReplacer("( ", "(", " )", ")").Replace(s)
}

// TestSpannerExample: an example deploys the Spanner ledger, so that checkSpanner has
// something to check.
func TestSpannerExample(t *testing.T) {
	ds, err := loadDeployments(tfDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if ledgerOf(d) == "spanner" {
			return
		}
	}
	t.Fatal("no example sets ledger = \"spanner\"")
}

// --- Cloud Run -------------------------------------------------------------------------

// serviceOf returns the Cloud Run service (or worker pool) whose container image is
// var.<binary>_image.
func serviceOf(m *tfModule, binary string) (*tfBlock, error) {
	var found []*tfBlock
	for _, typ := range []string{"google_cloud_run_v2_service", "google_cloud_run_v2_worker_pool"} {
		for _, r := range m.resourcesOf(typ) {
			for _, c := range blocks(r.body, "template", "containers") {
				if e := attr(c, "image"); e != nil && references(e, "var."+binary+"_image") {
					found = append(found, r)
				}
			}
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("want one Cloud Run service or worker pool running var.%s_image, found %d", binary, len(found))
	}
	return found[0], nil
}

// The worker's CPU is always allocated (a service with cpu_idle = false, or a worker
// pool) and at least one instance runs, and its grace fits Cloud Run's 10 s.
func checkWorkerAlwaysOn(d *deployment) []error {
	var errs []error
	w, err := serviceOf(d.mod, "worker")
	if err != nil {
		return []error{err}
	}
	if w.typ() == "google_cloud_run_v2_service" {
		res := blocks(w.body, "template", "containers", "resources")
		if len(res) == 0 {
			errs = append(errs, fmt.Errorf("%s: no resources block: cpu_idle defaults to true (CPU only during requests)", w))
		}
		for _, r := range res {
			e := attr(r, "cpu_idle")
			if e == nil {
				errs = append(errs, fmt.Errorf("%s: cpu_idle is not set: it defaults to true, and request-based CPU stops pulls, lease renewals and the rescuer", w))
				continue
			}
			v, err := d.mod.eval(e, nil)
			if err != nil || v.Type() != cty.Bool || v.True() {
				errs = append(errs, fmt.Errorf("%s: cpu_idle must be false (CPU always allocated), got %s", w, strings.TrimSpace(string(srcOf(e)))))
			}
		}
	}
	minInst := -1.0
	for _, s := range blocks(w.body, "template", "scaling") {
		if e := attr(s, "min_instance_count"); e != nil {
			if n, err := d.mod.evalNumber(e); err == nil {
				minInst = n
			} else {
				errs = append(errs, fmt.Errorf("%s: min_instance_count: %v", w, err))
			}
		}
	}
	for _, s := range blocks(w.body, "scaling") { // worker pool (manual) or service level
		for _, name := range []string{"min_instance_count", "manual_instance_count"} {
			if e := attr(s, name); e != nil {
				if n, err := d.mod.evalNumber(e); err == nil {
					minInst = max(minInst, n)
				}
			}
		}
	}
	if minInst < 1 {
		errs = append(errs, fmt.Errorf("%s: the minimum instance count must be at least 1 (got %v): with none, nobody pulls and the rescuer never runs", w, minInst))
	}
	if s, err := envValue(d, "worker", "RUNONCE_GRACE"); err == nil {
		g, err := time.ParseDuration(s)
		// Cloud Run kills 10 s after SIGTERM; the worker takes grace + 1 s to release.
		if err != nil || g <= 0 || g+time.Second >= 10*time.Second {
			errs = append(errs, fmt.Errorf("%s: RUNONCE_GRACE=%q: want a duration with grace + 1s < 10s (Cloud Run's SIGTERM-to-SIGKILL)", w, s))
		}
	}
	return errs
}

// The ingress's request timeout is well under (at most half) every scheduler job's
// attempt deadline.
func checkTimeouts(d *deployment) []error {
	var errs []error
	in, err := serviceOf(d.mod, "ingress")
	if err != nil {
		return []error{err}
	}
	var timeout time.Duration
	for _, tpl := range blocks(in.body, "template") {
		e := attr(tpl, "timeout")
		if e == nil {
			return []error{fmt.Errorf("%s: no template.timeout (the default is 300s, longer than the scheduler waits)", in)}
		}
		s, err := d.mod.evalString(e, nil)
		if err != nil {
			return []error{err}
		}
		if timeout, err = parseSeconds(s); err != nil {
			return []error{err}
		}
		if attr(tpl, "max_instance_request_concurrency") == nil {
			errs = append(errs, fmt.Errorf("%s: no max_instance_request_concurrency", in))
		}
	}
	for _, j := range d.mod.resourcesOf("google_cloud_scheduler_job") {
		e := attr(j.body, "attempt_deadline")
		if e == nil {
			continue // checkSchedulerOIDC reports it
		}
		s, err := d.mod.evalString(e, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dl, err := parseSeconds(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if 2*timeout > dl {
			errs = append(errs, fmt.Errorf("%s: attempt_deadline %s is not well over the ingress timeout %s (want at least twice)", j, dl, timeout))
		}
	}
	return errs
}

// --- IAM -------------------------------------------------------------------------------

// allowedRoles lists every role the deployment may grant and the only IAM resource type
// it may be granted through: each on one resource, none project-wide except
// datastore.user (Firestore has no per-database IAM resource; an IAM condition narrows
// it) and monitoring.metricWriter and cloudtrace.agent (time series and traces belong to
// the project; write-only). Why each is there: modules/runonce/iam.tf.
var allowedRoles = map[string]string{
	"roles/pubsub.publisher":               "google_pubsub_topic_iam_member",                                       // ingress publishes; worker's rescuer republishes; Pub/Sub agent dead-letters
	"roles/pubsub.subscriber":              "google_pubsub_subscription_iam_member",                                // worker pulls; Pub/Sub agent acks what it dead-letters
	"roles/pubsub.viewer":                  "google_pubsub_topic_iam_member google_pubsub_subscription_iam_member", // GetTopic (/readyz), GetSubscription (retention check)
	"roles/datastore.user":                 "google_project_iam_member",                                            // the ledger (Firestore)
	"roles/spanner.databaseUser":           "google_spanner_database_iam_member",                                   // the ledger (Spanner)
	"roles/run.invoker":                    "google_cloud_run_v2_service_iam_member",                               // scheduler → ingress, push → worker
	"roles/iam.serviceAccountTokenCreator": "google_service_account_iam_member",                                    // Pub/Sub agent mints the push token
	"roles/secretmanager.secretAccessor":   "google_secret_manager_secret_iam_member",                              // worker reads the jobs file, ingress its own
	"roles/cloudscheduler.viewer":          "google_project_iam_member",                                            // both read a scheduler_job's schedule (no IAM below the project; read-only)
	"roles/workflows.invoker":              "google_project_iam_member",                                            // a workflows target (no IAM below the project; a condition narrows it)
	"roles/run.jobsExecutorWithOverrides":  "google_cloud_run_v2_job_iam_member",                                   // a cloudrun target, on its job: run it with overrides
	"roles/run.viewer":                     "google_cloud_run_v2_job_iam_member",                                   // a cloudrun target, on its job: get and list its executions
	"roles/cloudbuild.builds.editor":       "google_project_iam_member",                                            // a cloudbuild target (no IAM below the project; a condition narrows it)
	"roles/monitoring.metricWriter":        "google_project_iam_member",                                            // both export metrics (time series belong to the project)
	"roles/cloudtrace.agent":               "google_project_iam_member",                                            // both export spans (traces belong to the project)
}

var iamType = regexp.MustCompile(`^google_.*_iam_(member|binding|policy|audit_config)$`)

func checkIAM(d *deployment) []error {
	var errs []error
	n := 0
	for _, r := range d.mod.resources {
		if !iamType.MatchString(r.typ()) {
			continue
		}
		n++
		if !strings.HasSuffix(r.typ(), "_iam_member") {
			errs = append(errs, fmt.Errorf("%s: authoritative IAM (%s) would remove other grants; use *_iam_member", r, r.typ()))
			continue
		}
		e := attr(r.body, "role")
		if e == nil {
			errs = append(errs, fmt.Errorf("%s: no role", r))
			continue
		}
		role, err := d.mod.evalString(e, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: role must be a literal: %v", r, err))
			continue
		}
		types, ok := allowedRoles[role]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: role %s is not in the allowed list", r, role))
			continue
		}
		if !slices.Contains(strings.Fields(types), r.typ()) {
			errs = append(errs, fmt.Errorf("%s: %s may be granted only through %s (on the one resource that needs it)", r, role, types))
		}
		if role == "roles/iam.serviceAccountTokenCreator" {
			if m := attr(r.body, "member"); m == nil || !references(m, "local.pubsub_service_agent") {
				errs = append(errs, fmt.Errorf("%s: token creator is for the Pub/Sub service agent only", r))
			}
		}
	}
	if n == 0 {
		errs = append(errs, errors.New("no IAM grants at all: the services could not reach Pub/Sub or Firestore"))
	}
	return errs
}

// targetGrants are the grants each Google Cloud API target kind needs (targets.tf): the
// kind, the role, the IAM resource type, the local that lists the targets of the kind,
// and whether the grant is project-level (then narrowed by an IAM condition).
type targetGrant struct {
	kind, role, typ, local string
	projectLevel           bool
}

var targetGrants = []targetGrant{
	{"workflows", "roles/workflows.invoker", "google_project_iam_member", "local.workflow_targets", true},
	{"cloudrun", "roles/run.jobsExecutorWithOverrides", "google_cloud_run_v2_job_iam_member", "local.cloudrun_targets", false},
	{"cloudrun", "roles/run.viewer", "google_cloud_run_v2_job_iam_member", "local.cloudrun_targets", false},
	{"cloudbuild", "roles/cloudbuild.builds.editor", "google_project_iam_member", "local.cloudbuild_targets", true},
}

// targetKind reports whether kind is a Google Cloud API target's.
func targetKind(kind string) bool {
	return slices.ContainsFunc(targetGrants, func(g targetGrant) bool { return g.kind == kind })
}

// jobsTargets returns the Google Cloud API targets of the deployment's jobs file: name →
// kind and resource.
func jobsTargets(d *deployment) (map[string][2]string, error) {
	js, err := jobsJSON(d)
	if err != nil {
		return nil, fmt.Errorf("cannot check the targets' grants: %v", err)
	}
	out := map[string][2]string{}
	for name, fields := range js {
		var kind, resource string
		_ = json.Unmarshal(fields["kind"], &kind)
		_ = json.Unmarshal(fields["resource"], &resource)
		if targetKind(kind) {
			out[name] = [2]string{kind, resource}
		}
	}
	return out, nil
}

// Every Google Cloud API target of the jobs file gets its kind's one role, for the
// worker's account, on its own resource (project-level grants carry an IAM condition on
// it), and no target role is granted for a target the jobs file does not name.
func checkTargetIAM(d *deployment) []error {
	targets, err := jobsTargets(d)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, g := range targetGrants {
		kind := g.kind
		want := map[string]string{}
		for name, t := range targets {
			if t[0] == kind {
				want[name] = t[1]
			}
		}
		var grants []*tfBlock
		for _, r := range d.mod.resources {
			if e := attr(r.body, "role"); e != nil {
				if role, err := d.mod.evalString(e, nil); err == nil && role == g.role {
					grants = append(grants, r)
				}
			}
		}
		if len(grants) != 1 {
			errs = append(errs, fmt.Errorf("%s targets: %d resources grant %s, want one (for_each over %s)", kind, len(grants), g.role, g.local))
			continue
		}
		r := grants[0]
		fe := attr(r.body, "for_each")
		if r.typ() != g.typ || fe == nil || !references(fe, g.local) {
			errs = append(errs, fmt.Errorf("%s: %s must be a %s with for_each = %s", r, g.role, g.typ, g.local))
			continue
		}
		if m := attr(r.body, "member"); m == nil || !references(m, "google_service_account.worker") {
			errs = append(errs, fmt.Errorf("%s: %s must go to the worker's service account", r, g.role))
		}
		got, err := d.mod.eval(fe, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: for_each: %v", r, err))
			continue
		}
		have := map[string]string{}
		for it := got.ElementIterator(); it.Next(); {
			k, v := it.Element()
			if v.Type().Equals(cty.String) {
				have[k.AsString()] = v.AsString()
			}
		}
		if !maps.Equal(have, want) {
			errs = append(errs, fmt.Errorf("%s: grants %s for %v, want exactly the jobs file's %s targets %v", r, g.role, have, kind, want))
		}
		for name, res := range want {
			each := cty.StringVal(res)
			parts := strings.Split(res, "/")
			if p, err := d.mod.evalString(attr(r.body, "project"), &each); err != nil || len(parts) < 6 || p != parts[1] {
				errs = append(errs, fmt.Errorf("%s: target %s (%s) is granted in project %q, not its own", r, name, res, p))
			}
			if g.projectLevel {
				if err := conditionNames(d, r, each); err != nil {
					errs = append(errs, fmt.Errorf("%s: target %s: a project-level %s grant needs an IAM condition on its resource.name: %v", r, name, g.role, err))
				}
			} else {
				n, err := d.mod.evalString(attr(r.body, "name"), &each)
				l, lerr := d.mod.evalString(attr(r.body, "location"), &each)
				if err != nil || lerr != nil || n != parts[5] || l != parts[3] {
					errs = append(errs, fmt.Errorf("%s: target %s (%s) is granted on %s/%s, not on its own resource", r, name, res, l, n))
				}
			}
		}
	}
	return errs
}

// conditionNames checks that r's one dynamic condition block is on (its for_each is not
// empty with the deployment's variables) and that its expression names the resource.
func conditionNames(d *deployment, r *tfBlock, each cty.Value) error {
	dyn := dynamicBlocks(r.body, "condition")
	if len(dyn) != 1 {
		return fmt.Errorf("%d dynamic condition blocks, want 1", len(dyn))
	}
	on, err := d.mod.eval(attr(dyn[0].Body, "for_each"), nil)
	if err != nil {
		return err
	}
	if on.LengthInt() == 0 {
		return errors.New("the condition is off")
	}
	content := blocks(dyn[0].Body, "content")
	if len(content) != 1 {
		return errors.New("the condition has no content")
	}
	expr, err := d.mod.evalString(attr(content[0], "expression"), &each)
	if err != nil {
		return err
	}
	if !strings.Contains(expr, `resource.name == "`+each.AsString()+`"`) {
		return fmt.Errorf("the condition %q does not name %s", expr, each.AsString())
	}
	return nil
}

// Each binary runs as its own service account, not the default compute one.
func checkServiceAccounts(d *deployment) []error {
	var errs []error
	accounts := map[string]string{}
	for _, bin := range []string{"ingress", "worker"} {
		s, err := serviceOf(d.mod, bin)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, tpl := range blocks(s.body, "template") {
			e := attr(tpl, "service_account")
			if e == nil {
				errs = append(errs, fmt.Errorf("%s: no service_account: it would run as the default compute account (Editor)", s))
				continue
			}
			accounts[bin] = traversalName(e)
		}
	}
	if a, b := accounts["ingress"], accounts["worker"]; a != "" && a == b {
		errs = append(errs, fmt.Errorf("the ingress and the worker share the service account %s", a))
	}
	return errs
}

// --- RUNONCE_* names -------------------------------------------------------------------

var envRef = regexp.MustCompile(`\bRUNONCE_[A-Z0-9_]+\b`)

// Every RUNONCE_* variable given to a service names a flag of the binary it runs, and
// every RUNONCE_* token anywhere in the .tf files names a flag of one of them.
func checkEnvNames(d *deployment) []error {
	var errs []error
	flags, err := binaryEnvNames()
	if err != nil {
		return []error{err}
	}
	for _, bin := range []string{"ingress", "worker"} {
		svc, err := serviceOf(d.mod, bin)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var names []string
		for _, c := range blocks(svc.body, "template", "containers") {
			for _, e := range blocks(c, "env") {
				if n, err := d.mod.evalString(attr(e, "name"), nil); err == nil {
					names = append(names, n)
				}
			}
			for _, dyn := range dynamicBlocks(c, "env") {
				names = append(names, d.mod.objectKeys(dyn.Body.Attributes["for_each"].Expr)...)
			}
		}
		if len(names) == 0 {
			errs = append(errs, fmt.Errorf("%s: no environment variables found", svc))
		}
		for _, n := range names {
			if strings.HasPrefix(n, config.EnvPrefix) && !flags[bin][n] {
				errs = append(errs, fmt.Errorf("%s: %s names no flag of %s (its variables: %s)", svc, n, bin, strings.Join(sortedKeys(flags[bin]), " ")))
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(d.mod.dir, "*.tf"))
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, n := range envRef.FindAllString(string(src), -1) {
			if !flags["ingress"][n] && !flags["worker"][n] {
				errs = append(errs, fmt.Errorf("%s: %s names no flag of either binary", filepath.Base(f), n))
			}
		}
	}
	return errs
}

var (
	envNamesOnce sync.Once
	envNames     map[string]map[string]bool
	envNamesErr  error
)

// binaryEnvNames returns each binary's RUNONCE_* names: the worker's from its flag set
// (internal/app.WorkerFlagSet), the ingress's from its -help output (its flags live in
// package main).
func binaryEnvNames() (map[string]map[string]bool, error) {
	envNamesOnce.Do(func() {
		envNames = map[string]map[string]bool{"ingress": {}, "worker": {}}
		app.WorkerFlagSet(&app.WorkerFlags{}).VisitAll(func(f *flag.Flag) {
			envNames["worker"][config.EnvName(f.Name)] = true
		})
		cmd := exec.Command("go", "run", "./cmd/ingress", "-help")
		cmd.Dir = ".."
		out, _ := cmd.CombinedOutput() // -help exits 2
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9][a-z0-9.-]*)`).FindAllStringSubmatch(string(out), -1) {
			envNames["ingress"][config.EnvName(m[1])] = true
		}
		if len(envNames["ingress"]) < 5 || !envNames["ingress"]["RUNONCE_LEDGER"] {
			envNamesErr = fmt.Errorf("could not read the ingress's flags from `go run ./cmd/ingress -help`:\n%s", out)
		}
	})
	return envNames, envNamesErr
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
