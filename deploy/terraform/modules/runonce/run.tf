# The two Cloud Run services. Every setting of the binaries is a RUNONCE_* variable named
# after its flag (DESIGN.md, "Configuration"); PORT is set by Cloud Run and honoured.

locals {
  has_jobs = nonsensitive(var.jobs_json != null)

  ingress_env = {
    RUNONCE_LEDGER    = local.ledger_url
    RUNONCE_TOPIC     = local.topic_url
    RUNONCE_NAMESPACE = local.namespace
    RUNONCE_AUTH      = "oidc"
    RUNONCE_AUDIENCE  = local.ingress_audience
    RUNONCE_ALLOW     = join(",", local.allowed_callers)
    RUNONCE_OPERATORS = join(",", var.operators)
    RUNONCE_RETENTION = "${var.retention_hours}h"
    # The ingress has no jobs file (the worker's may carry credentials, and Go handlers
    # have none): it accepts any job name, and a worker fails the run of a job no
    # worker has a handler for once its -unhandled-after (24h) passes.
    RUNONCE_ACCEPT_ANY_JOB = "true"
    # Metrics to Cloud Monitoring (monitoring.tf's dashboard and alerts read them).
    RUNONCE_METRICS_EXPORT = var.monitoring ? "gcp" : "prometheus"
    # Spans to Cloud Trace: the request, its ledger calls and the publish.
    RUNONCE_TRACE_EXPORT = var.tracing ? "gcp" : "none"
  }

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
