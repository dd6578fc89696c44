// Package driver is the kit for ledger backends: the run state machine as pure
// functions over records (the Apply functions), the checks every backend makes before a
// transition (the Validate functions), and Transitions, which implements the fenced
// transitions of ledger.Driver once for every backend that can read a record and write
// it back atomically (a Store).
//
// Users of runonce never import it: they use package ledger's Ledger interface and
// Open. A backend author imports it, implements Store (or expresses the same rules in
// its own query language, as postgres and redis do), and proves the result with
// ledgertest, the conformance suite. docs/design.md describes the state machine these
// functions implement.
package driver
