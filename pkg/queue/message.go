package queue

import (
	"fmt"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// Message attribute names. Data is the caller's payload, unchanged.
const (
	AttrRunID        = "run_id"
	AttrJob          = "job"
	AttrNamespace    = "namespace"
	AttrKey          = "key"
	AttrScheduleTime = "schedule_time"
	AttrPayloadHash  = "payload_hash"
	// AttrEnqueuedAt is the publisher's time of the first claim (RFC 3339, UTC); the
	// worker drops a message older than the retention.
	AttrEnqueuedAt = "enqueued_at"
	// AttrTraceparent carries the W3C trace context of the ingress request.
	AttrTraceparent = "traceparent"
)

// Message is what the ingress publishes and a worker receives for one run. The
// caller's payload is Identity.Payload, the message's data; the other identity fields
// are its attributes.
type Message struct {
	Identity   ledger.Identity
	EnqueuedAt time.Time
	// Traceparent is the W3C trace context, empty when there is none.
	Traceparent string
}

// Data is the message's data: the caller's payload, unchanged.
func (m *Message) Data() []byte { return m.Identity.Payload }

// Attributes encodes m's identity as Pub/Sub message attributes.
func (m *Message) Attributes() map[string]string {
	a := map[string]string{
		AttrRunID:       m.Identity.RunID,
		AttrJob:         m.Identity.Job,
		AttrNamespace:   m.Identity.Namespace,
		AttrKey:         m.Identity.Key,
		AttrPayloadHash: m.Identity.PayloadHash,
	}
	if !m.Identity.ScheduleTime.IsZero() {
		a[AttrScheduleTime] = m.Identity.ScheduleTime.UTC().Format(time.RFC3339Nano)
	}
	if !m.EnqueuedAt.IsZero() {
		a[AttrEnqueuedAt] = m.EnqueuedAt.UTC().Format(time.RFC3339Nano)
	}
	if m.Traceparent != "" {
		a[AttrTraceparent] = m.Traceparent
	}
	return a
}

// Decode builds a Message from attributes and data. A message that is not a runonce
// message (no valid run ID or job, or a malformed time) is an error naming the problem.
func Decode(attrs map[string]string, data []byte) (*Message, error) {
	m := &Message{
		Identity: ledger.Identity{
			RunID:       attrs[AttrRunID],
			Job:         attrs[AttrJob],
			Namespace:   attrs[AttrNamespace],
			Key:         attrs[AttrKey],
			PayloadHash: attrs[AttrPayloadHash],
			Payload:     data,
		},
		Traceparent: attrs[AttrTraceparent],
	}
	if !ledger.ValidRunID(m.Identity.RunID) {
		return nil, fmt.Errorf("queue: message attribute %s=%q is not a run ID", AttrRunID, m.Identity.RunID)
	}
	if m.Identity.Job == "" {
		return nil, fmt.Errorf("queue: message for run %s has no %s attribute", m.Identity.RunID, AttrJob)
	}
	for name, dst := range map[string]*time.Time{AttrScheduleTime: &m.Identity.ScheduleTime, AttrEnqueuedAt: &m.EnqueuedAt} {
		if v, ok := attrs[name]; ok {
			if err := dst.UnmarshalText([]byte(v)); err != nil {
				return nil, fmt.Errorf("queue: message for run %s: attribute %s=%q: %w", m.Identity.RunID, name, v, err)
			}
		}
	}
	if m.Identity.PayloadHash == "" {
		m.Identity.PayloadHash = ledger.PayloadHash(data)
	}
	return m, nil
}

// RunMessage is the message that republishes the run r: its identity and stored payload,
// EnqueuedAt its creation.
func RunMessage(r *ledger.Run) *Message {
	return &Message{
		Identity: ledger.Identity{
			RunID: r.ID, Namespace: r.Namespace, Job: r.Job, Key: r.Key,
			ScheduleTime: r.ScheduleTime, PayloadHash: r.PayloadHash, Payload: r.Payload,
		},
		EnqueuedAt: r.CreatedAt,
	}
}
