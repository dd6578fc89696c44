package spannerledger

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/ledgertest"
)

// ddlModel is what a list of DDL statements leaves: the tables' columns and the
// indexes, with their key columns.
type ddlModel struct {
	// columns by "table.column": the column's type, and its generation expression for
	// a generated column.
	columns map[string]column
	// primary keys by table.
	primary map[string][]string
	// indexes by name.
	indexes map[string]index
}

type column struct{ typ, generated string }

type index struct {
	table        string
	nullFiltered bool
	keys         []string // "col" or "col DESC"
}

func (ix index) String() string {
	s := ix.table + "(" + strings.Join(ix.keys, ", ") + ")"
	if ix.nullFiltered {
		s = "NULL_FILTERED " + s
	}
	return s
}

var (
	createTable = regexp.MustCompile(`(?s)^CREATE TABLE (\w+) \((.*)\) PRIMARY KEY ?\(([^)]*)\)`)
	columnDef   = regexp.MustCompile(`^(\w+) ([A-Z0-9()]+|[A-Z]+\(MAX\))(?:.*\bAS \((.*)\) STORED)?`)
	addColumn   = regexp.MustCompile(`^ALTER TABLE (\w+) ADD COLUMN (.*)$`)
	indexDef    = regexp.MustCompile(`^CREATE (?:UNIQUE )?(NULL_FILTERED )?INDEX (\w+) ON (\w+) ?\(([^)]*)\)`)
)

// parseDDL applies stmts, in order, to an empty model. It understands the statements of
// Schema and those GetDatabaseDdl returns for them, and refuses any other.
func parseDDL(stmts []string) (ddlModel, error) {
	m := ddlModel{columns: map[string]column{}, primary: map[string][]string{}, indexes: map[string]index{}}
	addCol := func(table, def string) error {
		c := columnDef.FindStringSubmatch(strings.TrimSpace(def))
		if c == nil {
			return fmt.Errorf("column %q of %s: not understood", def, table)
		}
		m.columns[table+"."+c[1]] = column{typ: c[2], generated: c[3]}
		return nil
	}
	for _, raw := range stmts {
		s := strings.Join(strings.Fields(raw), " ")
		if g := createTable.FindStringSubmatch(s); g != nil {
			depth, start := 0, 0 // split the column list at its top-level commas
			for i, r := range g[2] + "," {
				switch {
				case r == '(':
					depth++
				case r == ')':
					depth--
				case r == ',' && depth == 0:
					if def := strings.TrimSpace(g[2][start:min(i, len(g[2]))]); def != "" {
						if err := addCol(g[1], def); err != nil {
							return m, err
						}
					}
					start = i + 1
				}
			}
			for _, k := range strings.Split(g[3], ",") {
				m.primary[g[1]] = append(m.primary[g[1]], strings.TrimSpace(k))
			}
			continue
		}
		if g := addColumn.FindStringSubmatch(s); g != nil {
			if err := addCol(g[1], g[2]); err != nil {
				return m, err
			}
			continue
		}
		if g := indexDef.FindStringSubmatch(s); g != nil {
			ix := index{table: g[3], nullFiltered: g[1] != ""}
			for _, k := range strings.Split(g[4], ",") {
				ix.keys = append(ix.keys, strings.Join(strings.Fields(strings.Replace(k, " ASC", "", 1)), " "))
			}
			m.indexes[g[2]] = ix
			continue
		}
		if g := dropIndex.FindStringSubmatch(s); g != nil {
			if _, ok := m.indexes[g[1]]; !ok {
				return m, fmt.Errorf("%q drops an index that does not exist", s)
			}
			delete(m.indexes, g[1])
			continue
		}
		return m, fmt.Errorf("statement not understood: %q", s)
	}
	return m, nil
}

// liveIndexes returns the indexes stmts leave, by name, or the parser's error.
func liveIndexes(stmts []string) map[string]string {
	m, err := parseDDL(stmts)
	if err != nil {
		return map[string]string{"parse error": err.Error()}
	}
	out := map[string]string{}
	for name, ix := range m.indexes {
		out[name] = ix.String()
	}
	return out
}

// sequentialColumns are the columns, besides the times, whose values follow the clock
// (a run's attempt ID is a UUIDv7, which starts with its time) or may follow a caller's
// sequence (a run's key, an effect's ref: what its target answered).
var sequentialColumns = []string{"runs.attempt_id", "runs.run_key", "effects.ref"}

// monotonic reports whether the column table.col of m follows the clock or a sequence:
// a time, or one of sequentialColumns.
func monotonic(m ddlModel, table, col string) bool {
	return m.columns[table+"."+col].typ == "TIMESTAMP" || slices.Contains(sequentialColumns, table+"."+col)
}

// hotIndexes returns what is wrong with the indexes of m: an index that leads with a
// time or another monotonic column (every write at the current time lands in one key
// range: the hot spot of https://cloud.google.com/spanner/docs/schema-design), or that
// holds one after a lead Spanner does not compute from the table's primary key (a
// status: a few key ranges take every write, as hot).
func hotIndexes(m ddlModel) []string {
	var out []string
	for name, ix := range m.indexes {
		lead := strings.Fields(ix.keys[0])[0]
		leadCol := m.columns[ix.table+"."+lead]
		if monotonic(m, ix.table, lead) {
			out = append(out, fmt.Sprintf("index %s %s leads with the monotonic column %s", name, ix, lead))
			continue
		}
		hasMonotonic := slices.ContainsFunc(ix.keys, func(k string) bool {
			return monotonic(m, ix.table, strings.Fields(k)[0])
		})
		pk := m.primary[ix.table][0]
		if hasMonotonic && lead != pk && !strings.Contains(leadCol.generated, pk) {
			out = append(out, fmt.Sprintf("index %s %s holds a monotonic column after %s, which is not computed from the primary key %s", name, ix, lead, pk))
		}
	}
	slices.Sort(out)
	return out
}

// TestNoIndexLeadsWithAMonotonicColumn parses Schema and checks every index it leaves
// (hotIndexes), and that the shard column is the run ID's first hex digit.
func TestNoIndexLeadsWithAMonotonicColumn(t *testing.T) {
	m, err := parseDDL(Schema)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.indexes) == 0 {
		t.Fatal("Schema leaves no index: the parser lost them")
	}
	for _, hot := range hotIndexes(m) {
		t.Error(hot)
	}
	for _, c := range sequentialColumns {
		if _, ok := m.columns[c]; !ok {
			t.Errorf("sequentialColumns names %s, which Schema does not have", c)
		}
	}
	shard := m.columns["runs.shard"]
	if !strings.Contains(shard.generated, "SUBSTR(run_id, 1, 1)") || !strings.Contains(shard.generated, "0123456789abcdef") || Shards != 16 {
		t.Errorf("runs.shard = %+v with %d shards: want the run ID's first hex digit, 16 values", shard, Shards)
	}
}

// TestSchemaRefusesAMonotonicIndex: hotIndexes catches an index led by a time, one led
// by the status then a time, one of the first release's, and ones led by (or holding
// after a job) a column that follows a sequence, appended to Schema.
func TestSchemaRefusesAMonotonicIndex(t *testing.T) {
	for _, bad := range []string{
		"CREATE INDEX runs_by_completed ON runs (completed_at DESC)",
		"CREATE INDEX runs_by_status_deadline ON runs (status, deadline)",
		"CREATE INDEX runs_by_expire_at ON runs (expire_at)",
		"CREATE INDEX runs_by_attempt ON runs (attempt_id)",
		"CREATE INDEX effects_by_ref ON effects (ref)",
		"CREATE INDEX runs_by_job_key ON runs (job, run_key)",
	} {
		m, err := parseDDL(append(slices.Clone(Schema), bad))
		if err != nil {
			t.Fatal(err)
		}
		if hot := hotIndexes(m); len(hot) != 1 {
			t.Errorf("%q: hotIndexes = %q, want it named", bad, hot)
		}
	}
}

// TestQueriesUseLiveIndexes: every index the queries force (FORCE_INDEX in this
// package's source, and listIndex for every listing) is one Schema leaves.
func TestQueriesUseLiveIndexes(t *testing.T) {
	live := liveIndexes(Schema)
	var used []string
	for _, f := range []string{"ops.go", "operators.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`FORCE_INDEX=(\w+)`).FindAllStringSubmatch(string(src), -1) {
			used = append(used, m[1])
		}
	}
	now := time.Now()
	for _, p := range []ledger.ListParams{{}, {Status: ledger.StatusQueued}, {Job: "j"}, {Namespace: "n"},
		{UpdatedAfter: now}, {Status: ledger.StatusQueued, UpdatedAfter: now}, {Job: "j", UpdatedAfter: now}} {
		used = append(used, listIndex(&p))
	}
	if len(used) < 5 {
		t.Fatalf("found only %v", used)
	}
	for _, name := range used {
		if _, ok := live[name]; !ok {
			t.Errorf("a query forces the index %s, which Schema does not leave (it has %v)", name, live)
		}
	}
}

// TestMigrationNames holds the files Schema is read from to the numbering of every
// backend's migrations.
func TestMigrationNames(t *testing.T) {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.CheckMigrationNames(t, sub)
}
