variable "project_id" {
  description = "The Google Cloud project to deploy runonce, the workflow and the Cloud Run job to."
  type        = string
}

variable "region" {
  description = "The region of the services, the workflow, the Cloud Run job and the scheduler jobs."
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

variable "etl_image" {
  description = "The Cloud Run job's image: a program that reads RUNONCE_IDEMPOTENCY_KEY and the other RUNONCE_* variables (docs/targets.md, \"What the execution receives\")."
  type        = string
}
