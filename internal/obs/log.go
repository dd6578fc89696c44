package obs

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chainguard-dev/clog/gcp"
)

// NewLogger returns a JSON logger in Cloud Logging's format writing to w at level.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(gcp.NewHandlerForWriter(w, level))
}

// ParseLevel parses debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("obs: log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// MaxCleanLen is the longest value Clean returns before it cuts one (in bytes, before
// escaping).
const MaxCleanLen = 256

// Clean makes a caller-supplied value safe to log or echo: control characters, format
// characters (bidi overrides, zero-width) and invalid UTF-8 are escaped Go-style
// (\n, \x00, \u202e), and a value longer than MaxCleanLen is cut with a marker saying
// how long it was. A value with nothing to escape is returned unchanged.
func Clean(s string) string {
	cut := ""
	if len(s) > MaxCleanLen {
		cut = fmt.Sprintf("…(%d bytes)", len(s))
		s = strings.ToValidUTF8(s[:MaxCleanLen], "")
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
