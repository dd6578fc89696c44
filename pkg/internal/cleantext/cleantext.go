// Package cleantext makes caller-supplied text safe to log or echo. It imports nothing
// of runonce's, so that any package may use it without linking what internal/obs links
// (the OpenTelemetry SDK, its exporters, Prometheus).
package cleantext

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLen is the longest value Clean returns before it cuts one (in bytes, before
// escaping).
const MaxLen = 256

// Clean makes a caller-supplied value safe to log or echo: control characters, format
// characters (bidi overrides, zero-width) and invalid UTF-8 are escaped Go-style
// (\n, \x00, \u202e), and a value longer than MaxLen is cut with a marker saying how
// long it was. A value with nothing to escape is returned unchanged.
func Clean(s string) string {
	cut := ""
	if len(s) > MaxLen {
		cut = fmt.Sprintf("…(%d bytes)", len(s))
		s = strings.ToValidUTF8(s[:MaxLen], "")
	}
	if !needsEscape(s) {
		return s + cut
	}
	q := strconv.QuoteToGraphic(s)
	q = q[1 : len(q)-1] // drop the quotes; keep the escapes
	q = strings.ReplaceAll(q, `\"`, `"`)
	return q + cut
}

func needsEscape(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r == '\\' || !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r) {
			return true
		}
	}
	return false
}
