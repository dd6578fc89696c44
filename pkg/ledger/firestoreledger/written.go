package firestoreledger

import (
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// defaultWritten is how many runs a ledger remembers its last write of.
const defaultWritten = 4096

// written remembers, within one process, the runs this ledger wrote last: each run's
// record as written and the update time Firestore gave that write. A holder's next
// fenced write of such a run (a renewal, its completion, release or failure) is decided
// on that record and written with that update time as its precondition, with no read
// first: if the precondition holds, nobody has written the document since, so the
// record is the document and the decision is the one a read would have led to; if it
// fails, the write is read, decided and made again as usual. It holds at most its size
// of runs, the oldest forgotten first. It is safe for concurrent use.
type written struct {
	mu   sync.Mutex
	runs map[string]lastWrite
	ring []string
	next int
}

// lastWrite is a run as this ledger last wrote it.
type lastWrite struct {
	run *ledger.Run
	at  time.Time // the write's update time
}

func newWritten(size int) *written {
	return &written{runs: make(map[string]lastWrite, size), ring: make([]string, size)}
}

// put remembers r, written at update time at.
func (w *written) put(r *ledger.Run, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.runs[r.ID]; !ok {
		if old := w.ring[w.next]; old != "" {
			delete(w.runs, old)
		}
		w.ring[w.next] = r.ID
		w.next = (w.next + 1) % len(w.ring)
	}
	w.runs[r.ID] = lastWrite{run: r.Clone(), at: at}
}

// take returns the last write of run id and forgets it: a write decided on it either
// succeeds and is remembered in its place, or finds the document changed.
func (w *written) take(id string) (lastWrite, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lw, ok := w.runs[id]
	if ok {
		delete(w.runs, id) // its ring slot stays: coming round, it may evict a newer put early, a miss
	}
	return lw, ok
}

// forget drops run id, whose document this ledger changed some other way.
func (w *written) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.runs, id)
}
