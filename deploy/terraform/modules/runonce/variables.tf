# Inputs of the runonce module. Durations are whole numbers of seconds or hours, so that
# Terraform can check the retention rule at plan time; the module turns them into the Go
# durations the binaries read (RUNONCE_LEASE = "30s", RUNONCE_RETENTION = "336h").

# ---------------------------------------------------------------------------------------
# Where
# ---------------------------------------------------------------------------------------

variable "project_id" {
  description = "The Google Cloud project everything is created in."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project ID (6-30 lowercase letters, digits and hyphens), not a project number or name."
  }
}

variable "region" {
  description = "The region of the Cloud Run services (and, unless firestore_location says otherwise, of the Firestore database)."
  type        = string
  default     = "us-central1"
}

variable "name" {
  description = "Prefix of every resource name (services, topics, subscriptions, service accounts). Pub/Sub names need 3 characters or more; service account IDs at most 30 in all, so keep it short."
  type        = string
  default     = "runonce"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{2,16}$", var.name))
    error_message = "name must be 3-17 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "namespace" {
  description = "Namespace mixed into every run key (RUNONCE_NAMESPACE), so equal job IDs from two projects or regions never collide. Null means PROJECT/REGION. Changing it changes every run ID: a run scheduled before the change is not deduplicated against one after it."
  type        = string
  default     = null
}

variable "labels" {
  description = "Labels put on every resource that takes labels."
  type        = map(string)
  default     = {}
}

variable "deletion_protection" {
  description = "Protect the Cloud Run services and the Firestore database from terraform destroy."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------

variable "ingress_image" {
  description = "The ingress image (ko build ./cmd/ingress), preferably by digest."
  type        = string
}

variable "worker_image" {
  description = "The worker image (ko build ./cmd/worker), preferably by digest."
  type        = string
}

# ---------------------------------------------------------------------------------------
# Ledger
# ---------------------------------------------------------------------------------------

variable "ledger" {
  description = "The ledger's datastore: \"firestore\" (the default; no operation) or \"spanner\" (Cloud Spanner, for multi-region or very high write rates; spanner.tf)."
  type        = string
  default     = "firestore"

  validation {
    condition     = contains(["firestore", "spanner"], var.ledger)
    error_message = "ledger must be \"firestore\" or \"spanner\"."
  }
}

# --- Firestore (ledger = "firestore") ---

variable "create_firestore_database" {
  description = "Create the Firestore database. Set false to use one that exists (it must be in Native mode)."
  type        = bool
  default     = true
}

variable "firestore_database" {
  description = "The Firestore database ID. A named database (not \"(default)\") keeps the ledger apart from the project's other data and lets the datastore.user grant be limited to it."
  type        = string
  default     = "runonce"

  validation {
    condition     = var.firestore_database == "(default)" || can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.firestore_database))
    error_message = "firestore_database must be \"(default)\" or 4-63 lowercase letters, digits and hyphens."
  }
}

variable "firestore_location" {
  description = "The Firestore location (a region such as us-central1, or a multi-region such as nam5). Null means var.region."
  type        = string
  default     = null
}

variable "collection_prefix" {
  description = "Prefix of the ledger's collection names (the firestore:// URL's ?prefix=): PREFIXruns and PREFIXeffects."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]*$", var.collection_prefix))
    error_message = "collection_prefix may hold only letters, digits, '_' and '-'."
  }
}

# --- Spanner (ledger = "spanner") ---

variable "create_spanner_instance" {
  description = "Create the Spanner instance. Set false to put the ledger's database in an instance that exists (spanner_instance)."
  type        = bool
  default     = true
}

variable "spanner_instance" {
  description = "The Spanner instance ID, created unless create_spanner_instance is false."
  type        = string
  default     = "runonce"

  validation {
    condition     = can(regex("^[a-z][-a-z0-9]{0,62}[a-z0-9]$", var.spanner_instance))
    error_message = "spanner_instance must be 2-64 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "spanner_config" {
  description = "The instance configuration (regional-us-central1, nam3, …). Null means regional-REGION."
  type        = string
  default     = null
}

variable "spanner_processing_units" {
  description = "The instance's compute capacity in processing units (100 is the smallest; 1000 is one node)."
  type        = number
  default     = 100
}

variable "spanner_database" {
  description = "The Spanner database ID holding the ledger's tables."
  type        = string
  default     = "runonce"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_-]{0,28}[a-z0-9]$", var.spanner_database))
    error_message = "spanner_database must be 2-30 lowercase letters, digits, '_' and '-', starting with a letter."
  }
}

variable "restrict_datastore_user_to_database" {
  description = "Limit the roles/datastore.user grants to the ledger's database with an IAM condition on resource.name."
  type        = bool
  default     = true
}

variable "restrict_target_grants_to_resource" {
  description = "Limit the project-level grants of Workflows and Cloud Build targets (targets.tf) to the named workflow or trigger with an IAM condition on resource.name."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------------------
# The guarantees: retention, leases, shutdown
# ---------------------------------------------------------------------------------------

variable "retention_hours" {
  description = "How long run and effect records are kept (RUNONCE_RETENTION, and the Firestore TTL on expire_at). Must outlast the subscription's message retention + the scheduler's 24h retry window + the longest lease or job, or a late redelivery finds no record and runs the run again; the binaries refuse a shorter one."
  type        = number
  default     = 336

  validation {
    condition     = var.retention_hours >= 1 && floor(var.retention_hours) == var.retention_hours
    error_message = "retention_hours must be a whole number of hours."
  }
}

variable "message_retention_hours" {
  description = "How long the pull subscription keeps unacknowledged messages (message_retention_duration). Pub/Sub allows 10 minutes to 7 days for a subscription; it must be shorter than retention_hours by the margins above."
  type        = number
  default     = 168

  validation {
    condition     = var.message_retention_hours >= 1 && var.message_retention_hours <= 168 && floor(var.message_retention_hours) == var.message_retention_hours
    error_message = "message_retention_hours must be a whole number from 1 to 168 (7 days, Pub/Sub's limit for a subscription)."
  }
}

variable "lease_seconds" {
  description = "The worker's lease on a run (RUNONCE_LEASE), renewed every third of it. A crashed worker's run is taken over once its lease expires."
  type        = number
  default     = 30

  validation {
    condition     = var.lease_seconds >= 3 && var.lease_seconds <= 3600
    error_message = "lease_seconds must be from 3 to 3600."
  }
}

variable "longest_job_seconds" {
  description = "The longest job timeout in the jobs file (its \"timeout\" fields). Sets the worker's request timeout (push) and enters the retention check."
  type        = number
  default     = 600

  validation {
    condition     = var.longest_job_seconds >= 1 && var.longest_job_seconds <= 3600
    error_message = "longest_job_seconds must be from 1 to 3600 (Cloud Run's longest request)."
  }
}

variable "grace_seconds" {
  description = "The worker's shutdown grace (RUNONCE_GRACE): running jobs get this long after SIGTERM, then are cancelled, released and nacked. Cloud Run kills an instance 10s after SIGTERM and the worker adds 1s to close its server and subscriber, so at most 8."
  type        = number
  default     = 8

  validation {
    condition     = var.grace_seconds >= 1 && var.grace_seconds <= 8
    error_message = "grace_seconds must be from 1 to 8: Cloud Run sends SIGKILL 10s after SIGTERM, and the worker needs grace + 1s to release its runs."
  }
}

variable "max_attempts" {
  description = "Attempts of a run before the worker fails it (RUNONCE_MAX_ATTEMPTS), for jobs whose jobs-file entry sets no max_attempts."
  type        = number
  default     = 5

  validation {
    condition     = var.max_attempts >= 1 && var.max_attempts <= 50
    error_message = "max_attempts must be from 1 to 50."
  }
}

# ---------------------------------------------------------------------------------------
# Pub/Sub
# ---------------------------------------------------------------------------------------

variable "ack_deadline_seconds" {
  description = "The pull subscription's ack deadline. The worker's client extends it while a job runs (up to -max-ack-extension per extension); this is how soon a message held by a crashed instance comes back."
  type        = number
  default     = 60

  validation {
    condition     = var.ack_deadline_seconds >= 10 && var.ack_deadline_seconds <= 600
    error_message = "ack_deadline_seconds must be from 10 to 600 (Pub/Sub's range)."
  }
}

variable "retry_min_backoff_seconds" {
  description = "The subscriptions' retry policy: the shortest wait before a nacked message is redelivered."
  type        = number
  default     = 10

  validation {
    condition     = var.retry_min_backoff_seconds >= 0 && var.retry_min_backoff_seconds <= 600
    error_message = "retry_min_backoff_seconds must be from 0 to 600."
  }
}

variable "retry_max_backoff_seconds" {
  description = "The subscriptions' retry policy: the longest wait before a nacked message is redelivered."
  type        = number
  default     = 600

  validation {
    condition     = var.retry_max_backoff_seconds >= 0 && var.retry_max_backoff_seconds <= 600
    error_message = "retry_max_backoff_seconds must be from 0 to 600."
  }
}

variable "max_delivery_attempts" {
  description = "Deliveries of one message before Pub/Sub moves it to the dead-letter topic. Must exceed max_attempts, so that the worker fails a run in the ledger (with its error) before Pub/Sub gives up on the message; nacks of duplicates of a held run count too."
  type        = number
  default     = 20

  validation {
    condition     = var.max_delivery_attempts >= 5 && var.max_delivery_attempts <= 100
    error_message = "max_delivery_attempts must be from 5 to 100 (Pub/Sub's range)."
  }
}

variable "delivery" {
  description = "How the workers receive runs: \"pull\" (a pull subscription, streaming pull from always-on instances; the default) or \"push\" (a push subscription that POSTs each message to the worker's /v1/push with an OIDC token). Only one subscription is created: two would deliver every run twice (harmless, the ledger deduplicates, but twice the work). In both modes the worker keeps CPU always allocated and at least one instance, for the rescuer and the lease renewals."
  type        = string
  default     = "pull"

  validation {
    condition     = contains(["pull", "push"], var.delivery)
    error_message = "delivery must be \"pull\" or \"push\"."
  }
}

# ---------------------------------------------------------------------------------------
# Cloud Run
# ---------------------------------------------------------------------------------------

variable "ingress_timeout_seconds" {
  description = "The ingress's request timeout. Well under the scheduler's attempt deadline, so that a stuck request fails and is retried by the scheduler instead of the scheduler giving up first."
  type        = number
  default     = 30

  validation {
    condition     = var.ingress_timeout_seconds >= 5 && var.ingress_timeout_seconds <= 300
    error_message = "ingress_timeout_seconds must be from 5 to 300."
  }
}

variable "ingress_concurrency" {
  description = "Requests one ingress instance serves at once (max_instance_request_concurrency). Each request is one ledger write and one publish, both I/O."
  type        = number
  default     = 80

  validation {
    condition     = var.ingress_concurrency >= 1 && var.ingress_concurrency <= 1000
    error_message = "ingress_concurrency must be from 1 to 1000."
  }
}

variable "ingress_min_instances" {
  description = "Ingress instances kept warm. 0 costs nothing when idle; 1 keeps the first call of a tick free of a cold start."
  type        = number
  default     = 0
}

variable "ingress_max_instances" {
  description = "Most ingress instances."
  type        = number
  default     = 10
}

variable "ingress_traffic" {
  description = "Who can reach the ingress: INGRESS_TRAFFIC_ALL (callers are still authenticated twice: Cloud Run IAM and the ingress's own OIDC check) or INGRESS_TRAFFIC_INTERNAL_ONLY (Cloud Scheduler in the same project still counts as internal)."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.ingress_traffic)
    error_message = "ingress_traffic must be INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "worker_concurrency" {
  description = "Jobs one worker instance runs at once (RUNONCE_CONCURRENCY; also the push requests one instance takes)."
  type        = number
  default     = 8

  validation {
    condition     = var.worker_concurrency >= 1 && var.worker_concurrency <= 1000
    error_message = "worker_concurrency must be from 1 to 1000."
  }
}

variable "worker_min_instances" {
  description = "Worker instances always running. Pull needs at least one: with no instance nobody pulls, and the subscription's backlog waits."
  type        = number
  default     = 1

  validation {
    condition     = var.worker_min_instances >= 1
    error_message = "worker_min_instances must be at least 1: a pull worker with no instance pulls nothing."
  }
}

variable "worker_max_instances" {
  description = "Most worker instances."
  type        = number
  default     = 10
}

variable "worker_cpu" {
  description = "CPU limit of a worker instance."
  type        = string
  default     = "1"
}

variable "worker_memory" {
  description = "Memory limit of a worker instance."
  type        = string
  default     = "512Mi"
}

variable "jobs_json" {
  description = "The jobs file (docs/jobs.md) as a JSON string. Stored in Secret Manager (it may carry headers with credentials) and mounted into the worker as RUNONCE_JOBS. The ingress gets a file of its own derived from it, each job's name and schedule fields only (schedule, time_zone, scheduler_job, catch_up, missed_after), and answers 404 for a job it does not name: list a job a Go handler runs as {}. A scheduler_job grants both service accounts roles/cloudscheduler.viewer on its project. Null: no jobs file (a worker image with its own Go handlers); the ingress accepts any job name and knows no schedule."
  type        = string
  default     = null
  sensitive   = true

  validation {
    condition     = var.jobs_json == null || can(jsondecode(var.jobs_json).jobs)
    error_message = "jobs_json must be a JSON object with a \"jobs\" member."
  }
  validation {
    condition = var.jobs_json == null || try(alltrue([
      for j in values(jsondecode(var.jobs_json).jobs) :
      can(regex("^projects/[A-Za-z0-9:.-]+/locations/[A-Za-z0-9-]+/jobs/[A-Za-z0-9_-]{1,500}$", lookup(j, "scheduler_job", "projects/p/locations/l/jobs/j")))
    ]), true)
    error_message = "jobs_json: a job's scheduler_job must be a Cloud Scheduler job's name, projects/PROJECT/locations/LOCATION/jobs/JOB."
  }
}

# ---------------------------------------------------------------------------------------
# Callers and Cloud Scheduler
# ---------------------------------------------------------------------------------------

variable "ingress_audience" {
  description = "The audience of the ID tokens the ingress accepts (RUNONCE_AUDIENCE, the Cloud Run service's custom audience, and each scheduler job's oidc_token.audience). Null means \"https://NAME-ingress.PROJECT.runonce\": an explicit string that does not depend on the service's URL."
  type        = string
  default     = null
}

variable "operators" {
  description = "Emails of the people (or service accounts) who may retry, cancel and release runs and see their payloads, in the API, the CLI and the dashboard (RUNONCE_OPERATORS, and roles/run.invoker on the ingress). Empty: nobody may act; the allowed callers may still read runs."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.operators : can(regex("^[^@\\s]+@[^@\\s]+$", e))])
    error_message = "operators must be email addresses."
  }
}

variable "extra_allowed_callers" {
  description = "Service account emails, besides the module's scheduler service account, that may call the ingress (RUNONCE_ALLOW and roles/run.invoker on the ingress): e.g. an operator's account to read GET /v1/runs/{id}."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.extra_allowed_callers : can(regex("^[^@\\s]+@[^@\\s]+$", e))])
    error_message = "extra_allowed_callers must be email addresses."
  }
}

variable "scheduler_region" {
  description = "The Cloud Scheduler location. Null means var.region."
  type        = string
  default     = null
}

variable "scheduler_jobs" {
  description = <<-EOT
    Cloud Scheduler jobs that call the ingress, by scheduler job ID (sent as X-CloudScheduler-JobName, part of every run's key: renaming a job starts a new identity). Each:
      job       the runonce job name in POST /v1/jobs/{job} (a key of the jobs file)
      schedule  unix-cron (so the scheduler sends X-CloudScheduler-ScheduleTime)
      time_zone a tz database name
      body      the payload, passed to the job unchanged
  EOT
  type = map(object({
    job       = string
    schedule  = string
    time_zone = optional(string, "Etc/UTC")
    body      = optional(string, "{}")
  }))
  default = {}

  validation {
    condition     = alltrue([for k, j in var.scheduler_jobs : can(regex("^[A-Za-z0-9_-]{1,500}$", k)) && can(regex("^[A-Za-z0-9._-]{1,128}$", j.job))])
    error_message = "scheduler job IDs may hold letters, digits, '_' and '-'; job names letters, digits, '.', '_' and '-' (at most 128)."
  }
  validation {
    condition     = alltrue([for j in values(var.scheduler_jobs) : length(split(" ", trimspace(j.schedule))) == 5])
    error_message = "schedule must be a five-field unix-cron expression (e.g. \"0 5 * * *\")."
  }
}

variable "scheduler_attempt_deadline_seconds" {
  description = "How long Cloud Scheduler waits for the ingress's answer before it counts the attempt as failed (attempt_deadline). Must exceed ingress_timeout_seconds."
  type        = number
  default     = 180

  validation {
    condition     = var.scheduler_attempt_deadline_seconds >= 15 && var.scheduler_attempt_deadline_seconds <= 1800
    error_message = "scheduler_attempt_deadline_seconds must be from 15 to 1800 (Cloud Scheduler's range for HTTP targets)."
  }
}

variable "scheduler_retry" {
  description = "Cloud Scheduler's retry_config. Each retry of a tick carries the same schedule time, so the ingress deduplicates it; the whole window must stay within the 24h the retention rule assumes."
  type = object({
    retry_count                = optional(number, 5)
    min_backoff_seconds        = optional(number, 10)
    max_backoff_seconds        = optional(number, 300)
    max_doublings              = optional(number, 4)
    max_retry_duration_seconds = optional(number, 3600)
  })
  default = {}

  validation {
    condition     = var.scheduler_retry.retry_count >= 0 && var.scheduler_retry.retry_count <= 5
    error_message = "scheduler_retry.retry_count must be from 0 to 5 (Cloud Scheduler's range)."
  }
  validation {
    condition     = var.scheduler_retry.min_backoff_seconds <= var.scheduler_retry.max_backoff_seconds && var.scheduler_retry.max_backoff_seconds <= 3600
    error_message = "scheduler_retry backoffs must satisfy min <= max <= 3600."
  }
  validation {
    condition     = var.scheduler_retry.max_retry_duration_seconds >= 1 && var.scheduler_retry.max_retry_duration_seconds <= 86400
    error_message = "scheduler_retry.max_retry_duration_seconds must be from 1 to 86400: the retention rule counts on a retry window of at most 24h."
  }
}

# ---------------------------------------------------------------------------------------
# Cloud Monitoring
# ---------------------------------------------------------------------------------------

variable "monitoring" {
  description = "Create the Cloud Monitoring dashboard and the alert policies of deploy/README.md's runbook (monitoring.tf)."
  type        = bool
  default     = true
}

variable "tracing" {
  description = "Export the binaries' traces to Cloud Trace (RUNONCE_TRACE_EXPORT=gcp): one trace per run across the ingress and the worker, linked from their log lines."
  type        = bool
  default     = true
}

variable "notification_channels" {
  description = "Notification channel IDs (projects/PROJECT/notificationChannels/ID) every alert policy notifies. Empty: incidents open in the console only."
  type        = list(string)
  default     = []
}

variable "alert_thresholds" {
  description = <<-EOT
    When each alert policy fires (deploy/README.md, "Alerts"); each is "more than N in the window":
      dead_letter_messages     messages waiting in the dead-letter subscription (any: 0)
      runs_failed              runs failed for good in 10 minutes
      leases_lost              attempts that lost their lease in 10 minutes
      rescues                  runs the rescuer republished in an hour
      ingress_5xx              5xx answers of the ingress in 10 minutes
      ticks_missed             ticks of scheduled jobs missed in 10 minutes (any: 0)
      oldest_unacked_seconds   age of the oldest unacked message; null: the ledger's pickup timeout (300 s)
  EOT
  type = object({
    dead_letter_messages   = optional(number, 0)
    runs_failed            = optional(number, 0)
    leases_lost            = optional(number, 0)
    rescues                = optional(number, 5)
    ingress_5xx            = optional(number, 3)
    ticks_missed           = optional(number, 0)
    oldest_unacked_seconds = optional(number)
  })
  default = {
    dead_letter_messages   = 0
    runs_failed            = 0
    leases_lost            = 0
    rescues                = 5
    ingress_5xx            = 3
    ticks_missed           = 0
    oldest_unacked_seconds = null
  }
}
