package driver

import "sync"

// DefaultKnownRuns is how many run IDs a KnownRuns remembers when its size is not given.
const DefaultKnownRuns = 4096

// KnownRuns remembers, within one process, the IDs of runs the backend has seen exist: the
// ones it created and the ones a claim found already there. A backend whose new-run
// claim is one blind create (Firestore, Spanner) asks it which way to claim: a run known
// to exist is read first, so that duplicates of a hot run cost one read each instead of a
// rejected write (which takes the row's write lock on Spanner and serialises every
// duplicate of it) and a read. A hint only: a run swept since is not found by the read and
// the claim creates it as usual. It holds at most its size of IDs, the oldest forgotten
// first. The zero value is not usable; NewKnownRuns makes one. It is safe for concurrent
// use.
type KnownRuns struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	ring []string
	next int
}

// NewKnownRuns returns a KnownRuns of size IDs (DefaultKnownRuns when size <= 0).
func NewKnownRuns(size int) *KnownRuns {
	if size <= 0 {
		size = DefaultKnownRuns
	}
	return &KnownRuns{ids: make(map[string]struct{}, size), ring: make([]string, size)}
}

// Has reports whether run id was seen to exist and is still remembered.
func (k *KnownRuns) Has(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.ids[id]
	return ok
}

// Add remembers run id, forgetting the oldest remembered ID when full.
func (k *KnownRuns) Add(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.ids[id]; ok {
		return
	}
	if old := k.ring[k.next]; old != "" {
		delete(k.ids, old)
	}
	k.ring[k.next] = id
	k.ids[id] = struct{}{}
	k.next = (k.next + 1) % len(k.ring)
}

// Forget drops run id (a read found it gone).
func (k *KnownRuns) Forget(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.ids, id)
}
