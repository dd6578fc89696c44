# The queue between the ingress and the workers. Delivery is at least once; the ledger
# makes it once. Exactly one of the two worker subscriptions exists (var.delivery).

resource "google_pubsub_topic" "runs" {
  project = var.project_id
  name    = "${var.name}-runs"
  labels  = local.labels
}

# Where Pub/Sub moves a message after max_delivery_attempts deliveries.
resource "google_pubsub_topic" "dead_letter" {
  project = var.project_id
  name    = "${var.name}-dead-letter"
  labels  = local.labels
}

# The workers' pull subscription (delivery = "pull").
resource "google_pubsub_subscription" "pull" {
  count = var.delivery == "pull" ? 1 : 0

  project = var.project_id
  name    = "${var.name}-worker"
  topic   = google_pubsub_topic.runs.id
  labels  = local.labels

  # How soon a message held by a crashed instance comes back; while a job runs the
  # worker's client keeps extending it.
  ack_deadline_seconds = var.ack_deadline_seconds
  # Shorter than the ledger's retention (checked below and by the worker at start): a
  # message can be redelivered for this long, and its run's record must still be there
  # to deduplicate it.
  message_retention_duration = "${var.message_retention_hours * 3600}s"
  retain_acked_messages      = false

  # Never delete the subscription for inactivity (the default is 31 days).
  expiration_policy {
    ttl = ""
  }

  # A nacked message (a released run, a duplicate of a held run) comes back after a
  # backoff instead of at once.
  retry_policy {
    minimum_backoff = "${var.retry_min_backoff_seconds}s"
    maximum_backoff = "${var.retry_max_backoff_seconds}s"
  }

  # A message that keeps failing stops coming back and stays inspectable; the worker has
  # failed its run in the ledger first (max_delivery_attempts > max_attempts).
  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = var.max_delivery_attempts
  }

  lifecycle {
    precondition {
      condition     = var.retention_hours * 3600 >= local.min_retention_seconds
      error_message = "retention_hours is too short: records must outlast the subscription's message retention (message_retention_hours) + the scheduler's 24h retry window + max(lease_seconds, longest_job_seconds), or a late redelivery runs a run twice. The worker refuses to start with it."
    }
    precondition {
      condition     = var.max_delivery_attempts > var.max_attempts
      error_message = "max_delivery_attempts must exceed max_attempts, so that the worker fails a run in the ledger before Pub/Sub dead-letters its message."
    }
    precondition {
      condition     = var.retry_min_backoff_seconds <= var.retry_max_backoff_seconds
      error_message = "retry_min_backoff_seconds must not exceed retry_max_backoff_seconds."
    }
  }

  # Dead-lettering fails silently until the service agent may publish to the topic.
  depends_on = [google_pubsub_topic_iam_member.dead_letter_publisher_pubsub_agent]
}

# Push delivery (delivery = "push") to the worker's POST /v1/push, with an OIDC token the
# worker verifies (RUNONCE_AUTH=oidc, RUNONCE_AUDIENCE, RUNONCE_ALLOW).
resource "google_pubsub_subscription" "push" {
  count = var.delivery == "push" ? 1 : 0

  project = var.project_id
  name    = "${var.name}-worker-push"
  topic   = google_pubsub_topic.runs.id
  labels  = local.labels

  # For push the ack deadline is how long Pub/Sub waits for the response, and the
  # response comes when the job is done.
  ack_deadline_seconds       = min(600, var.longest_job_seconds + 30)
  message_retention_duration = "${var.message_retention_hours * 3600}s"
  retain_acked_messages      = false

  expiration_policy {
    ttl = ""
  }

  retry_policy {
    minimum_backoff = "${var.retry_min_backoff_seconds}s"
    maximum_backoff = "${var.retry_max_backoff_seconds}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = var.max_delivery_attempts
  }

  push_config {
    push_endpoint = "${google_cloud_run_v2_service.worker.uri}/v1/push"

    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = local.push_audience
    }
  }

  lifecycle {
    precondition {
      condition     = var.retention_hours * 3600 >= local.min_retention_seconds
      error_message = "retention_hours is too short: records must outlast the subscription's message retention (message_retention_hours) + the scheduler's 24h retry window + max(lease_seconds, longest_job_seconds), or a late redelivery runs a run twice."
    }
    precondition {
      condition     = var.max_delivery_attempts > var.max_attempts
      error_message = "max_delivery_attempts must exceed max_attempts, so that the worker fails a run in the ledger before Pub/Sub dead-letters its message."
    }
    precondition {
      condition     = var.longest_job_seconds <= 570
      error_message = "Pub/Sub waits at most 600s for a push response: with jobs longer than 570s use delivery = \"pull\"."
    }
  }

  depends_on = [
    google_pubsub_topic_iam_member.dead_letter_publisher_pubsub_agent,
    google_service_account_iam_member.push_token_creator_pubsub_agent,
  ]
}

# Keeps the dead letters: a topic without a subscription drops what it is sent. Nothing
# consumes it; the runbook (deploy/README.md) says how to inspect and replay it. Being
# the end of the line it has no dead-letter policy of its own (the Go test in deploy/
# exempts exactly the subscriptions of a dead-letter topic).
resource "google_pubsub_subscription" "dead_letter" {
  project = var.project_id
  name    = "${var.name}-dead-letter"
  topic   = google_pubsub_topic.dead_letter.id
  labels  = local.labels

  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  retain_acked_messages      = false

  expiration_policy {
    ttl = ""
  }

  retry_policy {
    minimum_backoff = "${var.retry_min_backoff_seconds}s"
    maximum_backoff = "${var.retry_max_backoff_seconds}s"
  }
}
