variable "project_id" {
  description = "The Google Cloud project to deploy runonce to."
  type        = string
}

variable "region" {
  description = "The region of the services, the Spanner instance (regional-REGION) and the scheduler job."
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

variable "sync_url" {
  description = "The HTTP endpoint the example job calls once an hour."
  type        = string
}
