// Package ingress is the HTTP endpoint schedulers and callers point at: it derives the
// run's key, claims the run in the ledger, publishes it to Pub/Sub and answers in
// milliseconds. It is an http.Handler, importable by users who build their own binary.
//
// # Contract
//
//	POST /v1/jobs/{job}
//	  new run claimed and published       202 + Location: /v1/runs/{run_id}  {run_id, status: queued}
//	  duplicate of a queued/running run   202  {run_id, status, duplicate: true}
//	  duplicate of a completed/failed run 200  {run_id, status, duplicate: true}
//	  no usable key, bad time, bad name   400  {error}
//	  token missing or invalid · denied   401 · 403
//	  job not in the jobs file            404
//	  body over MaxBody                   413
//	  same key, other payload             422
//	  ledger or Pub/Sub unavailable       503 + Retry-After (a new claim is released first)
//	GET /v1/runs/{run_id}   the record (never the payload)
//	GET /healthz            the process is up
//	GET /readyz             the ledger and the topic answer
//	GET /metrics            Prometheus
//
// # Guarantees
//
// A 202 for a new run means the run is durably claimed and its message stored by
// Pub/Sub: the handler waits for the publish result. If the publish fails, the claim is
// released (ledger.Unclaim with the claim's own attempt ID) before the 503 is written,
// so that the scheduler's retry claims and publishes the run anew. A new run costs one
// ledger round trip (Claim) and one publish; a duplicate costs one Claim, which writes
// nothing, plus a publish only when its message may have been lost (a queued run older
// than RepublishAfter, or a running run whose lease expired; the worker deduplicates).
// Nothing is started after the answer is written.
//
// The key (DeriveKey) follows DESIGN.md: Cloud Scheduler's job name and strict RFC 3339
// schedule time normalised to UTC, else Idempotency-Key, else the JSON body's job_key;
// a schedule time further in the future than MaxSkew is a forced run and refused. The
// namespace and the path's job are part of every run ID.
//
// Logs carry run_id, job, outcome and the key's source, never the payload; values the
// caller supplied are escaped (obs.Clean).
package ingress
