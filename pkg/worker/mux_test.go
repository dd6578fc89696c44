package worker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/worker"
)

// TestZeroMuxIsUsable: a Mux declared as a value routes like one from NewMux, and an
// empty one answers that it runs no job.
func TestZeroMuxIsUsable(t *testing.T) {
	t.Parallel()
	var empty worker.Mux
	if _, ok := empty.JobPolicy("x"); ok || len(empty.Jobs()) != 0 {
		t.Fatalf("an empty zero Mux runs %v", empty.Jobs())
	}
	errRan := errors.New("ran")
	var m worker.Mux
	m.HandleFunc("send", func(context.Context, *worker.Job) error { return errRan })
	m.HandleWith("report", worker.HandlerFunc(func(context.Context, *worker.Job) error { return nil }), &worker.HandleOptions{MaxRunTime: time.Minute})
	if got := m.Jobs(); !slices.Equal(got, []string{"report", "send"}) {
		t.Errorf("Jobs() = %v, want [report send]", got)
	}
	if p, ok := m.JobPolicy("report"); !ok || p.MaxRunTime != time.Minute {
		t.Errorf("JobPolicy(report) = %+v, %v; want its MaxRunTime", p, ok)
	}
	if err := m.HandleJob(t.Context(), &worker.Job{Name: "send"}); !errors.Is(err, errRan) {
		t.Errorf("HandleJob(send) = %v, want the handler's error", err)
	}
}
