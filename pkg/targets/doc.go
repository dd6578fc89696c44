// Package targets runs jobs whose target is a Google Cloud API rather than a URL:
// a Workflows execution (workflowexecutions.googleapis.com), a Cloud Run job
// (run.googleapis.com v2 jobs.run) or a Cloud Build trigger (cloudbuild.googleapis.com
// triggers.run). These APIs ignore a scheduler's headers and start a new execution on
// every retry; a Target starts one per run.
//
// # Once
//
// Starting the execution is the run's effect (worker.StartEffect): its key is recorded
// in the ledger before the call, and the execution's name with it after the call, so a
// later attempt (a retry, a redelivery, a worker shut down mid-wait) follows the
// recorded execution instead of starting another. The window between the API accepting
// the call and the record (an answer lost to a crash or behind an error) is closed per
// kind:
//
//   - Workflows: every execution is labelled LabelEffect = the start's effect key, and an
//     attempt that finds the start begun and not recorded lists the workflow's
//     executions by that label before it creates one: once.
//   - Cloud Run jobs and Cloud Build triggers: jobs.run takes no labels and
//     executions.list no filter; triggers.run sets no build tags and builds cannot be
//     filtered by substitution. Such a start is looked for among the latest executions
//     (by the EnvIdempotencyKey override in their template) or the trigger's latest
//     builds (by the SubstIdempotencyKey substitution) and followed when found; when none
//     is found, nothing proves none was started, so it is not repeated: the run fails,
//     naming the key to look for (at most once).
//
// The fencing window (an attempt taken over while its call is on its way; none of the
// APIs takes a request ID) is narrowed: the attempt confirms its fence with the ledger
// (worker.ConfirmFence) immediately before the call, does not abandon a call it sent,
// and after every start lists the executions carrying the key, keeps the oldest (the one
// the run follows) and cancels the newer ones. What remains per kind is in docs/targets.md.
//
// Only an answer that proves the API refused the call before it reached the service is
// recorded as not started (worker.NotStarted), so that the next attempt starts afresh:
// PERMISSION_DENIED, UNAUTHENTICATED, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
// OUT_OF_RANGE, and a RESOURCE_EXHAUSTED carrying Service Infrastructure's quota
// ErrorInfo (domain googleapis.com, reason RATE_LIMIT_EXCEEDED or
// RESOURCE_QUOTA_EXCEEDED). Every other answer (UNAVAILABLE, DEADLINE_EXCEEDED,
// INTERNAL, UNKNOWN, ABORTED, another RESOURCE_EXHAUSTED, a transport error, no answer)
// may come after the execution started: the start stays begun and the next attempt
// looks it up before any new start.
//
// A look-up that fails leaves the start uncertain, never "not started": the attempt
// retries it (Options.LookupRetries, exponential backoff) and then releases the run;
// once Options.MaxUncertain has passed since the start was begun, or the run's attempts
// are exhausted, the run fails, as it does at once where the API cannot prove there is
// no execution. The failed run's error says what to look for and how an operator
// resolves the start (worker.StartEffect): `runonce runs resolve RUN_ID --effect NAME
// --done --ref EXECUTION` if it exists, `--not-done` to start it.
//
// # Identity
//
// The run's Identity reaches the execution in the form its API carries: the Workflows
// argument's ArgumentField, the Cloud Run containers' environment (EnvIdempotencyKey,
// …), the build's substitutions (SubstIdempotencyKey, …). Its IdempotencyKey is
// worker.IdempotencyKey: stable across every attempt of the run.
//
// # Waiting
//
// With Wait, the handler polls the execution every PollInterval while the worker holds
// the run's lease, and the execution's end decides the run: success completes it; a
// failed or cancelled execution fails it; a Workflows execution whose data is
// UNAVAILABLE releases it for a retry that looks again. Errors of a poll that Google
// APIs answer for transient conditions are polled through.
//
// # Clients
//
// New builds the official clients (gRPC) with Application Default Credentials — an
// OAuth access token, not an ID token. A target's endpoint overrides the API's ("HOST:PORT"
// over TLS); "http://127.0.0.1:PORT" dials a plaintext loopback endpoint without
// credentials (option.WithGRPCConn, option.WithoutAuthentication), which is how the
// tests reach the fakes of package targetstest.
package targets
