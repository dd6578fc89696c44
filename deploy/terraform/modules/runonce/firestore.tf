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

# The TTL policy on runs: Firestore deletes a run record within about a day after its
# expire_at (RUNONCE_RETENTION after its last write, deadline or retry). Without it runs
# pile up forever; the ledger itself still deduplicates against a record past expire_at
# that still exists. Effects have no TTL policy: an effect must outlive its run, or a
# later attempt redoes it, so the workers' sweep deletes an effect only once its run is
# gone. No index_config block: expire_at keeps its automatic single-field index, which
# the sweep's query uses.
resource "google_firestore_field" "expire_at" {
  for_each = local.firestore ? toset(["runs"]) : toset([])

  project    = var.project_id
  database   = local.database_name
  collection = "${var.collection_prefix}${each.key}"
  field      = "expire_at"

  ttl_config {}
}

# The rescuer's one query (Ledger.RescueQuery):
#   status in [queued, running] AND deadline < T ORDER BY deadline ASC
# Without this index Firestore answers FAILED_PRECONDITION and lost runs are never
# republished.
resource "google_firestore_index" "rescue" {
  count = local.firestore ? 1 : 0

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "deadline"
    order      = "ASCENDING"
  }
}

# The operators' listing (GET /v1/runs, ListQuery in pkg/ledger/firestoreledger): equality
# filters on status, job and namespace, newest first by created_at, or by updated_at
# when filtered by update time. One index per filtered field and order; Firestore merges
# them for a query with several equality filters. A listing with no filter uses the
# automatic single-field indexes.
resource "google_firestore_index" "list_by_created" {
  for_each = local.firestore ? toset(["status", "job", "namespace"]) : toset([])

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}runs"
  query_scope = "COLLECTION"

  fields {
    field_path = each.key
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "list_by_updated" {
  for_each = local.firestore ? toset(["status", "job", "namespace"]) : toset([])

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}runs"
  query_scope = "COLLECTION"

  fields {
    field_path = each.key
    order      = "ASCENDING"
  }
  fields {
    field_path = "updated_at"
    order      = "DESCENDING"
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

# The payload, the history, the result and the progress are read with their run, never queried: no index entries
# for them (an index entry holds at most 1,500 bytes, and each would cost a write).
resource "google_firestore_field" "unindexed" {
  for_each = local.firestore ? toset(["payload", "history", "result", "progress"]) : toset([])

  project    = var.project_id
  database   = local.database_name
  collection = "${var.collection_prefix}runs"
  field      = each.key

  index_config {}
}
