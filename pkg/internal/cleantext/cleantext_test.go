package cleantext_test

import (
	"strings"
	"testing"

	"github.com/runonce/runonce/pkg/internal/cleantext"
)

func TestClean(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain-key:2026":  "plain-key:2026",
		"a\nb":            `a\nb`,
		"a\x00b":          `a\x00b`,
		"bidi\u202eevil":  `bidi\u202eevil`,
		"zero\u200bwidth": `zero\u200bwidth`,
		"bad\xffutf8":     `bad\xffutf8`,
		`back\slash`:      `back\\slash`,
		`"quoted"`:        `"quoted"`,
		"日本":              "日本",
	} {
		if got := cleantext.Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("x", 1000)
	if got := cleantext.Clean(long); !strings.HasSuffix(got, "…(1000 bytes)") || len(got) > cleantext.MaxLen+20 {
		t.Errorf("long value: %q", got)
	}
}
