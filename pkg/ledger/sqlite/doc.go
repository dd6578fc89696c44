// Package sqlite is the embedded, durable ledger backend: the default on one machine. It
// keeps runs and effects in one SQLite file (modernc.org/sqlite, pure Go) in WAL mode, so
// it survives a restart, and several processes on the machine — an ingress and its
// workers — can share the file.
//
// # Guarantees
//
// Every write runs in an immediate (write-locking) transaction: it reads the record,
// applies the state machine of package ledger, and writes the result, so concurrent
// claims of one key, from goroutines or processes, have exactly one winner. Writers in
// one process queue on a mutex, and the writes that queued while one transaction
// committed share the next (group commit): each under its own savepoint, in order,
// answered only once the batch is on disk, so one fsync serves many writes and a
// failed write undoes only itself. Writers in other processes wait on SQLite's busy
// timeout and, if it runs out, get ledger.ErrContended. A duplicate Claim, Get and
// GetEffect are reads outside the write lock.
//
// The backend's clock is the host's: every process sharing the file reads the same clock,
// so leases cannot be judged differently by two of them. A caller-supplied Now replaces
// it, for tests.
//
// Durability: the file is opened with synchronous=FULL, so every commit is on disk
// before it is answered; a Complete survives a power loss before its message is acked,
// and a claim answered 202 survives too. In WAL mode synchronous=NORMAL would sync only
// at checkpoints: about twice the rate of a lone writer (little gain once group commit
// batches many writes), but the last commits may be lost with the
// machine's power (never with a process crash). ?synchronous=normal chooses it.
//
// The schema is embedded and migrated when the file is opened (PRAGMA user_version, in one
// immediate transaction, so two processes opening a new file at once do not race).
// Records past expire_at stay until Sweep deletes them.
//
// URL: sqlite:///absolute/path.db or sqlite:relative/path.db; the query parameter
// busy_timeout (a Go duration, default 10s) bounds the wait for another process's write;
// synchronous (full, the default, or normal) is described above.
package sqlite
