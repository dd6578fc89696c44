package driver

import (
	"fmt"
	"sync"
	"testing"
)

func TestKnownRunsForgetsTheOldest(t *testing.T) {
	k := NewKnownRuns(2)
	k.Add("a")
	k.Add("b")
	k.Add("a") // already known: no slot taken
	if !k.Has("a") || !k.Has("b") {
		t.Fatal("a and b should be known")
	}
	k.Add("c")
	if k.Has("a") || !k.Has("b") || !k.Has("c") {
		t.Fatalf("after c: a %v b %v c %v, want false true true", k.Has("a"), k.Has("b"), k.Has("c"))
	}
	k.Forget("b")
	if k.Has("b") {
		t.Fatal("b forgotten, still known")
	}
}

func TestKnownRunsConcurrent(t *testing.T) {
	k := NewKnownRuns(16)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				id := fmt.Sprint(g, "-", i%32)
				k.Add(id)
				k.Has(id)
				if i%7 == 0 {
					k.Forget(id)
				}
			}
		}()
	}
	wg.Wait()
	if n := len(k.ids); n > 16 {
		t.Fatalf("%d IDs remembered, want at most 16", n)
	}
}
