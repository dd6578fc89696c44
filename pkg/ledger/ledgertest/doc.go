// Package ledgertest is the conformance suite every ledger backend passes against a real
// instance. A backend's own test calls Run with a Harness that gives each test a fresh,
// isolated ledger; Benchmark measures the same operations the same way for every backend.
//
// Only _test.go files import this package.
package ledgertest
