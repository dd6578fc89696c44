package app_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// TestDevSinkShowsTheRunBesideTheKey: GET /dev/sink lists each Idempotency-Key the
// demo-http job sent with the run it belongs to, so a reader can tell which run a
// derived key is. Before, it showed the key alone.
func TestDevSinkShowsTheRunBesideTheKey(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	dev(t, []string{"-addr", addr, "-ledger", "memory://dev-sink"}, nil)
	status, body := postJob(t, addr, "demo-http", "sink-1")
	if status != http.StatusAccepted {
		t.Fatalf("POST demo-http = %d %v", status, body)
	}
	id := body["run_id"].(string)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/dev/sink")
		if err != nil {
			t.Fatal(err)
		}
		var sink struct {
			Calls []struct {
				Key   string `json:"idempotency_key"`
				RunID string `json:"run_id"`
				Calls int    `json:"calls"`
			} `json:"calls"`
		}
		err = json.NewDecoder(resp.Body).Decode(&sink)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(sink.Calls) == 1 {
			c := sink.Calls[0]
			if c.RunID != id || c.Key != ledger.EffectKey(id, "run") || c.Calls != 1 {
				t.Fatalf("/dev/sink = %+v; want the key of run %s beside its run ID, called once", c, id)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/dev/sink shows %+v after 20s; want one call", sink.Calls)
		}
	}
}
