# The ledger on Cloud Spanner instead of Firestore (ledger = "spanner"): an optional
# instance, the database with the ledger's tables and the runs' row deletion policy
# (pkg/ledger/spannerledger, Schema), and the services' one grant on it.
#
# The DDL is the ledger's own (deploy/deploy_test.go checks that it matches
# spannerledger.Schema), applied here so that the services open the database with
# migrate=false and need only roles/spanner.databaseUser, never DDL rights.

resource "google_spanner_instance" "ledger" {
  count = local.spanner && var.create_spanner_instance ? 1 : 0

  project          = var.project_id
  name             = var.spanner_instance
  config           = coalesce(var.spanner_config, "regional-${var.region}")
  display_name     = "${var.name} ledger"
  processing_units = var.spanner_processing_units
  labels           = local.labels
  force_destroy    = !var.deletion_protection
}

resource "google_spanner_database" "ledger" {
  count = local.spanner ? 1 : 0

  project  = var.project_id
  instance = var.create_spanner_instance ? google_spanner_instance.ledger[0].name : var.spanner_instance
  name     = var.spanner_database
  # The row deletion policy on the runs' expire_at is the retention: Spanner deletes a run
  # (within about three days) RUNONCE_RETENTION after its last write, deadline or retry.
  # Effects have no policy of their own: interleaved in their run, they go with it.
  ddl = [
    "CREATE TABLE runs (run_id STRING(64) NOT NULL, namespace STRING(MAX) NOT NULL, job STRING(MAX) NOT NULL, run_key STRING(MAX) NOT NULL, schedule_time TIMESTAMP, payload_hash STRING(MAX) NOT NULL, payload BYTES(MAX), status STRING(16) NOT NULL, attempt INT64 NOT NULL, attempt_id STRING(MAX) NOT NULL, deadline TIMESTAMP, not_before TIMESTAMP, attempts_made INT64 NOT NULL, last_error STRING(MAX) NOT NULL, created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL, completed_at TIMESTAMP, expire_at TIMESTAMP NOT NULL, history STRING(MAX)) PRIMARY KEY (run_id), ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))",
    "CREATE NULL_FILTERED INDEX runs_by_deadline ON runs (deadline)",
    "CREATE INDEX runs_by_expire_at ON runs (expire_at)",
    "CREATE INDEX runs_by_created ON runs (created_at DESC)",
    "CREATE INDEX runs_by_status_created ON runs (status, created_at DESC)",
    "CREATE INDEX runs_by_job_created ON runs (job, created_at DESC)",
    "CREATE INDEX runs_by_namespace_created ON runs (namespace, created_at DESC)",
    "CREATE INDEX runs_by_updated ON runs (updated_at DESC)",
    "CREATE INDEX runs_by_status_updated ON runs (status, updated_at DESC)",
    "CREATE TABLE effects (run_id STRING(64) NOT NULL, name STRING(MAX) NOT NULL, effect_key STRING(64) NOT NULL, status STRING(16) NOT NULL, attempt INT64 NOT NULL, created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL, done_at TIMESTAMP, expire_at TIMESTAMP NOT NULL, ref STRING(MAX) NOT NULL) PRIMARY KEY (run_id, name), INTERLEAVE IN PARENT runs ON DELETE CASCADE",
    # Columns added since are appended, never folded into the statements above: Terraform
    # applies appended statements in place, and would replace the database for a changed one.
    "ALTER TABLE runs ADD COLUMN result BYTES(MAX)",
    "ALTER TABLE runs ADD COLUMN progress BYTES(MAX)",
    # The indexes above lead with a time, or the status then a time: every write at the
    # current time lands in one key range, a hot spot. They are replaced by indexes led by
    # the run's shard (its ID's first hex digit, a stored generated column), so the
    # writes spread over 16 key ranges (pkg/ledger/spannerledger, Schema).
    "ALTER TABLE runs ADD COLUMN shard INT64 AS (STRPOS('0123456789abcdef', SUBSTR(run_id, 1, 1)) - 1) STORED",
    "CREATE NULL_FILTERED INDEX runs_by_shard_deadline ON runs (shard, deadline)",
    "CREATE INDEX runs_by_shard_expire_at ON runs (shard, expire_at)",
    "CREATE INDEX runs_by_shard_created ON runs (shard, created_at DESC)",
    "CREATE INDEX runs_by_shard_status_created ON runs (shard, status, created_at DESC)",
    "CREATE INDEX runs_by_shard_job_created ON runs (shard, job, created_at DESC)",
    "CREATE INDEX runs_by_shard_namespace_created ON runs (shard, namespace, created_at DESC)",
    "CREATE INDEX runs_by_shard_updated ON runs (shard, updated_at DESC)",
    "CREATE INDEX runs_by_shard_status_updated ON runs (shard, status, updated_at DESC)",
    "DROP INDEX runs_by_deadline",
    "DROP INDEX runs_by_expire_at",
    "DROP INDEX runs_by_created",
    "DROP INDEX runs_by_status_created",
    "DROP INDEX runs_by_job_created",
    "DROP INDEX runs_by_namespace_created",
    "DROP INDEX runs_by_updated",
    "DROP INDEX runs_by_status_updated",
  ]
  deletion_protection = var.deletion_protection
}

# Reads and writes the ledger's rows (claims, leases, effects); no DDL, no admin.
resource "google_spanner_database_iam_member" "database_user" {
  for_each = local.spanner ? {
    ingress = google_service_account.ingress.member
    worker  = google_service_account.worker.member
  } : {}

  project  = var.project_id
  instance = google_spanner_database.ledger[0].instance
  database = google_spanner_database.ledger[0].name
  role     = "roles/spanner.databaseUser"
  member   = each.value
}
