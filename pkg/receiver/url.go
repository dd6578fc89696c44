package receiver

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Opener opens a store from a URL whose scheme it was registered for.
type Opener interface {
	OpenStoreURL(ctx context.Context, u *url.URL) (Store, error)
}

// OpenerFunc adapts a function to Opener.
type OpenerFunc func(ctx context.Context, u *url.URL) (Store, error)

// OpenStoreURL calls f.
func (f OpenerFunc) OpenStoreURL(ctx context.Context, u *url.URL) (Store, error) { return f(ctx, u) }

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
		panic("receiver: Register of a nil opener for " + scheme)
	}
	if _, dup := m.openers[scheme]; dup {
		panic("receiver: Register called twice for scheme " + scheme)
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

// Open opens the store rawURL names.
func (m *URLMux) Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("receiver: malformed store URL: %w (known schemes: %s)", err, m.known())
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("receiver: store URL %q has no scheme (known schemes: %s)", u.Redacted(), m.known())
	}
	m.mu.RLock()
	o, ok := m.openers[u.Scheme]
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("receiver: unknown scheme %q in store URL %q (known schemes: %s)", u.Scheme, u.Redacted(), m.known())
	}
	s, err := o.OpenStoreURL(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("receiver: open %s: %w", u.Redacted(), err)
	}
	return s, nil
}

func (m *URLMux) known() string {
	s := m.Schemes()
	if len(s) == 0 {
		return "none registered: import a store package"
	}
	return strings.Join(s, ", ")
}

var defaultMux URLMux

// DefaultURLMux is the mux Register and Open use; stores register on it in init.
func DefaultURLMux() *URLMux { return &defaultMux }

// Register registers o for scheme on the default mux.
func Register(scheme string, o Opener) { defaultMux.Register(scheme, o) }

// Open opens a store by URL with the default mux; the store's package must be linked in
// (import _ "github.com/runonce/runonce/pkg/receiver/sqlite").
func Open(ctx context.Context, rawURL string) (Store, error) { return defaultMux.Open(ctx, rawURL) }

// CheckQuery returns an error naming the first query parameter of u not in known, or
// given more than once: a misspelt parameter is refused rather than ignored.
func CheckQuery(u *url.URL, known ...string) error {
	for k, v := range u.Query() {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return fmt.Errorf("unknown query parameter %q: this store takes none", k)
			}
			return fmt.Errorf("unknown query parameter %q (known: %s)", k, strings.Join(known, ", "))
		}
		if len(v) > 1 {
			return fmt.Errorf("query parameter %q given %d times", k, len(v))
		}
	}
	return nil
}
