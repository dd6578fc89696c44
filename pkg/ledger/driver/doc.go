// Package driver is the kit for ledger backends: the run state machine as pure
// functions over records (the Apply functions), and Transitions, which implements the
// fenced transitions of ledger.Driver once for every backend that can read a record and
// write it back atomically (a Store). A backend checks no parameters: ledger.Ledger
// checks them before it calls the driver, and the functions here take them as sound.
//
// Users of runonce never import it: they use package ledger's Ledger and Open. A backend author imports it, implements Store (or expresses the same rules in
// its own query language, as postgres and redis do), and proves the result with
// ledgertest, the conformance suite. docs/design.md describes the state machine these
// functions implement.
package driver
