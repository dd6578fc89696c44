# Service accounts and every grant the deployment makes. Each account gets only what its
# binary calls, on the one resource it calls it on; deploy/deploy_test.go fails on any
# role outside the list below:
#
#   role                               who                  on                why
#   roles/pubsub.publisher             ingress              runs topic        publish a claimed run
#   roles/pubsub.publisher             worker               runs topic        the rescuer republishes lost runs
#   roles/pubsub.publisher             Pub/Sub agent        dead-letter topic move dead letters
#   roles/pubsub.subscriber            worker               pull subscription streaming pull, ack, nack
#   roles/pubsub.subscriber            Pub/Sub agent        worker's sub.     ack what it dead-letters
#   roles/pubsub.viewer                ingress              runs topic        /readyz reads the topic (GetTopic)
#   roles/pubsub.viewer                worker               pull subscription the start-up retention check reads
#                                                                             message_retention_duration (GetSubscription)
#   roles/datastore.user               ingress, worker      ledger database   claims, leases, effects (Firestore)
#   roles/spanner.databaseUser         ingress, worker      ledger database   claims, leases, effects (Spanner; spanner.tf)
#   roles/run.invoker                  scheduler, callers   ingress service   Cloud Run IAM in front of the OIDC check
#   roles/run.invoker                  push account         worker service    push delivery (delivery = "push")
#   roles/iam.serviceAccountTokenCreator Pub/Sub agent      push account      mint the push OIDC token (delivery = "push")
#   roles/secretmanager.secretAccessor worker               jobs secret       read the jobs file (jobs_json set)
#   roles/secretmanager.secretAccessor ingress              ingress-jobs sec. read its jobs file: names and schedules
#                                                                             (jobs_json set)
#   roles/cloudscheduler.viewer        ingress, worker      scheduler_job's   read the schedule, state and retry settings
#                                                           project           of a job's scheduler_job (Cloud Scheduler
#                                                                             has no IAM below the project; read-only)
#   roles/monitoring.metricWriter      ingress, worker      project           export metrics to Cloud Monitoring (no narrower
#                                                                             resource exists; write-only)
#   roles/cloudtrace.agent             ingress, worker      project           export spans to Cloud Trace (likewise)
#
# The jobs file's Google Cloud API targets get their grants in targets.tf.
#
# Cloud Scheduler's own service agent mints the scheduler's OIDC token with its built-in
# role; nothing is granted for it here.

resource "google_service_account" "ingress" {
  project      = var.project_id
  account_id   = "${var.name}-ingress"
  display_name = "runonce ingress"
  description  = "Claims runs in the ledger and publishes them to ${var.name}-runs."
}

resource "google_service_account" "worker" {
  project      = var.project_id
  account_id   = "${var.name}-worker"
  display_name = "runonce worker"
  description  = "Pulls runs, holds leases in the ledger, runs jobs, republishes lost runs."
}

resource "google_service_account" "scheduler" {
  project      = var.project_id
  account_id   = "${var.name}-scheduler"
  display_name = "runonce scheduler caller"
  description  = "The identity Cloud Scheduler's OIDC token carries when it calls the ingress."
}

# The push subscription's token identity: the only caller the worker's /v1/push accepts.
# Created in pull mode too (it holds no role there) so RUNONCE_ALLOW is never empty.
resource "google_service_account" "push" {
  project      = var.project_id
  account_id   = "${var.name}-push"
  display_name = "runonce push caller"
  description  = "The identity of Pub/Sub push requests to the worker's /v1/push."
}

locals {
  # roles/datastore.user has no resource-level grant on a database; an IAM condition on
  # resource.name keeps it to the ledger's database.
  datastore_condition = var.restrict_datastore_user_to_database ? [{
    title      = "runonce-ledger-only"
    expression = "resource.name == \"projects/${var.project_id}/databases/${var.firestore_database}\""
  }] : []
}

# --- ingress ---------------------------------------------------------------------------

resource "google_pubsub_topic_iam_member" "runs_publisher_ingress" {
  project = var.project_id
  topic   = google_pubsub_topic.runs.name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.ingress.member
}

resource "google_pubsub_topic_iam_member" "runs_viewer_ingress" {
  project = var.project_id
  topic   = google_pubsub_topic.runs.name
  role    = "roles/pubsub.viewer"
  member  = google_service_account.ingress.member
}

resource "google_project_iam_member" "datastore_user_ingress" {
  count = local.firestore ? 1 : 0

  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.ingress.member

  dynamic "condition" {
    for_each = local.datastore_condition
    content {
      title      = condition.value.title
      expression = condition.value.expression
    }
  }
}

resource "google_secret_manager_secret_iam_member" "jobs_accessor_ingress" {
  count = local.has_jobs ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.ingress_jobs[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.ingress.member
}

# Cloud Run IAM in front of the ingress's own OIDC check (same audience, same callers).
resource "google_cloud_run_v2_service_iam_member" "ingress_invoker" {
  for_each = toset(local.allowed_callers)

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.ingress.name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${each.value}"
}

# --- worker ----------------------------------------------------------------------------

resource "google_pubsub_subscription_iam_member" "subscriber_worker" {
  count = var.delivery == "pull" ? 1 : 0

  project      = var.project_id
  subscription = google_pubsub_subscription.pull[0].name
  role         = "roles/pubsub.subscriber"
  member       = google_service_account.worker.member
}

resource "google_pubsub_subscription_iam_member" "viewer_worker" {
  count = var.delivery == "pull" ? 1 : 0

  project      = var.project_id
  subscription = google_pubsub_subscription.pull[0].name
  role         = "roles/pubsub.viewer"
  member       = google_service_account.worker.member
}

resource "google_pubsub_topic_iam_member" "runs_publisher_worker" {
  project = var.project_id
  topic   = google_pubsub_topic.runs.name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.worker.member
}

resource "google_project_iam_member" "datastore_user_worker" {
  count = local.firestore ? 1 : 0

  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.worker.member

  dynamic "condition" {
    for_each = local.datastore_condition
    content {
      title      = condition.value.title
      expression = condition.value.expression
    }
  }
}

resource "google_secret_manager_secret_iam_member" "jobs_accessor_worker" {
  count = local.has_jobs ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.jobs[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.worker.member
}

# --- Pub/Sub service agent (dead letters, push tokens) -----------------------------------

resource "google_pubsub_topic_iam_member" "dead_letter_publisher_pubsub_agent" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "subscriber_pubsub_agent" {
  project      = var.project_id
  subscription = var.delivery == "pull" ? google_pubsub_subscription.pull[0].name : google_pubsub_subscription.push[0].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

resource "google_cloud_run_v2_service_iam_member" "worker_invoker_push" {
  count = var.delivery == "push" ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.worker.name
  role     = "roles/run.invoker"
  member   = google_service_account.push.member
}

# Needed in projects created before 8 April 2021, harmless after: the Pub/Sub agent mints
# the push token as the push account (and only as that account).
resource "google_service_account_iam_member" "push_token_creator_pubsub_agent" {
  count = var.delivery == "push" ? 1 : 0

  service_account_id = google_service_account.push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
}

# The binaries export their OpenTelemetry metrics to Cloud Monitoring (monitoring.tf).
# Time series belong to the project: there is no narrower resource to grant on, and
# the role only writes.
resource "google_project_iam_member" "metric_writer" {
  for_each = var.monitoring ? {
    ingress = google_service_account.ingress.member
    worker  = google_service_account.worker.member
  } : {}

  project = var.project_id
  role    = "roles/monitoring.metricWriter"
  member  = each.value
}

# The binaries export their spans to Cloud Trace; traces, too, belong to the project.
resource "google_project_iam_member" "trace_agent" {
  for_each = var.tracing ? {
    ingress = google_service_account.ingress.member
    worker  = google_service_account.worker.member
  } : {}

  project = var.project_id
  role    = "roles/cloudtrace.agent"
  member  = each.value
}

# The operators reach the ingress too (the API, the CLI, the dashboard); the ingress's
# own check (-operators) decides what they may do.
resource "google_cloud_run_v2_service_iam_member" "ingress_operator" {
  for_each = toset([for e in var.operators : e if !contains(local.allowed_callers, e)])

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.ingress.name
  role     = "roles/run.invoker"
  member   = endswith(each.value, ".gserviceaccount.com") ? "serviceAccount:${each.value}" : "user:${each.value}"
}

# A job with scheduler_job in the jobs file: the ingress and the worker read its Cloud
# Scheduler job (schedule, time zone, paused or not, retry settings) with their own
# credentials, for the tick audit and the missed-tick check. Cloud Scheduler has no IAM
# resource below the project, so the grant is on each project the jobs file's
# scheduler_job values name (read-only).
resource "google_project_iam_member" "scheduler_viewer_ingress" {
  for_each = local.scheduler_job_projects

  project = each.value
  role    = "roles/cloudscheduler.viewer"
  member  = google_service_account.ingress.member
}

resource "google_project_iam_member" "scheduler_viewer_worker" {
  for_each = local.scheduler_job_projects

  project = each.value
  role    = "roles/cloudscheduler.viewer"
  member  = google_service_account.worker.member
}
