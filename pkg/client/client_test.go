package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/pkg/api"
	"github.com/runonce/runonce/pkg/client"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
)

// TestListOptionsAreWhatTheIngressReads: every field of ListOptions reaches the
// ingress's listing as the filter it names.
func TestListOptionsAreWhatTheIngressReads(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	t0, t1 := now.Add(-48*time.Hour), now.Add(-time.Hour+time.Nanosecond)
	for _, c := range []struct {
		o    *client.ListOptions
		want *ledger.ListParams
	}{
		{nil, &ledger.ListParams{}},
		{&client.ListOptions{Status: ledger.StatusFailed, Job: "send-invoices", Namespace: "ns", Since: 90 * time.Minute, PageSize: 20, PageToken: "tok"},
			&ledger.ListParams{Status: ledger.StatusFailed, Job: "send-invoices", Namespace: "ns", CreatedAfter: now.Add(-90 * time.Minute), PageSize: 20, Cursor: "tok"}},
		{&client.ListOptions{CreatedAfter: t0, CreatedBefore: t1}, &ledger.ListParams{CreatedAfter: t0, CreatedBefore: t1}},
		{&client.ListOptions{UpdatedAfter: t0, UpdatedBefore: t1}, &ledger.ListParams{UpdatedAfter: t0, UpdatedBefore: t1}},
	} {
		got, err := ingress.ParseListQuery(c.o.Values(), now)
		if err != nil {
			t.Fatalf("%+v: the ingress refuses %v: %v", c.o, c.o.Values(), err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%+v: the ingress lists (-want +got):\n%s", c.o, diff)
		}
	}
}

// TestActRefusesAnUnknownAction without calling the ingress.
func TestActRefusesAnUnknownAction(t *testing.T) {
	t.Parallel()
	c := &client.Client{BaseURL: "http://127.0.0.1:1"} // nothing listens: a call would fail otherwise
	_, err := c.Act(t.Context(), "abc", api.Action("delete"), &api.ActionRequest{Reason: "r"})
	if err == nil || errors.Is(err, client.ErrStatus) || !strings.Contains(err.Error(), `no such action "delete"`) {
		t.Fatalf("Act(delete) = %v, want an error naming the action", err)
	}
}
