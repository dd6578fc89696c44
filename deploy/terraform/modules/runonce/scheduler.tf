# Cloud Scheduler jobs calling POST /v1/jobs/{job} on the ingress. A unix-cron schedule
# makes the scheduler send X-CloudScheduler-JobName and X-CloudScheduler-ScheduleTime,
# the run's identity: every retry of one tick carries the same schedule time, so the
# ingress deduplicates it, and the job runs once per tick.

resource "google_cloud_scheduler_job" "run" {
  for_each = var.scheduler_jobs

  project     = var.project_id
  region      = coalesce(var.scheduler_region, var.region)
  name        = each.key
  description = "runonce: ${each.value.job} once per tick"
  schedule    = each.value.schedule
  time_zone   = each.value.time_zone
  # How long one attempt may take before the scheduler counts it as failed; the ingress
  # answers within ingress_timeout_seconds, well inside it.
  attempt_deadline = "${var.scheduler_attempt_deadline_seconds}s"

  retry_config {
    retry_count          = var.scheduler_retry.retry_count
    min_backoff_duration = "${var.scheduler_retry.min_backoff_seconds}s"
    max_backoff_duration = "${var.scheduler_retry.max_backoff_seconds}s"
    max_doublings        = var.scheduler_retry.max_doublings
    max_retry_duration   = "${var.scheduler_retry.max_retry_duration_seconds}s"
  }

  http_target {
    http_method = "POST"
    uri         = "${google_cloud_run_v2_service.ingress.uri}/v1/jobs/${each.value.job}"
    body        = base64encode(each.value.body)
    headers = {
      "Content-Type" = "application/json"
    }

    # The ingress verifies this token itself (RUNONCE_AUTH=oidc): its audience and the
    # scheduler account's email (RUNONCE_AUDIENCE, RUNONCE_ALLOW). The X-CloudScheduler
    # headers identify a run; they never authenticate it.
    oidc_token {
      service_account_email = google_service_account.scheduler.email
      audience              = local.ingress_audience
    }
  }

  lifecycle {
    precondition {
      condition     = var.scheduler_attempt_deadline_seconds >= 2 * var.ingress_timeout_seconds
      error_message = "scheduler_attempt_deadline_seconds must be at least twice ingress_timeout_seconds: the ingress must time out (and the scheduler retry) well before the scheduler stops waiting."
    }
    precondition {
      condition     = var.scheduler_retry.retry_count * (var.scheduler_retry.max_backoff_seconds + var.scheduler_attempt_deadline_seconds) + var.scheduler_attempt_deadline_seconds <= local.scheduler_retry_window_seconds
      error_message = "the scheduler's retries of one tick must end within 24h, the retry window the retention rule counts on."
    }
  }

  depends_on = [google_cloud_run_v2_service_iam_member.ingress_invoker]
}
