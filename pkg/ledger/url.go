package ledger

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Opener opens a backend's driver from a URL whose scheme it was registered for.
type Opener interface {
	OpenLedgerURL(ctx context.Context, u *url.URL) (Driver, error)
}

// OpenerFunc adapts a function to Opener.
type OpenerFunc func(ctx context.Context, u *url.URL) (Driver, error)

// OpenLedgerURL calls f.
func (f OpenerFunc) OpenLedgerURL(ctx context.Context, u *url.URL) (Driver, error) {
	return f(ctx, u)
}

// URLMux maps URL schemes to openers. The zero value is ready to use.
type URLMux struct {
	mu      sync.RWMutex
	openers map[string]Opener
}

// Register makes scheme open with o. It panics if scheme is registered twice or o is nil.
func (m *URLMux) Register(scheme string, o Opener) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o == nil {
		panic("ledger: Register of a nil opener for " + scheme)
	}
	if _, dup := m.openers[scheme]; dup {
		panic("ledger: Register called twice for scheme " + scheme)
	}
	if m.openers == nil {
		m.openers = make(map[string]Opener)
	}
	m.openers[scheme] = o
}

// Schemes lists the registered schemes, sorted.
func (m *URLMux) Schemes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.openers))
	for s := range m.openers {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open opens the ledger rawURL names, with the default Options (New).
func (m *URLMux) Open(ctx context.Context, rawURL string) (*Ledger, error) {
	d, err := m.OpenDriver(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	return New(d, nil), nil
}

// OpenDriver opens the driver of the backend rawURL names, for New with Options of the
// caller's.
func (m *URLMux) OpenDriver(ctx context.Context, rawURL string) (Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("ledger: malformed URL %q: %w (known schemes: %s)", rawURL, err, m.known())
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("ledger: URL %q has no scheme (known schemes: %s)", rawURL, m.known())
	}
	m.mu.RLock()
	o, ok := m.openers[u.Scheme]
	m.mu.RUnlock()
	if !ok {
		if pkg := BackendPackage(u.Scheme); pkg != "" {
			return nil, fmt.Errorf("ledger: unknown scheme %q in URL %q: this program does not link its backend; add import _ %q (registered schemes: %s)",
				u.Scheme, Redact(rawURL), pkg, m.known())
		}
		return nil, fmt.Errorf("ledger: unknown scheme %q in URL %q (registered schemes: %s; runonce's backends: %s)", u.Scheme, Redact(rawURL), m.known(), shipped)
	}
	l, err := o.OpenLedgerURL(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", u.Redacted(), err)
	}
	return l, nil
}

func (m *URLMux) known() string {
	s := m.Schemes()
	if len(s) == 0 {
		return "none: import a backend package"
	}
	return strings.Join(s, ", ")
}

// shipped lists runonce's backends, for the error of a scheme none of them registers.
const shipped = "sqlite, postgres, firestore, spanner, redis, memory (each registered by importing its package under github.com/runonce/runonce/pkg/ledger/)"

// BackendPackage returns the import path of the runonce package that registers scheme
// when imported (for its side effect: import _ "…"), or "" for a scheme runonce ships no
// backend for.
func BackendPackage(scheme string) string {
	const base = "github.com/runonce/runonce/pkg/ledger/"
	switch scheme {
	case "sqlite":
		return base + "sqlite"
	case "postgres", "postgresql":
		return base + "postgres"
	case "firestore":
		return base + "firestoreledger"
	case "spanner":
		return base + "spannerledger"
	case "redis", "rediss":
		return base + "redisledger"
	case "memory":
		return base + "memory"
	}
	return ""
}

// Redact returns a ledger URL with any password replaced, for logs and banners.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

var defaultMux URLMux

// DefaultURLMux is the mux Register and Open use; backends register on it in init.
func DefaultURLMux() *URLMux { return &defaultMux }

// Register registers o for scheme on the default mux.
func Register(scheme string, o Opener) { defaultMux.Register(scheme, o) }

// Open opens a ledger by URL with the default mux and the default Options (New): the
// backend package must be linked in (import _ "github.com/runonce/runonce/pkg/ledger/sqlite").
func Open(ctx context.Context, rawURL string) (*Ledger, error) { return defaultMux.Open(ctx, rawURL) }

// OpenDriver opens a backend's driver by URL with the default mux, for New.
func OpenDriver(ctx context.Context, rawURL string) (Driver, error) {
	return defaultMux.OpenDriver(ctx, rawURL)
}
