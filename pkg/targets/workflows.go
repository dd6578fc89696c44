package targets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	executions "cloud.google.com/go/workflows/executions/apiv1"
	"cloud.google.com/go/workflows/executions/apiv1/executionspb"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/worker"
)

// LabelEffect is the label every Workflows execution a run starts carries: the first 63
// characters of the start's effect key (a label value holds at most 63), by which a
// later attempt finds an execution whose start was not recorded.
const LabelEffect = "runonce_effect"

// ArgumentField is the field of a Workflows execution's argument that carries the run's
// Identity; the rest of the argument is the caller's payload (a JSON object).
const ArgumentField = "runonce"

type workflows struct {
	c        *executions.Client
	workflow string
}

func newWorkflows(ctx context.Context, t *jobs.Target, opts []option.ClientOption) (*workflows, error) {
	c, err := executions.NewClient(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return &workflows{c: c, workflow: t.Resource}, nil
}

func (w *workflows) Close() error { return w.c.Close() }

// label is the label value of an effect key.
func label(effectKey string) string { return effectKey[:min(len(effectKey), 63)] }

// WorkflowArgument returns the execution argument of a run: the payload (a JSON object,
// or empty) with the run's identity under ArgumentField.
func WorkflowArgument(payload []byte, id Identity) (string, error) {
	arg := map[string]json.RawMessage{}
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &arg); err != nil || arg == nil {
			return "", errors.New("the payload is not a JSON object: a Workflows target passes it as the execution's argument, with the run's identity added under \"" + ArgumentField + "\"")
		}
	}
	if _, ok := arg[ArgumentField]; ok {
		return "", errors.New("the payload has a field \"" + ArgumentField + "\": it is reserved for the run's identity")
	}
	b, err := json.Marshal(id)
	if err != nil {
		return "", err
	}
	arg[ArgumentField] = b
	out, err := json.Marshal(arg)
	return string(out), err
}

func (w *workflows) start(ctx context.Context, j *worker.Job, id Identity, effectKey string) (string, error) {
	arg, err := WorkflowArgument(j.Payload, id)
	if err != nil {
		return "", worker.NotStarted(worker.Permanent(err))
	}
	e, err := w.c.CreateExecution(ctx, &executionspb.CreateExecutionRequest{
		Parent:    w.workflow,
		Execution: &executionspb.Execution{Argument: arg, Labels: map[string]string{LabelEffect: label(effectKey)}},
	})
	if err != nil {
		return "", err
	}
	return e.GetName(), nil
}

// find lists the workflow's executions with the AIP-160 filter labels.runonce_effect="…"
// (executions.list filters by label): every one it answers carries the key, and none
// proves there is none.
func (w *workflows) find(ctx context.Context, effectKey string) ([]execution, error) {
	it := w.c.ListExecutions(ctx, &executionspb.ListExecutionsRequest{
		Parent: w.workflow, Filter: fmt.Sprintf("labels.%s=%q", LabelEffect, label(effectKey)),
	})
	var out []execution
	for {
		e, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		// The filter selected it; a view without labels is trusted, a different label is not.
		if v, ok := e.GetLabels()[LabelEffect]; !ok || v == label(effectKey) {
			out = append(out, execution{name: e.GetName(), created: e.GetStartTime().AsTime()})
		}
	}
}

// cancel cancels an execution (executions.cancel).
func (w *workflows) cancel(ctx context.Context, name string) error {
	_, err := w.c.CancelExecution(ctx, &executionspb.CancelExecutionRequest{Name: name})
	return err
}

func (w *workflows) describe(_ context.Context, effectKey string) string {
	return fmt.Sprintf("an execution of %s labelled %s=%s", w.workflow, LabelEffect, label(effectKey))
}

// poll maps the execution's state: SUCCEEDED completes the run; FAILED and CANCELLED fail
// it (the workflow's own retry policy has run: another execution would be a second run);
// UNAVAILABLE (its data cannot be read, e.g. a revoked KMS key) releases it, and the next
// attempt looks again.
func (w *workflows) poll(ctx context.Context, ref string) (bool, error) {
	e, err := w.c.GetExecution(ctx, &executionspb.GetExecutionRequest{Name: ref})
	if err != nil {
		return false, err
	}
	switch e.GetState() {
	case executionspb.Execution_SUCCEEDED:
		return true, nil
	case executionspb.Execution_FAILED, executionspb.Execution_CANCELLED:
		return true, worker.Permanent(fmt.Errorf("workflows execution %s ended %s: %s", ref, e.GetState(), e.GetError().GetPayload()))
	case executionspb.Execution_UNAVAILABLE:
		return true, fmt.Errorf("workflows execution %s is UNAVAILABLE (%s); retried later", ref, e.GetStateError().GetDetails())
	}
	return false, nil
}
