// Package docs_test checks the repository's Markdown documents against the repository:
// every path they name exists, and every link into a document finds its heading.
package docs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// modulePath is the root module's import path: a code span naming one of its packages
// names a directory of the repository.
const modulePath = "github.com/runonce/runonce/"

var (
	// fence is a fenced code block; its text names no path this test reads.
	fence = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[ \t]*$")
	// link is a Markdown link or image: its target.
	link = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// codeSpan is an inline code span.
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	// pathLike is a relative path: words of file-name characters separated by slashes.
	pathLike = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`)
	// fileExt ends a file name a document may name without its directory.
	fileExt = regexp.MustCompile(`\.(md|go|sh|sql|lua|tf|json|yaml|yml|png)$`)
	// heading is a Markdown ATX heading.
	heading = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
)

// root is the repository's top directory.
func root(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		abs, err := filepath.Abs("..")
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	return strings.TrimSpace(string(out))
}

// documents are the repository's Markdown files a user or contributor reads.
func documents(t *testing.T, top string) []string {
	t.Helper()
	docs := []string{"README.md", "BENCHMARKS.md", "CHANGELOG.md", "deploy/README.md", "loadtest/README.md"}
	more, err := filepath.Glob(filepath.Join(top, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(top, m)
		docs = append(docs, filepath.ToSlash(rel))
	}
	return docs
}

// slugs are the anchors GitHub gives the headings of a Markdown document.
func slugs(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(doc, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f && isLetter(r):
				b.WriteRune(r)
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// isLetter reports whether a non-ASCII rune stays in a GitHub anchor (letters do,
// punctuation such as "—" and "…" does not).
func isLetter(r rune) bool {
	return !strings.ContainsRune("—–…’‘“”×→←·", r)
}

// TestDocumentedPathsExist: every repository path that the README, the guides in docs/,
// BENCHMARKS.md, CHANGELOG.md and the other READMEs name exists: the targets of their
// links (relative to the document), with the heading an anchor names, and the code spans
// that look like a path of the repository (a first directory the repository has, a file
// with an extension, `./cmd/…` in a command, or a package of the module). A file moved
// or renamed without its pointers fails here.
func TestDocumentedPathsExist(t *testing.T) {
	top := root(t)
	entries, err := os.ReadDir(top)
	if err != nil {
		t.Fatal(err)
	}
	topLevel := map[string]bool{}
	for _, e := range entries {
		topLevel[e.Name()] = true
	}
	// names are the base names of the repository's files: a document may name a file
	// without its directory (`run.tf`).
	names := map[string]bool{}
	files, err := exec.Command("git", "-C", top, "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Fields(string(files)) {
		names[path.Base(f)] = true
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		anchors[file] = slugs(string(b))
		return anchors[file]
	}
	exists := func(p string) bool {
		_, err := os.Stat(p)
		return err == nil
	}
	checked := 0
	for _, doc := range documents(t, top) {
		raw, err := os.ReadFile(filepath.Join(top, doc))
		if err != nil {
			t.Fatal(err)
		}
		text := fence.ReplaceAllStringFunc(string(raw), func(block string) string {
			return strings.Repeat("\n", strings.Count(block, "\n")) // keep the line numbers
		})
		dir := path.Dir(doc)
		line := func(offset int) int { return strings.Count(text[:offset], "\n") + 1 }
		for _, m := range link.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			full := filepath.Join(top, doc)
			if file != "" {
				full = filepath.Join(top, dir, file)
			}
			checked++
			if !exists(full) {
				t.Errorf("%s:%d: the link %s names %s, which does not exist", doc, line(m[2]), target, path.Join(dir, file))
				continue
			}
			if anchor != "" && strings.HasSuffix(full, ".md") && !anchorsOf(full)[anchor] {
				t.Errorf("%s:%d: the link %s names the anchor #%s, which no heading of %s has", doc, line(m[2]), target, anchor, file)
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatchIndex(text, -1) {
			span := text[m[2]:m[3]]
			var candidates []string
			if p, ok := strings.CutPrefix(span, modulePath); ok {
				candidates = append(candidates, p)
			} else if pathLike.MatchString(strings.TrimSuffix(span, "/")) {
				p := strings.TrimSuffix(span, "/")
				first, _, nested := strings.Cut(p, "/")
				if nested && topLevel[first] || fileExt.MatchString(p) && !strings.HasPrefix(p, ".") {
					candidates = append(candidates, p)
				}
			} else {
				for _, w := range strings.Fields(span) {
					if p, ok := strings.CutPrefix(w, "./"); ok && strings.Contains(p, "/") || ok && topLevel[p] {
						p = strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
						if pathLike.MatchString(p) {
							candidates = append(candidates, p)
						}
					}
				}
			}
			for _, p := range candidates {
				checked++
				if !exists(filepath.Join(top, p)) && !exists(filepath.Join(top, dir, p)) && !(!strings.Contains(p, "/") && names[p]) {
					t.Errorf("%s:%d: `%s` names %s, which does not exist", doc, line(m[2]), span, p)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d paths in the documents; the parser lost some", checked)
	}
}
