package jobs

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestConfigurationReferenceNamesEveryField: the jobs file's table in
// docs/configuration.md has a row for every field Parse reads, and no row for a field
// it does not.
func TestConfigurationReferenceNamesEveryField(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## The jobs file\n")
	if !ok {
		t.Fatal(`docs/configuration.md has no "## The jobs file" section`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	var fields []string
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for f := range typ.Fields() {
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, name)
		}
	}
	walk(reflect.TypeFor[jobJSON]())
	slices.Sort(documented)
	slices.Sort(fields)
	if !slices.Equal(documented, fields) {
		t.Errorf("docs/configuration.md's jobs file table names %v; the jobs file's fields are %v", documented, fields)
	}
}

// TestDocumentedJobsFilesParse: every jobs file the README and the guides in docs/ show
// (a json block with a "jobs" key) is one Parse accepts.
func TestDocumentedJobsFilesParse(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?ms)^[ \t]*```json\n(.*?)^[ \t]*```")
	found := 0
	for _, doc := range append([]string{filepath.Join("..", "..", "README.md")}, docs...) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllStringSubmatch(string(raw), -1) {
			if !strings.Contains(m[1], `"jobs"`) {
				continue
			}
			found++
			if _, err := Parse(strings.NewReader(m[1])); err != nil {
				t.Errorf("%s shows a jobs file Parse refuses: %v\n%s", doc, err, m[1])
			}
		}
	}
	if found < 4 {
		t.Fatalf("found %d jobs files in the README and docs/; the parser lost some", found)
	}
}
