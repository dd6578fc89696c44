package targets_test

import (
	"context"
	"fmt"
	"testing"

	executions "cloud.google.com/go/workflows/executions/apiv1"
	"cloud.google.com/go/workflows/executions/apiv1/executionspb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// BenchmarkWorkflowsStart measures what a run costs over the start itself: "raw" is one
// CreateExecution through the official client at the fake; "target" is a whole run of a
// Workflows target without wait through worker.Process on the memory ledger (claim, begin
// effect, the same CreateExecution, complete effect with its ref, complete). Compare
// their ops/s in the same run: the difference is runonce's bookkeeping.
func BenchmarkWorkflowsStart(b *testing.B) {
	for _, conc := range []int{1, 8} {
		b.Run(fmt.Sprintf("raw/conc=%d", conc), func(b *testing.B) {
			bb := newBench(b, jobs.KindWorkflows, workflow, `, "wait": false`)
			hostport, _ := bb.job.Target.Plaintext()
			conn, err := grpc.NewClient(hostport, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			c, err := executions.NewClient(b.Context(), option.WithGRPCConn(conn), option.WithoutAuthentication())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			benchloop.Run(b, conc, func(ctx context.Context, i int) error {
				_, err := c.CreateExecution(ctx, &executionspb.CreateExecutionRequest{Parent: workflow, Execution: &executionspb.Execution{Argument: `{}`}})
				return err
			})
		})
		b.Run(fmt.Sprintf("target/conc=%d", conc), func(b *testing.B) {
			bb := newBench(b, jobs.KindWorkflows, workflow, `, "wait": false`)
			w := bb.worker()
			benchloop.Run(b, conc, func(ctx context.Context, i int) error {
				if v := w.Process(ctx, &queue.Delivery{Message: newMessage(`{}`)}); v.Outcome != worker.OutcomeCompleted {
					return fmt.Errorf("run %d: %s", i, v.Outcome)
				}
				return nil
			})
		})
	}
}
