// Package logonce tells the first time a key is seen, so that what a process may be
// told again and again for as long as a condition lasts is logged once per key (a job,
// a run's attempt), and the repeats at debug level.
package logonce

import "sync"

// maxKeys bounds the keys a Set remembers.
const maxKeys = 4096

// Set remembers the keys it has seen, at most 4096 of them; when full it forgets them
// all, and each is logged again, once. The zero value is ready to use, and safe for
// concurrent use.
type Set struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// First reports whether key is new.
func (o *Set) First(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[key]; ok {
		return false
	}
	if o.seen == nil || len(o.seen) >= maxKeys {
		o.seen = make(map[string]struct{})
	}
	o.seen[key] = struct{}{}
	return true
}
