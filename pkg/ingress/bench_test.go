package ingress_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runonce/runonce/internal/benchbase"
	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
)

// BenchmarkIngress measures POST /v1/jobs/{job} over HTTP for new runs and for
// duplicates of a completed run, at concurrency 1, 8 and 32, against each ledger with
// the in-process Pub/Sub and (when PUBSUB_EMULATOR_HOST is set) the emulator; beside it,
// "raw" is the limit: one ledger claim plus one publish, no HTTP. Per-request ledger calls
// and publishes are reported too.
func BenchmarkIngress(b *testing.B) {
	for bi, be := range backends {
		for _, q := range []string{"pstest", "emulator"} {
			for _, kind := range []string{"raw", "new", "duplicate"} {
				for _, conc := range []int{1, 8, 32} {
					b.Run(fmt.Sprintf("%s/%s/%s/c=%d", be.name, q, kind, conc), func(b *testing.B) {
						if q == "emulator" {
							requireEmulator(b)
						}
						bn := setup(b, setupOpts{backend: bi, emulator: q == "emulator", quiet: true})
						benchIngress(b, bn, kind, conc)
					})
				}
			}
		}
	}
}

func benchIngress(b *testing.B, bn *bundle, kind string, conc int) {
	ctx := context.Background()
	prefix := uuid.NewString()
	// A duplicate of a completed run answers 200, of a live one 202.
	postTo, _ := benchbase.Poster(b, "/v1/jobs/bench", payload, http.StatusAccepted, http.StatusOK)
	post := func(key string) error { return postTo(bn.srv.URL, key) }
	var op func(i int) error
	switch kind {
	case "raw":
		op = func(i int) error {
			key := prefix + strconv.Itoa(i)
			id := ledger.Identity{RunID: ledger.KeyedRunID(ns, "bench", key), Namespace: ns, Job: "bench", Key: key, PayloadHash: ledger.PayloadHash([]byte(payload))}
			res, err := bn.led.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: uuid.NewString()})
			if err != nil {
				return err
			}
			id.Payload = []byte(payload)
			_, err = bn.pub.Publish(ctx, &queue.Message{Identity: id, EnqueuedAt: res.Run.CreatedAt})
			return err
		}
	case "new":
		op = func(i int) error { return post(prefix + strconv.Itoa(i)) }
	case "duplicate":
		// One completed run, asked for again and again.
		if err := post(prefix); err != nil {
			b.Fatal(err)
		}
		r := acquire(b, bn.led.Driver, ledger.KeyedRunID(ns, "bench", prefix), time.Minute)
		if _, err := bn.led.Driver.Complete(ctx, &ledger.CompleteParams{Fence: fence(r)}); err != nil {
			b.Fatal(err)
		}
		op = func(int) error { return post(prefix) }
	}
	c0, p0 := bn.led.claims.Load()+bn.led.gets.Load()+bn.led.expedites.Load(), bn.pub.publishes.Load()
	benchloop.Run(b, conc, func(_ context.Context, i int) error { return op(i) })
	n := float64(b.N)
	b.ReportMetric(float64(bn.led.claims.Load()+bn.led.gets.Load()+bn.led.expedites.Load()-c0)/n, "ledger-calls/op")
	b.ReportMetric(float64(bn.pub.publishes.Load()-p0)/n, "publishes/op")
}
