# Google Cloud API targets: a Workflows execution and a Cloud Run job, each started once
# per scheduled tick by the runonce worker (kind "workflows" and "cloudrun" in the jobs
# file). The module grants the worker's service account only what each target needs
# (modules/runonce/targets.tf). See deploy/README.md, "Google Cloud API targets".

provider "google" {
  project = var.project_id
  region  = var.region
}

locals {
  workflow_name = "nightly-report"
  etl_job_name  = "nightly-etl"
}

# The workflow's own identity: what its steps may call (here, nothing but logging).
resource "google_service_account" "workflow" {
  project      = var.project_id
  account_id   = "nightly-report-workflow"
  display_name = "nightly-report workflow"
}

# A workflow that reads the run's identity from its argument (args.runonce) and passes
# the idempotency key on to what it calls, so that its own steps happen once too.
resource "google_workflows_workflow" "nightly_report" {
  project         = var.project_id
  region          = var.region
  name            = local.workflow_name
  service_account = google_service_account.workflow.email
  source_contents = <<-EOT
    main:
      params: [args]
      steps:
        - log:
            call: sys.log
            args:
              text: $${"report for " + args.runonce.schedule_time + ", key " + args.runonce.idempotency_key}
        - done:
            return: $${args.runonce.run_id}
  EOT
}

# The job's own identity.
resource "google_service_account" "etl" {
  project      = var.project_id
  account_id   = "nightly-etl-job"
  display_name = "nightly-etl Cloud Run job"
}

# A Cloud Run job; runonce runs it with RUNONCE_IDEMPOTENCY_KEY, RUNONCE_RUN_ID,
# RUNONCE_JOB, RUNONCE_ATTEMPT and RUNONCE_SCHEDULE_TIME overriding its environment.
resource "google_cloud_run_v2_job" "etl" {
  project  = var.project_id
  location = var.region
  name     = local.etl_job_name

  template {
    template {
      service_account = google_service_account.etl.email
      max_retries     = 1
      timeout         = "3600s"
      containers {
        image = var.etl_image
      }
    }
  }
}

module "runonce" {
  source = "../../modules/runonce"

  project_id    = var.project_id
  region        = var.region
  ingress_image = var.ingress_image
  worker_image  = var.worker_image

  # A run holds its lease while the worker waits on the execution; a Cloud Run job may
  # run for an hour here, far past Cloud Scheduler's 30-minute attempt deadline.
  longest_job_seconds = 3600

  jobs_json = jsonencode({
    jobs = {
      nightly-report = {
        kind     = "workflows"
        resource = "projects/${var.project_id}/locations/${var.region}/workflows/${local.workflow_name}"
      }
      nightly-etl = {
        kind          = "cloudrun"
        resource      = "projects/${var.project_id}/locations/${var.region}/jobs/${local.etl_job_name}"
        poll_interval = "30s"
        max_attempts  = 3
      }
    }
  })

  scheduler_jobs = {
    nightly-report-0300 = {
      job      = "nightly-report"
      schedule = "0 3 * * *"
      body     = jsonencode({ format = "pdf" })
    }
    nightly-etl-0200 = {
      job      = "nightly-etl"
      schedule = "0 2 * * *"
    }
  }
}
