output "ingress_url" {
  description = "The ingress's URL: POST /v1/jobs/{job}, GET /v1/runs/{run_id}."
  value       = google_cloud_run_v2_service.ingress.uri
}

output "ingress_audience" {
  description = "The audience callers' ID tokens must carry."
  value       = local.ingress_audience
}

output "worker_url" {
  description = "The worker's URL (internal ingress only): /healthz, /readyz, /metrics, POST /v1/push."
  value       = google_cloud_run_v2_service.worker.uri
}

output "ledger_url" {
  description = "RUNONCE_LEDGER of both binaries."
  value       = local.ledger_url
}

output "topic" {
  description = "The runs topic (RUNONCE_TOPIC), for a manual publish."
  value       = google_pubsub_topic.runs.id
}

output "subscription" {
  description = "The workers' subscription (pull or push)."
  value       = local.subscription_id
}

output "dead_letter_subscription" {
  description = "Where dead-lettered messages wait for inspection (runbook: deploy/README.md)."
  value       = google_pubsub_subscription.dead_letter.id
}

output "namespace" {
  description = "RUNONCE_NAMESPACE, part of every run key."
  value       = local.namespace
}

output "scheduler_service_account" {
  description = "The account Cloud Scheduler's OIDC token names; use it for scheduler jobs made outside this module."
  value       = google_service_account.scheduler.email
}

output "ingress_service_account" {
  description = "The ingress's service account."
  value       = google_service_account.ingress.email
}

output "worker_service_account" {
  description = "The worker's service account (grant it roles/run.invoker on job targets that use auth: oidc)."
  value       = google_service_account.worker.email
}

output "scheduler_jobs" {
  description = "The Cloud Scheduler jobs, by ID."
  value       = { for k, j in google_cloud_scheduler_job.run : k => j.id }
}

output "dashboard" {
  description = "The Cloud Monitoring dashboard's ID (null with monitoring = false)."
  value       = var.monitoring ? google_monitoring_dashboard.runonce[0].id : null
}

output "alert_policies" {
  description = "The runbook's alert policies, by signal."
  value       = { for k, p in google_monitoring_alert_policy.runbook : k => p.name }
}
