# runonce on Google Cloud: the ingress and the worker on Cloud Run, Pub/Sub between them,
# the ledger in Firestore (or Spanner), Cloud Scheduler calling the ingress with an OIDC
# token.
#
#   pubsub.tf     topic, pull or push subscription (retry policy, dead letter)
#   firestore.tf  database, TTL policy on expire_at, the sharded indexes of the ledger's queries
#   spanner.tf    with ledger = "spanner": instance, database (DDL, row deletion
#                 policies), roles/spanner.databaseUser
#   run.tf        the ingress and worker services and the RUNONCE_* environment
#   iam.tf        one service account per role, and every grant (nothing else grants)
#   scheduler.tf  Cloud Scheduler jobs calling the ingress
#   monitoring.tf the dashboard and the runbook's alert policies
#   outputs.tf    URLs, names and accounts to wire into the rest of a deployment

data "google_project" "this" {
  project_id = var.project_id
}

locals {
  namespace = coalesce(var.namespace, "${var.project_id}/${var.region}")

  firestore = var.ledger == "firestore"
  spanner   = var.ledger == "spanner"

  database_name = local.firestore && var.create_firestore_database ? google_firestore_database.ledger[0].name : var.firestore_database

  # firestore://PROJECT/DATABASE[?prefix=…] (pkg/ledger/firestoreledger), or
  # spanner://projects/P/instances/I/databases/D?migrate=false (pkg/ledger/spannerledger: the
  # tables are spanner.tf's).
  ledger_url = local.spanner ? "spanner://projects/${var.project_id}/instances/${google_spanner_database.ledger[0].instance}/databases/${google_spanner_database.ledger[0].name}?migrate=false" : "firestore://${var.project_id}/${local.database_name}${var.collection_prefix == "" ? "" : "?prefix=${var.collection_prefix}"}"

  topic_url = "pubsub://${var.project_id}/${google_pubsub_topic.runs.name}"
  # The worker's RUNONCE_SUBSCRIPTION: empty in push mode (push only).
  subscription_url = var.delivery == "pull" ? "pubsub://${var.project_id}/${google_pubsub_subscription.pull[0].name}" : ""
  subscription_id  = var.delivery == "pull" ? google_pubsub_subscription.pull[0].id : google_pubsub_subscription.push[0].id

  ingress_audience = coalesce(var.ingress_audience, "https://${var.name}-ingress.${var.project_id}.runonce")
  # The push subscription's token audience, checked by the worker's /v1/push.
  push_audience = "https://${var.name}-worker.${var.project_id}.runonce/v1/push"

  allowed_callers = concat([google_service_account.scheduler.email], var.extra_allowed_callers)

  # The Pub/Sub service agent: it moves dead letters and mints push tokens.
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"

  # The retention rule the binaries enforce (DESIGN.md, "The run state machine"): records
  # outlast the subscription's message retention + the scheduler's retry window (24h) +
  # the longest lease or job. Checked here at plan time, by the worker at start.
  scheduler_retry_window_seconds = 24 * 3600
  min_retention_seconds          = var.message_retention_hours * 3600 + local.scheduler_retry_window_seconds + max(var.lease_seconds, var.longest_job_seconds)

  jobs_path = "/etc/runonce/jobs.json"

  labels = merge({ app = "runonce" }, var.labels)
}
