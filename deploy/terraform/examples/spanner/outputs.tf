output "ingress_url" {
  description = "POST /v1/jobs/{job} and GET /v1/runs/{run_id} here."
  value       = module.runonce.ingress_url
}

output "ledger_url" {
  description = "The ledger URL both services open (spanner://…?migrate=false)."
  value       = module.runonce.ledger_url
}
