// Package memory is an in-process ledger backend: real, complete and fast, for tests and
// for single-process use. It passes the ledgertest conformance suite like every backend;
// records live as long as the process.
//
// Opening memory://NAME twice in one process returns the same store, so an ingress and a
// worker in one process (or one test) share state. Its clock is the process's, which for
// an in-process store is the backend's clock; a caller-supplied Now replaces it.
package memory
