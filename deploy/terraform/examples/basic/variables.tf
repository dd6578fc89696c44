variable "project_id" {
  description = "The Google Cloud project to deploy runonce to."
  type        = string
}

variable "region" {
  description = "The region of the services, the Firestore database and the scheduler job."
  type        = string
  default     = "us-central1"
}

variable "ingress_image" {
  description = "The ingress image, as printed by `ko build --bare ./cmd/ingress` (a digest)."
  type        = string
}

variable "worker_image" {
  description = "The worker image, as printed by `ko build --bare ./cmd/worker` (a digest)."
  type        = string
}

variable "report_url" {
  description = "The HTTP endpoint the example job calls once per tick (it receives Idempotency-Key and X-Runonce-* headers)."
  type        = string
}

variable "operator_account" {
  description = "A service account email the operator impersonates to call the ingress (deploy/README.md, step 6); null: none."
  type        = string
  default     = null
}

variable "deletion_protection" {
  description = "Protect the Cloud Run services and the Firestore database from terraform destroy."
  type        = bool
  default     = true
}

variable "alert_email" {
  description = "An email address the runbook's alert policies notify; null: incidents open in the console only."
  type        = string
  default     = null
}
