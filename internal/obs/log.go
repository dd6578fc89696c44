package obs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/chainguard-dev/clog/gcp"
	"golang.org/x/term"
)

// NewLogger returns a JSON logger in Cloud Logging's format writing to w at level.
// Durations are logged as Go duration strings ("30s"), not nanoseconds.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(durationStrings{gcp.NewHandlerForWriter(w, level)})
}

// NewTextLogger returns a logger for a person at a terminal: one line of key=value
// text per record, with the time of day, the level, and durations as strings; no
// source locations.
func NewTextLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			switch {
			case len(groups) == 0 && a.Key == slog.TimeKey:
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			case a.Value.Kind() == slog.KindDuration:
				return slog.String(a.Key, a.Value.Duration().String())
			}
			return a
		},
	}))
}

// IsTerminal reports whether w is a terminal (a person is reading it).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// durationStrings is a handler that logs durations as strings ("30s") before passing
// records on: Cloud Logging and people read "30s", not 30000000000.
type durationStrings struct{ next slog.Handler }

func (h durationStrings) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h durationStrings) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(stringDurations(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h durationStrings) WithAttrs(as []slog.Attr) slog.Handler {
	conv := make([]slog.Attr, len(as))
	for i, a := range as {
		conv[i] = stringDurations(a)
	}
	return durationStrings{h.next.WithAttrs(conv)}
}

func (h durationStrings) WithGroup(name string) slog.Handler {
	return durationStrings{h.next.WithGroup(name)}
}

func stringDurations(a slog.Attr) slog.Attr {
	a.Value = a.Value.Resolve()
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case slog.KindGroup:
		g := a.Value.Group()
		conv := make([]slog.Attr, len(g))
		for i, ga := range g {
			conv[i] = stringDurations(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(conv...)}
	case slog.KindAny:
		if d, ok := a.Value.Any().(time.Duration); ok {
			return slog.String(a.Key, d.String())
		}
	}
	return a
}

// ParseLevel parses debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("obs: log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
