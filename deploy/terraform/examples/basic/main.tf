# The smallest complete deployment: runonce in one project, with one job ("daily-report",
# an HTTP target) run once per tick by one Cloud Scheduler job. See deploy/README.md.

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

  # terraform destroy needs false here first (deploy/README.md, "Tear it down").
  deletion_protection = var.deletion_protection

  # The account deploy/README.md's operator impersonates to call the ingress (POST a run,
  # GET /v1/runs/{id}): it gets RUNONCE_ALLOW and roles/run.invoker on the ingress.
  extra_allowed_callers = var.operator_account == null ? [] : [var.operator_account]
  # It may also retry, cancel and release runs (RUNONCE_OPERATORS).
  operators = var.operator_account == null ? [] : [var.operator_account]

  # Every alert policy of the runbook notifies these (deploy/README.md, "Alerts").
  notification_channels = google_monitoring_notification_channel.email[*].id

  # The guarantees' settings, at their defaults, spelled out: records are kept 14 days,
  # longer than the subscription's 7 days + the scheduler's 24h + the longest job.
  retention_hours         = 336
  message_retention_hours = 168
  lease_seconds           = 30
  grace_seconds           = 8
  longest_job_seconds     = 600
  worker_concurrency      = 8

  jobs_json = jsonencode({
    jobs = {
      daily-report = {
        url          = var.report_url
        method       = "POST"
        timeout      = "10m"
        auth         = "oidc"
        max_attempts = 5
        # runonce reads the tick schedule from the scheduler job below (the tick audit,
        # the missed-tick alert); the module grants roles/cloudscheduler.viewer for it.
        scheduler_job = "projects/${var.project_id}/locations/${var.region}/jobs/daily-report-0500"
      }
    }
  })

  scheduler_jobs = {
    # The scheduler job's ID is half of every run's identity (with the tick's time).
    daily-report-0500 = {
      job       = "daily-report"
      schedule  = "0 5 * * *"
      time_zone = "Europe/Berlin"
      body      = jsonencode({ report = "daily" })
    }
  }
}

# Where the runbook's alerts go: an email channel, when alert_email is set.
resource "google_monitoring_notification_channel" "email" {
  count        = var.alert_email == null ? 0 : 1
  project      = var.project_id
  display_name = "runonce alerts"
  type         = "email"
  labels = {
    email_address = var.alert_email
  }
}
