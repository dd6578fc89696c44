# The two Cloud Run services. Every setting of the binaries is a RUNONCE_* variable named
# after its flag (DESIGN.md, "Configuration"); PORT is set by Cloud Run and honoured.

locals {
  has_jobs = nonsensitive(var.jobs_json != null)

  # The jobs file's fields of a job's schedule (pkg/jobs): none carries a secret, unlike
  # an HTTP target's url and headers.
  schedule_fields = ["schedule", "time_zone", "scheduler_job", "catch_up", "missed_after"]

  # The ingress's jobs file: every job of jobs_json by name, with only its schedule's
  # fields (a job without a target is valid). The ingress then answers 404 for a job the
  # file does not name, and knows the schedules: the tick audit, backfill, /ui/jobs/ and
  # the missed-tick check. Null without jobs_json.
  ingress_jobs_json = local.has_jobs ? jsonencode({
    jobs = {
      for name, j in jsondecode(var.jobs_json).jobs : name => {
        for field, v in j : field => v if contains(local.schedule_fields, field)
      }
    }
  }) : null

  # The projects of the jobs file's scheduler_job values (projects/P/locations/L/jobs/J),
  # whose Cloud Scheduler jobs the ingress and the worker read (iam.tf).
  scheduler_job_projects = local.has_jobs ? nonsensitive(toset([
    for j in values(jsondecode(var.jobs_json).jobs) : split("/", lookup(j, "scheduler_job", ""))[1]
    if lookup(j, "scheduler_job", "") != ""
  ])) : toset([])

  ingress_env = merge(
    {
      RUNONCE_LEDGER    = local.ledger_url
      RUNONCE_TOPIC     = local.topic_url
      RUNONCE_NAMESPACE = local.namespace
      RUNONCE_AUTH      = "oidc"
      RUNONCE_AUDIENCE  = local.ingress_audience
      RUNONCE_ALLOW     = join(",", local.allowed_callers)
      RUNONCE_OPERATORS = join(",", var.operators)
      RUNONCE_RETENTION = "${var.retention_hours}h"
      # Metrics to Cloud Monitoring (monitoring.tf's dashboard and alerts read them).
      RUNONCE_METRICS_EXPORT = var.monitoring ? "gcp" : "prometheus"
      # Spans to Cloud Trace: the request, its ledger calls and the publish.
      RUNONCE_TRACE_EXPORT = var.tracing ? "gcp" : "none"
    },
    # With jobs_json, the ingress's own jobs file (local.ingress_jobs_json: names and
    # schedules, never the worker's targets or headers). Without it (a worker image with
    # its own Go handlers) it accepts any job name, and a worker fails the run of a job no
    # worker has a handler for once its -unhandled-after (24h) passes.
    local.has_jobs ? { RUNONCE_JOBS = local.jobs_path } : { RUNONCE_ACCEPT_ANY_JOB = "true" },
  )

  worker_env = merge(
    {
      RUNONCE_LEDGER = local.ledger_url
      # The runs whose ticks the worker checks for missed ones (the jobs file's
      # scheduled jobs): the ingress's namespace.
      RUNONCE_NAMESPACE = local.namespace
      # Where the rescuer republishes runs whose message was lost.
      RUNONCE_TOPIC = local.topic_url
      # With delivery = "push" the worker serves /v1/push (RUNONCE_PUSH below); it
      # accepts only the push service account's tokens.
      RUNONCE_AUTH         = "oidc"
      RUNONCE_AUDIENCE     = local.push_audience
      RUNONCE_ALLOW        = google_service_account.push.email
      RUNONCE_RETENTION    = "${var.retention_hours}h"
      RUNONCE_LEASE        = "${var.lease_seconds}s"
      RUNONCE_GRACE        = "${var.grace_seconds}s"
      RUNONCE_CONCURRENCY  = tostring(var.worker_concurrency)
      RUNONCE_MAX_ATTEMPTS = tostring(var.max_attempts)
      # Metrics to Cloud Monitoring (monitoring.tf's dashboard and alerts read them).
      RUNONCE_METRICS_EXPORT = var.monitoring ? "gcp" : "prometheus"
      # Spans to Cloud Trace: each attempt, its ledger calls and the call at the target.
      RUNONCE_TRACE_EXPORT = var.tracing ? "gcp" : "none"
    },
    var.delivery == "pull" ? { RUNONCE_SUBSCRIPTION = local.subscription_url } : { RUNONCE_PUSH = "true" },
    local.has_jobs ? { RUNONCE_JOBS = local.jobs_path } : {},
  )
}

# The ingress: claims a run, publishes it and answers 202 within milliseconds. It does no
# work after answering, so its CPU may be throttled between requests.
resource "google_cloud_run_v2_service" "ingress" {
  project             = var.project_id
  name                = "${var.name}-ingress"
  location            = var.region
  ingress             = var.ingress_traffic
  deletion_protection = var.deletion_protection
  labels              = local.labels
  # Cloud Run's own IAM check accepts tokens for this audience as well as for the URL, so
  # the scheduler's token passes both checks without naming the URL.
  custom_audiences = [local.ingress_audience]

  template {
    service_account = google_service_account.ingress.email
    # Well under the scheduler's attempt deadline: a stuck request fails here and the
    # scheduler retries it (with the same schedule time: deduplicated) before giving up.
    timeout                          = "${var.ingress_timeout_seconds}s"
    max_instance_request_concurrency = var.ingress_concurrency

    scaling {
      min_instance_count = var.ingress_min_instances
      max_instance_count = var.ingress_max_instances
    }

    containers {
      image = var.ingress_image

      ports {
        container_port = 8080
      }

      resources {
        limits = {
          cpu    = "1"
          memory = "512Mi"
        }
        cpu_idle          = true
        startup_cpu_boost = true
      }

      dynamic "env" {
        for_each = local.ingress_env
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "volume_mounts" {
        for_each = local.has_jobs ? [1] : []
        content {
          name       = "jobs"
          mount_path = dirname(local.jobs_path)
        }
      }

      startup_probe {
        http_get {
          path = "/healthz"
        }
        period_seconds    = 1
        failure_threshold = 30
      }

      liveness_probe {
        http_get {
          path = "/healthz"
        }
        period_seconds = 10
      }
    }

    dynamic "volumes" {
      for_each = local.has_jobs ? [1] : []
      content {
        name = "jobs"
        secret {
          # Its own secret, not the worker's: the ingress's account cannot read the
          # worker's jobs file.
          secret = google_secret_manager_secret.ingress_jobs[0].secret_id
          items {
            # A pinned version: a new jobs file rolls out as a new revision.
            version = google_secret_manager_secret_version.ingress_jobs[0].version
            path    = basename(local.jobs_path)
          }
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = var.ingress_min_instances >= 0 && var.ingress_min_instances <= var.ingress_max_instances
      error_message = "ingress_min_instances must be from 0 to ingress_max_instances."
    }
  }

  depends_on = [
    google_pubsub_topic_iam_member.runs_publisher_ingress,
    google_project_iam_member.datastore_user_ingress,
    google_secret_manager_secret_iam_member.jobs_accessor_ingress,
  ]
}

# The worker: holds leases and renews them in the background, runs the rescuer on a
# timer and pulls messages between requests, so its CPU must always be allocated
# (cpu_idle = false: request-based CPU would starve all of that) and at least one
# instance must run. A Cloud Run service rather than a worker pool: services are GA in
# the 6.x provider (worker pools are BETA there), autoscale, and serve /v1/push for push
# delivery and /healthz for probes.
resource "google_cloud_run_v2_service" "worker" {
  project             = var.project_id
  name                = "${var.name}-worker"
  location            = var.region
  deletion_protection = var.deletion_protection
  labels              = local.labels
  # Only Pub/Sub push (which counts as internal) and the VPC reach it.
  ingress          = "INGRESS_TRAFFIC_INTERNAL_ONLY"
  custom_audiences = [local.push_audience]

  template {
    service_account = google_service_account.worker.email
    # A push request lasts as long as its job.
    timeout                          = "${min(3600, var.longest_job_seconds + 60)}s"
    max_instance_request_concurrency = var.worker_concurrency

    scaling {
      min_instance_count = var.worker_min_instances
      max_instance_count = var.worker_max_instances
    }

    containers {
      image = var.worker_image

      ports {
        container_port = 8080
      }

      resources {
        limits = {
          cpu    = var.worker_cpu
          memory = var.worker_memory
        }
        # CPU always allocated. Cloud Run sends SIGTERM and kills the instance 10s later;
        # RUNONCE_GRACE (at most 8s) + 1s lets running jobs finish or be released first.
        cpu_idle          = false
        startup_cpu_boost = true
      }

      dynamic "env" {
        for_each = local.worker_env
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "volume_mounts" {
        for_each = local.has_jobs ? [1] : []
        content {
          name       = "jobs"
          mount_path = dirname(local.jobs_path)
        }
      }

      startup_probe {
        http_get {
          path = "/healthz"
        }
        period_seconds    = 1
        failure_threshold = 60
      }

      liveness_probe {
        http_get {
          path = "/healthz"
        }
        period_seconds = 10
      }
    }

    dynamic "volumes" {
      for_each = local.has_jobs ? [1] : []
      content {
        name = "jobs"
        secret {
          secret = google_secret_manager_secret.jobs[0].secret_id
          items {
            # A pinned version: a new jobs file rolls out as a new revision.
            version = google_secret_manager_secret_version.jobs[0].version
            path    = basename(local.jobs_path)
          }
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = var.worker_min_instances <= var.worker_max_instances
      error_message = "worker_min_instances must not exceed worker_max_instances."
    }
  }

  # The worker reads the subscription's retention at start and refuses to run without it.
  depends_on = [
    google_pubsub_subscription_iam_member.subscriber_worker,
    google_pubsub_subscription_iam_member.viewer_worker,
    google_pubsub_topic_iam_member.runs_publisher_worker,
    google_project_iam_member.datastore_user_worker,
    google_secret_manager_secret_iam_member.jobs_accessor_worker,
  ]
}

# The jobs file, which may carry credentials in its headers.
resource "google_secret_manager_secret" "jobs" {
  count = local.has_jobs ? 1 : 0

  project   = var.project_id
  secret_id = "${var.name}-jobs"
  labels    = local.labels

  replication {
    auto {}
  }
}

resource "google_secret_manager_secret_version" "jobs" {
  count = local.has_jobs ? 1 : 0

  secret      = google_secret_manager_secret.jobs[0].id
  secret_data = var.jobs_json
}

# The ingress's jobs file (local.ingress_jobs_json): job names and schedules only. Nothing
# in it is secret, but it is derived from the sensitive jobs_json, and a secret is how a
# Cloud Run service mounts a file; the ingress alone reads it.
resource "google_secret_manager_secret" "ingress_jobs" {
  count = local.has_jobs ? 1 : 0

  project   = var.project_id
  secret_id = "${var.name}-ingress-jobs"
  labels    = local.labels

  replication {
    auto {}
  }
}

resource "google_secret_manager_secret_version" "ingress_jobs" {
  count = local.has_jobs ? 1 : 0

  secret      = google_secret_manager_secret.ingress_jobs[0].id
  secret_data = local.ingress_jobs_json
}
