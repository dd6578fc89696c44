// Package ingress is the HTTP endpoint schedulers and callers point at: it derives the
// run's key, claims the run in the ledger, publishes it to Pub/Sub and answers in
// milliseconds. It is an http.Handler, importable by users who build their own binary.
//
// # Contract
//
//	POST /v1/jobs/{job}
//	  new run claimed and published       202 + Location: /v1/runs/{run_id}  {run_id, status: queued}
//	  duplicate of a queued/running run   202  {run_id, status, duplicate: true}
//	  duplicate of a completed/failed run 200  {run_id, status, duplicate: true, result | last_error (operators)}
//	  no usable key, bad time, bad name   400  {error}
//	  token missing or invalid · denied   401 · 403
//	  job not in the jobs file            404
//	  body over MaxBody                   413
//	  same key, other payload             422
//	  ledger or Pub/Sub unavailable       503 + Retry-After (a claim already written is kept, due now)
//	GET /v1/runs/{run_id}   the record (never the payload)
//	GET /healthz            the process is up
//	GET /readyz             the ledger and the topic answer
//	GET /metrics            Prometheus
//	GET /v1/openapi.yaml    the API's OpenAPI 3.1 description (OpenAPI)
//
// # Guarantees
//
// Any 2xx answer for a run, new or duplicate, means the run will reach completed or
// failed without the caller doing anything more; a non-2xx answer means a retry is safe
// and needed. A 202 for a new run means the run is durably claimed and its message
// stored by Pub/Sub: the handler waits for the publish result. A claim is never deleted,
// because a concurrent duplicate may already have been answered 202 for it: if the
// publish fails (or the claim call fails after it may have landed), the claim is kept
// and made due now (ledger.Expedite, fenced by the claim's own attempt ID) before the
// 503 is written, so that the scheduler's retry, any other duplicate, or else the
// rescuer republishes it. A new run costs one
// ledger round trip (Claim) and one publish; a duplicate costs one Claim, which writes
// nothing, plus a publish only when its message may have been lost (a queued run past
// its pickup deadline or older than RepublishAfter, or a running run whose lease
// expired; the worker deduplicates). A failed publish costs one more ledger write.
// Nothing is started after the answer is written.
//
// The key (DeriveKey) follows docs/design.md: Cloud Scheduler's job name and strict RFC 3339
// schedule time normalised to UTC, else Idempotency-Key, else the job_key of a body
// declared JSON (Content-Type: application/json); a schedule time further in the future
// than MaxSkew is a forced run and refused. The namespace and the path's job are part
// of every run ID.
//
// A request that can change state (every method but GET, HEAD and OPTIONS) that a
// browser sends from a page of another origin is refused with 403 on every route, and
// an operator's action must declare its JSON body (Content-Type: application/json, else
// 415): a web page can post text/plain or form bodies anywhere without a CORS
// preflight, never JSON. Clients that are not browsers send no Origin and are not
// affected.
//
// Logs carry run_id, job, outcome and the key's source, never the payload; values the
// caller supplied are escaped (cleantext.Clean).
package ingress
