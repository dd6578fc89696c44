package worker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/worker"
)

// The batch the child workers run for the job "batch" (process_test.go).
const (
	processBatch      = "items"
	processBatchSize  = 2000
	processCheckpoint = 100
)

func processBatchItems() []string { return itemIDs(processBatchSize) }

// TestProcessKilledMidBatchResumes: a worker process is SIGKILLed in the middle of a
// batch of 2,000 items; the worker that takes the run over does only what was left
// (the items of the groups the killed one had not recorded done), every item's effect
// reaches the downstream under one key, its own, and the run completes.
func TestProcessKilledMidBatchResumes(t *testing.T) {
	t.Parallel()
	c := newCluster(t, time.Second, time.Second)
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() { // the sink reports every call; nothing else reads them here
		defer close(drained)
		for {
			select {
			case <-c.sink.arrived:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-drained })

	a := c.start()
	id := c.submit("batch", "kill-mid-batch")
	apid := fmt.Sprint(a.cmd.Process.Pid)
	itemCalls := func(pid string) map[string][]string { // item → keys, in call order
		out := map[string][]string{}
		c.sink.mu.Lock()
		defer c.sink.mu.Unlock()
		for _, call := range c.sink.calls {
			if item, ok := strings.CutPrefix(call.Path, "/item/"); ok && (pid == "" || call.Pid == pid) {
				out[item] = append(out[item], call.Key)
			}
		}
		return out
	}
	for deadline := time.Now().Add(60 * time.Second); len(itemCalls(apid)) < processBatchSize/3; {
		if time.Now().After(deadline) {
			t.Fatalf("the first worker called %d items within 60s; want a third of %d", len(itemCalls(apid)), processBatchSize)
		}
		time.Sleep(time.Millisecond)
	}
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, no release
		t.Fatal(err)
	}
	<-a.done
	byA := itemCalls(apid)
	if len(byA) >= processBatchSize {
		t.Fatalf("the first worker called all %d items before the kill; the test wants it mid-batch", len(byA))
	}

	// What the killed worker left: the groups it recorded done, read from the ledger.
	ids := processBatchItems()
	doneGroup := map[int]bool{}
	for g := 0; g*processCheckpoint < len(ids); g++ {
		e, err := c.led.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: id, Name: worker.CheckpointName(processBatch, g, ids[g*processCheckpoint:(g+1)*processCheckpoint])})
		doneGroup[g] = err == nil && e.Status == ledger.EffectDone
	}
	if n := len(doneGroup); n == 0 {
		t.Fatal("no groups")
	}

	b := c.start()
	r := c.waitCompleted(id, 60*time.Second)
	if r.Attempt < 2 {
		t.Fatalf("completed at attempt %d; want a takeover", r.Attempt)
	}
	byB, all := itemCalls(fmt.Sprint(b.cmd.Process.Pid)), itemCalls("")
	done := 0
	for i, item := range ids {
		want := worker.BatchItemKey(id, processBatch, item)
		keys := all[item]
		if len(keys) == 0 {
			t.Fatalf("item %s never reached the downstream", item)
		}
		for _, k := range keys {
			if k != want {
				t.Fatalf("item %s reached the downstream under keys %v; want only its own, %s", item, keys, want)
			}
		}
		_, again := byB[item]
		switch g := i / processCheckpoint; {
		case doneGroup[g] && (again || len(keys) != 1):
			t.Fatalf("item %s of group %d, recorded done by the killed worker, was called %d times, again by the second: %v", item, g, len(keys), again)
		case !doneGroup[g] && !again:
			t.Fatalf("item %s of group %d, left open by the killed worker, was not done by the second", item, g)
		}
		if doneGroup[i/processCheckpoint] {
			done++
		}
	}
	if done == 0 {
		t.Fatalf("the killed worker recorded no group done after %d items; the test wants a resumed batch", len(byA))
	}
	if len(byB) != len(ids)-done {
		t.Fatalf("the second worker did %d items; want exactly the %d left", len(byB), len(ids)-done)
	}
	t.Logf("killed after %d items called, %d recorded done; the second attempt did the %d left", len(byA), done, len(byB))
	if string(r.Progress) != fmt.Sprintf(`{"%s":{"done":%d,"failed":0,"total":%d}}`, processBatch, len(ids), len(ids)) {
		t.Errorf("the completed run's progress is %s; want all %d done", r.Progress, len(ids))
	}
}
