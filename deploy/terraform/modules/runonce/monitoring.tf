# Cloud Monitoring: a dashboard and the alert policies for what deploy/README.md's runbook
# says to watch. The binaries export their OpenTelemetry instruments to Cloud Monitoring
# as workload.googleapis.com/INSTRUMENT on the generic_task resource whose job label is
# the Cloud Run service's name (RUNONCE_METRICS_EXPORT=gcp, internal/obs); Pub/Sub and
# Cloud Run report their own metrics. deploy/monitoring_test.go checks that every alert
# exists and that every workload metric named here is an instrument the code creates.

locals {
  ingress_service = "${var.name}-ingress"
  worker_service  = "${var.name}-worker"
  # The subscription the workers consume (pull or push) and the one keeping dead letters.
  worker_subscription_name      = var.delivery == "pull" ? "${var.name}-worker" : "${var.name}-worker-push"
  dead_letter_subscription_name = "${var.name}-dead-letter"

  # A runonce instrument of one service.
  workload_filter = {
    ingress = "resource.type = \"generic_task\" AND resource.label.job = \"${local.ingress_service}\""
    worker  = "resource.type = \"generic_task\" AND resource.label.job = \"${local.worker_service}\""
  }
  worker_subscription_filter = "resource.type = \"pubsub_subscription\" AND resource.label.subscription_id = \"${local.worker_subscription_name}\""
  dead_letter_filter         = "resource.type = \"pubsub_subscription\" AND resource.label.subscription_id = \"${local.dead_letter_subscription_name}\""
  ingress_run_filter         = "resource.type = \"cloud_run_revision\" AND resource.label.service_name = \"${local.ingress_service}\""

  # The ledger's pickup timeout (pkg/ledger.DefaultPickupTimeout): a message older than
  # this is one the rescuer already republished, or one no worker picks up.
  pickup_timeout_seconds = 300

  # One entry per runbook signal. Each is a condition_threshold "more than threshold in
  # the window": counters are summed over window_seconds (ALIGN_DELTA), gauges maxed.
  alerts = {
    dead_letter = {
      title     = "messages in the dead-letter subscription"
      filter    = "metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND ${local.dead_letter_filter}"
      aligner   = "ALIGN_MAX"
      reducer   = "REDUCE_MAX"
      window    = 300
      threshold = var.alert_thresholds.dead_letter_messages
      doc       = "A message was delivered ${var.max_delivery_attempts} times without being settled and was dead-lettered to ${local.dead_letter_subscription_name}. Its run is usually `failed` in the ledger: look it up with `runonce runs show RUN_ID` and retry it with `runonce runs retry` once its cause is fixed. Inspect the message without acking: `gcloud pubsub subscriptions pull ${local.dead_letter_subscription_name} --limit=10 --format=json` (deploy/README.md, runbook)."
    }
    runs_failed = {
      title     = "runs failed"
      filter    = "metric.type = \"workload.googleapis.com/runonce.worker.deliveries\" AND metric.label.outcome = \"failed\" AND ${local.workload_filter.worker}"
      aligner   = "ALIGN_DELTA"
      reducer   = "REDUCE_SUM"
      window    = 600
      threshold = var.alert_thresholds.runs_failed
      doc       = "A run failed for good: its job returned a permanent error, or it used up its attempts. Nothing runs it again by itself. Find it (`runonce runs list --status failed`, or `jsonPayload.outcome=\"failed\"` in the worker's logs), read its error (`runonce runs show RUN_ID`), fix the cause, then retry it: `runonce runs retry RUN_ID --reason ...`, the dashboard's Retry, or POST /v1/runs/RUN_ID:retry (deploy/README.md, runbook)."
    }
    leases_lost = {
      title     = "leases lost"
      filter    = "metric.type = \"workload.googleapis.com/runonce.worker.leases.lost\" AND ${local.workload_filter.worker}"
      aligner   = "ALIGN_DELTA"
      reducer   = "REDUCE_SUM"
      window    = 600
      threshold = var.alert_thresholds.leases_lost
      doc       = "A worker could not renew a lease in time and another attempt took the run over (nothing the first one wrote afterwards landed): overload, CPU throttling or a long pause. Confirm the worker's cpu_idle = false, look for CPU saturation and long GC pauses, raise lease_seconds (deploy/README.md, runbook)."
    }
    rescues = {
      title     = "runs rescued"
      filter    = "metric.type = \"workload.googleapis.com/runonce.worker.rescues\" AND ${local.workload_filter.worker}"
      aligner   = "ALIGN_DELTA"
      reducer   = "REDUCE_SUM"
      window    = 3600
      threshold = var.alert_thresholds.rescues
      doc       = "The rescuer republished runs whose pickup deadline or lease had passed: messages were lost, or workers died holding runs. A few after a deploy are normal; a steady stream means messages are being dropped. Check the subscription's delivery and the workers' restarts (deploy/README.md, runbook)."
    }
    ticks_missed = {
      title     = "ticks missed"
      filter    = "metric.type = \"workload.googleapis.com/runonce.job.ticks.missed\" AND ${local.workload_filter.worker}"
      aligner   = "ALIGN_DELTA"
      reducer   = "REDUCE_SUM"
      window    = 600
      threshold = var.alert_thresholds.ticks_missed
      doc       = "A tick of a scheduled job (schedule or scheduler_job in the jobs file) got no run within its grace: the scheduler job is paused by mistake, deleted, its OIDC audience or URL is wrong, its retries ran out on 4xx answers, or the ingress was down. The worker's ERROR log line \"tick missed\" names the job, the tick and the backfill command; `runonce jobs ticks JOB` shows every missing tick. Fix the cause, then claim them with `runonce jobs backfill JOB --from 24h --to 0s` (a late real delivery is then a duplicate) (deploy/README.md, runbook)."
    }
    ingress_5xx = {
      title     = "ingress 5xx answers"
      filter    = "metric.type = \"run.googleapis.com/request_count\" AND metric.label.response_code_class = \"5xx\" AND ${local.ingress_run_filter}"
      aligner   = "ALIGN_DELTA"
      reducer   = "REDUCE_SUM"
      window    = 600
      threshold = var.alert_thresholds.ingress_5xx
      doc       = "The ingress answered 5xx: 503 means the ledger or Pub/Sub was unavailable; a claim already written is kept (never deleted) and made due at once, so the scheduler's retry or the rescuer republishes it. Check Firestore's and Pub/Sub's status and the ingress's /readyz and logs (deploy/README.md, runbook)."
    }
    oldest_unacked = {
      title     = "oldest unacked message older than the pickup timeout"
      filter    = "metric.type = \"pubsub.googleapis.com/subscription/oldest_unacked_message_age\" AND ${local.worker_subscription_filter}"
      aligner   = "ALIGN_MAX"
      reducer   = "REDUCE_MAX"
      window    = 300
      threshold = coalesce(var.alert_thresholds.oldest_unacked_seconds, local.pickup_timeout_seconds)
      doc       = "A run's message has waited longer than the ledger's pickup timeout: the workers are down, not keeping up, or not pulling. Check the worker service's instances and logs; raise worker_max_instances or worker_concurrency (deploy/README.md, runbook)."
    }
  }

  # The dashboard's charts: title → [filter, aligner, reducer, group_by] per line.
  rate = "ALIGN_RATE"
  dashboard_charts = [
    {
      title = "Runs accepted, duplicate, rejected (ingress, per second, by outcome)"
      lines = [{ filter = "metric.type = \"workload.googleapis.com/runonce.ingress.requests\" AND ${local.workload_filter.ingress}", aligner = local.rate, reducer = "REDUCE_SUM", group_by = ["metric.label.outcome"] }]
    },
    {
      title = "Runs completed, failed, released (worker deliveries, per second, by outcome)"
      lines = [{ filter = "metric.type = \"workload.googleapis.com/runonce.worker.deliveries\" AND ${local.workload_filter.worker}", aligner = local.rate, reducer = "REDUCE_SUM", group_by = ["metric.label.outcome"] }]
    },
    {
      title = "Lease renewals and leases lost (per second)"
      lines = [
        { filter = "metric.type = \"workload.googleapis.com/runonce.worker.lease.renewals\" AND ${local.workload_filter.worker}", aligner = local.rate, reducer = "REDUCE_SUM", group_by = [] },
        { filter = "metric.type = \"workload.googleapis.com/runonce.worker.leases.lost\" AND ${local.workload_filter.worker}", aligner = local.rate, reducer = "REDUCE_SUM", group_by = [] },
      ]
    },
    {
      title = "Rescues (runs republished, per second)"
      lines = [{ filter = "metric.type = \"workload.googleapis.com/runonce.worker.rescues\" AND ${local.workload_filter.worker}", aligner = local.rate, reducer = "REDUCE_SUM", group_by = [] }]
    },
    {
      title = "Oldest unacked message age (s), ${local.worker_subscription_name}"
      lines = [{ filter = "metric.type = \"pubsub.googleapis.com/subscription/oldest_unacked_message_age\" AND ${local.worker_subscription_filter}", aligner = "ALIGN_MAX", reducer = "REDUCE_MAX", group_by = [] }]
    },
    {
      title = "Dead-letter backlog (messages), ${local.dead_letter_subscription_name}"
      lines = [{ filter = "metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND ${local.dead_letter_filter}", aligner = "ALIGN_MAX", reducer = "REDUCE_MAX", group_by = [] }]
    },
    {
      title = "Ingress latency p50 and p99 (ms, Cloud Run)"
      lines = [
        { filter = "metric.type = \"run.googleapis.com/request_latencies\" AND ${local.ingress_run_filter}", aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_50", group_by = [] },
        { filter = "metric.type = \"run.googleapis.com/request_latencies\" AND ${local.ingress_run_filter}", aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_99", group_by = [] },
      ]
    },
    {
      title = "Ingress answers by status class (Cloud Run, per second)"
      lines = [{ filter = "metric.type = \"run.googleapis.com/request_count\" AND ${local.ingress_run_filter}", aligner = local.rate, reducer = "REDUCE_SUM", group_by = ["metric.label.response_code_class"] }]
    },
  ]
}

resource "google_monitoring_dashboard" "runonce" {
  count   = var.monitoring ? 1 : 0
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "runonce ${var.name}"
    mosaicLayout = {
      columns = 48
      tiles = [for i, c in local.dashboard_charts : {
        xPos   = (i % 2) * 24
        yPos   = floor(i / 2) * 16
        width  = 24
        height = 16
        widget = {
          title = c.title
          xyChart = {
            dataSets = [for l in c.lines : {
              plotType = "LINE"
              timeSeriesQuery = {
                timeSeriesFilter = {
                  filter = l.filter
                  aggregation = {
                    alignmentPeriod    = "60s"
                    perSeriesAligner   = l.aligner
                    crossSeriesReducer = l.reducer
                    groupByFields      = l.group_by
                  }
                }
              }
            }]
          }
        }
      }]
    }
  })
}

resource "google_monitoring_alert_policy" "runbook" {
  for_each = var.monitoring ? local.alerts : {}

  project               = var.project_id
  display_name          = "runonce ${var.name}: ${each.value.title}"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  documentation {
    content   = each.value.doc
    mime_type = "text/markdown"
  }

  conditions {
    display_name = "${each.value.title} > ${each.value.threshold} in ${each.value.window}s"
    condition_threshold {
      filter          = each.value.filter
      comparison      = "COMPARISON_GT"
      threshold_value = each.value.threshold
      duration        = "0s"
      aggregations {
        alignment_period     = "${each.value.window}s"
        per_series_aligner   = each.value.aligner
        cross_series_reducer = each.value.reducer
      }
      trigger {
        count = 1
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }
}
