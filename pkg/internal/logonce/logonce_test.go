package logonce

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestFirstOncePerKey: of many concurrent callers with one key, exactly one is first;
// another key is first again; once the set is full it forgets, and a key it knew is
// first once more.
func TestFirstOncePerKey(t *testing.T) {
	t.Parallel()
	var s Set
	var firsts atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			if s.First("job") {
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	if firsts.Load() != 1 || !s.First("other") || s.First("other") {
		t.Fatalf("%d of 64 callers were first for one key; want 1, and another key first once", firsts.Load())
	}
	for i := range maxKeys {
		s.First(strconv.Itoa(i))
	}
	if !s.First("job") {
		t.Fatal("a full set still remembers its first key: it must forget, bounded")
	}
}
