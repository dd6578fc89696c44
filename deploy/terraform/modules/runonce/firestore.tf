# The ledger: one Firestore (Native mode) database with two collections, PREFIXruns and
# PREFIXeffects (pkg/ledger/firestore/doc.go). Nothing here with ledger = "spanner"
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

# The operators' listing (Ledger.ListQuery): equality filters on status, job or namespace,
# ordered by created_at (or updated_at) and the document ID, newest first. One index per
# equality field and order ("FIELD/ORDER_BY"); Firestore merges them when several filters
# are given. Without them GET /v1/runs with a filter answers 503 (FAILED_PRECONDITION).
resource "google_firestore_index" "list" {
  for_each = local.firestore ? toset([
    "status/created_at", "job/created_at", "namespace/created_at",
    "status/updated_at", "job/updated_at", "namespace/updated_at",
  ]) : toset([])

  project     = var.project_id
  database    = local.database_name
  collection  = "${var.collection_prefix}runs"
  query_scope = "COLLECTION"

  fields {
    field_path = split("/", each.value)[0]
    order      = "ASCENDING"
  }
  fields {
    field_path = split("/", each.value)[1]
    order      = "DESCENDING"
  }
  fields {
    field_path = "__name__"
    order      = "DESCENDING"
  }
}
