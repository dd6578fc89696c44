package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/runonce/runonce/pkg/jobs"
)

// scheduleFields are the jobs file's fields of a job's schedule (pkg/jobs): the only
// fields the ingress's jobs file may carry. None is secret.
var scheduleFields = []string{"schedule", "time_zone", "scheduler_job", "catch_up", "missed_after"}

// jobsJSON returns the deployment's jobs_json decoded (each job's fields as raw JSON),
// or nil when it is null.
func jobsJSON(d *deployment) (map[string]map[string]json.RawMessage, error) {
	v := d.mod.ctx.Variables["var"].GetAttr("jobs_json")
	if v.IsNull() {
		return nil, nil
	}
	if !v.IsWhollyKnown() || !v.Type().Equals(cty.String) {
		return nil, errors.New("jobs_json is not known from the variables")
	}
	return decodeJobs(v.AsString())
}

func decodeJobs(s string) (map[string]map[string]json.RawMessage, error) {
	var f struct {
		Jobs map[string]map[string]json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(s), &f); err != nil {
		return nil, err
	}
	if f.Jobs == nil {
		f.Jobs = map[string]map[string]json.RawMessage{}
	}
	return f.Jobs, nil
}

// resourceRef returns "TYPE.NAME" of the first resource expr refers to, or "".
func resourceRef(expr hcl.Expression) string {
	for _, tr := range expr.Variables() {
		root, ok := tr[0].(hcl.TraverseRoot)
		if !ok || len(tr) < 2 || !strings.HasPrefix(root.Name, "google_") {
			continue
		}
		if a, ok := tr[1].(hcl.TraverseAttr); ok {
			return root.Name + "." + a.Name
		}
	}
	return ""
}

// mountedFile is a file a Cloud Run service mounts from a Secret Manager secret.
type mountedFile struct {
	secret string // "google_secret_manager_secret.NAME"
	path   string // where the container sees it
	data   string // the secret version's secret_data, evaluated
}

// secretFiles returns the files binary's service mounts from secrets, with the
// deployment's variables (a dynamic volume whose for_each is empty mounts nothing).
func secretFiles(d *deployment, binary string) ([]mountedFile, error) {
	svc, err := serviceOf(d.mod, binary)
	if err != nil {
		return nil, err
	}
	// Volumes and mounts, static or dynamic (when on), by volume name.
	type vol struct {
		secret, version, item string
	}
	vols := map[string]vol{}
	mounts := map[string]string{}
	for _, tpl := range blocks(svc.body, "template") {
		bodies, err := expanded(d, tpl, "volumes")
		if err != nil {
			return nil, fmt.Errorf("%s: %v", svc, err)
		}
		for _, b := range bodies {
			name, err := d.mod.evalString(attr(b, "name"), nil)
			if err != nil {
				return nil, err
			}
			for _, s := range blocks(b, "secret") {
				v := vol{secret: resourceRef(attr(s, "secret"))}
				for _, it := range blocks(s, "items") {
					if v.item, err = d.mod.evalString(attr(it, "path"), nil); err != nil {
						return nil, err
					}
					if e := attr(it, "version"); e != nil {
						v.version = resourceRef(e)
					}
				}
				vols[name] = v
			}
		}
		for _, c := range blocks(tpl, "containers") {
			bodies, err := expanded(d, c, "volume_mounts")
			if err != nil {
				return nil, fmt.Errorf("%s: %v", svc, err)
			}
			for _, b := range bodies {
				name, err := d.mod.evalString(attr(b, "name"), nil)
				if err != nil {
					return nil, err
				}
				if mounts[name], err = d.mod.evalString(attr(b, "mount_path"), nil); err != nil {
					return nil, err
				}
			}
		}
	}
	var out []mountedFile
	for name, v := range vols {
		dir, ok := mounts[name]
		if !ok {
			continue
		}
		f := mountedFile{secret: v.secret, path: path.Join(dir, v.item)}
		if v.secret == "" || v.item == "" {
			return nil, fmt.Errorf("%s: volume %q: want a secret and one item with its path", svc, name)
		}
		// The version the item pins, which must be a version of the volume's secret.
		for _, r := range d.mod.resourcesOf("google_secret_manager_secret_version") {
			if "google_secret_manager_secret_version."+r.name() != v.version {
				continue
			}
			if s := attr(r.body, "secret"); s == nil || resourceRef(s) != v.secret {
				return nil, fmt.Errorf("%s: volume %q pins %s, a version of another secret than %s", svc, name, r, v.secret)
			}
			if f.data, err = d.mod.evalString(attr(r.body, "secret_data"), nil); err != nil {
				return nil, fmt.Errorf("%s: secret_data: %v", r, err)
			}
		}
		if f.data == "" {
			return nil, fmt.Errorf("%s: volume %q: no google_secret_manager_secret_version %q of %s", svc, name, v.version, v.secret)
		}
		out = append(out, f)
	}
	return out, nil
}

// expanded returns body's typ blocks: the static ones, and the content of each dynamic
// one whose for_each is not empty with the deployment's variables.
func expanded(d *deployment, body *hclsyntax.Body, typ string) ([]*hclsyntax.Body, error) {
	out := blocks(body, typ)
	for _, dyn := range dynamicBlocks(body, typ) {
		v, err := d.mod.eval(attr(dyn.Body, "for_each"), nil)
		if err != nil {
			return nil, fmt.Errorf("dynamic %s: for_each: %v", typ, err)
		}
		if v.LengthInt() > 0 {
			out = append(out, blocks(dyn.Body, "content")...)
		}
	}
	return out, nil
}

// accessors returns the service accounts ("ingress", "worker", …) that hold
// roles/secretmanager.secretAccessor on secret ("google_secret_manager_secret.NAME").
func accessors(d *deployment, secret string) []string {
	var out []string
	for _, r := range d.mod.resourcesOf("google_secret_manager_secret_iam_member") {
		if s := attr(r.body, "secret_id"); s == nil || resourceRef(s) != secret {
			continue
		}
		if m := attr(r.body, "member"); m != nil {
			if acct, ok := strings.CutPrefix(resourceRef(m), "google_service_account."); ok {
				out = append(out, acct)
			}
		}
	}
	return out
}

// checkIngressJobs: with jobs_json, the ingress reads a jobs file of its own
// (RUNONCE_JOBS, no RUNONCE_ACCEPT_ANY_JOB) from a secret only it may read, holding
// every job of jobs_json by name with its schedule's fields and nothing else (no url,
// headers or target), which the ingress's parser accepts; without jobs_json it accepts
// any job.
func checkIngressJobs(d *deployment) []error {
	want, err := jobsJSON(d)
	if err != nil {
		return []error{err}
	}
	jobsPath, jobsErr := envValue(d, "ingress", "RUNONCE_JOBS")
	anyJob, anyErr := envValue(d, "ingress", "RUNONCE_ACCEPT_ANY_JOB")
	files, err := secretFiles(d, "ingress")
	if err != nil {
		return []error{err}
	}
	if want == nil {
		var errs []error
		if anyErr != nil || anyJob != "true" {
			errs = append(errs, fmt.Errorf("no jobs_json: the ingress needs RUNONCE_ACCEPT_ANY_JOB=true (got %q, %v), or it refuses to start", anyJob, anyErr))
		}
		if jobsErr == nil {
			errs = append(errs, fmt.Errorf("no jobs_json, yet the ingress has RUNONCE_JOBS=%q", jobsPath))
		}
		return errs
	}
	var errs []error
	if anyErr == nil {
		errs = append(errs, fmt.Errorf("the ingress has RUNONCE_ACCEPT_ANY_JOB=%q with a jobs file: it would answer 202 for any job, and know no schedule", anyJob))
	}
	if jobsErr != nil {
		return append(errs, fmt.Errorf("jobs_json is set but the ingress has no RUNONCE_JOBS: the tick audit, backfill and /ui/jobs/ answer 404 for every job (%v)", jobsErr))
	}
	var file *mountedFile
	for i := range files {
		if files[i].path == jobsPath {
			file = &files[i]
		}
	}
	if file == nil {
		return append(errs, fmt.Errorf("the ingress's RUNONCE_JOBS=%s is no file it mounts from a secret", jobsPath))
	}
	if workerFiles, err := secretFiles(d, "worker"); err != nil {
		errs = append(errs, err)
	} else {
		for _, wf := range workerFiles {
			if wf.secret == file.secret {
				errs = append(errs, fmt.Errorf("the ingress mounts the worker's jobs file (%s): its headers may carry credentials", file.secret))
			}
		}
	}
	if who := accessors(d, file.secret); !slices.Equal(who, []string{"ingress"}) {
		errs = append(errs, fmt.Errorf("%s: secretAccessor for %v, want the ingress's account only", file.secret, who))
	}
	got, err := decodeJobs(file.data)
	if err != nil {
		return append(errs, fmt.Errorf("the ingress's jobs file (%s): %v", file.secret, err))
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		errs = append(errs, fmt.Errorf("the ingress's jobs file names %v, jobs_json %v: want the same jobs", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))))
	}
	for name, fields := range want {
		schedule := map[string]json.RawMessage{}
		for k, v := range fields {
			if slices.Contains(scheduleFields, k) {
				schedule[k] = v
			}
		}
		have := got[name]
		for k := range have {
			if !slices.Contains(scheduleFields, k) {
				errs = append(errs, fmt.Errorf("the ingress's jobs file gives job %s its %q: only %v may leave the worker's file", name, k, scheduleFields))
			}
		}
		if !sameJSON(have, schedule) {
			errs = append(errs, fmt.Errorf("the ingress's jobs file has job %s as %s, want its schedule fields %s", name, jsonString(have), jsonString(schedule)))
		}
	}
	if _, err := jobs.Parse(strings.NewReader(realNames(file.data))); err != nil {
		errs = append(errs, fmt.Errorf("the ingress's jobs file is refused by its parser: %v", err))
	}
	return errs
}

// standIn is the value a required string variable stands for (tfModule.evalContext).
var standIn = regexp.MustCompile(`VAR_([a-z0-9_]+)`)

// realNames replaces each required variable's stand-in in s (VAR_project_id) with a
// name of the form a real value has (var-project-id: a project ID holds no '_'), so that
// the names built from it pass the parser's checks.
func realNames(s string) string {
	return standIn.ReplaceAllStringFunc(s, func(m string) string {
		return strings.ReplaceAll(strings.ToLower(m), "_", "-")
	})
}

// sameJSON reports whether two objects of raw JSON values hold equal values.
func sameJSON(a, b map[string]json.RawMessage) bool {
	norm := func(m map[string]json.RawMessage) any {
		var v any
		b, _ := json.Marshal(m)
		_ = json.NewDecoder(bytes.NewReader(b)).Decode(&v)
		return v
	}
	return len(a) == len(b) && reflect.DeepEqual(norm(a), norm(b))
}

func jsonString(m map[string]json.RawMessage) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// schedulerJobProjects returns the projects of the jobs file's scheduler_job values.
func schedulerJobProjects(d *deployment) (map[string]bool, error) {
	js, err := jobsJSON(d)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for name, fields := range js {
		raw, ok := fields["scheduler_job"]
		if !ok {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("job %s: scheduler_job: %v", name, err)
		}
		parts := strings.Split(s, "/")
		if len(parts) != 6 || parts[0] != "projects" {
			return nil, fmt.Errorf("job %s: scheduler_job %q is not projects/P/locations/L/jobs/J", name, s)
		}
		out[parts[1]] = true
	}
	return out, nil
}

// checkSchedulerViewer: the ingress and the worker each hold roles/cloudscheduler.viewer
// on exactly the projects of the jobs file's scheduler_job values (runonce reads each
// Cloud Scheduler job with its own credentials), and on no other.
func checkSchedulerViewer(d *deployment) []error {
	want, err := schedulerJobProjects(d)
	if err != nil {
		return []error{err}
	}
	var errs []error
	grants := map[string][]*tfBlock{}
	for _, r := range d.mod.resources {
		e := attr(r.body, "role")
		if e == nil {
			continue
		}
		if role, err := d.mod.evalString(e, nil); err != nil || role != "roles/cloudscheduler.viewer" {
			continue
		}
		m := attr(r.body, "member")
		acct, _ := strings.CutPrefix(resourceRef(m), "google_service_account.")
		grants[acct] = append(grants[acct], r)
	}
	for acct := range grants {
		if acct != "ingress" && acct != "worker" {
			errs = append(errs, fmt.Errorf("roles/cloudscheduler.viewer granted to %q: only the ingress and the worker read Cloud Scheduler", acct))
		}
	}
	for _, bin := range []string{"ingress", "worker"} {
		rs := grants[bin]
		if len(rs) != 1 {
			errs = append(errs, fmt.Errorf("%d resources grant roles/cloudscheduler.viewer to the %s, want one (for_each over the scheduler_job projects)", len(rs), bin))
			continue
		}
		r := rs[0]
		fe := attr(r.body, "for_each")
		if fe == nil {
			errs = append(errs, fmt.Errorf("%s: no for_each over the jobs file's scheduler_job projects", r))
			continue
		}
		v, err := d.mod.eval(fe, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: for_each: %v", r, err))
			continue
		}
		have := map[string]bool{}
		for it := v.ElementIterator(); it.Next(); {
			k, each := it.Element()
			if !each.Type().Equals(cty.String) {
				errs = append(errs, fmt.Errorf("%s: for_each element %#v is not a project", r, k))
				continue
			}
			p, err := d.mod.evalString(attr(r.body, "project"), &each)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: project: %v", r, err))
				continue
			}
			have[p] = true
		}
		if !maps.Equal(have, want) {
			errs = append(errs, fmt.Errorf("%s: grants roles/cloudscheduler.viewer on %v, want the scheduler_job projects of the jobs file %v", r, slices.Sorted(maps.Keys(have)), slices.Sorted(maps.Keys(want))))
		}
	}
	return errs
}

func TestIngressJobsFile(t *testing.T)    { runCheck(t, "IngressJobsFile") }
func TestSchedulerViewerIAM(t *testing.T) { runCheck(t, "SchedulerViewerIAM") }

// TestIngressJobsFileDerived evaluates the module with a jobs file that has every kind of
// field, credentials in headers included, and checks the ingress's file field by field,
// the viewer grants project by project, and that without a jobs file the ingress accepts
// any job.
func TestIngressJobsFileDerived(t *testing.T) {
	const jobsFile = `{"jobs": {
	  "billing": {"url": "https://billing.internal/run", "headers": {"X-Api-Key": "s3cret"}, "auth": "oidc",
	              "timeout": "90s", "max_attempts": 3, "result": true,
	              "scheduler_job": "projects/billing-prod/locations/europe-west1/jobs/billing", "missed_after": "30m"},
	  "report": {"kind": "workflows", "resource": "projects/p/locations/l/workflows/w",
	             "schedule": "0 5 * * *", "time_zone": "Europe/Berlin", "catch_up": "2h"},
	  "sync": {"kind": "cloudrun", "resource": "projects/p/locations/l/jobs/j", "poll_interval": "30s",
	           "scheduler_job": "projects/VAR_project_id/locations/us-central1/jobs/sync-0200"},
	  "handled": {},
	  "adhoc": {"url": "https://example.com/adhoc", "headers": {"Authorization-Token": "t0ken"}}
	}}`
	wantFile := map[string]map[string]any{
		"billing": {"scheduler_job": "projects/billing-prod/locations/europe-west1/jobs/billing", "missed_after": "30m"},
		"report":  {"schedule": "0 5 * * *", "time_zone": "Europe/Berlin", "catch_up": "2h"},
		"sync":    {"scheduler_job": "projects/VAR_project_id/locations/us-central1/jobs/sync-0200"},
		"handled": {},
		"adhoc":   {},
	}
	mod, err := loadModule(filepath.Join(tfDir(), moduleRel), map[string]cty.Value{"jobs_json": cty.StringVal(jobsFile)})
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{name: "module with a full jobs file", mod: mod}
	for _, name := range []string{"IngressJobsFile", "SchedulerViewerIAM", "EnvNamesRealFlags", "IAMRoles", "TargetIAM"} {
		for _, err := range checks[name](d) {
			t.Errorf("%s: %v", name, err)
		}
	}

	files, err := secretFiles(d, "ingress")
	if err != nil || len(files) != 1 {
		t.Fatalf("the ingress mounts %v (%v), want its one jobs file", files, err)
	}
	for _, secret := range []string{"s3cret", "t0ken", "billing.internal", "headers", "url", "kind", "resource", "max_attempts"} {
		if strings.Contains(files[0].data, secret) {
			t.Errorf("the ingress's jobs file holds %q: %s", secret, files[0].data)
		}
	}
	var got struct{ Jobs map[string]map[string]any }
	if err := json.Unmarshal([]byte(files[0].data), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Jobs, wantFile) {
		t.Errorf("the ingress's jobs file is\n%s\nwant the jobs' names and schedule fields\n%v", files[0].data, wantFile)
	}
	parsed, err := jobs.Parse(strings.NewReader(realNames(files[0].data)))
	if err != nil {
		t.Fatalf("the ingress's jobs file is refused: %v", err)
	}
	for name, sched := range map[string]bool{"billing": true, "report": true, "sync": true, "handled": false, "adhoc": false} {
		if j := parsed[name]; j == nil || j.HasSchedule() != sched || j.HasTarget() {
			t.Errorf("job %s parsed as %+v: want schedule %v and no target", name, j, sched)
		}
	}

	projects, err := schedulerJobProjects(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"billing-prod": true, "VAR_project_id": true}; !maps.Equal(projects, want) {
		t.Errorf("scheduler_job projects %v, want %v", projects, want)
	}

	// Without a jobs file: any job, no file, no viewer grant.
	mod, err = loadModule(filepath.Join(tfDir(), moduleRel), nil)
	if err != nil {
		t.Fatal(err)
	}
	d = &deployment{name: "module without a jobs file", mod: mod}
	if v, err := envValue(d, "ingress", "RUNONCE_ACCEPT_ANY_JOB"); err != nil || v != "true" {
		t.Errorf("without jobs_json: RUNONCE_ACCEPT_ANY_JOB=%q (%v), want true", v, err)
	}
	if files, err := secretFiles(d, "ingress"); err != nil || len(files) != 0 {
		t.Errorf("without jobs_json the ingress mounts %v (%v), want nothing", files, err)
	}
	for _, name := range []string{"IngressJobsFile", "SchedulerViewerIAM"} {
		for _, err := range checks[name](d) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
