package ledgertest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCapacityRowAndTable(t *testing.T) {
	got := map[string]Ops{"new": {1, 1}, "duplicate": {0, 1}, "worker start": {1, 0}, "renewal": {1, 0}, "effect": {2, 0}, "finish": {1, 0}}
	row := capacityRow("SQLite", got)
	if want := "| SQLite | 1 W + 1 R | 1 R | 1 W | 1 W | 2 W | 1 W | 5 W + 1 R |"; row != want {
		t.Fatalf("capacityRow = %s, want %s", row, want)
	}
	if s := (Ops{}).String(); s != "0" {
		t.Fatalf("Ops{}.String() = %q, want 0", s)
	}
	page := filepath.Join(t.TempDir(), "capacity.md")
	text := "# Capacity\n\n| backend | new | duplicate | worker start | renewal | effect | finish | a run (one effect) |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- |\n" +
		"|  SQLite |1 W + 1 R| 1 R | 1 W | 1 W | 2 W | 1 W | 5 W + 1 R |\n" +
		"| Redis | 1 W | 1 R | 1 W | 1 W | 2 W | 1 W | 5 W |\n\n" +
		"| Spanner | not | in | the | table |\n"
	if err := os.WriteFile(page, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := readCapacityTable(page)
	if err != nil {
		t.Fatal(err)
	}
	if rows["SQLite"] != row {
		t.Errorf("the SQLite row read back as %s, want %s", rows["SQLite"], row)
	}
	if _, ok := rows["Spanner"]; ok || len(rows) != 2 {
		t.Errorf("rows = %v, want SQLite and Redis only: the table ends at its first line that is not a row", rows)
	}
	if err := os.WriteFile(page, []byte(strings.Replace(text, "| new |", "| created |", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCapacityTable(page); err == nil || !strings.Contains(err.Error(), "no table") {
		t.Errorf("a page without the table's header: error %v, want one saying there is no table", err)
	}
}
