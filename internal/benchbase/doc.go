// Package benchbase holds the baselines runonce's benchmarks compare against: bare
// PostgreSQL and Firestore stores doing a claim's writes without runonce (BarePostgres,
// BareFirestore), a worker's claim and completion as raw SQL (Chain), and a closed-loop
// HTTP poster. It links pgx and Firestore, so only tests import it; the loop itself is
// pkg/benchloop.
package benchbase
