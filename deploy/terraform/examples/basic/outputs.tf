output "ingress_url" {
  description = "POST /v1/jobs/{job} and GET /v1/runs/{run_id} here."
  value       = module.runonce.ingress_url
}

output "ingress_audience" {
  description = "The audience of the ID tokens the ingress accepts."
  value       = module.runonce.ingress_audience
}

output "scheduler_service_account" {
  description = "The identity Cloud Scheduler calls the ingress as."
  value       = module.runonce.scheduler_service_account
}

output "worker_service_account" {
  description = "Grant it roles/run.invoker on report_url if that is a Cloud Run service."
  value       = module.runonce.worker_service_account
}

output "dead_letter_subscription" {
  description = "Watch its backlog (deploy/README.md, runbook)."
  value       = module.runonce.dead_letter_subscription
}

output "dashboard" {
  description = "The Cloud Monitoring dashboard (Monitoring → Dashboards → runonce runonce)."
  value       = module.runonce.dashboard
}
