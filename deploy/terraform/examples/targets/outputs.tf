output "ingress_url" {
  description = "The ingress's URL: GET /v1/runs/{run_id} shows each run and the execution it started."
  value       = module.runonce.ingress_url
}

output "workflow" {
  description = "The workflow the nightly-report job starts once per tick."
  value       = google_workflows_workflow.nightly_report.id
}

output "cloud_run_job" {
  description = "The Cloud Run job the nightly-etl job runs once per tick."
  value       = google_cloud_run_v2_job.etl.id
}
