# The ledger: one Firestore (Native mode) database with two collections, PREFIXruns and
# PREFIXeffects (pkg/ledger/firestoreledger/doc.go). Nothing here with ledger = "spanner"
# (spanner.tf).

resource "google_firestore_database" "ledger" {
  count = local.firestore && var.create_firestore_database ? 1 : 0

  project     = var.project_id
  name        = var.firestore_database
  location_id = coalesce(var.firestore_location, var.region)
  type        = "FIRESTORE_NATIVE"
  # The ledger fences every transition with update-time preconditions and its effect
  # transactions read nothing: optimistic concurrency, no locks held while a job works.
  concurrency_mode            = "OPTIMISTIC"
  app_engine_integration_mode = "DISABLED"
  delete_protection_state     = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy             = var.deletion_protection ? "ABANDON" : "DELETE"
}

# Sharded timestamps (pkg/ledger/firestoreledger, Indexes and Unindexed): Firestore limits
# a collection whose documents hold a sequential indexed value (a time) to 500 writes a
# second (https://firebase.google.com/docs/firestore/solutions/shard-timestamp). Every run
# and effect document carries "shard" (the first hex digit of its run ID, 16 shards);
# every index below that holds a time leads with it, and every time (and the run's
# attempt ID, a UUIDv7 that starts with its time; the run's key and schedule time and an
# effect's ref, which may follow a caller's sequence) is exempted from single-field
# indexing, so the ceiling is 500 x 16 writes a second per collection. The ledger's
# queries fan out over the shards. deploy/deploy_test.go refuses an index or a
# single-field default that would bring the limit back. The indexes are replaced before
# they are destroyed, so a deployment being upgraded keeps the old ones until the new
# ones are built.

# The TTL policy on runs: Firestore deletes a run record within about a day after its
# expire_at (RUNONCE_RETENTION after its last write, deadline or retry). Without it runs
# pile up forever; the ledger itself still deduplicates against a record past expire_at
# that still exists. Effects have no TTL policy: an effect must outlive its run, or a
# later attempt redoes it, so the workers' sweep deletes an effect only once its run is
# gone. The empty index_config exempts expire_at from single-field indexing
# (https://firebase.google.com/docs/firestore/best-practices, "TTL fields"): the sweep's
# query uses the sharded index "sweep" instead.
resource "google_firestore_field" "expire_at" {
  for_each = local.firestore ? toset(["runs"]) : toset([])

  project    = var.project_id
  database   = local.database_name
  collection = "${var.collection_prefix}${each.key}"
  field      = "expire_at"

  ttl_config {}
  index_config {}
}

# The rescuer's query, on each shard (Ledger.RescueQuery):
#   shard == S AND status in [queued, running] AND deadline < T ORDER BY deadline ASC
# Without this index Firestore answers FAILED_PRECONDITION and lost runs are never
# republished.
resource "google_firestore_index" "rescue" {
  count = local.firestore ? 1 : 0

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "deadline"
    order      = "ASCENDING"
  }

  lifecycle {
    create_before_destroy = true
  }
}

# The workers' sweep, on each shard of each collection (SweepQuery):
#   shard == S AND expire_at < T ORDER BY expire_at ASC
resource "google_firestore_index" "sweep" {
  for_each = local.firestore ? toset(["runs", "effects"]) : toset([])

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}${each.key}"
  query_scope = "COLLECTION"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "expire_at"
    order      = "ASCENDING"
  }

  lifecycle {
    create_before_destroy = true
  }
}

# The operators' listing (GET /v1/runs, ListQuery in pkg/ledger/firestoreledger), on each
# shard: equality filters on status, job and namespace, newest first by created_at, or by
# updated_at when filtered by update time. One index per order, and one per filtered
# field and order; Firestore merges them for a query with several equality filters.
resource "google_firestore_index" "list_newest" {
  for_each = local.firestore ? toset(["created_at", "updated_at"]) : toset([])

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = each.key
    order      = "DESCENDING"
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "google_firestore_index" "list_by_created" {
  for_each = local.firestore ? toset(["status", "job", "namespace"]) : toset([])

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = each.key
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "google_firestore_index" "list_by_updated" {
  for_each = local.firestore ? toset(["status", "job", "namespace"]) : toset([])

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = each.key
    order      = "ASCENDING"
  }
  fields {
    field_path = "updated_at"
    order      = "DESCENDING"
  }

  lifecycle {
    create_before_destroy = true
  }
}

# A run's effects, by name (EffectsQuery), for the run's detail view.
resource "google_firestore_index" "effects_of_run" {
  count = local.firestore ? 1 : 0

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}effects"
  query_scope = "COLLECTION"

  fields {
    field_path = "run_id"
    order      = "ASCENDING"
  }
  fields {
    field_path = "name"
    order      = "ASCENDING"
  }
}

# No single-field index on the runs' fields that follow the clock (the times, the
# attempt ID) or a caller's sequence (the key, the schedule time) (each would bring back the 500 writes a second limit; the queries use the sharded
# indexes above), on the shard (only ever used in those), nor on the payload, the history,
# the result and the progress, read with their run and never queried (an index entry
# holds at most 1,500 bytes, and each would cost a write).
resource "google_firestore_field" "unindexed" {
  for_each = local.firestore ? toset(["created_at", "updated_at", "deadline", "not_before", "completed_at", "schedule_time", "key", "attempt_id", "shard", "payload", "history", "result", "progress"]) : toset([])

  project    = var.project_id
  database   = local.database_name
  collection = "${var.collection_prefix}runs"
  field      = each.key

  index_config {}
}

# Likewise the effects' times, ref (what the effect's target answered) and shard.
resource "google_firestore_field" "effects_unindexed" {
  for_each = local.firestore ? toset(["created_at", "updated_at", "done_at", "expire_at", "ref", "shard"]) : toset([])

  project    = var.project_id
  database   = local.database_name
  collection = "${var.collection_prefix}effects"
  field      = each.key

  index_config {}
}
