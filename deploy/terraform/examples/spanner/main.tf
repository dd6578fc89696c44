# runonce with its ledger on Cloud Spanner instead of Firestore: a new 100-processing-unit
# instance, the ledger's database with its tables and row deletion policies, and
# roles/spanner.databaseUser on it for the ingress and the worker. See deploy/README.md.

provider "google" {
  project = var.project_id
  region  = var.region
}

module "runonce" {
  source = "../../modules/runonce"

  project_id    = var.project_id
  region        = var.region
  ingress_image = var.ingress_image
  worker_image  = var.worker_image

  ledger                   = "spanner"
  spanner_instance         = "runonce"
  spanner_database         = "runonce"
  spanner_processing_units = 100

  jobs_json = jsonencode({
    jobs = {
      hourly-sync = {
        url          = var.sync_url
        method       = "POST"
        timeout      = "5m"
        auth         = "oidc"
        max_attempts = 5
      }
    }
  })

  scheduler_jobs = {
    hourly-sync = {
      job      = "hourly-sync"
      schedule = "0 * * * *"
      body     = jsonencode({ sync = "hourly" })
    }
  }
}
