// Package receiver makes a downstream HTTP service idempotent: a net/http middleware
// that executes each request with an Idempotency-Key at most once per key and scope,
// stores its response and replays it to every later request with the key, and refuses
// the requests of a runonce run's superseded attempts.
//
// runonce's worker sends every call of an HTTP target, and worker.Effect's key, as
// Idempotency-Key (the same on every attempt of the run), with X-Runonce-Run-Id and
// X-Runonce-Attempt. A service wraps its handlers:
//
//	store, _ := sqlite.Open(ctx, "/var/lib/payments/receiver.db", nil) // or postgres, redisreceiver, …
//	rc, _ := receiver.New(store, &receiver.Options{
//		TrustRunHeaders: func(r *http.Request) bool { return authenticatedAsTheWorker(r) },
//	})
//	mux.Handle("POST /charges", rc.Wrap(http.HandlerFunc(charge)))
//
// # The Idempotency-Key draft
//
// The receiver follows the IETF draft "The Idempotency-Key HTTP Header Field",
// draft-ietf-httpapi-idempotency-key-header-06: the key is a Structured Field String
// (the bare token runonce sends is accepted too); the first request with a key is
// executed; a request with a key whose request completed gets that response, success or
// error, marked "Idempotent-Replayed: true"; one that arrives while the first is in
// flight gets 409 Conflict, with Retry-After; the key with another request body (or
// query) gets 422; a request without a key gets 400 (unless Options.KeyOptional). Errors
// are RFC 9457 problem details (application/problem+json) whose type names a section of
// docs/receiver.md, also given as a Link (rel="describedby"). A key is scoped by the
// method, the path and the tenant (Options.Tenant: the authenticated caller), and
// counts for Options.Retention (14 days by default) after its last write, the expiry
// policy the draft asks a resource to publish.
//
// # What is stored
//
// The status, the headers of Options.StoreHeaders and the body up to
// Options.MaxResponseBody (a longer body is replayed empty, marked
// Idempotent-Body-Omitted). By default every final status below 500 is stored except
// 401, 403, 408, 425 and 429; a 5xx says the handler failed, and the key is released for
// a retry to execute (Options.StoreStatus changes this). A handler that answers 5xx after
// it took its effect will therefore take it again on the retry: answer what happened.
//
// # Crashes and timeouts
//
// A claimed key is in flight under a lease (Options.Lease, 30s), renewed every third of
// it while the handler runs. A handler that panics releases its key at once; one whose
// process dies leaves it in flight until the lease passes, and the first request after
// that executes again. Neither is ever replayed as a success. A handler that outlives
// Options.MaxHandlerTime (10m) has its context cancelled (ErrHandlerTimeout) and its
// lease is no longer renewed; one whose renewals fail for most of a lease has its context
// cancelled (ErrLeaseLost), since another request may take the key over, and if one
// does, the late handler's response is refused by the store. A client that goes away
// does not cancel the handler: its retry gets the stored response.
//
// # Fencing runonce's attempts
//
// With Options.TrustRunHeaders, the store remembers the highest attempt of each run that
// reached the service, atomically with each claim, and answers a request of an older
// attempt 409 (problem "stale-attempt", naming the newer attempt, without Retry-After,
// so that runonce's worker fails that attempt rather than retrying it), whatever its
// key. A worker paused past its lease, whose run a newer attempt took over, thus cannot
// act downstream after its successor reached the service.
//
// What it does not guarantee: the headers are only as trustworthy as the caller's
// authentication, so TrustRunHeaders must return true only for a request your
// authentication admitted as the runonce worker (an unauthenticated caller could fence a
// run's real attempts out, or pass as any attempt); with nil, the headers are ignored. The
// fence orders requests as they reach the store: an older attempt's request that arrived
// first is executed, and its handler may still finish (and its response be stored) after
// the newer attempt arrived; it refuses the superseded attempt's next request, not work
// already started. It knows only the attempts that reached this service, and forgets a
// run after Options.Retention.
//
// # Stores
//
// A Store keeps the records. Each implementation is a subpackage that links only its own
// client library, passes the conformance suite receivertest against its real backend,
// and registers a URL scheme for Open once imported (memory:// for tests). A replay
// costs the store one read; a new key one write before the handler and one after it.
// docs/receiver.md lists the stores.
package receiver
