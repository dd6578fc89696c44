package app

import (
	"context"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/targets"
	"github.com/runonce/runonce/pkg/worker"
)

// handleTargets registers a Google Cloud API target (pkg/targets, Application Default
// Credentials) on mux for each job of js whose kind is one and that mux has no Go
// handler for, and returns a function that closes their clients. HTTP targets are left
// to worker.MuxFromJobs.
func handleTargets(ctx context.Context, mux *worker.Mux, js map[string]*jobs.Job) (func(), error) {
	have := map[string]bool{}
	for _, name := range mux.Jobs() {
		have[name] = true
	}
	var opened []*targets.Target
	closeAll := func() {
		for _, t := range opened {
			t.Close()
		}
	}
	for _, name := range jobs.Names(js) {
		j := js[name]
		if j.Target == nil || have[name] {
			continue
		}
		t, err := targets.New(ctx, j, nil)
		if err != nil {
			closeAll()
			return nil, err
		}
		opened = append(opened, t)
		mux.HandleWith(name, t, &worker.HandleOptions{MaxAttempts: j.MaxAttempts})
	}
	return closeAll, nil
}
