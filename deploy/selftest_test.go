package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// breakage is one deliberate mistake in a copy of the Terraform tree that a check must
// catch: the test of the checks themselves (like ledgertest's broken backend).
type breakage struct {
	name, check string
	file        string // relative to the terraform dir
	old, new    string
}

var breakages = []breakage{
	{"scheduler without audience", "SchedulerOIDC", "modules/runonce/scheduler.tf",
		"      audience              = local.ingress_audience\n", ""},
	{"scheduler without oidc_token", "SchedulerOIDC", "modules/runonce/scheduler.tf",
		"    oidc_token {", "    dynamic \"oidc_token\" {\n      for_each = []\n    }\n    removed {"},
	{"scheduler with a six-field schedule", "SchedulerUsesUnixCron", "examples/basic/main.tf",
		`schedule  = "0 5 * * *"`, `schedule  = "0 0 5 * * *"`},
	{"pull subscription without retry_policy", "SubscriptionPolicy", "modules/runonce/pubsub.tf",
		"  # A nacked message (a released run, a duplicate of a held run) comes back after a\n  # backoff instead of at once.\n  retry_policy {", "  retry_policy_removed {"},
	{"pull subscription without dead_letter_policy", "SubscriptionPolicy", "modules/runonce/pubsub.tf",
		"  # failed its run in the ledger first (max_delivery_attempts > max_attempts).\n  dead_letter_policy {", "  dead_letter_policy_removed {"},
	{"no Pub/Sub agent publisher on the dead-letter topic", "DeadLetterAgentIAM", "modules/runonce/iam.tf",
		"  topic   = google_pubsub_topic.dead_letter.name", "  topic   = google_pubsub_topic.runs.name"},
	{"ledger retention shorter than message retention in the example", "Retention", "examples/basic/main.tf",
		"retention_hours         = 336", "retention_hours         = 100"},
	{"ledger retention without the scheduler's 24h window", "Retention", "modules/runonce/variables.tf",
		"  type        = number\n  default     = 336\n", "  type        = number\n  default     = 180\n"},
	{"message retention of 7 days in seconds, ledger 7 days", "Retention", "examples/basic/main.tf",
		"retention_hours         = 336", "retention_hours         = 168"},
	{"no TTL on expire_at", "FirestoreTTLIndex", "modules/runonce/firestore.tf", "  ttl_config {}\n", ""},
	{"TTL on the wrong field", "FirestoreTTLIndex", "modules/runonce/firestore.tf", `field      = "expire_at"`, `field      = "expires_at"`},
	{"TTL on effects too", "FirestoreTTLIndex", "modules/runonce/firestore.tf", `toset(["runs"])`, `toset(["runs", "effects"])`},
	{"rescue index in the wrong order", "FirestoreTTLIndex", "modules/runonce/firestore.tf",
		"    field_path = \"deadline\"\n    order      = \"ASCENDING\"", "    field_path = \"deadline\"\n    order      = \"DESCENDING\""},
	{"listing by update time in the wrong order", "FirestoreTTLIndex", "modules/runonce/firestore.tf",
		"    field_path = \"updated_at\"\n    order      = \"DESCENDING\"", "    field_path = \"updated_at\"\n    order      = \"ASCENDING\""},
	{"no index for a run's effects", "FirestoreTTLIndex", "modules/runonce/firestore.tf", `field_path = "run_id"`, `field_path = "run"`},
	{"a listing index without the shard first", "FirestoreSharded", "modules/runonce/firestore.tf",
		"  fields {\n    field_path = \"shard\"\n    order      = \"ASCENDING\"\n  }\n  fields {\n    field_path = each.key\n    order      = \"ASCENDING\"\n  }\n  fields {\n    field_path = \"created_at\"",
		"  fields {\n    field_path = each.key\n    order      = \"ASCENDING\"\n  }\n  fields {\n    field_path = \"created_at\""},
	{"the shard after the time in the rescue index", "FirestoreSharded", "modules/runonce/firestore.tf",
		"  fields {\n    field_path = \"shard\"\n    order      = \"ASCENDING\"\n  }\n  fields {\n    field_path = \"status\"\n    order      = \"ASCENDING\"\n  }\n  fields {\n    field_path = \"deadline\"\n    order      = \"ASCENDING\"\n  }\n",
		"  fields {\n    field_path = \"status\"\n    order      = \"ASCENDING\"\n  }\n  fields {\n    field_path = \"deadline\"\n    order      = \"ASCENDING\"\n  }\n  fields {\n    field_path = \"shard\"\n    order      = \"ASCENDING\"\n  }\n"},
	{"an unsharded index on a time", "FirestoreSharded", "modules/runonce/firestore.tf",
		"# A run's effects, by name (EffectsQuery), for the run's detail view.\n",
		"resource \"google_firestore_index\" \"by_completion\" {\n  count = local.firestore ? 1 : 0\n\n  project     = var.project_id\n  database    = local.database_name\n  collection  = \"${var.collection_prefix}runs\"\n  query_scope = \"COLLECTION\"\n\n  fields {\n    field_path = \"job\"\n    order      = \"ASCENDING\"\n  }\n  fields {\n    field_path = \"completed_at\"\n    order      = \"DESCENDING\"\n  }\n}\n\n"},
	{"the TTL field's single-field index kept", "FirestoreSharded", "modules/runonce/firestore.tf",
		"  ttl_config {}\n  index_config {}\n", "  ttl_config {}\n"},
	{"a run's deadline indexed alone", "FirestoreSharded", "modules/runonce/firestore.tf", `"deadline", "not_before", `, `"not_before", `},
	{"a run's attempt ID (a UUIDv7) indexed alone", "FirestoreSharded", "modules/runonce/firestore.tf", `"key", "attempt_id", `, `"key", `},
	{"an effect's done_at indexed alone", "FirestoreSharded", "modules/runonce/firestore.tf", `"updated_at", "done_at", `, `"updated_at", `},
	{"a single-field index on created_at asked for", "FirestoreSharded", "modules/runonce/firestore.tf",
		"  field      = each.key\n\n  index_config {}\n}\n\n# Likewise",
		"  field      = each.key\n\n  index_config {\n    indexes {\n      order = \"ASCENDING\"\n    }\n  }\n}\n\n# Likewise"},
	{"worker with request-based CPU", "WorkerAlwaysOn", "modules/runonce/run.tf",
		"        cpu_idle          = false", "        cpu_idle          = true"},
	{"worker without cpu_idle", "WorkerAlwaysOn", "modules/runonce/run.tf",
		"        cpu_idle          = false\n", ""},
	{"worker scaled to zero", "WorkerAlwaysOn", "modules/runonce/variables.tf",
		"  type        = number\n  default     = 1\n", "  type        = number\n  default     = 0\n"},
	{"worker grace past Cloud Run's 10s", "WorkerAlwaysOn", "examples/basic/main.tf",
		"grace_seconds           = 8", "grace_seconds           = 12"},
	{"ingress timeout over half the attempt deadline", "Timeouts", "modules/runonce/variables.tf",
		"  type        = number\n  default     = 180\n", "  type        = number\n  default     = 45\n"},
	{"project-wide publisher", "IAMRoles", "modules/runonce/iam.tf",
		"resource \"google_project_iam_member\" \"datastore_user_ingress\" {\n  count = local.firestore ? 1 : 0\n\n  project = var.project_id\n  role    = \"roles/datastore.user\"",
		"resource \"google_project_iam_member\" \"datastore_user_ingress\" {\n  count = local.firestore ? 1 : 0\n\n  project = var.project_id\n  role    = \"roles/pubsub.publisher\""},
	{"an editor role", "IAMRoles", "modules/runonce/iam.tf",
		"role    = \"roles/datastore.user\"\n  member  = google_service_account.worker.member", "role    = \"roles/editor\"\n  member  = google_service_account.worker.member"},
	{"authoritative binding", "IAMRoles", "modules/runonce/iam.tf",
		`resource "google_pubsub_topic_iam_member" "runs_publisher_worker"`, `resource "google_pubsub_topic_iam_binding" "runs_publisher_worker"`},
	{"ingress and worker share an account", "ServiceAccountsOwn", "modules/runonce/run.tf",
		"service_account = google_service_account.worker.email", "service_account = google_service_account.ingress.email"},
	{"a worker-only flag given to the ingress", "EnvNamesRealFlags", "modules/runonce/run.tf",
		"    RUNONCE_NAMESPACE = local.namespace\n", "    RUNONCE_NAMESPACE = local.namespace\n    RUNONCE_LEASE     = \"30s\"\n"},
	{"a misspelt flag", "EnvNamesRealFlags", "modules/runonce/run.tf",
		"RUNONCE_CONCURRENCY  = ", "RUNONCE_CONCURENCY   = "},
	{"the Spanner DDL without the runs' row deletion policy", "SpannerSchemaIAM", "modules/runonce/spanner.tf",
		"PRIMARY KEY (run_id), ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))", "PRIMARY KEY (run_id)"},
	{"the Spanner DDL keeping an index led by a time", "SpannerSchemaIAM", "modules/runonce/spanner.tf",
		"    \"DROP INDEX runs_by_created\",\n", ""},
	{"the worker without its Spanner grant", "SpannerSchemaIAM", "modules/runonce/spanner.tf",
		"    worker  = google_service_account.worker.member\n", ""},
	{"a workflows target without its grant", "TargetIAM", "modules/runonce/targets.tf",
		`if t.kind == "workflows"`, `if t.kind == "workflow"`},
	{"a Cloud Run job's grant on the project", "TargetIAM", "modules/runonce/targets.tf",
		`resource "google_cloud_run_v2_job_iam_member" "jobs_executor_worker"`, `resource "google_project_iam_member" "jobs_executor_worker"`},
	{"a Cloud Run job's grant on another job", "TargetIAM", "modules/runonce/targets.tf",
		`name     = split("/", each.value)[5]`, `name     = split("/", each.value)[3]`},
	{"a project-wide workflows invoker", "TargetIAM", "modules/runonce/targets.tf",
		"    for_each = var.restrict_target_grants_to_resource ? [1] : []\n    content {\n      title      = \"runonce-${each.key}\"\n      expression = \"resource.name == \\\"${each.value}\\\"",
		"    for_each = []\n    content {\n      title      = \"runonce-${each.key}\"\n      expression = \"resource.name == \\\"${each.value}\\\""},
	{"a target role for the ingress", "TargetIAM", "modules/runonce/targets.tf",
		"  role    = \"roles/workflows.invoker\"\n  member  = google_service_account.worker.member", "  role    = \"roles/workflows.invoker\"\n  member  = google_service_account.ingress.member"},
	{"the ingress given the worker's jobs file", "IngressJobsFile", "modules/runonce/run.tf",
		"          secret = google_secret_manager_secret.ingress_jobs[0].secret_id\n          items {\n            # A pinned version: a new jobs file rolls out as a new revision.\n            version = google_secret_manager_secret_version.ingress_jobs[0].version",
		"          secret = google_secret_manager_secret.jobs[0].secret_id\n          items {\n            # A pinned version: a new jobs file rolls out as a new revision.\n            version = google_secret_manager_secret_version.jobs[0].version"},
	{"the ingress mounting a version of another secret", "IngressJobsFile", "modules/runonce/run.tf",
		"secret = google_secret_manager_secret.ingress_jobs[0].secret_id", "secret = google_secret_manager_secret.jobs[0].secret_id"},
	{"the ingress's jobs file keeping the targets' fields", "IngressJobsFile", "modules/runonce/run.tf",
		"for field, v in j : field => v if contains(local.schedule_fields, field)", "for field, v in j : field => v"},
	{"the ingress's jobs file without a job's scheduler_job", "IngressJobsFile", "modules/runonce/run.tf",
		`schedule_fields = ["schedule", "time_zone", "scheduler_job", `, `schedule_fields = ["schedule", "time_zone", `},
	{"the ingress accepting any job beside a jobs file", "IngressJobsFile", "modules/runonce/run.tf",
		`local.has_jobs ? { RUNONCE_JOBS = local.jobs_path } : { RUNONCE_ACCEPT_ANY_JOB = "true" }`, `{ RUNONCE_ACCEPT_ANY_JOB = "true" }`},
	{"the worker able to read the ingress's jobs secret", "IngressJobsFile", "modules/runonce/iam.tf",
		"  secret_id = google_secret_manager_secret.ingress_jobs[0].secret_id\n  role      = \"roles/secretmanager.secretAccessor\"\n  member    = google_service_account.ingress.member",
		"  secret_id = google_secret_manager_secret.ingress_jobs[0].secret_id\n  role      = \"roles/secretmanager.secretAccessor\"\n  member    = google_service_account.worker.member"},
	{"no Cloud Scheduler viewer for the worker", "SchedulerViewerIAM", "modules/runonce/iam.tf",
		"  role    = \"roles/cloudscheduler.viewer\"\n  member  = google_service_account.worker.member", "  role    = \"roles/cloudscheduler.viewer\"\n  member  = google_service_account.push.member"},
	{"no Cloud Scheduler viewer for the ingress", "SchedulerViewerIAM", "modules/runonce/iam.tf",
		"  for_each = local.scheduler_job_projects\n\n  project = each.value\n  role    = \"roles/cloudscheduler.viewer\"\n  member  = google_service_account.ingress.member",
		"  for_each = toset([])\n\n  project = each.value\n  role    = \"roles/cloudscheduler.viewer\"\n  member  = google_service_account.ingress.member"},
	{"no leases-lost alert", "Monitoring", "modules/runonce/monitoring.tf",
		"    leases_lost = {", "    leases_lost_removed = {"},
	{"an alert on a metric the code does not emit", "Monitoring", "modules/runonce/monitoring.tf",
		`"workload.googleapis.com/runonce.worker.rescues\" AND ${local.workload_filter.worker}"
      aligner   = "ALIGN_DELTA"`, `"workload.googleapis.com/runonce.worker.rescued\" AND ${local.workload_filter.worker}"
      aligner   = "ALIGN_DELTA"`},
	{"runs-failed alert on an outcome the worker never records", "Monitoring", "modules/runonce/monitoring.tf",
		`metric.label.outcome = \"failed\"`, `metric.label.outcome = \"fail\"`},
	{"oldest-unacked threshold past the pickup timeout", "Monitoring", "modules/runonce/monitoring.tf",
		"pickup_timeout_seconds = 300", "pickup_timeout_seconds = 600"},
	{"an alert on the wrong subscription", "Monitoring", "modules/runonce/monitoring.tf",
		`subscription_id = \"${local.dead_letter_subscription_name}\""`, `subscription_id = \"${local.worker_subscription_name}\""`},
	{"dashboard without the rescues chart", "Monitoring", "modules/runonce/monitoring.tf",
		`title = "Rescues (runs republished, per second)"
      lines = [{ filter = "metric.type = \"workload.googleapis.com/runonce.worker.rescues\"`, `title = "Rescues (runs republished, per second)"
      lines = [{ filter = "metric.type = \"workload.googleapis.com/runonce.worker.fenced_writes.refused\"`},
	{"alerts that notify nobody", "Monitoring", "modules/runonce/monitoring.tf",
		"notification_channels = var.notification_channels", "notification_channels = []"},
}

// TestChecksCatchBreakage breaks a copy of the Terraform, one way at a time, and expects
// the check meant for it to report it (and to pass on the unbroken copy).
func TestChecksCatchBreakage(t *testing.T) {
	src := tfDir()
	base := copyTree(t, src)
	ds, err := loadDeployments(base)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range checks {
		for _, d := range ds {
			if errs := c(d); len(errs) > 0 {
				t.Fatalf("check %s fails on the unbroken tree (%s): %v", name, d.name, errs)
			}
		}
	}
	for _, b := range breakages {
		t.Run(strings.ReplaceAll(b.name, " ", "_"), func(t *testing.T) {
			dir := copyTree(t, src)
			p := filepath.Join(dir, b.file)
			text, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(text), b.old) {
				t.Fatalf("%s no longer contains %q: update this breakage", b.file, b.old)
			}
			if err := os.WriteFile(p, []byte(strings.Replace(string(text), b.old, b.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			ds, err := loadDeployments(dir)
			if err != nil {
				t.Fatal(err)
			}
			var caught []error
			for _, d := range ds {
				caught = append(caught, checks[b.check](d)...)
			}
			if len(caught) == 0 {
				t.Fatalf("check %s did not catch: %s", b.check, b.name)
			}
			t.Logf("check %s caught %q: %v", b.check, b.name, caught[0])
		})
	}
}

func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == ".terraform" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !strings.HasSuffix(p, ".tf") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
